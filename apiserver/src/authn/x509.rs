//! The user of a client certificate, as Kubernetes reads it: the name is
//! the subject's common name, the groups its organizations. The
//! certificate's chain to the cluster CA is checked by TLS before this.

use crate::user::UserInfo;

/// The user `der` names; `None` when it cannot be read or names nobody.
pub fn user_of(der: &[u8]) -> Option<UserInfo> {
    let user = skiff_machinery::serving::delegated::user_of_certificate(der)?;
    Some(UserInfo {
        name: user.name,
        groups: user.groups,
    })
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
