//! PATCH bodies applied to a stored object: JSON patch, JSON merge patch and
//! strategic merge patch. Not validation or storage (the registry does those
//! to the result), and not server-side apply (`crate::apply`), whose body
//! is only decoded here.

mod json_patch;
mod list_strategies;
mod merge_patch;
mod strategic;

use serde_json::Value;

use crate::resources::ResourceType;
use crate::status::ApiError;

pub use list_strategies::{list_strategy, ListStrategy};

pub const JSON_PATCH: &str = "application/json-patch+json";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// The body is not a patch of its type (400).
    #[error("{0}")]
    Malformed(String),
    /// A well-formed patch that does not apply to this object (422), e.g. a
    /// failed `test` or a path that does not exist.
    #[error("{0}")]
    Unprocessable(String),
    #[error("The allowed maximum operations in a JSON patch is {max}, got {0}", max = json_patch::MAX_OPERATIONS)]
    TooManyOperations(usize),
    /// The `copy` operations of a JSON patch would add more than
    /// Kubernetes allows (413).
    #[error("the copy operations of the JSON patch would add more than {max} bytes", max = json_patch::MAX_COPY_BYTES)]
    CopyTooLarge,
}

impl From<PatchError> for ApiError {
    fn from(err: PatchError) -> Self {
        match err {
            PatchError::Malformed(why) => ApiError::bad_request(why),
            // Kubernetes answers 422 Invalid with only its generic sentence;
            // the reason is kept after it, so that users can see what failed.
            PatchError::Unprocessable(why) => ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {why}"),
            ),
            err @ (PatchError::TooManyOperations(_) | PatchError::CopyTooLarge) => {
                ApiError::too_large(err.to_string())
            }
        }
    }
}

/// Applies a PATCH body of `content_type` to `current`; returns the patched
/// object (not yet validated or stored).
pub fn apply_patch(
    resource: &ResourceType,
    content_type: &str,
    current: &Value,
    patch: &[u8],
) -> Result<Value, ApiError> {
    let patched = match media_type(content_type).as_str() {
        JSON_PATCH => json_patch::apply(current, &decode(patch)?),
        MERGE_PATCH => merge_patch::apply(current, &decode(patch)?),
        // Custom resources have no patch strategies: Kubernetes answers
        // 415, and kubectl falls back to a merge patch.
        STRATEGIC_MERGE_PATCH if resource.custom.is_some() => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
            )))
        }
        STRATEGIC_MERGE_PATCH => strategic::apply(resource.definition, current, &decode(patch)?),
        _ => return Err(unsupported_media_type()),
    };
    Ok(patched?)
}

/// The media type of `content_type`, lower-case, without parameters.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether a PATCH is a server-side apply.
pub fn is_apply(content_type: &str) -> bool {
    media_type(content_type) == APPLY_PATCH
}

/// The body of a server-side apply: YAML (kubectl sends JSON, which is
/// YAML too), one object.
pub fn decode_apply(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("error decoding YAML: {why}"));
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(_) => serde_yaml::from_slice(body).map_err(|e| bad(e.to_string()))?,
    };
    match value {
        Value::Object(_) => Ok(value),
        _ => Err(bad("the applied configuration must be an object".into())),
    }
}

fn decode(body: &[u8]) -> Result<Value, PatchError> {
    serde_json::from_slice(body)
        .map_err(|err| PatchError::Malformed(format!("error decoding patch: {err}")))
}

/// 415 in Kubernetes' words, for any other media type (and apply, where
/// it is not served: subresources other than status).
fn unsupported_media_type() -> ApiError {
    ApiError::unsupported_media_type(format!(
        "the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}, {STRATEGIC_MERGE_PATCH}"
    ))
}

#[cfg(test)]
mod tests;
