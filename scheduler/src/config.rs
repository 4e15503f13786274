//! The scheduler's configuration: a KubeSchedulerConfiguration
//! (`kubescheduler.config.k8s.io/v1`) YAML file — profiles, the plugins of
//! each extension point enabled or disabled, score weights, plugin args,
//! percentageOfNodesToScore and back-off times — turned into [`Profile`]s.
//! Without a file, the one default profile `default-scheduler`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::extender::{self, Extender};
use crate::framework::{Plugin, Point, Profile};
use crate::plugins::{factory, DEFAULT_PLUGINS};
use crate::queue::QueueConfig;

pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    percentage_of_nodes_to_score: Option<i64>,
    pod_initial_backoff_seconds: Option<i64>,
    pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    profiles: Vec<ProfileConfig>,
    /// Accepted for compatibility; skiff's own flags decide these.
    leader_election: Option<Value>,
    client_connection: Option<Value>,
    parallelism: Option<i64>,
    #[serde(default)]
    extenders: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileConfig {
    scheduler_name: Option<String>,
    percentage_of_nodes_to_score: Option<i64>,
    #[serde(default)]
    plugins: HashMap<String, PluginSet>,
    #[serde(default)]
    plugin_config: Vec<PluginConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginSet {
    #[serde(default)]
    enabled: Vec<PluginRef>,
    #[serde(default)]
    disabled: Vec<PluginRef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginRef {
    name: String,
    #[serde(default)]
    weight: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginConfig {
    name: String,
    #[serde(default)]
    args: Value,
}

/// What the scheduler runs with.
pub struct SchedulerConfig {
    pub profiles: Vec<Arc<Profile>>,
    pub queue: QueueConfig,
    /// The HTTP extenders of the file (filter, prioritize, bind).
    pub extenders: Vec<Arc<Extender>>,
}

impl SchedulerConfig {
    /// The default profile and back-off times.
    pub fn default_config() -> Result<SchedulerConfig, String> {
        SchedulerConfig::parse("")
    }

    /// From the YAML text of a KubeSchedulerConfiguration.
    pub fn parse(yaml: &str) -> Result<SchedulerConfig, String> {
        let file: File = match yaml.trim() {
            "" => File::default(),
            text => serde_yaml::from_str(text)
                .map_err(|e| format!("invalid scheduler configuration: {e}"))?,
        };
        if let Some(api_version) = &file.api_version {
            if api_version != "kubescheduler.config.k8s.io/v1" {
                return Err(format!(
                    "apiVersion {api_version:?} is not supported: use kubescheduler.config.k8s.io/v1"
                ));
            }
        }
        if let Some(kind) = &file.kind {
            if kind != "KubeSchedulerConfiguration" {
                return Err(format!(
                    "kind {kind:?}: expected KubeSchedulerConfiguration"
                ));
            }
        }
        let _ = (
            &file.leader_election,
            &file.client_connection,
            file.parallelism,
        );
        let percentage = percentage(
            file.percentage_of_nodes_to_score,
            "percentageOfNodesToScore",
        )?;
        let mut queue = QueueConfig::default();
        if let Some(seconds) = file.pod_initial_backoff_seconds {
            queue.initial_backoff = seconds_of(seconds, "podInitialBackoffSeconds")?;
        }
        if let Some(seconds) = file.pod_max_backoff_seconds {
            queue.max_backoff = seconds_of(seconds, "podMaxBackoffSeconds")?;
        }
        if queue.max_backoff < queue.initial_backoff {
            return Err(
                "podMaxBackoffSeconds must not be less than podInitialBackoffSeconds".into(),
            );
        }
        let extenders = extender::extenders_from_config(&file.extenders)
            .map_err(|e| format!("invalid scheduler configuration: {e}"))?;
        let ignored = extender::ignored_resources(&extenders);
        let configs = match file.profiles.is_empty() {
            true => vec![ProfileConfig::default()],
            false => file.profiles,
        };
        let mut profiles = Vec::new();
        for config in configs {
            let profile = build_profile(config, percentage, &ignored)?;
            if profiles
                .iter()
                .any(|p: &Arc<Profile>| p.scheduler_name == profile.scheduler_name)
            {
                return Err(format!(
                    "profiles: duplicate schedulerName {:?}",
                    profile.scheduler_name
                ));
            }
            profiles.push(Arc::new(profile));
        }
        Ok(SchedulerConfig {
            profiles,
            queue,
            extenders,
        })
    }

    pub fn profile(&self, scheduler_name: &str) -> Option<&Arc<Profile>> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }
}

fn percentage(value: Option<i64>, field: &str) -> Result<usize, String> {
    match value {
        None => Ok(0),
        Some(p) if (0..=100).contains(&p) => Ok(p as usize),
        Some(p) => Err(format!(
            "{field}: Invalid value: {p}: not in valid range [0-100]"
        )),
    }
}

fn seconds_of(value: i64, field: &str) -> Result<Duration, String> {
    match value {
        v if v > 0 => Ok(Duration::from_secs(v as u64)),
        v => Err(format!(
            "{field}: Invalid value: {v}: must be greater than 0"
        )),
    }
}

fn point_of(name: &str) -> Option<Point> {
    Point::ALL.into_iter().find(|p| p.config_name() == name)
}

fn build_profile(
    config: ProfileConfig,
    default_percentage: usize,
    extender_ignored: &[String],
) -> Result<Profile, String> {
    let scheduler_name = config
        .scheduler_name
        .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_string());
    let mut args: HashMap<String, Value> = HashMap::new();
    for entry in config.plugin_config {
        if args.insert(entry.name.clone(), entry.args).is_some() {
            return Err(format!(
                "profile {scheduler_name:?}: pluginConfig names {:?} twice",
                entry.name
            ));
        }
    }
    // Resources that extenders manage and the scheduler ignores are left
    // out of NodeResourcesFit's checks, as kube-scheduler does.
    if !extender_ignored.is_empty() {
        let fit = args
            .entry("NodeResourcesFit".to_string())
            .or_insert(Value::Null);
        if !fit.is_object() {
            *fit = serde_json::json!({});
        }
        let list = &mut fit["ignoredResources"];
        if !list.is_array() {
            *list = serde_json::json!([]);
        }
        if let Some(list) = list.as_array_mut() {
            for name in extender_ignored {
                if !list.iter().any(|v| v == name.as_str()) {
                    list.push(Value::from(name.as_str()));
                }
            }
        }
    }
    for name in config.plugins.keys() {
        if name != "multiPoint" && point_of(name).is_none() {
            return Err(format!(
                "profile {scheduler_name:?}: plugins.{name} is not an extension point"
            ));
        }
    }
    // multiPoint: the defaults, less what is disabled, plus what is enabled.
    let mut multi: Vec<(String, i64)> = DEFAULT_PLUGINS
        .iter()
        .map(|(n, w)| (n.to_string(), *w))
        .collect();
    let empty = PluginSet::default();
    let multi_set = config.plugins.get("multiPoint").unwrap_or(&empty);
    apply_disabled(&mut multi, &multi_set.disabled);
    for plugin in &multi_set.enabled {
        match multi.iter_mut().find(|(n, _)| *n == plugin.name) {
            Some(entry) if plugin.weight != 0 => entry.1 = plugin.weight,
            Some(_) => {}
            None => multi.push((plugin.name.clone(), plugin.weight)),
        }
    }
    // One instance per plugin, shared by its extension points.
    let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut instance = |name: &str| -> Result<Arc<dyn Plugin>, String> {
        if let Some(plugin) = instances.get(name) {
            return Ok(plugin.clone());
        }
        let make = factory(name)
            .ok_or_else(|| format!("profile {scheduler_name:?}: no plugin named {name:?}"))?;
        let plugin = make(args.get(name).unwrap_or(&Value::Null))
            .map_err(|e| format!("profile {scheduler_name:?}: plugin {name}: {e}"))?;
        instances.insert(name.to_string(), plugin.clone());
        Ok(plugin)
    };
    let mut plugins: HashMap<Point, Vec<Arc<dyn Plugin>>> = HashMap::new();
    let mut weights: HashMap<&'static str, i64> = HashMap::new();
    for point in Point::ALL {
        let set = config.plugins.get(point.config_name()).unwrap_or(&empty);
        let mut at: Vec<(String, i64)> = Vec::new();
        // Enabled at this point: first, in their order.
        for plugin in &set.enabled {
            let made = instance(&plugin.name)?;
            if !made.points().contains(&point) {
                return Err(format!(
                    "profile {scheduler_name:?}: plugin {} does not implement {}",
                    plugin.name,
                    point.config_name()
                ));
            }
            at.push((plugin.name.clone(), plugin.weight));
        }
        let mut from_multi: Vec<(String, i64)> = Vec::new();
        for (name, weight) in &multi {
            if at.iter().any(|(n, _)| n == name) {
                continue;
            }
            if instance(name)?.points().contains(&point) {
                from_multi.push((name.clone(), *weight));
            }
        }
        apply_disabled(&mut from_multi, &set.disabled);
        at.extend(from_multi);
        for (name, weight) in at {
            let plugin = instance(&name)?;
            if point == Point::Score {
                let weight = match weight {
                    0 => DEFAULT_PLUGINS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, w)| *w)
                        .filter(|w| *w > 0)
                        .unwrap_or(1),
                    w if w < 0 => {
                        return Err(format!(
                            "profile {scheduler_name:?}: plugin {name}: weight must be positive"
                        ))
                    }
                    w => w,
                };
                weights.insert(plugin.name(), weight);
            }
            plugins.entry(point).or_default().push(plugin);
        }
    }
    if plugins.get(&Point::Bind).is_none_or(Vec::is_empty) {
        return Err(format!(
            "profile {scheduler_name:?}: at least one bind plugin is needed"
        ));
    }
    if plugins.get(&Point::QueueSort).is_none_or(|q| q.len() != 1) {
        return Err(format!(
            "profile {scheduler_name:?}: exactly one queueSort plugin is needed"
        ));
    }
    let percentage_of_nodes_to_score = match config.percentage_of_nodes_to_score {
        Some(_) => percentage(
            config.percentage_of_nodes_to_score,
            "percentageOfNodesToScore",
        )?,
        None => default_percentage,
    };
    Ok(Profile {
        scheduler_name,
        plugins,
        weights,
        percentage_of_nodes_to_score,
    })
}

fn apply_disabled(list: &mut Vec<(String, i64)>, disabled: &[PluginRef]) {
    for plugin in disabled {
        match plugin.name.as_str() {
            "*" => list.clear(),
            name => list.retain(|(n, _)| n != name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(profile: &Profile, point: Point) -> Vec<&'static str> {
        profile.at(point).iter().map(|p| p.name()).collect()
    }

    #[test]
    fn the_default_profile_is_kube_schedulers() {
        let config = SchedulerConfig::default_config().unwrap();
        assert_eq!(config.profiles.len(), 1);
        let profile = config.profile("default-scheduler").unwrap();
        assert_eq!(
            names(profile, Point::Filter),
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "PodTopologySpread",
                "InterPodAffinity",
            ]
        );
        assert_eq!(names(profile, Point::PostFilter), ["DefaultPreemption"]);
        assert_eq!(names(profile, Point::Bind), ["DefaultBinder"]);
        assert_eq!(names(profile, Point::QueueSort), ["PrioritySort"]);
        assert_eq!(names(profile, Point::PreEnqueue), ["SchedulingGates"]);
        let weights: Vec<(&str, i64)> = names(profile, Point::Score)
            .into_iter()
            .map(|n| (n, profile.weights[n]))
            .collect();
        assert_eq!(
            weights,
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1),
            ]
        );
        assert_eq!(config.queue.initial_backoff, Duration::from_secs(1));
        assert_eq!(config.queue.max_backoff, Duration::from_secs(10));
    }

    #[test]
    fn profiles_enable_disable_weigh_and_configure_plugins() {
        let config = SchedulerConfig::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  percentageOfNodesToScore: 100
  plugins:
    score:
      disabled:
      - name: '*'
      enabled:
      - name: NodeResourcesFit
        weight: 5
    multiPoint:
      enabled:
      - name: NodeLabel
      disabled:
      - name: ImageLocality
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
  - name: NodeLabel
    args:
      presentLabels: [rack]
",
        )
        .unwrap();
        assert_eq!(config.queue.initial_backoff, Duration::from_secs(2));
        assert_eq!(config.queue.max_backoff, Duration::from_secs(20));
        let default = config.profile("default-scheduler").unwrap();
        assert_eq!(default.percentage_of_nodes_to_score, 30);
        assert!(names(default, Point::Score).contains(&"ImageLocality"));
        let packer = config.profile("bin-packer").unwrap();
        assert_eq!(packer.percentage_of_nodes_to_score, 100);
        assert_eq!(names(packer, Point::Score), ["NodeResourcesFit"]);
        assert_eq!(packer.weights["NodeResourcesFit"], 5);
        assert!(names(packer, Point::Filter).contains(&"NodeLabel"));
        assert!(!names(packer, Point::Filter).is_empty());
        assert!(config.profile("other").is_none());
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        let cases = [
            ("apiVersion: kubescheduler.config.k8s.io/v1beta3\n", "not supported"),
            ("kind: Pod\n", "expected KubeSchedulerConfiguration"),
            ("percentageOfNodesToScore: 101\n", "not in valid range"),
            ("podInitialBackoffSeconds: 0\n", "must be greater than 0"),
            ("podInitialBackoffSeconds: 20\n", "must not be less"),
            ("profile: []\n", "unknown field"),
            ("profiles: [{schedulerName: a}, {schedulerName: a}]\n", "duplicate schedulerName"),
            (
                "profiles: [{plugins: {filter: {enabled: [{name: NoSuchPlugin}]}}}]\n",
                "no plugin named \"NoSuchPlugin\"",
            ),
            (
                "profiles: [{plugins: {filter: {enabled: [{name: ImageLocality}]}}}]\n",
                "does not implement filter",
            ),
            ("profiles: [{plugins: {filters: {}}}]\n", "not an extension point"),
            (
                "profiles: [{plugins: {bind: {disabled: [{name: '*'}]}}}]\n",
                "at least one bind plugin",
            ),
            (
                "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Nope}}}]}]\n",
                "NodeResourcesFit",
            ),
            ("{{{", "invalid scheduler configuration"),
        ];
        for (yaml, wanted) in cases {
            let err = match SchedulerConfig::parse(yaml) {
                Ok(_) => panic!("{yaml:?} was accepted"),
                Err(err) => err,
            };
            assert!(err.contains(wanted), "{yaml:?}: {err}");
        }
    }
}
