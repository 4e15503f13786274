//! The daemon pod a DaemonSet creates for a node, as a value: its
//! template with the daemon tolerations, the revision labels, and node
//! affinity pinning it to the node (the scheduler binds it).

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::eligibility::{add_daemon_tolerations, pin_to_node};
use super::plan::{template_generation, POD_TEMPLATE_GENERATION};
use crate::common::owners::controller_reference;
use crate::history::CONTROLLER_REVISION_HASH;

/// The pod for `node` from `template` at revision `hash`
/// (`CreatePodTemplate` and `ReplaceDaemonSetPodNodeNameNodeAffinity`).
pub fn new_pod(ds: &DaemonSet, template: &PodTemplateSpec, node: &str, hash: &str) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(CONTROLLER_REVISION_HASH.into(), hash.to_string());
    if let Some(generation) = template_generation(ds) {
        labels.insert(POD_TEMPLATE_GENERATION.into(), generation.to_string());
    }
    let mut spec = template.spec.clone().unwrap_or_default();
    add_daemon_tolerations(&mut spec);
    pin_to_node(&mut spec, node);
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-",
                ds.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_reference(ds)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::eligibility::target_node;
    use crate::daemonset::fixtures::daemon_set;

    #[test]
    fn daemon_pods_are_labelled_pinned_and_not_bound() {
        let ds = daemon_set("agent");
        let template = &ds.spec.as_ref().unwrap().template;
        let pod = new_pod(&ds, template, "n3", "abc");
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[CONTROLLER_REVISION_HASH], "abc");
        assert_eq!(labels[POD_TEMPLATE_GENERATION], "1");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("agent-"));
        assert_eq!(
            pod.metadata.owner_references.as_ref().unwrap()[0].kind,
            "DaemonSet"
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name, None);
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 6);
        assert_eq!(target_node(&pod), Some("n3"));
    }
}
