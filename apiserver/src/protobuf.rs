//! Just enough of Kubernetes' protobuf encoding to read the bodies that
//! kubectl's typed client sends as protobuf to create-only resources
//! (`kubectl auth can-i` posts a SelfSubjectAccessReview that way, `kubectl
//! create token` a TokenRequest): the `k8s\0` envelope (runtime.Unknown:
//! typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2) and the fields of
//! those specs, read into the same JSON a client sending JSON would have
//! sent. The replies are JSON, which client-go accepts.

use serde_json::{json, Map, Value};

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

/// One field of a message: its number and its bytes (length-delimited)
/// or value (varint); fixed-width fields are skipped.
enum Field<'a> {
    Bytes(u64, &'a [u8]),
    Varint(u64, u64),
}

fn varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = data.split_first()?;
        *data = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The fields of one message, in order; `None` if it is malformed.
fn fields(mut data: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let key = varint(&mut data)?;
        let number = key >> 3;
        match key & 7 {
            0 => out.push(Field::Varint(number, varint(&mut data)?)),
            2 => {
                let len = usize::try_from(varint(&mut data)?).ok()?;
                if len > data.len() {
                    return None;
                }
                let (bytes, rest) = data.split_at(len);
                out.push(Field::Bytes(number, bytes));
                data = rest;
            }
            1 => data = data.get(8..)?,
            5 => data = data.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

fn bytes_of<'a>(fields: &[Field<'a>], number: u64) -> Option<&'a [u8]> {
    fields.iter().find_map(|f| match f {
        Field::Bytes(n, b) if *n == number => Some(*b),
        _ => None,
    })
}

/// The string fields of a message, by number, as JSON fields by name.
fn strings(data: &[u8], names: &[(u64, &str)]) -> Option<Value> {
    let fields = fields(data)?;
    let mut out = Map::new();
    for (number, name) in names {
        if let Some(bytes) = bytes_of(&fields, *number) {
            out.insert(
                name.to_string(),
                json!(String::from_utf8_lossy(bytes).into_owned()),
            );
        }
    }
    Some(Value::Object(out))
}

/// ResourceAttributes (namespace 1, verb 2, group 3, version 4, resource
/// 5, subresource 6, name 7) and NonResourceAttributes (path 1, verb 2).
const RESOURCE_ATTRIBUTES: &[(u64, &str)] = &[
    (1, "namespace"),
    (2, "verb"),
    (3, "group"),
    (4, "version"),
    (5, "resource"),
    (6, "subresource"),
    (7, "name"),
];
const NON_RESOURCE_ATTRIBUTES: &[(u64, &str)] = &[(1, "path"), (2, "verb")];

/// TokenRequestSpec: audiences = 1 (repeated), boundObjectRef = 3
/// {kind = 1, apiVersion = 2, name = 3, uid = 4}, expirationSeconds = 4.
fn token_request_spec(data: &[u8]) -> Option<Value> {
    let fields = fields(data)?;
    let audiences: Vec<Value> = fields
        .iter()
        .filter_map(|f| match f {
            Field::Bytes(1, b) => Some(json!(String::from_utf8_lossy(b).into_owned())),
            _ => None,
        })
        .collect();
    let mut spec = json!({ "audiences": audiences });
    if let Some(bound) = bytes_of(&fields, 3) {
        spec["boundObjectRef"] = strings(
            bound,
            &[(1, "kind"), (2, "apiVersion"), (3, "name"), (4, "uid")],
        )?;
    }
    if let Some(seconds) = fields.iter().find_map(|f| match f {
        Field::Varint(4, v) => Some(*v as i64),
        _ => None,
    }) {
        spec["expirationSeconds"] = json!(seconds);
    }
    Some(spec)
}

/// The `k8s\0` envelope (runtime.Unknown): its typeMeta as JSON
/// (`apiVersion`, `kind`) and the fields of its raw message; `None` when
/// the body is not such an envelope.
fn unwrap(body: &[u8]) -> Option<(Value, Vec<Field<'_>>)> {
    let envelope = fields(body.strip_prefix(MAGIC)?)?;
    let type_meta = strings(
        bytes_of(&envelope, 1).unwrap_or_default(),
        &[(1, "apiVersion"), (2, "kind")],
    )?;
    let raw = fields(bytes_of(&envelope, 2).unwrap_or_default())?;
    Some((type_meta, raw))
}

/// The object in a protobuf body as JSON, for the kinds this server reads
/// as protobuf; an error says what is wrong.
pub fn object(body: &[u8]) -> Result<Value, String> {
    let malformed = || "the protobuf body is malformed".to_string();
    let (type_meta, raw) = unwrap(body).ok_or_else(malformed)?;
    let kind = type_meta["kind"].as_str().unwrap_or("").to_string();
    let spec_bytes = bytes_of(&raw, 2).unwrap_or_default();
    let mut review = json!({
        "apiVersion": type_meta["apiVersion"],
        "kind": kind,
        "metadata": {},
    });
    review["spec"] = match kind.as_str() {
        "SelfSubjectAccessReview" => {
            let spec = fields(spec_bytes).ok_or_else(malformed)?;
            let mut out = json!({});
            if let Some(r) = bytes_of(&spec, 1) {
                out["resourceAttributes"] =
                    strings(r, RESOURCE_ATTRIBUTES).ok_or_else(malformed)?;
            }
            if let Some(n) = bytes_of(&spec, 2) {
                out["nonResourceAttributes"] =
                    strings(n, NON_RESOURCE_ATTRIBUTES).ok_or_else(malformed)?;
            }
            out
        }
        "SelfSubjectRulesReview" => {
            strings(spec_bytes, &[(1, "namespace")]).ok_or_else(malformed)?
        }
        "SelfSubjectReview" => json!({}),
        "TokenRequest" => token_request_spec(spec_bytes).ok_or_else(malformed)?,
        other => return Err(format!("{other} is not accepted as protobuf; send JSON")),
    };
    Ok(review)
}

/// A DeleteOptions body (gracePeriodSeconds = 1, preconditions = 2 {uid =
/// 1, resourceVersion = 2}, orphanDependents = 3, propagationPolicy = 4,
/// dryRun = 5 repeated), as kubectl drain sends it, read into its JSON.
pub fn delete_options(body: &[u8]) -> Result<Value, String> {
    let malformed = || "the protobuf DeleteOptions body is malformed".to_string();
    let (type_meta, raw) = unwrap(body).ok_or_else(malformed)?;
    let mut options = json!({ "kind": type_meta["kind"] });
    let mut dry_run = Vec::new();
    for field in &raw {
        match field {
            Field::Varint(1, v) => options["gracePeriodSeconds"] = json!(*v as i64),
            Field::Bytes(2, b) => {
                options["preconditions"] =
                    strings(b, &[(1, "uid"), (2, "resourceVersion")]).ok_or_else(malformed)?
            }
            Field::Varint(3, v) => options["orphanDependents"] = json!(*v != 0),
            Field::Bytes(4, b) => {
                options["propagationPolicy"] = json!(String::from_utf8_lossy(b).into_owned())
            }
            Field::Bytes(5, b) => dry_run.push(json!(String::from_utf8_lossy(b).into_owned())),
            _ => {}
        }
    }
    if !dry_run.is_empty() {
        options["dryRun"] = json!(dry_run);
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8];
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_self_subject_access_review_reads_as_its_json() {
        let attributes = [field(1, b"team"), field(2, b"delete"), field(5, b"pods")].concat();
        let spec = field(1, &attributes);
        let raw = [field(1, b""), field(2, &spec)].concat();
        let type_meta = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let review = object(&body).unwrap();
        assert_eq!(review["kind"], "SelfSubjectAccessReview");
        assert_eq!(
            review["spec"]["resourceAttributes"],
            json!({"namespace": "team", "verb": "delete", "resource": "pods"})
        );
        assert!(object(b"k8s\0\x0a\xff").is_err());
        assert!(object(b"{}").is_err());
    }

    #[test]
    fn delete_options_read_as_their_json() {
        let raw = [
            vec![1 << 3, 5],
            field(2, &field(1, b"u1")),
            field(4, b"Foreground"),
            field(5, b"All"),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"DeleteOptions")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let options = delete_options(&body).unwrap();
        assert_eq!(
            options,
            json!({"kind": "DeleteOptions", "gracePeriodSeconds": 5,
                   "preconditions": {"uid": "u1"}, "propagationPolicy": "Foreground",
                   "dryRun": ["All"]})
        );
        assert!(delete_options(b"k8s\0\x0a\xff").is_err());
    }

    #[test]
    fn a_token_request_reads_as_its_json() {
        let bound = [field(1, b"Pod"), field(3, b"web")].concat();
        let spec = [
            field(1, b"vault"),
            field(1, b"api"),
            field(3, &bound),
            vec![4 << 3, 0xd8, 0x04],
        ]
        .concat();
        let raw = [field(1, b""), field(2, &spec)].concat();
        let type_meta = [
            field(1, b"authentication.k8s.io/v1"),
            field(2, b"TokenRequest"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let request = object(&body).unwrap();
        assert_eq!(
            request["spec"],
            json!({"audiences": ["vault", "api"], "expirationSeconds": 600,
                   "boundObjectRef": {"kind": "Pod", "name": "web"}})
        );
    }
}
