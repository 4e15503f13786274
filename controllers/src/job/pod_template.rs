//! The pod a Job creates from its template: the template's labels (which
//! carry the selector's `batch.kubernetes.io/controller-uid`), the Job's
//! controller reference, the job-tracking finalizer, and for an Indexed
//! Job the completion index (annotation, label, hostname, env var).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::indexes::COMPLETION_INDEX;
use super::tracking::TRACKING_FINALIZER;
use crate::common::owners::controller_reference;

/// The env var kube gives each container of an Indexed Job's pod.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// A new pod of `job`, for completion `index` when the Job is Indexed.
pub fn new_pod(job: &Job, index: Option<i32>) -> Option<Pod> {
    let template = &job.spec.as_ref()?.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.to_string());
    }
    let mut spec = template.spec.clone()?;
    let generate_name = match index {
        Some(index) => {
            annotations.insert(COMPLETION_INDEX.into(), index.to_string());
            labels.insert(COMPLETION_INDEX.into(), index.to_string());
            if spec.hostname.as_deref().unwrap_or_default().is_empty() {
                spec.hostname = Some(format!("{job_name}-{index}"));
            }
            spec.containers.iter_mut().for_each(add_index_env);
            spec.init_containers
                .iter_mut()
                .flatten()
                .for_each(add_index_env);
            format!("{job_name}-{index}-")
        }
        None => format!("{job_name}-"),
    };
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            finalizers: Some(finalizers),
            owner_references: Some(vec![controller_reference(job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// `JOB_COMPLETION_INDEX` from the index annotation, through the
/// downward API, unless the container sets it itself.
fn add_index_env(container: &mut Container) {
    let env = container.env.get_or_insert_with(Vec::new);
    if env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
        return;
    }
    env.push(EnvVar {
        name: COMPLETION_INDEX_ENV.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
            }),
            ..Default::default()
        }),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::fixtures::job;

    #[test]
    fn pods_carry_the_template_the_owner_and_the_finalizer() {
        let j = job("pi", 3, 2);
        let pod = new_pod(&j, None).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], "uid-pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(
            pod.metadata.finalizers.as_deref(),
            Some(&[TRACKING_FINALIZER.to_string()][..])
        );
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", "uid-pi"));
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(pod.spec.unwrap().hostname.is_none());
    }

    #[test]
    fn indexed_pods_carry_their_index() {
        let j = job("pi", 3, 2);
        let pod = new_pod(&j, Some(2)).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-2-"));
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX],
            "2"
        );
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "2");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
        let env = spec.containers[0].env.as_ref().unwrap();
        let var = env.iter().find(|e| e.name == COMPLETION_INDEX_ENV).unwrap();
        let field = var.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
        assert_eq!(
            field.field_path,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
    }
}
