//! The pod-template-hash that names a Deployment's ReplicaSets: FNV-32a of
//! the pod template's canonical JSON (plus the collisionCount), rendered in
//! Kubernetes' "safe encode" alphabet. Also template equality ignoring it.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// The label a Deployment adds to its ReplicaSets' selector and template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Kubernetes' alphabet without vowels and look-alikes (`rand.SafeEncodeString`).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub(crate) const FNV32_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// The pod-template-hash of `template` under `collision_count`: stable for
/// the same template, made only of [`SAFE_ALPHABET`] characters.
pub fn pod_template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hash = fnv32a(
        FNV32_OFFSET_BASIS,
        canonical(template).to_string().as_bytes(),
    );
    if let Some(count) = collision_count {
        hash = fnv32a(hash, &(count as u32).to_le_bytes());
    }
    safe_encode(&hash.to_string())
}

/// Whether two pod templates are the same once the pod-template-hash label
/// is taken out (Kubernetes' `EqualIgnoreHash`).
pub fn same_template(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    canonical(a) == canonical(b)
}

pub(crate) fn fnv32a(mut hash: u32, bytes: &[u8]) -> u32 {
    for byte in bytes {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(FNV32_PRIME);
    }
    hash
}

pub(crate) fn safe_encode(text: &str) -> String {
    text.bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// The template as JSON without the hash label, without nulls and empty
/// lists (absent and empty mean the same to the API), and without empty
/// label or annotation maps.
fn canonical(template: &PodTemplateSpec) -> Value {
    let mut value = serde_json::to_value(template).unwrap_or_default();
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove(POD_TEMPLATE_HASH);
        }
        for field in ["labels", "annotations"] {
            if metadata
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(|m| m.is_empty())
            {
                metadata.remove(field);
            }
        }
    }
    prune(&mut value);
    value
}

fn prune(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null() && !v.as_array().is_some_and(Vec::is_empty));
            map.values_mut().for_each(prune);
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(value: Value) -> PodTemplateSpec {
        serde_json::from_value(value).unwrap()
    }

    fn web(image: &str) -> PodTemplateSpec {
        template(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": image}]}
        }))
    }

    #[test]
    fn hash_is_stable_and_in_the_safe_alphabet() {
        let first = pod_template_hash(&web("nginx:1.25"), None);
        assert_eq!(first, pod_template_hash(&web("nginx:1.25"), None));
        assert!(!first.is_empty() && first.len() <= 10, "{first}");
        assert!(first.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{first}");
    }

    #[test]
    fn hash_changes_with_the_template_and_the_collision_count() {
        let base = pod_template_hash(&web("nginx:1.25"), None);
        assert_ne!(base, pod_template_hash(&web("nginx:1.26"), None));
        assert_ne!(base, pod_template_hash(&web("nginx:1.25"), Some(1)));
        assert_ne!(
            pod_template_hash(&web("nginx:1.25"), Some(1)),
            pod_template_hash(&web("nginx:1.25"), Some(2))
        );
    }

    #[test]
    fn templates_compare_without_the_hash_label() {
        let mut hashed = web("nginx:1.25");
        hashed
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(POD_TEMPLATE_HASH.into(), "abc".into());
        assert!(same_template(&hashed, &web("nginx:1.25")));
        assert!(!same_template(&hashed, &web("nginx:1.26")));
        assert_eq!(
            pod_template_hash(&hashed, None),
            pod_template_hash(&web("nginx:1.25"), None)
        );
    }

    #[test]
    fn empty_lists_equal_absent_ones_but_empty_volume_sources_do_not() {
        let with_args = template(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx", "args": []}]}
        }));
        assert!(same_template(&with_args, &web("nginx")));
        let volume = |source: &str| {
            template(json!({
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}],
                         "volumes": [{"name": "v", source: {}}]}
            }))
        };
        assert!(!same_template(&volume("emptyDir"), &volume("downwardAPI")));
    }
}
