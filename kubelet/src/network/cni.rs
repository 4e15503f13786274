//! The Container Network Interface, from the runtime's side (what libcni
//! does for the real kubelet's runtime): a network configuration list
//! read from `--cni-conf-dir`, and its plugins run from `--cni-bin-dir`
//! for `ADD`, `CHECK` and `DEL` with the spec's environment variables and
//! each plugin's configuration on stdin, the previous plugin's result
//! chained in as `prevResult`. The result of an `ADD` is kept on disk, so
//! that a `DEL` after a kubelet restart hands the plugins what they made.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;

/// The CNI versions a result of ours is read as.
const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("no network configuration in {}: write a .conflist there (see docs/tour.md)", dir.display())]
    NoConfig { dir: PathBuf },
    #[error("network configuration {}: {why}", path.display())]
    BadConfig { path: PathBuf, why: String },
    #[error("CNI plugin {plugin:?} not found in {dirs}")]
    PluginMissing { plugin: String, dirs: String },
    #[error("CNI plugin {plugin} {command}: {why}")]
    Plugin {
        plugin: String,
        command: &'static str,
        why: String,
    },
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A network configuration list (`.conflist`, or a single `.conf`
/// plugin read as a list of one).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<Map<String, Value>>,
    /// Where it was read from.
    pub source: PathBuf,
}

impl NetworkList {
    /// Reads one configuration file.
    pub fn read(path: &Path) -> Result<NetworkList, CniError> {
        let bad = |why: String| CniError::BadConfig {
            path: path.to_path_buf(),
            why,
        };
        let text = std::fs::read(path).map_err(|source| CniError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
        let value: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let Value::Object(mut object) = value else {
            return Err(bad("not a JSON object".into()));
        };
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("no \"name\"".into()))?
            .to_string();
        let cni_version = object
            .get("cniVersion")
            .and_then(Value::as_str)
            .unwrap_or("0.2.0")
            .to_string();
        let plugins = match object.remove("plugins") {
            Some(Value::Array(plugins)) => plugins
                .into_iter()
                .map(|plugin| match plugin {
                    Value::Object(plugin)
                        if plugin.get("type").and_then(Value::as_str).is_some() =>
                    {
                        Ok(plugin)
                    }
                    _ => Err(bad("a plugin without a \"type\"".into())),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(bad("\"plugins\" is not a list".into())),
            // A single network configuration: the file is its one plugin.
            None if object.get("type").and_then(Value::as_str).is_some() => vec![object],
            None => return Err(bad("neither \"plugins\" nor \"type\"".into())),
        };
        if plugins.is_empty() {
            return Err(bad("\"plugins\" is empty".into()));
        }
        Ok(NetworkList {
            name,
            cni_version,
            plugins,
            source: path.to_path_buf(),
        })
    }

    /// The network of `dir`: its first `.conflist`, `.conf` or `.json` file
    /// in name order, as the kubelet's runtime picks it.
    pub fn load(dir: &Path) -> Result<NetworkList, CniError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("conflist" | "conf" | "json")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        match files.first() {
            Some(first) => NetworkList::read(first),
            None => Err(CniError::NoConfig {
                dir: dir.to_path_buf(),
            }),
        }
    }
}

/// One pod's attachment to a network: what the plugins are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The sandbox's ID (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The network namespace's path (`CNI_NETNS`).
    pub netns: PathBuf,
    /// The interface in it (`CNI_IFNAME`).
    pub ifname: String,
    /// `CNI_ARGS`: the pod's namespace, name and UID, as the kubelet sets.
    pub args: Vec<(String, String)>,
    /// `runtimeConfig` for plugins that declare the capability, e.g.
    /// `portMappings`.
    pub capabilities: Map<String, Value>,
}

/// A `hostPort` as the `portmap` plugin takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// The addresses a network gave the pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Addresses {
    /// Without their prefix length, in the result's order.
    pub ips: Vec<String>,
}

/// Runs a network's plugins.
#[derive(Debug, Clone)]
pub struct Cni {
    /// Where plugin binaries are looked for (`CNI_PATH`), in order.
    pub bin_dirs: Vec<PathBuf>,
    /// Where the results of `ADD`s are kept.
    pub cache_dir: PathBuf,
}

impl Cni {
    /// Attaches the pod: `ADD` through every plugin in order, each given
    /// the result so far. On a failure what was added is deleted again.
    pub async fn add(
        &self,
        network: &NetworkList,
        attachment: &Attachment,
    ) -> Result<Addresses, CniError> {
        let mut previous: Option<Value> = None;
        for plugin in &network.plugins {
            let config = self.plugin_config(network, plugin, attachment, previous.as_ref());
            match self.exec(plugin, "ADD", &config, attachment).await {
                Ok(result) => previous = Some(result),
                Err(err) => {
                    if let Err(undo) = self.del(network, attachment).await {
                        tracing::warn!(error = %undo, "CNI DEL after a failed ADD");
                    }
                    return Err(err);
                }
            }
        }
        let result = previous.unwrap_or_else(|| json!({}));
        self.write_cache(network, attachment, &result)?;
        Ok(addresses(&result))
    }

    /// Checks the attachment (`CHECK`, CNI 0.4.0 and later) with the
    /// result the `ADD` gave.
    pub async fn check(
        &self,
        network: &NetworkList,
        attachment: &Attachment,
    ) -> Result<(), CniError> {
        if !version_at_least(&network.cni_version, (0, 4, 0)) {
            return Ok(());
        }
        let cached = self.read_cache(network, attachment);
        for plugin in &network.plugins {
            let config = self.plugin_config(network, plugin, attachment, cached.as_ref());
            self.exec(plugin, "CHECK", &config, attachment).await?;
        }
        Ok(())
    }

    /// Detaches the pod: `DEL` through the plugins in reverse order, with
    /// the `ADD`'s result; deleting what is already gone succeeds.
    pub async fn del(
        &self,
        network: &NetworkList,
        attachment: &Attachment,
    ) -> Result<(), CniError> {
        let cached = self.read_cache(network, attachment);
        for plugin in network.plugins.iter().rev() {
            let config = self.plugin_config(network, plugin, attachment, cached.as_ref());
            self.exec(plugin, "DEL", &config, attachment).await?;
        }
        let path = self.cache_path(network, attachment);
        match std::fs::remove_file(&path) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => Err(CniError::Io {
                action: "remove",
                path,
                source,
            }),
            _ => Ok(()),
        }
    }

    /// The addresses of a kept `ADD` result, if there is one.
    pub fn cached_addresses(
        &self,
        network: &NetworkList,
        attachment: &Attachment,
    ) -> Option<Addresses> {
        self.read_cache(network, attachment).map(|r| addresses(&r))
    }

    /// What a plugin reads on stdin: its own configuration with the
    /// network's name and version, the result so far, and the runtime
    /// configuration of the capabilities it declares.
    fn plugin_config(
        &self,
        network: &NetworkList,
        plugin: &Map<String, Value>,
        attachment: &Attachment,
        previous: Option<&Value>,
    ) -> Value {
        let mut config = plugin.clone();
        config.insert("name".into(), json!(network.name));
        config.insert("cniVersion".into(), json!(network.cni_version));
        if let Some(previous) = previous {
            config.insert("prevResult".into(), previous.clone());
        }
        let declared = plugin
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let runtime: Map<String, Value> = attachment
            .capabilities
            .iter()
            .filter(|(name, _)| declared.get(*name) == Some(&Value::Bool(true)))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        if !runtime.is_empty() {
            config.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        Value::Object(config)
    }

    fn find_plugin(&self, kind: &str) -> Result<PathBuf, CniError> {
        if kind.contains('/') || kind.is_empty() {
            return Err(CniError::PluginMissing {
                plugin: kind.to_string(),
                dirs: "(a plugin type is a file name)".into(),
            });
        }
        self.bin_dirs
            .iter()
            .map(|dir| dir.join(kind))
            .find(|path| path.is_file())
            .ok_or_else(|| CniError::PluginMissing {
                plugin: kind.to_string(),
                dirs: self.path_list(),
            })
    }

    fn path_list(&self) -> String {
        self.bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// Runs one plugin for `command`: its result on success; its error
    /// (`{"code", "msg", "details"}` on stdout) or stderr on failure.
    async fn exec(
        &self,
        plugin: &Map<String, Value>,
        command: &'static str,
        config: &Value,
        attachment: &Attachment,
    ) -> Result<Value, CniError> {
        let kind = plugin
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let program = self.find_plugin(kind)?;
        let failed = |why: String| CniError::Plugin {
            plugin: kind.to_string(),
            command,
            why,
        };
        let args: Vec<String> = std::iter::once("IgnoreUnknown=1".to_string())
            .chain(attachment.args.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        let mut child = tokio::process::Command::new(&program)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &attachment.container_id)
            .env("CNI_NETNS", &attachment.netns)
            .env("CNI_IFNAME", &attachment.ifname)
            .env("CNI_ARGS", args.join(";"))
            .env("CNI_PATH", self.path_list())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(format!("cannot run {}: {e}", program.display())))?;
        let input = serde_json::to_vec(config).expect("JSON values serialize");
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&input)
                .await
                .map_err(|e| failed(format!("writing its configuration: {e}")))?;
        }
        let output = child
            .wait_with_output()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !output.status.success() {
            let reported: Option<Value> = serde_json::from_slice(&output.stdout).ok();
            let why = match reported {
                Some(error) if error.get("msg").is_some() => {
                    let msg = error["msg"].as_str().unwrap_or_default();
                    match error["details"].as_str().filter(|d| !d.is_empty()) {
                        Some(details) => format!("{msg}: {details}"),
                        None => msg.to_string(),
                    }
                }
                _ => {
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    format!("{} ({})", output.status, stderr.trim())
                }
            };
            return Err(failed(why));
        }
        if command != "ADD" {
            return Ok(Value::Null);
        }
        let result: Value = serde_json::from_slice(&output.stdout)
            .map_err(|e| failed(format!("its result is not JSON: {e}")))?;
        if let Some(version) = result.get("cniVersion").and_then(Value::as_str) {
            if !SUPPORTED_VERSIONS.contains(&version) {
                return Err(failed(format!(
                    "result version {version:?} is not one skiff reads"
                )));
            }
        }
        Ok(result)
    }

    fn cache_path(&self, network: &NetworkList, attachment: &Attachment) -> PathBuf {
        self.cache_dir.join(format!(
            "{}-{}-{}.json",
            network.name, attachment.container_id, attachment.ifname
        ))
    }

    fn write_cache(
        &self,
        network: &NetworkList,
        attachment: &Attachment,
        result: &Value,
    ) -> Result<(), CniError> {
        let path = self.cache_path(network, attachment);
        let io = |action, source| CniError::Io {
            action,
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.cache_dir).map_err(|e| io("create", e))?;
        let text = serde_json::to_vec(result).expect("JSON values serialize");
        std::fs::write(&path, text).map_err(|e| io("write", e))
    }

    fn read_cache(&self, network: &NetworkList, attachment: &Attachment) -> Option<Value> {
        let text = std::fs::read(self.cache_path(network, attachment)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// The addresses of a result (`ips[].address`, CNI 0.3.0 and later),
/// without their prefix lengths.
fn addresses(result: &Value) -> Addresses {
    let ips = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .map(|address| address.split('/').next().unwrap_or(address).to_string())
        .collect();
    Addresses { ips }
}

fn version_at_least(version: &str, wanted: (u32, u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    found >= wanted
}

/// The configuration skiff's runtime writes when `--cni-conf-dir` has
/// none, once the Node has its pod CIDRs: a `bridge` with `host-local`
/// addresses from them (kept under `data_dir`) and a default route
/// through it, and `portmap` for `hostPort`s.
pub fn default_conflist(bridge: &str, pod_cidrs: &[String], data_dir: &Path) -> Value {
    let ranges: Vec<Value> = pod_cidrs.iter().map(|c| json!([{"subnet": c}])).collect();
    let routes: Vec<Value> = pod_cidrs
        .iter()
        .map(|c| match c.contains(':') {
            true => json!({"dst": "::/0"}),
            false => json!({"dst": "0.0.0.0/0"}),
        })
        .collect();
    json!({
        "cniVersion": "1.0.0",
        "name": "skiff",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                    "dataDir": data_dir,
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
}

/// The network every pod's `lo` is brought up with, as the kubelet's
/// runtime does apart from the pod network.
pub fn loopback() -> NetworkList {
    let mut plugin = Map::new();
    plugin.insert("type".into(), json!("loopback"));
    NetworkList {
        name: "cni-loopback".into(),
        cni_version: "1.0.0".into(),
        plugins: vec![plugin],
        source: PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec(value).unwrap()).unwrap();
        path
    }

    #[test]
    fn the_first_configuration_in_name_order_is_the_network() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            NetworkList::load(dir.path()),
            Err(CniError::NoConfig { .. })
        ));
        write(
            dir.path(),
            "20-other.conflist",
            &json!({"name": "other", "cniVersion": "1.0.0", "plugins": [{"type": "ptp"}]}),
        );
        write(
            dir.path(),
            "10-single.conf",
            &json!({"name": "single", "cniVersion": "0.4.0", "type": "bridge", "bridge": "b0"}),
        );
        std::fs::write(dir.path().join("00-notes.txt"), "not a configuration").unwrap();
        let network = NetworkList::load(dir.path()).unwrap();
        assert_eq!(network.name, "single");
        assert_eq!(network.cni_version, "0.4.0");
        assert_eq!(network.plugins.len(), 1);
        assert_eq!(network.plugins[0]["bridge"], "b0");
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        for (value, why) in [
            (json!({"plugins": [{"type": "bridge"}]}), "no \"name\""),
            (
                json!({"name": "n", "plugins": [{"bridge": "b"}]}),
                "without a \"type\"",
            ),
            (json!({"name": "n", "plugins": []}), "is empty"),
            (json!({"name": "n"}), "neither"),
            (json!([1]), "not a JSON object"),
        ] {
            let path = write(dir.path(), "x.conflist", &value);
            let err = NetworkList::read(&path).unwrap_err().to_string();
            assert!(err.contains(why), "{value}: {err}");
        }
    }

    #[test]
    fn plugins_read_their_configuration_with_the_result_so_far() {
        let cni = Cni {
            bin_dirs: vec![],
            cache_dir: PathBuf::from("/nonexistent"),
        };
        let network = NetworkList {
            name: "skiff".into(),
            cni_version: "1.0.0".into(),
            plugins: vec![],
            source: PathBuf::new(),
        };
        let mut attachment = Attachment {
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            args: vec![],
            capabilities: Map::new(),
        };
        attachment.capabilities.insert(
            "portMappings".into(),
            json!([{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]),
        );
        let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true}});
        let previous = json!({"ips": [{"address": "10.244.0.5/24"}]});
        let config = cni.plugin_config(
            &network,
            portmap.as_object().unwrap(),
            &attachment,
            Some(&previous),
        );
        assert_eq!(config["name"], "skiff");
        assert_eq!(config["cniVersion"], "1.0.0");
        assert_eq!(config["prevResult"], previous);
        assert_eq!(config["runtimeConfig"]["portMappings"][0]["hostPort"], 80);
        // A plugin that does not declare the capability is not given it.
        let bridge = json!({"type": "bridge"});
        let config = cni.plugin_config(&network, bridge.as_object().unwrap(), &attachment, None);
        assert!(config.get("runtimeConfig").is_none());
        assert!(config.get("prevResult").is_none());
    }

    #[test]
    fn results_give_their_addresses_without_prefix_lengths() {
        let result = json!({"cniVersion": "1.0.0", "ips": [
            {"address": "10.244.1.7/24", "gateway": "10.244.1.1"},
            {"address": "fd00:10:244:1::7/64"}]});
        assert_eq!(addresses(&result).ips, ["10.244.1.7", "fd00:10:244:1::7"]);
        assert!(addresses(&json!({})).ips.is_empty());
        assert!(version_at_least("0.4.0", (0, 4, 0)));
        assert!(version_at_least("1.0.0", (0, 4, 0)));
        assert!(!version_at_least("0.3.1", (0, 4, 0)));
    }

    #[test]
    fn the_default_network_is_a_bridge_over_the_pod_cidrs() {
        let list = default_conflist(
            "skiff0",
            &[
                "10.244.3.0/24".to_string(),
                "fd00:10:244:3::/64".to_string(),
            ],
            Path::new("/var/lib/skiff/cni"),
        );
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(
            bridge["ipam"]["ranges"][1][0]["subnet"],
            "fd00:10:244:3::/64"
        );
        assert_eq!(bridge["ipam"]["routes"][1]["dst"], "::/0");
        assert_eq!(list["plugins"][1]["capabilities"]["portMappings"], true);
    }
}
