//! The list merge strategies of strategic merge patch, per (schema
//! definition, field): which lists merge by a key, which primitive lists
//! merge as sets. Every list not named here is replaced whole.
//!
//! Generated, not hand-written: each row is read from the `DeepMerge`
//! impls that k8s-openapi 0.29 generates (feature `v1_33`) from the
//! Kubernetes OpenAPI spec's `x-kubernetes-patch-merge-key` /
//! `x-kubernetes-list-type` extensions — `merge_strategies::list::map` with
//! one scalar key becomes `MergeByKey`, `list::set` becomes `SetOfPrimitives`.
//! The schemars output of k8s-openapi drops those extensions, and the spec
//! itself is not available offline, so this is the nearest authoritative
//! source in the build. To regenerate after a k8s-openapi upgrade, scan
//! `k8s-openapi-*/src/v1_33/**/*.rs` for those calls, mapping Rust field
//! names to JSON names through each file's `"json" => Field::Key_rust`
//! lines; rows with several keys or a nested key are left out (replaced
//! whole). The test `merge_keys_come_from_the_table_…` checks every row of
//! a served definition against the schema.

/// How strategic merge patch combines a list in the patch with the stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// A list of objects merged element by element on this field.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    SetOfPrimitives,
}

use ListStrategy::{MergeByKey, SetOfPrimitives};

/// The strategy of `field` in the definition `definition`, if it merges.
pub fn list_strategy(definition: &str, field: &str) -> Option<ListStrategy> {
    TABLE
        .binary_search_by(|(d, f, _)| (*d, *f).cmp(&(definition, field)))
        .ok()
        .map(|at| TABLE[at].2)
}

/// Sorted by (definition, field).
#[rustfmt::skip]
pub(super) static TABLE: &[(&str, &str, ListStrategy)] = &[
    ("io.k8s.api.admissionregistration.v1.MutatingWebhook", "matchConditions", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration", "webhooks", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBindingSpec", "validationActions", SetOfPrimitives),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "matchConditions", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec", "variables", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhook", "matchConditions", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration", "webhooks", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1alpha1.MutatingAdmissionPolicySpec", "matchConditions", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicyBindingSpec", "validationActions", SetOfPrimitives),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec", "matchConditions", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicySpec", "variables", MergeByKey("name")),
    ("io.k8s.api.admissionregistration.v1beta1.ValidatingAdmissionPolicyStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.apiserverinternal.v1alpha1.ServerStorageVersion", "decodableVersions", SetOfPrimitives),
    ("io.k8s.api.apiserverinternal.v1alpha1.ServerStorageVersion", "servedVersions", SetOfPrimitives),
    ("io.k8s.api.apiserverinternal.v1alpha1.StorageVersionStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.apiserverinternal.v1alpha1.StorageVersionStatus", "storageVersions", MergeByKey("apiServerID")),
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement", "values", SetOfPrimitives),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "failed", SetOfPrimitives),
    ("io.k8s.api.batch.v1.UncountedTerminatedPods", "succeeded", SetOfPrimitives),
    ("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.ComponentStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.Container", "env", MergeByKey("name")),
    ("io.k8s.api.core.v1.Container", "ports", MergeByKey("containerPort")),
    ("io.k8s.api.core.v1.Container", "volumeDevices", MergeByKey("devicePath")),
    ("io.k8s.api.core.v1.Container", "volumeMounts", MergeByKey("mountPath")),
    ("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", MergeByKey("name")),
    ("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", MergeByKey("mountPath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", MergeByKey("name")),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", MergeByKey("containerPort")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", MergeByKey("devicePath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", MergeByKey("mountPath")),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", SetOfPrimitives),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", MergeByKey("type")),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.PodSpec", "containers", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", MergeByKey("ip")),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", MergeByKey("topologyKey")),
    ("io.k8s.api.core.v1.PodSpec", "volumes", MergeByKey("name")),
    ("io.k8s.api.core.v1.PodStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", MergeByKey("ip")),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", MergeByKey("ip")),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", MergeByKey("name")),
    ("io.k8s.api.core.v1.ReplicationControllerStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.core.v1.ResourceRequirements", "claims", MergeByKey("name")),
    ("io.k8s.api.core.v1.ResourceStatus", "resources", MergeByKey("resourceID")),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", MergeByKey("name")),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", MergeByKey("port")),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.discovery.v1.Endpoint", "addresses", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.FlowSchemaStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "nonResourceURLs", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.NonResourcePolicyRule", "verbs", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "apiGroups", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "namespaces", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "resources", SetOfPrimitives),
    ("io.k8s.api.flowcontrol.v1.ResourcePolicyRule", "verbs", SetOfPrimitives),
    ("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.networking.v1beta1.ServiceCIDRStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.resource.v1alpha3.AllocatedDeviceStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.resource.v1alpha3.ResourceClaimStatus", "reservedFor", MergeByKey("uid")),
    ("io.k8s.api.resource.v1beta1.AllocatedDeviceStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.resource.v1beta1.ResourceClaimStatus", "reservedFor", MergeByKey("uid")),
    ("io.k8s.api.resource.v1beta2.AllocatedDeviceStatus", "conditions", MergeByKey("type")),
    ("io.k8s.api.resource.v1beta2.ResourceClaimStatus", "reservedFor", MergeByKey("uid")),
    ("io.k8s.api.storage.v1.CSIDriverSpec", "volumeLifecycleModes", SetOfPrimitives),
    ("io.k8s.api.storage.v1.CSINodeSpec", "drivers", MergeByKey("name")),
    ("io.k8s.api.storagemigration.v1alpha1.StorageVersionMigrationStatus", "conditions", MergeByKey("type")),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus", "conditions", MergeByKey("type")),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", "x-kubernetes-validations", MergeByKey("rule")),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "finalizers", SetOfPrimitives),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "ownerReferences", MergeByKey("uid")),
    ("io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIServiceStatus", "conditions", MergeByKey("type")),
];
