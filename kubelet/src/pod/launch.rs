//! What a container is started with: its argv from command and args, its
//! environment (ConfigMaps and Secrets fetched fresh at each start, the
//! Services' variables), its volumes (with ServiceAccount tokens) and
//! working directory, and its limits; and the volumes' refresh while the
//! pod runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::{Api, Client};
use skiff_machinery::quantity::Quantity;

use crate::env::{self, EnvSources, NodeFacts};
use crate::envvars::ServiceLister;
use crate::pod::shared::PodPlace;
use crate::probe::ProbeTarget;
use crate::runtime::Limits;
use crate::token::{TokenKey, TokenManager};
use crate::volumes::{self, BindMount};

/// How long a start waits for the kubelet's first list of Services.
const SERVICES_WAIT: Duration = Duration::from_secs(5);

/// The waiting reason and message a container shows when it cannot start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotStarted {
    pub reason: &'static str,
    pub message: String,
    /// When the pod's volumes are what failed, the message of the
    /// `FailedMount` event the kubelet records on the pod; otherwise the
    /// container gets a `Failed` event.
    pub failed_mount: Option<String>,
}

impl NotStarted {
    /// The container cannot be configured or created.
    fn config(reason: &'static str, message: String) -> NotStarted {
        NotStarted {
            reason,
            message,
            failed_mount: None,
        }
    }

    /// The pod's volumes cannot be set up.
    fn volumes(err: volumes::VolumeError) -> NotStarted {
        use volumes::VolumeError::*;
        let message = err.to_string();
        let failed_mount = match &err {
            // Mistakes of the spec, not of a mount: the kubelet refuses
            // the container's configuration.
            UnknownVolume { .. } | InvalidPath { .. } | MountConflict { .. } => None,
            SetUp { .. } => Some(message.clone()),
            ClaimNotReady { volume, reason } => Some(format!(
                "Unable to attach or mount volumes: unmounted volumes=[{volume}]: {reason}"
            )),
            _ => Some(format!("Unable to attach or mount volumes: {message}")),
        };
        NotStarted {
            // The kubelet keeps such a pod in ContainerCreating until
            // its claims are bound.
            reason: match err {
                ClaimNotReady { .. } => "ContainerCreating",
                _ => "CreateContainerConfigError",
            },
            message,
            failed_mount,
        }
    }
}

/// Everything the runtime needs for one start, and what probes and hooks
/// run with.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    pub limits: Limits,
    pub probe_target: ProbeTarget,
    /// The container's volumes that its mount namespace has at their
    /// mountPaths; none without one.
    pub mounts: Vec<BindMount>,
}

/// The pod-wide part of starting containers.
#[derive(Clone)]
pub struct PodLauncher {
    pub client: Client,
    /// `<root>/pods-volumes`: one directory per pod uid.
    pub pods_dir: PathBuf,
    pub node: NodeFacts,
    pub allocatable: BTreeMap<String, ApiQuantity>,
    /// The pods' ServiceAccount tokens.
    pub tokens: Arc<TokenManager>,
    /// The cluster's Services, for containers' variables; `None`: none.
    pub services: Option<ServiceLister>,
}

impl PodLauncher {
    /// Prepares volumes and resolves the container's start. `network` is
    /// where the pod's processes run (its own network's address and
    /// namespace, or the host's network, and its files) when the kubelet
    /// makes such a place;
    /// `volumes_lock` is the pod's, so that one of its volume setups runs
    /// at a time.
    pub async fn launch(
        &self,
        pod: &Pod,
        container: &Container,
        network: Option<&PodPlace>,
        volumes_lock: &tokio::sync::Mutex<()>,
    ) -> Result<Launch, NotStarted> {
        let mut node = self.node.clone();
        if let Some(PodPlace {
            ip, netns: Some(_), ..
        }) = network
        {
            node.pod_ip = ip.to_string();
            node.pod_ips = vec![ip.to_string()];
        }
        let mut sources = self.sources(pod).await?;
        sources.service_env = self.service_env(pod).await?;
        let prepared = {
            let _one_at_a_time = volumes_lock.lock().await;
            volumes::prepare(&self.pods_dir, pod, &sources).await
        };
        let prepared = prepared.map_err(NotStarted::volumes)?;
        let env = env::container_env(pod, container, &sources, &node, &prepared)
            .map_err(|err| NotStarted::config("CreateContainerConfigError", err.to_string()))?;
        let argv = argv(container, &env)?;
        let root = prepared
            .root()
            .unwrap_or_else(|| self.pods_dir.join(pod_uid(pod)));
        let working_dir = working_dir(&root, container.working_dir.as_deref());
        if let Err(err) = tokio::fs::create_dir_all(&working_dir).await {
            return Err(NotStarted::config(
                "CreateContainerError",
                format!(
                    "cannot create the working directory {}: {err}",
                    working_dir.display()
                ),
            ));
        }
        let mounts = match network {
            Some(_) => mountable(pod, container, &prepared.bind_mounts(&container.name)),
            None => Vec::new(),
        };
        Ok(Launch {
            probe_target: ProbeTarget {
                host: node.pod_ip.clone(),
                env: env.clone(),
                working_dir: working_dir.clone(),
                ports: container.ports.clone().unwrap_or_default(),
                netns: network.and_then(|p| p.netns.clone()),
                files: network.map(|p| p.files.clone()),
                mounts: mounts.clone(),
            },
            argv,
            env,
            working_dir,
            limits: limits(container),
            mounts,
        })
    }

    /// Writes the pod's volumes again from what the API has now: its
    /// ConfigMaps, Secrets and downward API fields, and ServiceAccount
    /// tokens, refreshed when they are due. A volume that cannot be set up
    /// keeps what it had.
    pub async fn refresh_volumes(
        &self,
        pod: &Pod,
        volumes_lock: &tokio::sync::Mutex<()>,
    ) -> Result<(), String> {
        let sources = self.sources(pod).await.map_err(|e| e.message)?;
        let _one_at_a_time = volumes_lock.lock().await;
        volumes::prepare(&self.pods_dir, pod, &sources)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The Services' variables for a container of `pod`.
    async fn service_env(&self, pod: &Pod) -> Result<BTreeMap<String, String>, NotStarted> {
        let Some(services) = &self.services else {
            return Ok(BTreeMap::new());
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let links = crate::envvars::enable_service_links(pod);
        services
            .env_for(namespace, links, SERVICES_WAIT)
            .await
            .map_err(|message| NotStarted::config("CreateContainerConfigError", message))
    }

    /// A token for each serviceAccountToken projection of the pod, bound
    /// to it (or why there is none).
    async fn tokens(&self, pod: &Pod, sources: &mut EnvSources) {
        let spec = pod.spec.as_ref();
        let account = spec
            .and_then(|s| s.service_account_name.clone().or(s.service_account.clone()))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "default".to_string());
        for projection in volumes::token_projections(pod) {
            let (audience, expiration_seconds) = volumes::token_key(projection);
            let key = TokenKey {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                account: account.clone(),
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.clone()]
                },
                expiration_seconds,
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: pod_uid(pod),
            };
            let token = self.tokens.service_account_token(&key).await;
            sources.tokens.insert(
                (audience, expiration_seconds),
                token.map_err(|e| e.to_string()),
            );
        }
    }

    /// The ConfigMaps and Secrets the pod refers to (a missing one is left
    /// out: env and volumes then report it, or skip it if optional), its
    /// claims' volumes, and its projections' tokens.
    async fn sources(&self, pod: &Pod) -> Result<EnvSources, NotStarted> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut sources = EnvSources {
            node_allocatable: self.allocatable.clone(),
            ..Default::default()
        };
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        for name in env::referenced_config_maps(pod) {
            if let Some(found) = config_maps.get_opt(&name).await.map_err(api_error)? {
                sources.config_maps.insert(name, found);
            }
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        for name in env::referenced_secrets(pod) {
            if let Some(found) = secrets.get_opt(&name).await.map_err(api_error)? {
                sources.secrets.insert(name, found);
            }
        }
        self.claims(pod, namespace, &mut sources).await?;
        self.tokens(pod, &mut sources).await;
        Ok(sources)
    }

    /// Each persistentVolumeClaim the pod names, resolved to its bound
    /// volume's directory (or why it has none yet).
    async fn claims(
        &self,
        pod: &Pod,
        namespace: &str,
        sources: &mut EnvSources,
    ) -> Result<(), NotStarted> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        for name in volumes::claim_names(pod) {
            let claim = claims.get_opt(&name).await.map_err(claim_error)?;
            let volume_name = claim
                .as_ref()
                .and_then(|c| c.spec.as_ref())
                .and_then(|s| s.volume_name.clone())
                .filter(|n| !n.is_empty());
            let volume = match volume_name {
                Some(volume_name) => volumes.get_opt(&volume_name).await.map_err(claim_error)?,
                None => None,
            };
            let resolved =
                volumes::resolve_claim(namespace, &name, claim.as_ref(), volume.as_ref());
            sources.claims.insert(name, resolved);
        }
        Ok(())
    }
}

/// The volumes that can be mounted at their mountPaths in the container's
/// mount namespace (their mount points made); the others are said once
/// per start and reached through `SKIFF_VOLUME_*` and the pod root.
fn mountable(pod: &Pod, container: &Container, volumes: &[BindMount]) -> Vec<BindMount> {
    let (accepted, refused) = crate::network::files::mountable(volumes);
    for (volume, why) in refused {
        tracing::warn!(
            pod = %pod.metadata.name.as_deref().unwrap_or_default(),
            namespace = %pod.metadata.namespace.as_deref().unwrap_or_default(),
            container = %container.name,
            mount_path = %volume.mount_path,
            reason = %why,
            "the volume is not mounted at its mountPath; the container finds it through SKIFF_VOLUME_* and the pod root"
        );
    }
    accepted
}

fn claim_error(err: kube::Error) -> NotStarted {
    let message = format!("reading the pod's PersistentVolumeClaims: {err}");
    NotStarted {
        reason: "ContainerCreating",
        failed_mount: Some(format!("Unable to attach or mount volumes: {message}")),
        message,
    }
}

fn api_error(err: kube::Error) -> NotStarted {
    NotStarted::config(
        "CreateContainerConfigError",
        format!("reading the pod's ConfigMaps and Secrets: {err}"),
    )
}

pub fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The process to run: `command` then `args`, with `$(VAR)` expanded. With
/// no command, `args` alone are run, as they would be for an image without
/// an ENTRYPOINT; with neither there is nothing this runtime can run.
pub fn argv(container: &Container, env: &[(String, String)]) -> Result<Vec<String>, NotStarted> {
    let command = container.command.clone().unwrap_or_default();
    let args = container.args.clone().unwrap_or_default();
    let words: Vec<String> = command
        .into_iter()
        .chain(args)
        .map(|word| env::expand_references(&word, env))
        .collect();
    if words.is_empty() {
        return Err(NotStarted::config(
            "ContainerCommandRequired",
            format!(
                "skiff runs containers as local processes and does not pull images: container {:?} (image {:?}) needs a command or args to run",
                container.name,
                container.image.as_deref().unwrap_or("")
            ),
        ));
    }
    Ok(words)
}

/// `workingDir` if it exists on this host, else the same path inside the
/// pod's root; the pod's root when none is given.
pub fn working_dir(pod_root: &Path, given: Option<&str>) -> PathBuf {
    match given.filter(|d| !d.is_empty()) {
        None => pod_root.to_path_buf(),
        Some(dir) if Path::new(dir).is_dir() => PathBuf::from(dir),
        Some(dir) => pod_root.join(dir.trim_start_matches('/')),
    }
}

/// cpu and memory limits, for cgroup v2.
pub fn limits(container: &Container) -> Limits {
    let limit = |name: &str| {
        container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(name))
            .and_then(|q| Quantity::parse(&q.0))
            .filter(|q| q.milli > 0)
    };
    Limits {
        cpu_millis: limit("cpu").map(|q| q.milli as u64),
        memory_bytes: limit("memory").map(|q| (q.milli / 1000) as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn argv_is_command_then_args_with_references_expanded() {
        let c = container(serde_json::json!({
            "name": "c", "command": ["sh", "-c"], "args": ["echo $(GREETING) $$HOME"]
        }));
        let env = vec![("GREETING".to_string(), "hi".to_string())];
        assert_eq!(argv(&c, &env).unwrap(), ["sh", "-c", "echo hi $HOME"]);
        let args_only = container(serde_json::json!({"name": "c", "args": ["python3", "-V"]}));
        assert_eq!(argv(&args_only, &[]).unwrap(), ["python3", "-V"]);
    }

    #[test]
    fn a_container_with_nothing_to_run_says_so() {
        let c = container(serde_json::json!({"name": "web", "image": "nginx"}));
        let err = argv(&c, &[]).unwrap_err();
        assert_eq!(err.reason, "ContainerCommandRequired");
        assert!(err.message.contains("\"nginx\""), "{}", err.message);
    }

    #[test]
    fn volumes_that_cannot_be_set_up_are_failed_mounts() {
        let set_up = NotStarted::volumes(volumes::VolumeError::SetUp {
            volume: "cfg".into(),
            reason: "configmap \"cfg\" not found".into(),
        });
        assert_eq!(set_up.reason, "CreateContainerConfigError");
        assert_eq!(
            set_up.failed_mount.as_deref(),
            Some("MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found")
        );
        let claim = NotStarted::volumes(volumes::VolumeError::ClaimNotReady {
            volume: "data".into(),
            reason: "persistentvolumeclaim \"data\" is not bound".into(),
        });
        assert_eq!(claim.reason, "ContainerCreating");
        assert_eq!(
            claim.failed_mount.as_deref(),
            Some("Unable to attach or mount volumes: unmounted volumes=[data]: persistentvolumeclaim \"data\" is not bound")
        );
        let unknown = NotStarted::volumes(volumes::VolumeError::UnknownVolume {
            container: "c".into(),
            volume: "v".into(),
        });
        assert_eq!(
            unknown.failed_mount, None,
            "a spec mistake is the container's"
        );
        let c = container(serde_json::json!({"name": "web", "image": "nginx"}));
        assert_eq!(argv(&c, &[]).unwrap_err().failed_mount, None);
    }

    #[test]
    fn working_dirs_missing_on_the_host_live_in_the_pod_root() {
        let root = Path::new("/var/lib/skiff/pods/u/root");
        assert_eq!(working_dir(root, None), root);
        assert_eq!(working_dir(root, Some("/tmp")), Path::new("/tmp"));
        assert_eq!(
            working_dir(root, Some("/no/such/app")),
            root.join("no/such/app")
        );
    }

    #[test]
    fn limits_come_from_resources() {
        let c = container(serde_json::json!({
            "name": "c", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}
        }));
        assert_eq!(
            limits(&c),
            Limits {
                cpu_millis: Some(500),
                memory_bytes: Some(64 * 1024 * 1024)
            }
        );
        assert_eq!(
            limits(&container(serde_json::json!({"name": "c"}))),
            Limits::default()
        );
    }
}
