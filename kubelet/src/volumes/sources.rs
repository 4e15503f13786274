//! What each volume of a pod should hold, worked out from the pod and the
//! fetched ConfigMaps and Secrets before anything touches the disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, Pod, ServiceAccountTokenProjection, Volume, VolumeProjection,
};

use super::atomic_writer::{write_payload, FileEntry, Payload};
use super::{host_path, set_mode, ClaimVolume, VolumeError, EMPTY_DIR_PLUGIN};
use crate::env::{self, EnvSources, NodeFacts};

/// Kubernetes' default mode for configMap, secret, downwardAPI and projected files.
const DEFAULT_MODE: u32 = 0o644;

/// One volume: its name, where it lives and what goes there.
#[derive(Debug)]
pub(super) struct VolumePlan {
    pub name: String,
    pub path: PathBuf,
    pub content: Content,
    pub notes: Vec<String>,
}

#[derive(Debug)]
pub(super) enum Content {
    EmptyDir,
    Files(Payload),
    HostPath { kind: String },
}

impl VolumePlan {
    /// Puts the volume on disk; `read_only` when every mount of it reads only.
    pub fn apply(&self, read_only: bool) -> Result<(), VolumeError> {
        let path = &self.path;
        match &self.content {
            Content::EmptyDir => {
                std::fs::create_dir_all(path).map_err(VolumeError::io("create emptyDir", path))?;
                let mode = if read_only { 0o555 } else { 0o777 };
                set_mode(path, mode).map_err(VolumeError::io("set mode of emptyDir", path))
            }
            Content::Files(payload) => {
                write_payload(path, payload).map_err(|e| VolumeError::set_up(&self.name, e))
            }
            Content::HostPath { kind } => {
                host_path::check(path, kind).map_err(|e| VolumeError::set_up(&self.name, e))
            }
        }
    }
}

/// A plan for every volume of `pod`, in spec order.
pub(super) fn plan_volumes(
    pod_dir: &Path,
    pod: &Pod,
    sources: &EnvSources,
) -> Result<Vec<VolumePlan>, VolumeError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .map(|volume| plan_volume(pod_dir, pod, volume, sources))
        .collect()
}

fn plan_volume(
    pod_dir: &Path,
    pod: &Pod,
    volume: &Volume,
    sources: &EnvSources,
) -> Result<VolumePlan, VolumeError> {
    let name = volume.name.clone();
    let under = |plugin: &str| pod_dir.join("volumes").join(plugin).join(&volume.name);
    let failed = |reason: String| VolumeError::set_up(&volume.name, reason);
    let mut notes = Vec::new();
    let (path, content) = if volume.empty_dir.is_some() {
        (under(EMPTY_DIR_PLUGIN), Content::EmptyDir)
    } else if let Some(source) = &volume.config_map {
        let mode = file_mode(source.default_mode, DEFAULT_MODE);
        let items = (source.items.as_deref(), source.optional, mode);
        let files = config_map_files(sources, &source.name, items).map_err(failed)?;
        (under("kubernetes.io~configmap"), Content::Files(files))
    } else if let Some(source) = &volume.secret {
        let secret_name = source.secret_name.as_deref().unwrap_or_default();
        let mode = file_mode(source.default_mode, DEFAULT_MODE);
        let items = (source.items.as_deref(), source.optional, mode);
        let files = secret_files(sources, secret_name, items).map_err(failed)?;
        (under("kubernetes.io~secret"), Content::Files(files))
    } else if let Some(source) = &volume.host_path {
        let kind = source.type_.clone().unwrap_or_default();
        (PathBuf::from(&source.path), Content::HostPath { kind })
    } else if let Some(source) = &volume.persistent_volume_claim {
        match sources.claims.get(&source.claim_name) {
            Some(ClaimVolume::Bound { path, kind }) => (
                PathBuf::from(path),
                Content::HostPath { kind: kind.clone() },
            ),
            Some(ClaimVolume::NotReady(reason)) => {
                return Err(VolumeError::ClaimNotReady {
                    volume: name,
                    reason: reason.clone(),
                })
            }
            None => {
                return Err(VolumeError::ClaimNotReady {
                    volume: name,
                    reason: format!(
                        "persistentvolumeclaim \"{}\" was not looked up",
                        source.claim_name
                    ),
                })
            }
        }
    } else if let Some(source) = &volume.downward_api {
        let mode = file_mode(source.default_mode, DEFAULT_MODE);
        let items = source.items.as_deref().unwrap_or_default();
        let files = downward_files(pod, items, mode, sources).map_err(failed)?;
        (under("kubernetes.io~downward-api"), Content::Files(files))
    } else if let Some(source) = &volume.projected {
        let mode = file_mode(source.default_mode, DEFAULT_MODE);
        let projections = source.sources.as_deref().unwrap_or_default();
        let files = projected_files(pod, projections, mode, sources, &mut notes);
        let files = files.map_err(failed)?;
        notes
            .iter_mut()
            .for_each(|n| *n = format!("volume \"{name}\": {n}"));
        (under("kubernetes.io~projected"), Content::Files(files))
    } else {
        return Err(VolumeError::UnsupportedType {
            volume: name,
            kind: volume_type(volume),
        });
    };
    Ok(VolumePlan {
        name,
        path,
        content,
        notes,
    })
}

/// `items`, `optional` and the default file mode of a key-based source.
type KeySelection<'a> = (Option<&'a [KeyToPath]>, Option<bool>, u32);

fn config_map_files(
    sources: &EnvSources,
    name: &str,
    (items, optional, mode): KeySelection,
) -> Result<Payload, String> {
    let found = env::find_config_map(sources, name, optional).map_err(|e| e.to_string())?;
    let Some(map) = found else {
        return Ok(Payload::new());
    };
    let text = map
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()));
    let binary = map
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()));
    let entries: BTreeMap<String, Vec<u8>> = text.chain(binary).collect();
    key_files(&entries, items, optional, mode)
        .map_err(|key| format!("configmap references non-existent config key: {key}"))
}

fn secret_files(
    sources: &EnvSources,
    name: &str,
    (items, optional, mode): KeySelection,
) -> Result<Payload, String> {
    let found = env::find_secret(sources, name, optional).map_err(|e| e.to_string())?;
    let Some(secret) = found else {
        return Ok(Payload::new());
    };
    let entries: BTreeMap<String, Vec<u8>> = env::secret_entries(secret).collect();
    key_files(&entries, items, optional, mode)
        .map_err(|key| format!("secret references non-existent secret key: {key}"))
}

/// Every key as a file, or only `items` at their paths; Err(key) for a
/// missing item key unless `optional`.
fn key_files(
    entries: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: u32,
) -> Result<Payload, String> {
    let entry = |data: &Vec<u8>, mode| FileEntry {
        data: data.clone(),
        mode,
    };
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        let all = entries
            .iter()
            .map(|(k, v)| (k.clone(), entry(v, default_mode)));
        return Ok(all.collect());
    };
    let mut payload = Payload::new();
    for item in items {
        match entries.get(&item.key) {
            Some(data) => {
                let mode = file_mode(item.mode, default_mode);
                payload.insert(item.path.clone(), entry(data, mode));
            }
            None if optional == Some(true) => {}
            None => return Err(item.key.clone()),
        }
    }
    Ok(payload)
}

fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    sources: &EnvSources,
) -> Result<Payload, String> {
    let node = NodeFacts::from_pod(pod);
    let mut payload = Payload::new();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            env::field_ref_value(pod, field, &node).map_err(|e| e.to_string())?
        } else if let Some(resource) = &item.resource_field_ref {
            let allocatable = &sources.node_allocatable;
            env::resource_field_value(pod, "", resource, allocatable).map_err(|e| e.to_string())?
        } else {
            String::new()
        };
        let file = FileEntry {
            data: value.into_bytes(),
            mode: file_mode(item.mode, default_mode),
        };
        payload.insert(item.path.clone(), file);
    }
    Ok(payload)
}

fn projected_files(
    pod: &Pod,
    projections: &[VolumeProjection],
    mode: u32,
    sources: &EnvSources,
    notes: &mut Vec<String>,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    for projection in projections {
        if let Some(source) = &projection.config_map {
            let items = (source.items.as_deref(), source.optional, mode);
            payload.extend(config_map_files(sources, &source.name, items)?);
        }
        if let Some(source) = &projection.secret {
            let items = (source.items.as_deref(), source.optional, mode);
            payload.extend(secret_files(sources, &source.name, items)?);
        }
        if let Some(source) = &projection.downward_api {
            let items = source.items.as_deref().unwrap_or_default();
            payload.extend(downward_files(pod, items, mode, sources)?);
        }
        if let Some(token) = &projection.service_account_token {
            let issued = sources.tokens.get(&token_key(token)).ok_or_else(|| {
                format!("no token was asked for the projection to {:?}", token.path)
            })?;
            let token_text = issued.as_ref().map_err(String::clone)?;
            let file = FileEntry {
                data: token_text.clone().into_bytes(),
                mode,
            };
            payload.insert(token.path.clone(), file);
        }
        if let Some(bundle) = &projection.cluster_trust_bundle {
            notes.push(format!(
                "clusterTrustBundle projection to {:?} skipped",
                bundle.path
            ));
        }
    }
    Ok(payload)
}

/// The serviceAccountToken projections of the pod's volumes.
pub fn token_projections(pod: &Pod) -> Vec<&ServiceAccountTokenProjection> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|source| source.service_account_token.as_ref())
        .collect()
}

/// What a projection's token is asked with and found by in
/// [`EnvSources::tokens`]: its audience (empty: the API server's) and
/// lifetime (an hour unless it names one, ten minutes at least).
pub fn token_key(projection: &ServiceAccountTokenProjection) -> (String, i64) {
    let seconds = projection
        .expiration_seconds
        .unwrap_or(crate::token::DEFAULT_EXPIRATION_SECONDS)
        .max(crate::token::MIN_EXPIRATION_SECONDS);
    (projection.audience.clone().unwrap_or_default(), seconds)
}

fn file_mode(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default) & 0o7777
}

/// The volume's source field as the API spells it (`persistentVolumeClaim`).
fn volume_type(volume: &Volume) -> String {
    let fields = serde_json::to_value(volume).ok();
    let kind = fields
        .as_ref()
        .and_then(|v| v.as_object())
        .and_then(|o| o.keys().find(|k| *k != "name").cloned());
    kind.unwrap_or_else(|| "none".to_string())
}
