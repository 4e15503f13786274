//! `scheduling.k8s.io/v1beta1` PriorityClass, served beside
//! `scheduling.k8s.io/v1` (its storage version). The fields are the same;
//! v1beta1 defaults `preemptionPolicy` to PreemptLowerPriority, as v1 does.

use schemars::SchemaGenerator;
use serde_json::{json, Value};

use super::{default_field, derive_definitions, map_fields, Direction, FieldMap, ServedVersion};

pub const STORAGE_API_VERSION: &str = "scheduling.k8s.io/v1";
pub const API_VERSION: &str = "scheduling.k8s.io/v1beta1";

/// (v1beta1 name, v1 name).
const FIELDS: FieldMap = &[
    ("apiVersion", "apiVersion"),
    ("kind", "kind"),
    ("metadata", "metadata"),
    ("value", "value"),
    ("globalDefault", "globalDefault"),
    ("description", "description"),
    ("preemptionPolicy", "preemptionPolicy"),
];

pub struct PriorityClassV1beta1;

impl ServedVersion for PriorityClassV1beta1 {
    type Storage = k8s_openapi::api::scheduling::v1::PriorityClass;
    const VERSION: &'static str = "v1beta1";
    const DEFINITION: &'static str = "io.k8s.api.scheduling.v1beta1.PriorityClass";
    const DEPRECATION: Option<&'static str> = Some(
        "scheduling.k8s.io/v1beta1 PriorityClass is deprecated in v1.14+, unavailable in v1.22+; use scheduling.k8s.io/v1 PriorityClass",
    );

    /// v1beta1's `SetDefaults_PriorityClass`.
    fn set_defaults(object: &mut Value) {
        default_field(object, "preemptionPolicy", json!("PreemptLowerPriority"));
    }

    fn to_storage(object: &Value) -> Value {
        convert(object, Direction::ToStorage)
    }

    fn from_storage(object: &Value) -> Value {
        convert(object, Direction::FromStorage)
    }

    fn add_definitions(generator: &mut SchemaGenerator) {
        derive_definitions(
            generator,
            &[(
                "io.k8s.api.scheduling.v1.PriorityClass",
                "io.k8s.api.scheduling.v1beta1.PriorityClass",
            )],
            |_, schema| {
                schema["description"] = json!(
                    "DEPRECATED - This group version of PriorityClass is deprecated by scheduling.k8s.io/v1/PriorityClass. PriorityClass defines mapping from a priority class name to the priority integer value."
                );
            },
        );
    }
}

fn convert(object: &Value, direction: Direction) -> Value {
    let mut out = map_fields(object, FIELDS, direction, |_, v| v.clone());
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

    #[test]
    fn only_the_api_version_changes() {
        let served = json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
            "globalDefault": false,
            "description": "important",
            "preemptionPolicy": "Never",
        });
        let stored = PriorityClassV1beta1::to_storage(&served);
        let mut expected = served.clone();
        expected["apiVersion"] = json!("scheduling.k8s.io/v1");
        assert_eq!(stored, expected);
        let typed: k8s_openapi::api::scheduling::v1::PriorityClass =
            serde_json::from_value(stored.clone()).expect("a v1 PriorityClass");
        assert_eq!(typed.value, 1000);
        assert_eq!(PriorityClassV1beta1::from_storage(&stored), served);
    }

    #[test]
    fn preemption_policy_defaults() {
        let mut served = json!({"apiVersion": API_VERSION, "kind": "PriorityClass", "metadata": {"name": "a"}, "value": 1});
        PriorityClassV1beta1::set_defaults(&mut served);
        let stored = PriorityClassV1beta1::to_storage(&served);
        assert_eq!(stored["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(stored["apiVersion"], STORAGE_API_VERSION);
    }

    #[test]
    fn the_v1beta1_schema_has_the_v1_fields() {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        generator.subschema_for::<k8s_openapi::api::scheduling::v1::PriorityClass>();
        PriorityClassV1beta1::add_definitions(&mut generator);
        let schema = &generator.definitions()["io.k8s.api.scheduling.v1beta1.PriorityClass"];
        for (field, _) in FIELDS {
            assert!(schema["properties"].get(field).is_some(), "{field}");
        }
    }
}
