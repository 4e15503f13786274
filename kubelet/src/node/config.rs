//! The Node's configuration as the kubelet's flags give it: name, address,
//! labels, taints, capacity overrides, reserved resources and hard
//! eviction thresholds, with parsers for the flag syntax.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Taint;
use skiff_machinery::quantity::Quantity;

/// A flag value that does not parse; each says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("label {0:?} is not key=value")]
    LabelSyntax(String),
    #[error("label key {key:?} is invalid: {why}")]
    LabelKey { key: String, why: String },
    #[error("label value {value:?} is invalid: at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit")]
    LabelValue { value: String },
    #[error("taint {0:?} is not key[=value]:Effect")]
    TaintSyntax(String),
    #[error(
        "taint {taint:?} has effect {effect:?}; use NoSchedule, PreferNoSchedule or NoExecute"
    )]
    TaintEffect { taint: String, effect: String },
    #[error("resource {0:?} is not name=quantity (e.g. cpu=4,memory=8Gi)")]
    ResourceSyntax(String),
    #[error("resource name {0:?} is unknown; use cpu, memory, pods or ephemeral-storage")]
    ResourceName(String),
    #[error("{name}={value:?} is not a non-negative quantity (e.g. 4, 500m, 8Gi)")]
    ResourceQuantity { name: String, value: String },
    #[error("eviction threshold {0:?} is not signal<quantity or signal<percent% (e.g. memory.available<100Mi)")]
    ThresholdSyntax(String),
    #[error("eviction signal {0:?} is unknown; use memory.available, nodefs.available, nodefs.inodesFree or pid.available")]
    ThresholdSignal(String),
    #[error("eviction threshold {0:?} has a value that is neither a quantity nor a percentage of 0-100%")]
    ThresholdValue(String),
}

/// Quantities for the four resources a Node reports; `None` where not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceList {
    pub cpu: Option<Quantity>,
    pub memory: Option<Quantity>,
    pub pods: Option<Quantity>,
    pub ephemeral_storage: Option<Quantity>,
}

impl ResourceList {
    /// Parses `cpu=4,memory=8Gi,pods=110,ephemeral-storage=100Gi`.
    pub fn parse(text: &str) -> Result<ResourceList, ConfigError> {
        let mut list = ResourceList::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| ConfigError::ResourceSyntax(item.to_string()))?;
            let (name, value) = (name.trim(), value.trim());
            let quantity = Quantity::parse(value)
                .filter(|q| q.milli >= 0)
                .ok_or_else(|| ConfigError::ResourceQuantity {
                    name: name.to_string(),
                    value: value.to_string(),
                })?;
            *list.slot(name)? = Some(quantity);
        }
        Ok(list)
    }

    fn slot(&mut self, name: &str) -> Result<&mut Option<Quantity>, ConfigError> {
        Ok(match name {
            "cpu" => &mut self.cpu,
            "memory" => &mut self.memory,
            "pods" => &mut self.pods,
            "ephemeral-storage" => &mut self.ephemeral_storage,
            other => return Err(ConfigError::ResourceName(other.to_string())),
        })
    }
}

/// A hard eviction threshold: an absolute amount, or a share of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Quantity(Quantity),
    /// Percent of the capacity, 0 to 100.
    Percentage(f64),
}

impl Threshold {
    /// The threshold in units (bytes, inodes, pids) for a given capacity.
    pub fn amount_of(&self, capacity: u64) -> u64 {
        match self {
            Threshold::Quantity(q) => u64::try_from(q.milli.max(0) / 1000).unwrap_or(u64::MAX),
            Threshold::Percentage(p) => (capacity as f64 * p / 100.0).round() as u64,
        }
    }

    fn parse(value: &str) -> Option<Threshold> {
        if let Some(percent) = value.strip_suffix('%') {
            let p: f64 = percent.trim().parse().ok()?;
            return (0.0..=100.0)
                .contains(&p)
                .then_some(Threshold::Percentage(p));
        }
        Quantity::parse(value)
            .filter(|q| q.milli >= 0)
            .map(Threshold::Quantity)
    }
}

/// The kubelet's hard eviction thresholds (`--eviction-hard`): when a
/// signal's available amount falls below one, the node is under pressure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvictionThresholds {
    pub memory_available: Option<Threshold>,
    pub nodefs_available: Option<Threshold>,
    pub nodefs_inodes_free: Option<Threshold>,
    pub pid_available: Option<Threshold>,
}

impl Default for EvictionThresholds {
    /// The real kubelet's Linux defaults, plus pid.available<5%.
    fn default() -> Self {
        EvictionThresholds {
            memory_available: Quantity::parse("100Mi").map(Threshold::Quantity),
            nodefs_available: Some(Threshold::Percentage(10.0)),
            nodefs_inodes_free: Some(Threshold::Percentage(5.0)),
            pid_available: Some(Threshold::Percentage(5.0)),
        }
    }
}

impl EvictionThresholds {
    /// No thresholds: never under pressure, nothing held back.
    pub fn none() -> EvictionThresholds {
        EvictionThresholds {
            memory_available: None,
            nodefs_available: None,
            nodefs_inodes_free: None,
            pid_available: None,
        }
    }

    /// Parses `memory.available<100Mi,nodefs.available<10%`; signals not
    /// named keep their defaults.
    pub fn parse(text: &str) -> Result<EvictionThresholds, ConfigError> {
        let mut thresholds = EvictionThresholds::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (signal, value) = item
                .split_once('<')
                .ok_or_else(|| ConfigError::ThresholdSyntax(item.to_string()))?;
            let threshold = Threshold::parse(value.trim())
                .ok_or_else(|| ConfigError::ThresholdValue(item.to_string()))?;
            let slot = match signal.trim() {
                "memory.available" => &mut thresholds.memory_available,
                "nodefs.available" => &mut thresholds.nodefs_available,
                "nodefs.inodesFree" => &mut thresholds.nodefs_inodes_free,
                "pid.available" => &mut thresholds.pid_available,
                other => return Err(ConfigError::ThresholdSignal(other.to_string())),
            };
            *slot = Some(threshold);
        }
        Ok(thresholds)
    }
}

/// Everything the kubelet decides about its Node, as its flags give it.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    /// The InternalIP address.
    pub address: String,
    pub hostname: String,
    pub kubelet_port: u16,
    /// Labels beside the well-known ones the kubelet always sets.
    pub labels: BTreeMap<String, String>,
    /// Taints the Node registers with.
    pub taints: Vec<Taint>,
    /// Overrides of what the host reports.
    pub capacity: ResourceList,
    pub system_reserved: ResourceList,
    pub kube_reserved: ResourceList,
    /// Its filesystem is the node's ephemeral storage (nodefs).
    pub root_dir: PathBuf,
    pub eviction_hard: EvictionThresholds,
    /// nodeInfo.containerRuntimeVersion.
    pub runtime_version: String,
}

/// Pods a node takes when not told otherwise, as the real kubelet.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// The kubelet's port for logs, exec and its API.
pub const DEFAULT_KUBELET_PORT: u16 = 10250;
/// nodeInfo.kubeletVersion: the version the API reports, one for all of
/// skiff.
pub const KUBELET_VERSION: &str = skiff_machinery::version::GIT_VERSION;

impl NodeConfig {
    /// A node named `name` at `address`, with the real kubelet's defaults.
    pub fn new(name: &str, address: &str) -> NodeConfig {
        NodeConfig {
            name: name.to_string(),
            address: address.to_string(),
            hostname: name.to_string(),
            kubelet_port: DEFAULT_KUBELET_PORT,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            capacity: ResourceList::default(),
            system_reserved: ResourceList::default(),
            kube_reserved: ResourceList::default(),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            eviction_hard: EvictionThresholds::default(),
            runtime_version: format!("skiff-process://{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Parses `k=v,k2=v2` (`--node-labels`), checking keys and values as the
/// API server would.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut labels = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| ConfigError::LabelSyntax(item.to_string()))?;
        check_label_key(key)?;
        if !is_label_value(value) {
            return Err(ConfigError::LabelValue {
                value: value.to_string(),
            });
        }
        labels.insert(key.to_string(), value.to_string());
    }
    Ok(labels)
}

/// Parses `key=value:Effect,key2:Effect` (`--register-with-taints`).
pub fn parse_taints(text: &str) -> Result<Vec<Taint>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(parse_taint)
        .collect()
}

fn parse_taint(item: &str) -> Result<Taint, ConfigError> {
    let (key_value, effect) = item
        .rsplit_once(':')
        .ok_or_else(|| ConfigError::TaintSyntax(item.to_string()))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(ConfigError::TaintEffect {
            taint: item.to_string(),
            effect: effect.to_string(),
        });
    }
    let (key, value) = match key_value.split_once('=') {
        Some((key, value)) => (key, Some(value)),
        None => (key_value, None),
    };
    check_label_key(key)?;
    if let Some(value) = value.filter(|v| !is_label_value(v)) {
        return Err(ConfigError::LabelValue {
            value: value.to_string(),
        });
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.map(str::to_string),
        effect: effect.to_string(),
        time_added: None,
    })
}

fn check_label_key(key: &str) -> Result<(), ConfigError> {
    let fail = |why: &str| ConfigError::LabelKey {
        key: key.to_string(),
        why: why.to_string(),
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let dns = prefix.len() <= 253
            && !prefix.is_empty()
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !dns {
            return Err(fail("the prefix must be a lowercase DNS subdomain"));
        }
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(fail(
            "the name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit",
        ));
    }
    Ok(())
}

/// A label value: empty, or up to 63 of `[A-Za-z0-9-_.]` with
/// alphanumeric ends.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.is_empty()
        || (bytes.len() <= 63
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_with_and_without_value() {
        let taints = parse_taints("dedicated=gpu:NoSchedule, example.com/spot:NoExecute").unwrap();
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[0].key, "dedicated");
        assert_eq!(taints[0].value.as_deref(), Some("gpu"));
        assert_eq!(taints[0].effect, "NoSchedule");
        assert_eq!(taints[1].key, "example.com/spot");
        assert_eq!(taints[1].value, None);
        assert_eq!(taints[1].effect, "NoExecute");
    }

    #[test]
    fn bad_taints_say_what_is_wrong() {
        assert_eq!(
            parse_taints("dedicated=gpu").unwrap_err(),
            ConfigError::TaintSyntax("dedicated=gpu".into())
        );
        let err = parse_taints("a=b:Sometimes").unwrap_err();
        assert!(err
            .to_string()
            .contains("NoSchedule, PreferNoSchedule or NoExecute"));
        assert!(matches!(
            parse_taints("-bad=x:NoSchedule").unwrap_err(),
            ConfigError::LabelKey { .. }
        ));
    }

    #[test]
    fn labels_parse_and_are_checked() {
        let labels = parse_labels("zone=a,example.com/tier=front-end,empty=").unwrap();
        assert_eq!(labels["zone"], "a");
        assert_eq!(labels["example.com/tier"], "front-end");
        assert_eq!(labels["empty"], "");
        assert_eq!(
            parse_labels("zone").unwrap_err(),
            ConfigError::LabelSyntax("zone".into())
        );
        assert!(matches!(
            parse_labels("Bad_Prefix.com/x=1").unwrap_err(),
            ConfigError::LabelKey { .. }
        ));
        assert!(matches!(
            parse_labels("k=-x").unwrap_err(),
            ConfigError::LabelValue { .. }
        ));
        assert!(parse_labels(&format!("k={}", "a".repeat(64))).is_err());
    }

    #[test]
    fn capacity_parses_quantities() {
        let list = ResourceList::parse("cpu=4, memory=8Gi,pods=50,ephemeral-storage=100G").unwrap();
        assert_eq!(list.cpu.map(|q| q.milli), Some(4000));
        assert_eq!(list.memory.map(|q| q.milli), Some((8i128 << 30) * 1000));
        assert_eq!(list.pods.map(|q| q.milli), Some(50_000));
        assert_eq!(
            list.ephemeral_storage.map(|q| q.milli),
            Some(100_000_000_000_000)
        );
        assert_eq!(
            ResourceList::parse("gpu=1").unwrap_err(),
            ConfigError::ResourceName("gpu".into())
        );
        assert!(matches!(
            ResourceList::parse("cpu=lots").unwrap_err(),
            ConfigError::ResourceQuantity { .. }
        ));
        assert!(ResourceList::parse("cpu=-1").is_err());
        assert_eq!(
            ResourceList::parse("cpu").unwrap_err(),
            ConfigError::ResourceSyntax("cpu".into())
        );
    }

    #[test]
    fn eviction_thresholds_parse_and_keep_defaults() {
        let t = EvictionThresholds::parse("memory.available<1Gi,nodefs.available<15%").unwrap();
        assert_eq!(t.memory_available.map(|t| t.amount_of(0)), Some(1 << 30));
        assert_eq!(t.nodefs_available, Some(Threshold::Percentage(15.0)));
        assert_eq!(t.nodefs_inodes_free, Some(Threshold::Percentage(5.0)));
        assert_eq!(Threshold::Percentage(10.0).amount_of(1000), 100);
        assert!(matches!(
            EvictionThresholds::parse("swap.available<1Gi").unwrap_err(),
            ConfigError::ThresholdSignal(_)
        ));
        assert!(matches!(
            EvictionThresholds::parse("memory.available<150%").unwrap_err(),
            ConfigError::ThresholdValue(_)
        ));
        assert!(matches!(
            EvictionThresholds::parse("memory.available=1Gi").unwrap_err(),
            ConfigError::ThresholdSyntax(_)
        ));
    }
}
