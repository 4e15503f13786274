//! The 409 an apply gets when it would change fields other managers own,
//! worded as Kubernetes words it so that clients and people recognise it.

use super::fieldset::{self, FieldSet};
use super::managed::Entry;
use crate::resources::ResourceType;
use crate::status::{ApiError, Cause, Details};

/// `conflicts`: each other manager's entry with the fields of it the apply
/// would change.
pub(crate) fn error(
    resource: &ResourceType,
    name: &str,
    conflicts: &[(&Entry, FieldSet)],
) -> ApiError {
    let mut by_manager: Vec<(&Entry, Vec<String>)> = conflicts
        .iter()
        .map(|(entry, fields)| {
            let paths = fields
                .paths()
                .iter()
                .map(|p| fieldset::display(p))
                .collect();
            (*entry, paths)
        })
        .collect();
    by_manager.sort_by(|(a, _), (b, _)| {
        (&a.manager, a.operation, &a.api_version, &a.subresource).cmp(&(
            &b.manager,
            b.operation,
            &b.api_version,
            &b.subresource,
        ))
    });
    let count: usize = by_manager.iter().map(|(_, paths)| paths.len()).sum();
    let message = match by_manager.as_slice() {
        [(entry, paths)] if paths.len() == 1 => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            entry.describe(),
            paths[0]
        ),
        _ => {
            let mut lines = Vec::new();
            for (entry, paths) in &by_manager {
                lines.push(format!("conflicts with {}:", entry.describe()));
                lines.extend(paths.iter().map(|p| format!("- {p}")));
            }
            format!("Apply failed with {count} conflicts: {}", lines.join("\n"))
        }
    };
    let causes = by_manager
        .iter()
        .flat_map(|(entry, paths)| {
            paths.iter().map(move |path| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {}", entry.describe()),
                field: path.clone(),
            })
        })
        .collect();
    let mut err = ApiError::new(409, "Conflict", message);
    err.details = Some(Box::new(Details {
        group: resource.group.to_string(),
        kind: resource.plural.to_string(),
        name: name.to_string(),
        causes,
        retry_after_seconds: None,
    }));
    err
}

/// Whether `err` is an apply conflict (not some other 409).
#[cfg(test)]
pub(crate) fn is_conflict(err: &ApiError) -> bool {
    err.code == 409
        && err
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "FieldManagerConflict"))
}
