//! Owner references as the workload controllers write and read them: the
//! controller reference an object puts on what it creates, and which
//! object controls a pod.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;

use super::pods::controller_ref;

/// The reference `owner` puts on the objects it creates: its kind, name
/// and UID, `controller` and `blockOwnerDeletion` true.
pub fn controller_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The object of type `K` whose controller reference `pod` carries, if
/// any, as the key to sync it by.
pub fn controller_of<K: Resource<DynamicType = ()>>(pod: &Pod) -> Option<ObjectRef<K>> {
    let owner = controller_ref(pod)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    (owner.kind == K::kind(&()) && owner.api_version == K::api_version(&()))
        .then(|| ObjectRef::new(&owner.name).within(namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;

    #[test]
    fn the_reference_names_the_owners_type() {
        let mut job = Job::default();
        job.metadata.name = Some("pi".into());
        job.metadata.uid = Some("uid-pi".into());
        let reference = controller_reference(&job);
        assert_eq!(
            (reference.api_version.as_str(), reference.kind.as_str()),
            ("batch/v1", "Job")
        );
        assert_eq!(
            (reference.name.as_str(), reference.uid.as_str()),
            ("pi", "uid-pi")
        );
        assert_eq!(
            (reference.controller, reference.block_owner_deletion),
            (Some(true), Some(true))
        );
    }

    #[test]
    fn a_pod_names_its_controller_of_that_type_only() {
        let mut set = StatefulSet::default();
        set.metadata.name = Some("web".into());
        set.metadata.uid = Some("uid-web".into());
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("default".into());
        pod.metadata.owner_references = Some(vec![controller_reference(&set)]);
        assert_eq!(
            controller_of::<StatefulSet>(&pod),
            Some(ObjectRef::new("web").within("default"))
        );
        assert_eq!(controller_of::<DaemonSet>(&pod), None);
        pod.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert_eq!(controller_of::<StatefulSet>(&pod), None);
    }
}
