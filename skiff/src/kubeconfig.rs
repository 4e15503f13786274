//! The kubeconfig `skiff up` and `skiff server` write, so that kubectl and
//! client libraries find the API with no other setup: the API's HTTPS
//! address, the cluster CA to trust, and a client certificate.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::pki::Credentials;

/// The kubeconfig text for the API at `server` (a URL), trusting `ca_pem`
/// and presenting `credentials`.
pub fn render(server: &str, ca_pem: &str, credentials: &Credentials) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: skiff
  cluster:
    server: {server}
    certificate-authority-data: {ca}
contexts:
- name: skiff
  context:
    cluster: skiff
    user: skiff
    namespace: default
current-context: skiff
preferences: {{}}
users:
- name: skiff
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
        ca = STANDARD.encode(ca_pem),
        cert = STANDARD.encode(&credentials.cert_pem),
        key = STANDARD.encode(&credentials.key_pem),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_names_the_api_its_ca_and_the_credentials() {
        let credentials = Credentials {
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
        };
        let text = render("https://127.0.0.1:6443", "CA", &credentials);
        let config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let cluster = &config["clusters"][0]["cluster"];
        assert_eq!(cluster["server"].as_str(), Some("https://127.0.0.1:6443"));
        let decode = |v: &serde_yaml::Value| STANDARD.decode(v.as_str().unwrap()).unwrap();
        assert_eq!(decode(&cluster["certificate-authority-data"]), b"CA");
        let user = &config["users"][0]["user"];
        assert_eq!(decode(&user["client-certificate-data"]), b"CERT");
        assert_eq!(decode(&user["client-key-data"]), b"KEY");
        assert_eq!(config["current-context"].as_str(), Some("skiff"));
    }
}
