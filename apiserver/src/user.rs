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

    /// Whether the user is in `system:masters`, the group that may do
    /// anything (the administrator, the plain-HTTP loopback port).
    pub fn in_system_masters(&self) -> bool {
        self.groups.iter().any(|g| g == crate::authn::MASTERS)
    }
}

tokio::task_local! {
    /// The user of the request being served, set by authorization around
    /// the handler, so that admission (and the AdmissionReviews of
    /// webhooks) knows who writes.
    pub static CURRENT: UserInfo;
}

/// The user of the request this task serves, if it is serving one.
pub fn current() -> Option<UserInfo> {
    CURRENT.try_with(|user| user.clone()).ok()
}
