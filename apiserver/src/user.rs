//! Who a request comes from, as authentication found it and as audit and
//! authorization read it. Until a request is authenticated it is
//! `system:anonymous` in the group `system:unauthenticated`.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }
}
