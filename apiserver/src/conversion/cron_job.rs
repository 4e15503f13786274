//! `batch/v1beta1` CronJob, served beside `batch/v1` (its storage version).
//! The two have the same fields (v1beta1 was frozen when it gained
//! `timeZone`, in 1.24); v1beta1's JobTemplateSpec holds a `batch/v1`
//! JobSpec. v1beta1 defaults the spec as v1 does: concurrencyPolicy Allow,
//! suspend false, 3 successful and 1 failed job kept.

use schemars::SchemaGenerator;
use serde_json::{json, Value};

use super::{default_field, derive_definitions, map_fields, Direction, FieldMap, ServedVersion};

pub const STORAGE_API_VERSION: &str = "batch/v1";
pub const API_VERSION: &str = "batch/v1beta1";

/// Fields of each object, as (v1beta1 name, v1 name).
const OBJECT: FieldMap = &[
    ("apiVersion", "apiVersion"),
    ("kind", "kind"),
    ("metadata", "metadata"),
    ("spec", "spec"),
    ("status", "status"),
];
const SPEC: FieldMap = &[
    ("schedule", "schedule"),
    ("timeZone", "timeZone"),
    ("startingDeadlineSeconds", "startingDeadlineSeconds"),
    ("concurrencyPolicy", "concurrencyPolicy"),
    ("suspend", "suspend"),
    ("jobTemplate", "jobTemplate"),
    ("successfulJobsHistoryLimit", "successfulJobsHistoryLimit"),
    ("failedJobsHistoryLimit", "failedJobsHistoryLimit"),
];
/// v1beta1.JobTemplateSpec; its `spec` is a batch/v1 JobSpec in both.
const JOB_TEMPLATE: FieldMap = &[("metadata", "metadata"), ("spec", "spec")];
const STATUS: FieldMap = &[
    ("active", "active"),
    ("lastScheduleTime", "lastScheduleTime"),
    ("lastSuccessfulTime", "lastSuccessfulTime"),
];

/// The v1beta1 definitions and the v1 ones they are derived from.
const DEFINITIONS: &[(&str, &str)] = &[
    (
        "io.k8s.api.batch.v1.CronJob",
        "io.k8s.api.batch.v1beta1.CronJob",
    ),
    (
        "io.k8s.api.batch.v1.CronJobSpec",
        "io.k8s.api.batch.v1beta1.CronJobSpec",
    ),
    (
        "io.k8s.api.batch.v1.CronJobStatus",
        "io.k8s.api.batch.v1beta1.CronJobStatus",
    ),
    (
        "io.k8s.api.batch.v1.JobTemplateSpec",
        "io.k8s.api.batch.v1beta1.JobTemplateSpec",
    ),
];

pub struct CronJobV1beta1;

impl ServedVersion for CronJobV1beta1 {
    type Storage = k8s_openapi::api::batch::v1::CronJob;
    const VERSION: &'static str = "v1beta1";
    const DEFINITION: &'static str = "io.k8s.api.batch.v1beta1.CronJob";
    const DEPRECATION: Option<&'static str> =
        Some("batch/v1beta1 CronJob is deprecated in v1.21+, unavailable in v1.25+; use batch/v1 CronJob");

    /// v1beta1's `SetDefaults_CronJob`.
    fn set_defaults(object: &mut Value) {
        let Some(spec) = object.get_mut("spec").filter(|s| s.is_object()) else {
            return;
        };
        default_field(spec, "concurrencyPolicy", json!("Allow"));
        default_field(spec, "suspend", json!(false));
        default_field(spec, "successfulJobsHistoryLimit", json!(3));
        default_field(spec, "failedJobsHistoryLimit", json!(1));
    }

    fn to_storage(object: &Value) -> Value {
        convert(object, Direction::ToStorage)
    }

    fn from_storage(object: &Value) -> Value {
        convert(object, Direction::FromStorage)
    }

    fn add_definitions(generator: &mut SchemaGenerator) {
        derive_definitions(generator, DEFINITIONS, |name, schema| {
            if name == "io.k8s.api.batch.v1beta1.CronJob" {
                schema["description"] = json!(
                    "CronJob represents the configuration of a single cron job. Deprecated: use batch/v1 CronJob."
                );
            }
        });
    }
}

fn convert(object: &Value, direction: Direction) -> Value {
    let mut out = map_fields(object, OBJECT, direction, |field, value| match field {
        "spec" => map_fields(value, SPEC, direction, |field, value| match field {
            "jobTemplate" => map_fields(value, JOB_TEMPLATE, direction, |_, v| v.clone()),
            _ => value.clone(),
        }),
        "status" => map_fields(value, STATUS, direction, |_, v| v.clone()),
        _ => value.clone(),
    });
    if let Value::Object(map) = &mut out {
        let api_version = match direction {
            Direction::ToStorage => STORAGE_API_VERSION,
            Direction::FromStorage => API_VERSION,
        };
        map.insert("apiVersion".into(), json!(api_version));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1beta1() -> Value {
        json!({
            "apiVersion": "batch/v1beta1",
            "kind": "CronJob",
            "metadata": {"name": "hello", "namespace": "default", "labels": {"app": "hello"}},
            "spec": {
                "schedule": "*/1 * * * *",
                "timeZone": "Etc/UTC",
                "startingDeadlineSeconds": 30,
                "concurrencyPolicy": "Forbid",
                "suspend": true,
                "successfulJobsHistoryLimit": 5,
                "failedJobsHistoryLimit": 2,
                "jobTemplate": {
                    "metadata": {"labels": {"job": "hello"}},
                    "spec": {"template": {"spec": {
                        "restartPolicy": "OnFailure",
                        "containers": [{"name": "hello", "image": "busybox"}],
                    }}},
                },
            },
            "status": {
                "active": [{"kind": "Job", "name": "hello-1", "namespace": "default"}],
                "lastScheduleTime": "2024-01-01T00:00:00Z",
                "lastSuccessfulTime": "2024-01-01T00:00:10Z",
            },
        })
    }

    #[test]
    fn every_field_maps_to_v1_and_back() {
        let served = v1beta1();
        let mut defaulted = served.clone();
        CronJobV1beta1::set_defaults(&mut defaulted);
        assert_eq!(defaulted, served, "every defaulted field is set already");
        let stored = CronJobV1beta1::to_storage(&served);
        let mut expected = served.clone();
        expected["apiVersion"] = json!("batch/v1");
        assert_eq!(stored, expected);
        assert_eq!(CronJobV1beta1::from_storage(&stored), served);
    }

    #[test]
    fn the_v1_form_is_a_valid_v1_cron_job() {
        let stored = CronJobV1beta1::to_storage(&v1beta1());
        let typed: k8s_openapi::api::batch::v1::CronJob =
            serde_json::from_value(stored).expect("a batch/v1 CronJob");
        let spec = typed.spec.unwrap();
        assert_eq!(spec.schedule, "*/1 * * * *");
        assert_eq!(spec.time_zone.as_deref(), Some("Etc/UTC"));
        assert_eq!(spec.successful_jobs_history_limit, Some(5));
        let status = typed.status.unwrap();
        assert_eq!(status.active.unwrap()[0].name.as_deref(), Some("hello-1"));
    }

    #[test]
    fn v1beta1_defaults_fill_the_spec() {
        let mut served = json!({
            "apiVersion": "batch/v1beta1",
            "kind": "CronJob",
            "metadata": {"name": "hello"},
            "spec": {"schedule": "@hourly", "failedJobsHistoryLimit": 0, "jobTemplate": {"spec": {}}},
        });
        CronJobV1beta1::set_defaults(&mut served);
        let stored = CronJobV1beta1::to_storage(&served);
        assert_eq!(stored["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(stored["spec"]["suspend"], false);
        assert_eq!(stored["spec"]["successfulJobsHistoryLimit"], 3);
        // An explicit zero is kept.
        assert_eq!(stored["spec"]["failedJobsHistoryLimit"], 0);
        // No spec: nothing is made up for validation to miss.
        let mut bare =
            json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "x"}});
        CronJobV1beta1::set_defaults(&mut bare);
        assert!(bare.get("spec").is_none());
    }

    #[test]
    fn unknown_fields_are_left_for_the_storage_version() {
        let mut served = v1beta1();
        served["spec"]["scheduel"] = json!("typo");
        let stored = CronJobV1beta1::to_storage(&served);
        assert_eq!(stored["spec"]["scheduel"], "typo");
    }

    #[test]
    fn the_v1beta1_schema_is_derived_from_v1() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        generator.subschema_for::<k8s_openapi::api::batch::v1::CronJob>();
        CronJobV1beta1::add_definitions(&mut generator);
        let definitions = generator.definitions();
        let cron_job = &definitions["io.k8s.api.batch.v1beta1.CronJob"];
        let spec = cron_job["properties"]["spec"].to_string();
        assert!(
            spec.contains("io.k8s.api.batch.v1beta1.CronJobSpec"),
            "{spec}"
        );
        let spec = &definitions["io.k8s.api.batch.v1beta1.CronJobSpec"];
        for (field, _) in SPEC {
            assert!(spec["properties"].get(field).is_some(), "{field}");
        }
        let template = spec["properties"]["jobTemplate"].to_string();
        assert!(template.contains("io.k8s.api.batch.v1beta1.JobTemplateSpec"));
        let job_spec = definitions["io.k8s.api.batch.v1beta1.JobTemplateSpec"]["properties"]
            ["spec"]
            .to_string();
        assert!(
            job_spec.contains("io.k8s.api.batch.v1.JobSpec"),
            "{job_spec}"
        );
        for (field, _) in STATUS {
            assert!(
                definitions["io.k8s.api.batch.v1beta1.CronJobStatus"]["properties"]
                    .get(field)
                    .is_some(),
                "{field}"
            );
        }
    }
}
