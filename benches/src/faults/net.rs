//! The hosts of a run: a bridge on this machine and, for each member, a
//! network namespace with an `eth0` on that bridge — each member its own
//! host with its own address. The clients stay here, outside the faults:
//! partitions and losses are nftables rules inside the members'
//! namespaces that match only the other members' addresses.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The nftables table the faults live in, inside each member's namespace.
const TABLE: &str = "skiff_faults";

/// A bridge and one namespace per member. Dropped: the namespaces (with
/// their links) and the bridge go.
pub struct Hosts {
    bridge: String,
    /// This machine's address on the bridge.
    pub gateway: Ipv4Addr,
    pub members: Vec<Host>,
}

/// One member's namespace and address.
#[derive(Debug, Clone)]
pub struct Host {
    pub netns: String,
    pub ip: Ipv4Addr,
    /// This machine's end of the member's veth pair, on the bridge.
    outside: String,
}

/// Runs `program args…`; its stdout, or an error with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    ensure!(
        output.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Why this machine cannot host a run, if it cannot: not root, or no
/// `ip` or `nft`.
pub fn missing_prerequisite() -> Option<String> {
    // SAFETY: geteuid reads the process's credentials and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the fault suite needs root (network namespaces, a bridge, nftables)".into());
    }
    for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` is missing (apt-get install {package})"));
        }
    }
    None
}

/// A /24 of 10.199.0.0/16 that no interface here uses.
fn free_subnet() -> Result<u8> {
    let used = run("ip", &["-o", "-4", "addr"])?;
    let start = (std::process::id() % 200) as u8;
    (0..=255u8)
        .map(|i| start.wrapping_add(i))
        .find(|third| !used.contains(&format!("10.199.{third}.")))
        .context("every /24 of 10.199.0.0/16 is in use here")
}

impl Hosts {
    /// A bridge and `count` namespaces named after this process.
    pub fn create(count: usize) -> Result<Hosts> {
        ensure!(count < 200, "{count} members is more than a /24 holds");
        let third = free_subnet()?;
        let tag = std::process::id() % 100_000;
        let mut hosts = Hosts {
            bridge: format!("skfb{tag}"),
            gateway: Ipv4Addr::new(10, 199, third, 1),
            members: Vec::new(),
        };
        run("ip", &["link", "add", &hosts.bridge, "type", "bridge"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", hosts.gateway),
                "dev",
                &hosts.bridge,
            ],
        )?;
        run("ip", &["link", "set", &hosts.bridge, "up"])?;
        for i in 0..count {
            let host = Host {
                netns: format!("skf{tag}-{i}"),
                ip: Ipv4Addr::new(10, 199, third, 10 + i as u8),
                outside: format!("skf{tag}v{i}"),
            };
            let outside = host.outside.clone();
            run("ip", &["netns", "add", &host.netns])?;
            hosts.members.push(host.clone());
            run(
                "ip",
                &[
                    "link",
                    "add",
                    &outside,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    &host.netns,
                ],
            )?;
            run(
                "ip",
                &["link", "set", &outside, "master", &hosts.bridge, "up"],
            )?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &host.netns, "ip"];
                all.extend_from_slice(args);
                run("ip", &all)
            };
            inside(&["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"])?;
            inside(&["link", "set", "eth0", "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// Drops every packet between member `from` and the members `to`,
    /// both ways when `both_ways` (else only what `from` sends to them).
    pub fn cut(&self, from: usize, to: &[usize], both_ways: bool) -> Result<()> {
        if to.is_empty() {
            return Ok(());
        }
        let ips: Vec<String> = to.iter().map(|&i| self.members[i].ip.to_string()).collect();
        let set = ips.join(", ");
        let mut rules = format!(
            "table inet {TABLE} {{\n\
             \tchain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n"
        );
        if both_ways {
            rules.push_str(&format!(
                "\tchain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n"
            ));
        }
        rules.push_str("}\n");
        self.nft(from, &rules)
    }

    /// Removes every fault rule of member `i`.
    pub fn heal(&self, i: usize) -> Result<()> {
        // Declaring the table first makes the delete succeed when there is none.
        self.nft(
            i,
            &format!("table inet {TABLE} {{}}\ndelete table inet {TABLE}\n"),
        )
    }

    pub fn heal_all(&self) -> Result<()> {
        for i in 0..self.members.len() {
            self.heal(i)?;
        }
        Ok(())
    }

    fn nft(&self, i: usize, rules: &str) -> Result<()> {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.members[i].netns, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running nft")?;
        child
            .stdin
            .take()
            .context("nft has no stdin")?
            .write_all(rules.as_bytes())?;
        let output = child.wait_with_output()?;
        if !output.status.success() {
            bail!(
                "nft in {}: {}\n{rules}",
                self.members[i].netns,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in &self.members {
            // The pair goes at once with one end; a namespace's links go
            // later, in the background, and the next run's names would
            // still be taken.
            let _ = run("ip", &["link", "delete", &host.outside]);
            let _ = run("ip", &["netns", "delete", &host.netns]);
        }
        let _ = run("ip", &["link", "delete", &self.bridge]);
    }
}
