//! The cluster's certificates: a CA made on first start, the API's
//! serving certificate, and client certificates that name a user (CN) and
//! its groups (O), as kubeadm lays them out. The CA's key and the admin's
//! credentials stay in the PKI directory (mode 0600); serving and
//! component certificates are issued afresh at each start.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The directory's name inside a data directory.
pub const DEFAULT_DIR: &str = "pki";
/// The administrator's user and group, as kubeadm's admin.conf.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const ADMIN_GROUP: &str = "system:masters";

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const ADMIN_CERT: &str = "admin.crt";
const ADMIN_KEY: &str = "admin.key";
const SERVICE_ACCOUNT_KEY: &str = "sa.key";
/// The store's own CA, inside the PKI directory, as kubeadm's `etcd/`: a
/// certificate of the cluster CA (a kubelet's, say) opens nothing there.
pub const STORE_DIR: &str = "etcd";
/// The store's client credentials for operators (etcdctl, `skiff member`).
pub const STORE_CA_CERT: &str = "ca.crt";
pub const STORE_CLIENT_CERT: &str = "client.crt";
pub const STORE_CLIENT_KEY: &str = "client.key";
const STORE_CLIENT_USER: &str = "skiff-store-client";
const CA_DAYS: i64 = 3650;
const CERT_DAYS: i64 = 365;

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct Credentials {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The cluster CA, able to issue certificates.
pub struct Pki {
    dir: PathBuf,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").field("dir", &self.dir).finish()
    }
}

impl Pki {
    /// The cluster CA in `dir`, made (with a new key) if `dir` has none yet.
    pub fn ensure(dir: &Path) -> Result<Arc<Pki>> {
        Pki::ensure_named(dir, "skiff-ca")
    }

    /// The store's CA in `pki_dir`/etcd, made if there is none yet.
    pub fn ensure_store(pki_dir: &Path) -> Result<Arc<Pki>> {
        Pki::ensure_named(&pki_dir.join(STORE_DIR), "skiff-store-ca")
    }

    fn ensure_named(dir: &Path, common_name: &str) -> Result<Arc<Pki>> {
        let cert_path = dir.join(CA_CERT);
        let key_path = dir.join(CA_KEY);
        if !cert_path.exists() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("making {} private", dir.display()))?;
            let key = KeyPair::generate().context("making the CA's key")?;
            // Processes sharing the directory may get here at once: the
            // first key written wins, and its maker signs the certificate.
            let kept = crate::files::create_private(&key_path, key.serialize_pem().as_bytes())?;
            if kept == key.serialize_pem().as_bytes() {
                let mut params = CertificateParams::new(Vec::<String>::new())?;
                params
                    .distinguished_name
                    .push(DnType::CommonName, common_name);
                params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                params.key_usages = vec![
                    KeyUsagePurpose::KeyCertSign,
                    KeyUsagePurpose::CrlSign,
                    KeyUsagePurpose::DigitalSignature,
                ];
                valid_for(&mut params, CA_DAYS);
                let cert = params.self_signed(&key).context("signing the CA")?;
                crate::files::write_private(&cert_path, cert.pem().as_bytes())?;
                tracing::info!(dir = %dir.display(), "created the {common_name} CA");
            }
        }
        let ca_pem = read_when_written(&cert_path)?;
        let key_pem = std::fs::read_to_string(&key_path)
            .with_context(|| format!("reading {}", key_path.display()))?;
        let key = KeyPair::from_pem(&key_pem)
            .with_context(|| format!("{} is not a private key", key_path.display()))?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, key)
            .with_context(|| format!("{} is not a CA certificate", cert_path.display()))?;
        Ok(Arc::new(Pki {
            dir: dir.to_path_buf(),
            ca_pem,
            issuer,
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate for `user` in `groups`.
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<Credentials> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    /// A certificate for a store member's peer port: it serves peers and
    /// dials them, so it is for both ends.
    pub fn issue_peer(&self, common_name: &str, sans: &[String]) -> Result<Credentials> {
        self.issue_named(
            common_name,
            sans,
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// A serving certificate for the names and addresses in `sans`.
    pub fn issue_server(&self, common_name: &str, sans: &[String]) -> Result<Credentials> {
        self.issue_named(common_name, sans, vec![ExtendedKeyUsagePurpose::ServerAuth])
    }

    fn issue_named(
        &self,
        common_name: &str,
        sans: &[String],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<Credentials> {
        let mut params = CertificateParams::new(sans.to_vec())
            .map_err(|e| anyhow!("a certificate cannot name {sans:?}: {e}"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = usages;
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<Credentials> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        valid_for(&mut params, CERT_DAYS);
        let key = KeyPair::generate()?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a certificate with the cluster CA")?;
        Ok(Credentials {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The administrator's credentials (`kubernetes-admin` in
    /// `system:masters`), kept in the directory so that every kubeconfig
    /// written carries the same ones.
    pub fn admin(&self) -> Result<Credentials> {
        self.kept_client(ADMIN_CERT, ADMIN_KEY, ADMIN_USER, &[ADMIN_GROUP])
    }

    /// The store's client credentials (of a store CA), kept in the
    /// directory for etcdctl and `skiff member`.
    pub fn store_client(&self) -> Result<Credentials> {
        self.kept_client(STORE_CLIENT_CERT, STORE_CLIENT_KEY, STORE_CLIENT_USER, &[])
    }

    /// A client certificate kept in the directory as `cert` and `key`,
    /// issued on first use.
    fn kept_client(
        &self,
        cert: &str,
        key: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<Credentials> {
        let cert_path = self.dir.join(cert);
        let key_path = self.dir.join(key);
        if let (Ok(cert_pem), Ok(key_pem)) = (
            std::fs::read_to_string(&cert_path),
            std::fs::read_to_string(&key_path),
        ) {
            return Ok(Credentials { cert_pem, key_pem });
        }
        // Members of a cluster sharing the directory may get here at once:
        // the first key written wins, and its certificate with it.
        let credentials = self.issue_client(user, groups)?;
        let key = crate::files::create_private(&key_path, credentials.key_pem.as_bytes())?;
        if key != credentials.key_pem.as_bytes() {
            // Another process's key: wait for its certificate.
            let cert_pem = read_when_written(&cert_path)?;
            let key_pem = String::from_utf8_lossy(&key).into_owned();
            return Ok(Credentials { cert_pem, key_pem });
        }
        crate::files::write_private(&cert_path, credentials.cert_pem.as_bytes())?;
        Ok(credentials)
    }

    /// The key that signs ServiceAccount tokens (PKCS#8 DER), made on
    /// first use and kept in the directory, so every member of a cluster
    /// signs and verifies with the same one.
    pub fn service_account_key(&self) -> Result<Vec<u8>> {
        let path = self.dir.join(SERVICE_ACCOUNT_KEY);
        let pem = match std::fs::read_to_string(&path) {
            Ok(pem) => pem,
            Err(_) => {
                // The first of several members to make it wins.
                let made = KeyPair::generate()?.serialize_pem();
                let kept = crate::files::create_private(&path, made.as_bytes())?;
                String::from_utf8_lossy(&kept).into_owned()
            }
        };
        let key = KeyPair::from_pem(&pem)
            .with_context(|| format!("{} is not a private key", path.display()))?;
        Ok(key.serialized_der().to_vec())
    }

    /// The ServiceAccount token issuer of the directory's key.
    pub fn token_issuer(
        &self,
    ) -> Result<Arc<skiff_apiserver::authn::service_account::TokenIssuer>> {
        let der = self.service_account_key()?;
        skiff_apiserver::authn::service_account::TokenIssuer::from_pkcs8(&der)
            .map(Arc::new)
            .map_err(|e| anyhow!(e))
    }

    /// The API's TLS configuration: a serving certificate for `sans`, and
    /// client certificates verified against the CA when a client offers
    /// one (a client without one may still send a bearer token).
    pub fn api_tls(&self, sans: &[String]) -> Result<Arc<rustls::ServerConfig>> {
        let serving = self.issue_server("kube-apiserver", sans)?;
        self.server_config(&serving, false)
    }

    /// A store member's TLS, with this (store) CA: its client port's
    /// serving certificate for `client_sans`, and its peer certificate for
    /// `peer_sans`. Clients and peers must show a certificate it signed.
    pub fn store_tls(
        &self,
        name: &str,
        client_sans: &[String],
        peer_sans: &[String],
    ) -> Result<StoreTls> {
        let serving = self.issue_server(name, client_sans)?;
        let clients = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &serving.cert_pem,
                &serving.key_pem,
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(&self.ca_pem));
        let peer = self.issue_peer(name, peer_sans)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(pem_certs(&peer.cert_pem)?, private_key(&peer.key_pem)?)
            .context("the peer certificate")?;
        let peers = skiff_store::PeerTls::new(self.server_config(&peer, true)?, Arc::new(client));
        Ok(StoreTls { clients, peers })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certs(&self.ca_pem)? {
            roots.add(cert).context("the CA certificate")?;
        }
        Ok(Arc::new(roots))
    }

    /// Serving with `serving`; clients' certificates must chain to the CA,
    /// and (if `required`) clients must show one.
    fn server_config(
        &self,
        serving: &Credentials,
        required: bool,
    ) -> Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots()?,
            provider.clone(),
        );
        let verifier = match required {
            true => verifier,
            false => verifier.allow_unauthenticated(),
        }
        .build()
        .context("the client certificate verifier")?;
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                pem_certs(&serving.cert_pem)?,
                private_key(&serving.key_pem)?,
            )
            .context("the serving certificate")?;
        Ok(Arc::new(config))
    }
}

/// The user the API server calls kubelets as (kubeadm's name), in
/// `system:masters`.
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

impl Pki {
    /// The API server's TLS for calling kubelets: a client certificate of
    /// [`KUBELET_CLIENT_USER`]. A kubelet's serving certificate is its own
    /// (self-signed), so it is not checked, as kube-apiserver does not
    /// without --kubelet-certificate-authority.
    pub fn kubelet_client(&self) -> Result<Arc<rustls::ClientConfig>> {
        let credentials = self.issue_client(KUBELET_CLIENT_USER, &[ADMIN_GROUP])?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                skiff_machinery::skip_verify::SkipServerVerification(provider),
            ))
            .with_client_auth_cert(
                pem_certs(&credentials.cert_pem)?,
                private_key(&credentials.key_pem)?,
            )
            .context("the kubelet client certificate")?;
        Ok(Arc::new(config))
    }
}

/// The kubelet port's TLS and its certificate (PEM): a self-signed
/// serving certificate for `names` (a kubelet makes one when given none);
/// client certificates that `roots` (the cluster CA) signed, whose users
/// the kubelet then authorizes with SubjectAccessReviews, or none (for
/// `/healthz` and bearer tokens).
pub fn kubelet_tls(
    names: &[String],
    roots: Vec<CertificateDer<'static>>,
) -> Result<(Arc<rustls::ServerConfig>, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())
        .map_err(|e| anyhow!("a certificate cannot name {names:?}: {e}"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kubelet");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    valid_for(&mut params, CERT_DAYS);
    let cert = params
        .self_signed(&key)
        .context("signing the kubelet's certificate")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = kubelet_client_verifier(roots, provider.clone())?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert.der().clone()], private_key(&key.serialize_pem())?)
        .context("the kubelet's certificate")?;
    Ok((Arc::new(config), cert.pem()))
}

/// A store member's TLS: for its client port, and for its peers.
pub struct StoreTls {
    pub clients: tonic::transport::ServerTlsConfig,
    pub peers: skiff_store::PeerTls,
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| anyhow!("a private key: {e}"))
}

/// The file at `path`, waiting a little for another process that is
/// writing it (a CA or a certificate made by a process sharing the
/// directory).
fn read_when_written(path: &Path) -> Result<String> {
    for _ in 0..100 {
        match std::fs::read_to_string(path) {
            Ok(text) if !text.is_empty() => return Ok(text),
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (its key exists without it: if no other skiff is making it, remove the key and start again)",
            path.display()
        )
    })
}

pub fn pem_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("reading a PEM certificate: {e}"))
}

fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    // An hour of slack for clocks a little behind.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// The names a serving certificate for an API listening on `listen`
/// carries: loopback, this host's name, the in-cluster names of the
/// `kubernetes` Service, the listening address if it is a specific one,
/// and `extra` (`--tls-san`).
pub fn serving_names(listen: &std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    let ip: IpAddr = listen.ip();
    if !ip.is_unspecified() {
        names.push(ip.to_string());
    }
    names.extend(extra.iter().cloned());
    names.sort();
    names.dedup();
    names
}

/// Client certificates the cluster CA (`roots`) signed, whatever their
/// user, or none: a connection without one reaches `/healthz` alone, or
/// what a bearer token is allowed (the kubelet's router decides).
fn kubelet_client_verifier(
    roots: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root).context("the cluster CA certificate")?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
        .allow_unauthenticated()
        .build()
        .context("the client certificate verifier")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_verifier(pki: &Pki) -> Arc<dyn rustls::server::danger::ClientCertVerifier> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(pem_certs(pki.ca_pem()).unwrap().remove(0))
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap()
    }

    #[test]
    fn the_ca_is_made_once_and_signs_what_it_issues() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path()).unwrap();
        let again = Pki::ensure(dir.path()).unwrap();
        assert_eq!(pki.ca_pem(), again.ca_pem());
        let admin = pki.admin().unwrap();
        assert_eq!(admin.cert_pem, again.admin().unwrap().cert_pem);
        use std::os::unix::fs::PermissionsExt;
        for file in [CA_KEY, ADMIN_KEY] {
            let mode = std::fs::metadata(dir.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        // The client certificate chains to the CA and names its user.
        let verifier = client_verifier(&pki);
        let cert = pem_certs(&admin.cert_pem).unwrap().remove(0);
        verifier
            .verify_client_cert(&cert, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
        let user = skiff_apiserver::authn::x509::user_of(&cert).unwrap();
        assert_eq!(user.name, ADMIN_USER);
        assert_eq!(user.groups, [ADMIN_GROUP]);
        // A CA from elsewhere does not vouch for it.
        let other = tempfile::tempdir().unwrap();
        let verifier = client_verifier(&Pki::ensure(other.path()).unwrap());
        assert!(verifier
            .verify_client_cert(&cert, &[], rustls::pki_types::UnixTime::now())
            .is_err());
        assert!(pki
            .api_tls(&serving_names(&"127.0.0.1:6443".parse().unwrap(), &[]))
            .is_ok());
    }

    #[test]
    fn the_store_has_a_ca_of_its_own_that_concurrent_makers_agree_on() {
        let dir = tempfile::tempdir().unwrap();
        let makers: Vec<_> = (0..4)
            .map(|_| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || Pki::ensure_store(&dir).unwrap().ca_pem().to_string())
            })
            .collect();
        let pems: Vec<String> = makers.into_iter().map(|m| m.join().unwrap()).collect();
        assert!(
            pems.windows(2).all(|w| w[0] == w[1]),
            "two store CAs were made"
        );
        let store = Pki::ensure_store(dir.path()).unwrap();
        assert_eq!(store.dir(), dir.path().join(STORE_DIR));
        let cluster = Pki::ensure(dir.path()).unwrap();
        assert_ne!(cluster.ca_pem(), store.ca_pem());
        // The store's client certificate opens the store, not the API; the
        // API's administrator certificate does not open the store.
        let now = rustls::pki_types::UnixTime::now();
        let client = pem_certs(&store.store_client().unwrap().cert_pem)
            .unwrap()
            .remove(0);
        client_verifier(&store)
            .verify_client_cert(&client, &[], now)
            .unwrap();
        assert!(client_verifier(&cluster)
            .verify_client_cert(&client, &[], now)
            .is_err());
        let admin = pem_certs(&cluster.admin().unwrap().cert_pem)
            .unwrap()
            .remove(0);
        assert!(client_verifier(&store)
            .verify_client_cert(&admin, &[], now)
            .is_err());
        let names = ["127.0.0.1".to_string()];
        assert!(store.store_tls("n1", &names, &names).is_ok());
    }

    #[test]
    fn the_kubelet_port_admits_certificates_of_the_cluster_ca_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = kubelet_client_verifier(pem_certs(pki.ca_pem()).unwrap(), provider).unwrap();
        assert!(!verifier.client_auth_mandatory());
        let now = rustls::pki_types::UnixTime::now();
        let cert = |credentials: Credentials| pem_certs(&credentials.cert_pem).unwrap().remove(0);
        let admin = cert(pki.admin().unwrap());
        verifier.verify_client_cert(&admin, &[], now).unwrap();
        // Any user of the CA gets in; the kubelet authorizes it.
        let node = cert(
            pki.issue_client("system:node:n2", &["system:nodes"])
                .unwrap(),
        );
        verifier.verify_client_cert(&node, &[], now).unwrap();
        let other = Pki::ensure(tempfile::tempdir().unwrap().path()).unwrap();
        let stranger = cert(other.admin().unwrap());
        assert!(verifier.verify_client_cert(&stranger, &[], now).is_err());
        let names = ["127.0.0.1".to_string()];
        let (_, pem) = kubelet_tls(&names, pem_certs(pki.ca_pem()).unwrap()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.kubelet_client().is_ok());
    }

    #[test]
    fn serving_names_cover_loopback_and_the_listening_address() {
        let names = serving_names(&"10.1.2.3:6443".parse().unwrap(), &["api.example".into()]);
        for name in [
            "localhost",
            "127.0.0.1",
            "10.1.2.3",
            "api.example",
            "kubernetes.default.svc",
        ] {
            assert!(
                names.iter().any(|n| n == name),
                "{name} missing from {names:?}"
            );
        }
        let any = serving_names(&"0.0.0.0:6443".parse().unwrap(), &[]);
        assert!(!any.iter().any(|n| n == "0.0.0.0"));
    }
}
