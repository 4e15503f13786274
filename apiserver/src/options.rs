//! The options of a request, decoded strictly: query parameters (`watch`,
//! `limit`, `timeoutSeconds`, `dryRun`, `resourceVersionMatch`, …) and
//! `DeleteOptions` bodies. A wrong type is a 400 and a value Kubernetes'
//! options validation refuses is a 422 naming the options kind, so that a
//! malformed option never turns into a different request (a dry run into a
//! real delete). Not the objects themselves (`crate::validation`).

use std::collections::HashMap;

use serde_json::Value;

use crate::registry::{DeleteOptions, ListOptions, Propagation};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use skiff_machinery::selectors::{FieldSelector, LabelSelector};

/// The options kinds of the write verbs, as Kubernetes names them in a
/// 422 about an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsKind {
    Create,
    Update,
    Patch,
    Delete,
}

impl OptionsKind {
    fn kind(self) -> &'static str {
        match self {
            OptionsKind::Create => "CreateOptions",
            OptionsKind::Update => "UpdateOptions",
            OptionsKind::Patch => "PatchOptions",
            OptionsKind::Delete => "DeleteOptions",
        }
    }
}

/// A 422 about the options of a request, as Kubernetes words it
/// (`DeleteOptions.meta.k8s.io "" is invalid: dryRun[0]: …`).
pub fn invalid_options(kind: &str, causes: Vec<Cause>) -> ApiError {
    let plural = kind.to_ascii_lowercase();
    ApiError::invalid("meta.k8s.io", kind, &plural, "", causes)
}

fn cause(reason: &'static str, field: &str, message: String) -> Cause {
    Cause {
        reason,
        message,
        field: field.into(),
    }
}

fn bad_parameter(name: &str, value: &str, expected: &str) -> ApiError {
    ApiError::bad_request(format!(
        "invalid value {value:?} for the query parameter {name}: {expected}"
    ))
}

/// A boolean query parameter. As Kubernetes reads them, a parameter given
/// with no value (`?watch`) is true; besides that only the spellings of
/// true and false (`true`, `True`, `1`, `t`, `false`, `0`, `f`, any case)
/// are taken, and anything else is refused rather than guessed.
pub fn flag(query: &HashMap<String, String>, name: &str) -> ApiResult<bool> {
    let Some(value) = query.get(name) else {
        return Ok(false);
    };
    match value.to_ascii_lowercase().as_str() {
        "" | "true" | "1" | "t" => Ok(true),
        "false" | "0" | "f" => Ok(false),
        _ => Err(bad_parameter(name, value, "expected true or false")),
    }
}

/// A non-negative integer query parameter (`limit`, `timeoutSeconds`).
pub fn count(query: &HashMap<String, String>, name: &str) -> ApiResult<Option<i64>> {
    let Some(value) = query.get(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match value.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => Err(bad_parameter(
            name,
            value,
            "expected a non-negative integer",
        )),
    }
}

const DRY_RUN_ALL: &str = "All";

fn dry_run_value(kind: OptionsKind, index: Option<usize>, value: &str) -> ApiResult<bool> {
    match value {
        DRY_RUN_ALL => Ok(true),
        _ => {
            let field = match index {
                Some(i) => format!("dryRun[{i}]"),
                None => "dryRun".into(),
            };
            Err(invalid_options(
                kind.kind(),
                vec![cause(
                    "FieldValueNotSupported",
                    &field,
                    format!("Unsupported value: {value:?}: supported values: \"All\""),
                )],
            ))
        }
    }
}

/// `dryRun` of a write: absent or empty is a real write, `All` a dry run,
/// anything else a 422 (a typo must not become a real write).
pub fn dry_run(query: &HashMap<String, String>, kind: OptionsKind) -> ApiResult<bool> {
    match query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some(value) => dry_run_value(kind, None, value),
    }
}

/// The options of a list (`watch: false`) or of a watch, checked as
/// Kubernetes' ListOptions validation checks them.
pub fn list_options(
    resource: &ResourceType,
    query: &HashMap<String, String>,
    watch: bool,
) -> ApiResult<ListOptions> {
    let labels = match query.get("labelSelector").filter(|s| !s.is_empty()) {
        Some(s) => Some(LabelSelector::parse(s)?),
        None => None,
    };
    let fields = match query.get("fieldSelector").filter(|s| !s.is_empty()) {
        Some(s) => {
            let selector = FieldSelector::parse(s)?;
            selector.check_supported(resource.kind)?;
            Some(selector)
        }
        None => None,
    };
    let options = ListOptions {
        labels,
        fields,
        limit: count(query, "limit")?.unwrap_or(0),
        continue_token: query.get("continue").filter(|s| !s.is_empty()).cloned(),
        resource_version: query.get("resourceVersion").cloned().unwrap_or_default(),
        resource_version_match: query
            .get("resourceVersionMatch")
            .cloned()
            .unwrap_or_default(),
    };
    let send_initial_events = query.contains_key("sendInitialEvents");
    let causes = match watch {
        true => watch_causes(&options, send_initial_events),
        false => list_causes(&options, send_initial_events),
    };
    if !causes.is_empty() {
        return Err(invalid_options("ListOptions", causes));
    }
    Ok(options)
}

const EXACT: &str = "Exact";
const NOT_OLDER_THAN: &str = "NotOlderThan";

fn list_causes(options: &ListOptions, send_initial_events: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let matching = options.resource_version_match.as_str();
    if !matching.is_empty() {
        if options.resource_version.is_empty() {
            causes.push(cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                    .into(),
            ));
        }
        if options.continue_token.is_some() {
            causes.push(cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
        if matching != EXACT && matching != NOT_OLDER_THAN {
            causes.push(cause(
                "FieldValueNotSupported",
                "resourceVersionMatch",
                format!(
                    "Unsupported value: {matching:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
        if matching == EXACT && options.resource_version == "0" {
            causes.push(cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                    .into(),
            ));
        }
    }
    if send_initial_events {
        causes.push(cause(
            "FieldValueForbidden",
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for list".into(),
        ));
    }
    causes
}

fn watch_causes(options: &ListOptions, send_initial_events: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let matching = options.resource_version_match.as_str();
    if send_initial_events && matching != NOT_OLDER_THAN {
        causes.push(cause(
            "FieldValueForbidden",
            "resourceVersionMatch",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                .into(),
        ));
    }
    if !matching.is_empty() {
        if !send_initial_events {
            causes.push(cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                    .into(),
            ));
        }
        if matching != NOT_OLDER_THAN {
            causes.push(cause(
                "FieldValueNotSupported",
                "resourceVersionMatch",
                format!("Unsupported value: {matching:?}: supported values: \"NotOlderThan\""),
            ));
        }
        if options.continue_token.is_some() {
            causes.push(cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
    }
    causes
}

/// The DeleteOptions of a DELETE: from the query, then from the body
/// (JSON, or protobuf as kubectl drain sends it), decoded strictly.
pub fn delete_options(query: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut options = DeleteOptions {
        dry_run: dry_run(query, OptionsKind::Delete)?,
        ..DeleteOptions::default()
    };
    if let Some(g) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        options.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| bad_parameter("gracePeriodSeconds", g, "expected an integer"))?,
        );
    }
    if let Some(policy) = query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        options.propagation = Some(Propagation::parse(policy)?);
    }
    if query.contains_key("orphanDependents") {
        let orphan = flag(query, "orphanDependents")?;
        if options.propagation.is_some() {
            return Err(both_orphan_and_policy());
        }
        options.propagation = Some(match orphan {
            true => Propagation::Orphan,
            false => Propagation::Background,
        });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(options);
    }
    let value = match body.starts_with(crate::protobuf::MAGIC) {
        true => crate::object::protobuf_body(body)?,
        false => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        })?,
    };
    merge_body(&mut options, &value)?;
    Ok(options)
}

/// The body's fields over the query's, after decoding it as the
/// DeleteOptions type: a field of the wrong type, or a body of another
/// kind, is refused.
fn merge_body(options: &mut DeleteOptions, value: &Value) -> ApiResult<()> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions as Typed;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the DeleteOptions body must be a JSON object",
        ));
    }
    if let Some(kind) = value.get("kind").filter(|k| !k.is_null()) {
        if kind != "DeleteOptions" {
            return Err(ApiError::bad_request(format!(
                "decoded object cannot be converted to DeleteOptions: the body is of kind {kind}"
            )));
        }
    }
    let typed: Typed = serde_path_to_error::deserialize(value).map_err(|err| {
        ApiError::bad_request(format!(
            "the DeleteOptions body cannot be decoded: {}: {}",
            err.path(),
            err.inner()
        ))
    })?;
    if let Some(g) = typed.grace_period_seconds {
        options.grace_period_seconds = Some(g);
    }
    for (i, value) in typed.dry_run.iter().flatten().enumerate() {
        options.dry_run |= dry_run_value(OptionsKind::Delete, Some(i), value)?;
    }
    if let Some(policy) = typed.propagation_policy.as_deref() {
        options.propagation = Some(Propagation::parse(policy)?);
    }
    if let Some(orphan) = typed.orphan_dependents {
        if typed.propagation_policy.is_some() {
            return Err(both_orphan_and_policy());
        }
        options.propagation = Some(match orphan {
            true => Propagation::Orphan,
            false => Propagation::Background,
        });
    }
    if let Some(pre) = typed.preconditions {
        options.precondition_uid = pre.uid;
        options.precondition_resource_version = pre.resource_version;
    }
    Ok(())
}

fn both_orphan_and_policy() -> ApiError {
    invalid_options(
        "DeleteOptions",
        vec![cause(
            "FieldValueInvalid",
            "orphanDependents",
            "Invalid value: \"null\": Cannot both set OrphanDependents and PropagationPolicy"
                .into(),
        )],
    )
}

/// `force` is for server-side apply only, as Kubernetes' PatchOptions
/// validation says.
pub fn check_force(query: &HashMap<String, String>, apply: bool) -> ApiResult<bool> {
    let force = flag(query, "force")?;
    if force && !apply {
        return Err(invalid_options(
            "PatchOptions",
            vec![cause(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch".into(),
            )],
        ));
    }
    Ok(force)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pods() -> &'static ResourceType {
        crate::resources::find("", "v1", "pods").expect("pods are served")
    }

    #[test]
    fn booleans_take_the_spellings_of_true_and_false_and_refuse_the_rest() {
        for yes in ["true", "True", "1", "t", ""] {
            assert!(flag(&query(&[("watch", yes)]), "watch").unwrap(), "{yes}");
        }
        for no in ["false", "FALSE", "0", "f"] {
            assert!(!flag(&query(&[("watch", no)]), "watch").unwrap(), "{no}");
        }
        assert!(!flag(&query(&[]), "watch").unwrap());
        let err = flag(&query(&[("watch", "maybe")]), "watch").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("watch"), "{}", err.message);
    }

    #[test]
    fn counts_are_non_negative_integers() {
        assert_eq!(count(&query(&[("limit", "5")]), "limit").unwrap(), Some(5));
        assert_eq!(count(&query(&[("limit", "")]), "limit").unwrap(), None);
        for bad in ["-1", "ten", "1.5", "99999999999999999999"] {
            let err = count(&query(&[("limit", bad)]), "limit").unwrap_err();
            assert_eq!(err.code, 400, "{bad}");
        }
    }

    #[test]
    fn dry_run_is_all_or_nothing_else() {
        assert!(!dry_run(&query(&[]), OptionsKind::Create).unwrap());
        assert!(dry_run(&query(&[("dryRun", "All")]), OptionsKind::Create).unwrap());
        let err = dry_run(&query(&[("dryRun", "all")]), OptionsKind::Create).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.to_status()["details"]["kind"], "CreateOptions");
        assert_eq!(err.to_status()["details"]["causes"][0]["field"], "dryRun");
    }

    #[test]
    fn list_and_watch_options_are_checked_as_kubernetes_checks_them() {
        let ok = |pairs: &[(&str, &str)], watch| list_options(pods(), &query(pairs), watch);
        assert!(ok(
            &[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
            false
        )
        .is_ok());
        let fields = |pairs: &[(&str, &str)], watch| {
            let err = ok(pairs, watch).unwrap_err();
            assert_eq!(err.code, 422, "{pairs:?}");
            err.to_status()["details"]["causes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["field"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fields(&[("resourceVersionMatch", "Exact")], false),
            ["resourceVersionMatch"]
        );
        assert_eq!(
            fields(
                &[
                    ("resourceVersion", "1"),
                    ("resourceVersionMatch", "Sometimes")
                ],
                false
            ),
            ["resourceVersionMatch"]
        );
        assert_eq!(
            fields(
                &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                false
            ),
            ["resourceVersionMatch"]
        );
        assert_eq!(
            fields(&[("sendInitialEvents", "true")], false),
            ["sendInitialEvents"]
        );
        assert_eq!(
            fields(&[("sendInitialEvents", "true")], true),
            ["resourceVersionMatch"]
        );
        assert!(ok(
            &[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan")
            ],
            true
        )
        .is_ok());
        assert_eq!(
            fields(&[("resourceVersionMatch", "NotOlderThan")], true),
            ["resourceVersionMatch"]
        );
        assert_eq!(ok(&[("limit", "x")], false).unwrap_err().code, 400);
    }

    #[test]
    fn a_delete_options_body_of_the_wrong_type_is_refused_not_ignored() {
        let none = query(&[]);
        for body in [
            r#"{"dryRun":"All"}"#,
            r#"{"preconditions":{"uid":12345}}"#,
            r#"{"gracePeriodSeconds":"soon"}"#,
            r#"{"kind":"Pod","apiVersion":"v1"}"#,
            r#"{"propagationPolicy":7}"#,
            r#"[]"#,
            r#""All""#,
            r#"{"dryRun":["All"],"#,
        ] {
            let err = delete_options(&none, body.as_bytes()).unwrap_err();
            assert_eq!(err.code, 400, "{body}: {}", err.message);
        }
        let err = delete_options(&none, br#"{"dryRun":["Al"]}"#).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.to_status()["details"]["causes"][0]["field"],
            "dryRun[0]"
        );
        let err = delete_options(&none, br#"{"propagationPolicy":"Sideways"}"#).unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn a_delete_options_body_is_read() {
        let options = delete_options(
            &query(&[]),
            br#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"],"gracePeriodSeconds":5,
                 "propagationPolicy":"Foreground","preconditions":{"uid":"u1","resourceVersion":"7"}}"#,
        )
        .unwrap();
        assert!(options.dry_run);
        assert_eq!(options.grace_period_seconds, Some(5));
        assert_eq!(options.propagation, Some(Propagation::Foreground));
        assert_eq!(options.precondition_uid.as_deref(), Some("u1"));
        assert_eq!(options.precondition_resource_version.as_deref(), Some("7"));
        let options = delete_options(&query(&[("dryRun", "All")]), b"  \n").unwrap();
        assert!(options.dry_run);
        let err = delete_options(&query(&[("dryRun", "yes")]), b"").unwrap_err();
        assert_eq!(err.code, 422);
        let err = delete_options(&query(&[("gracePeriodSeconds", "soon")]), b"").unwrap_err();
        assert_eq!(err.code, 400);
        let err = delete_options(&query(&[("orphanDependents", "perhaps")]), b"").unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn force_is_only_for_apply() {
        assert!(check_force(&query(&[("force", "true")]), true).unwrap());
        assert!(!check_force(&query(&[]), false).unwrap());
        let err = check_force(&query(&[("force", "true")]), false).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.to_status()["details"]["kind"], "PatchOptions");
    }
}
