//! What the root CA publisher does about one namespace: nothing, create
//! its `kube-root-ca.crt`, or put the cluster CA (and the description)
//! back into the one there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

/// The ConfigMap of every namespace that holds the cluster CA.
pub const CONFIG_MAP_NAME: &str = "kube-root-ca.crt";
/// Its one key.
pub const CA_KEY: &str = "ca.crt";
/// The annotation that says what the ConfigMap is for.
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Its text, as kube-controller-manager writes it.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// The publisher's decision for one namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// The ConfigMap is as it should be, or the namespace is going away.
    Nothing,
    Create(ConfigMap),
    /// The ConfigMap there, with the CA and the description put back.
    Update(ConfigMap),
}

/// What to do in `namespace`, whose ConfigMap is `existing`, so that it
/// holds exactly `root_ca` (PEM) under `ca.crt`.
pub fn plan(namespace: &Namespace, existing: Option<&ConfigMap>, root_ca: &str) -> Plan {
    if terminating(namespace) {
        return Plan::Nothing;
    }
    let data = BTreeMap::from([(CA_KEY.to_string(), root_ca.to_string())]);
    let Some(existing) = existing else {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(CONFIG_MAP_NAME.into());
        map.metadata.namespace = namespace.metadata.name.clone();
        map.metadata.annotations = Some(description());
        map.data = Some(data);
        return Plan::Create(map);
    };
    let described = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .is_some_and(|d| !d.is_empty());
    let binary = existing.binary_data.as_ref().is_some_and(|b| !b.is_empty());
    if existing.data.as_ref() == Some(&data) && !binary && described {
        return Plan::Nothing;
    }
    let mut map = existing.clone();
    map.data = Some(data);
    map.binary_data = None;
    map.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    map.metadata.managed_fields = None;
    Plan::Update(map)
}

fn description() -> BTreeMap<String, String> {
    BTreeMap::from([(DESCRIPTION_ANNOTATION.to_string(), DESCRIPTION.to_string())])
}

/// Whether the namespace is being deleted: nothing new is made there.
pub fn terminating(namespace: &Namespace) -> bool {
    let phase = namespace.status.as_ref().and_then(|s| s.phase.as_deref());
    namespace.metadata.deletion_timestamp.is_some() || phase == Some("Terminating")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn namespace(name: &str) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        ns
    }

    #[test]
    fn a_namespace_without_the_config_map_gets_one() {
        let Plan::Create(map) = plan(&namespace("team"), None, CA) else {
            panic!("no create");
        };
        assert_eq!(map.metadata.name.as_deref(), Some(CONFIG_MAP_NAME));
        assert_eq!(map.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(map.data.unwrap()[CA_KEY], CA);
        assert_eq!(
            map.metadata.annotations.unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
    }

    #[test]
    fn a_changed_config_map_gets_the_ca_back_and_keeps_the_rest() {
        let Plan::Create(good) = plan(&namespace("team"), None, CA) else {
            panic!("no create");
        };
        assert_eq!(plan(&namespace("team"), Some(&good), CA), Plan::Nothing);

        let mut changed = good.clone();
        changed.metadata.resource_version = Some("7".into());
        changed.metadata.labels = Some(BTreeMap::from([("mine".into(), "yes".into())]));
        changed.data = Some(BTreeMap::from([
            (CA_KEY.into(), "something else".into()),
            ("extra".into(), "x".into()),
        ]));
        let Plan::Update(fixed) = plan(&namespace("team"), Some(&changed), CA) else {
            panic!("no update");
        };
        assert_eq!(fixed.data, good.data, "exactly the CA");
        assert_eq!(fixed.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(fixed.metadata.labels, changed.metadata.labels);

        let mut undescribed = good.clone();
        undescribed.metadata.annotations = None;
        let Plan::Update(fixed) = plan(&namespace("team"), Some(&undescribed), CA) else {
            panic!("no update");
        };
        assert_eq!(
            fixed.metadata.annotations.unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );

        // A new CA (another --root-ca-file) replaces the old.
        assert!(matches!(
            plan(&namespace("team"), Some(&good), "another CA"),
            Plan::Update(_)
        ));
    }

    #[test]
    fn a_terminating_namespace_is_left_alone() {
        let mut ns = namespace("gone");
        ns.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some("Terminating".into()),
            ..Default::default()
        });
        assert!(terminating(&ns));
        assert_eq!(plan(&ns, None, CA), Plan::Nothing);
        let mut deleted = namespace("gone");
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(plan(&deleted, None, CA), Plan::Nothing);
        assert!(!terminating(&namespace("here")));
    }
}
