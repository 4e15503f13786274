//! What a pod's containers and its worker share: the containers' statuses
//! (each runner writes its own slot), their running handles (for logs),
//! pod-level facts, and a version that ticks on every change so the
//! status writer and waiters see it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::container::initial_status;
use super::status::PodFacts;
use crate::runtime::ContainerHandle;

/// Where a pod's processes run: its network namespace (`None`: the host's
/// network) with its address, and its own files.
#[derive(Debug, Clone)]
pub struct PodPlace {
    pub ip: String,
    pub netns: Option<std::path::PathBuf>,
    pub files: std::path::PathBuf,
}

/// A container's place in the pod's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Init(usize),
    Regular(usize),
}

#[derive(Debug, Default)]
struct Statuses {
    init: Vec<ContainerStatus>,
    containers: Vec<ContainerStatus>,
    facts: PodFacts,
}

pub struct PodShared {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    statuses: Mutex<Statuses>,
    handles: Mutex<HashMap<String, ContainerHandle>>,
    version: watch::Sender<u64>,
    /// Flips once the eviction manager evicts the pod.
    evicted: watch::Sender<bool>,
    /// Held while the pod's volumes are written (a container's start, a
    /// refresh), so that one writer works on them at a time.
    pub volumes: tokio::sync::Mutex<()>,
}

impl PodShared {
    /// Every container waiting to be created (behind the init containers,
    /// if any).
    pub fn new(pod: &Pod, facts: PodFacts) -> PodShared {
        let spec = pod.spec.clone().unwrap_or_default();
        let init_containers = spec.init_containers.unwrap_or_default();
        let regular_reason = if init_containers.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let statuses = Statuses {
            init: init_containers
                .iter()
                .map(|c| initial_status(c, "PodInitializing"))
                .collect(),
            containers: spec
                .containers
                .iter()
                .map(|c| initial_status(c, regular_reason))
                .collect(),
            facts,
        };
        PodShared {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            statuses: Mutex::new(statuses),
            handles: Mutex::new(HashMap::new()),
            version: watch::channel(0).0,
            evicted: watch::channel(false).0,
            volumes: tokio::sync::Mutex::new(()),
        }
    }

    /// `name_namespace(uid)`, as the kubelet names pods in messages.
    pub fn pod_label(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    /// Changes one container's status.
    pub fn update(&self, slot: &Slot, change: impl FnOnce(&mut ContainerStatus)) {
        {
            let mut statuses = self.statuses.lock();
            let status = match *slot {
                Slot::Init(i) => statuses.init.get_mut(i),
                Slot::Regular(i) => statuses.containers.get_mut(i),
            };
            if let Some(status) = status {
                change(status);
            }
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Changes the pod-level facts.
    pub fn update_facts(&self, change: impl FnOnce(&mut PodFacts)) {
        change(&mut self.statuses.lock().facts);
        self.version.send_modify(|v| *v += 1);
    }

    /// Marks the pod Failed with `reason` and tells its worker to kill its
    /// containers.
    pub fn evict(&self, reason: &str, message: &str) {
        self.update_facts(|f| f.failed = Some((reason.to_string(), message.to_string())));
        self.evicted.send_replace(true);
    }

    pub fn is_evicted(&self) -> bool {
        *self.evicted.borrow()
    }

    pub fn evictions(&self) -> watch::Receiver<bool> {
        self.evicted.subscribe()
    }

    /// Where the pod's processes run, once its network (or, in the
    /// host's network, its files) is set up.
    pub fn network(&self) -> Option<PodPlace> {
        let statuses = self.statuses.lock();
        let facts = &statuses.facts;
        facts.files.clone().map(|files| PodPlace {
            ip: facts.pod_ip.clone(),
            netns: facts.netns.clone(),
            files,
        })
    }

    /// Init containers' statuses, regular containers' statuses and facts.
    pub fn snapshot(&self) -> (Vec<ContainerStatus>, Vec<ContainerStatus>, PodFacts) {
        let statuses = self.statuses.lock();
        (
            statuses.init.clone(),
            statuses.containers.clone(),
            statuses.facts.clone(),
        )
    }

    pub fn status_of(&self, slot: &Slot) -> Option<ContainerStatus> {
        let statuses = self.statuses.lock();
        match *slot {
            Slot::Init(i) => statuses.init.get(i).cloned(),
            Slot::Regular(i) => statuses.containers.get(i).cloned(),
        }
    }

    /// Ticks on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn set_handle(&self, container: &str, handle: Option<ContainerHandle>) {
        let mut handles = self.handles.lock();
        match handle {
            Some(handle) => handles.insert(container.to_string(), handle),
            None => handles.remove(container),
        };
    }

    /// The running container of that name, if any.
    pub fn handle(&self, container: &str) -> Option<ContainerHandle> {
        self.handles.lock().get(container).cloned()
    }

    /// Every running container, for eviction and stop.
    pub fn handles(&self) -> Vec<ContainerHandle> {
        self.handles.lock().values().cloned().collect()
    }
}
