//! The user of a client certificate, as Kubernetes reads it: the name is
//! the subject's common name, the groups its organizations. The
//! certificate's chain to the cluster CA is checked by TLS before this.

use x509_parser::prelude::{FromDer, X509Certificate};

use crate::user::UserInfo;

/// The user `der` names; `None` when it cannot be read or names nobody.
pub fn user_of(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(String::from)
        .collect();
    Some(UserInfo { name, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_name_is_the_user_and_organizations_are_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = user_of(cert.der()).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, ["system:nodes"]);
        assert!(user_of(b"not a certificate").is_none());
    }
}
