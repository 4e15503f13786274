//! One PKI directory for every skiff process the tests start (given to
//! each as `SKIFF_PKI_DIR`), so that the members of a cluster trust each
//! other and a test reaches any member's store with one client
//! certificate, as an operator does with the cluster's `pki/etcd`. It
//! lives in the target directory; the first skiff that needs it makes it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The shared directory: `<target>/<profile>/skiff-tests-pki`.
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // A test executable lives in <target>/<profile>/deps/.
        let exe = std::env::current_exe().expect("the test executable's path");
        let profile = exe
            .parent()
            .and_then(Path::parent)
            .map_or_else(std::env::temp_dir, Path::to_path_buf);
        profile.join("skiff-tests-pki")
    })
}

/// The store's CA certificate, and the client certificate and key that
/// skiff keeps for operators (`etcd/ca.crt`, `etcd/client.crt`,
/// `etcd/client.key`).
pub fn store_files() -> [PathBuf; 3] {
    let store = dir().join("etcd");
    ["ca.crt", "client.crt", "client.key"].map(|file| store.join(file))
}

/// TLS for a member's client port, with the kept client certificate.
pub fn store_client_tls() -> Result<ClientTlsConfig> {
    let [ca, cert, key] = store_files();
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (made by the first skiff the tests start)",
                path.display()
            )
        })
    };
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&ca)?))
        .identity(Identity::from_pem(read(&cert)?, read(&key)?)))
}

/// A client certificate for `user` in `groups`, signed with the shared
/// cluster CA (`ca.crt`, `ca.key`): (certificate, key), both PEM.
pub fn client_credentials(user: &str, groups: &[&str]) -> Result<(String, String)> {
    let ca_pem = std::fs::read_to_string(dir().join("ca.crt"))?;
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(dir().join("ca.key"))?)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    for group in groups {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *group);
    }
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}
