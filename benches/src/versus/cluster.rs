//! One system's members as running processes on loopback: started,
//! waited for until they serve and agree on a leader, stopped when the
//! run is done with them. Dropped without `stop`, they are still stopped
//! (see `process`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::client::Endpoints;
use super::process::ServerProcess;
use super::system::{self, MemberAddrs, Program, System};

/// How long the members may take to serve and elect a leader.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a member may take to stop after SIGTERM before it gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a starting cluster is checked for members that died.
const EXIT_POLL: Duration = Duration::from_millis(100);

pub struct Cluster {
    processes: Vec<ServerProcess>,
    pub endpoints: Endpoints,
    /// Process start -> every member ready with a leader.
    pub started_in: Duration,
}

impl Cluster {
    /// Starts `members` members of `system`, data under `dir`, and waits
    /// until they serve; `connections` client channels to each.
    pub async fn start(
        system: System,
        program: &Program,
        members: usize,
        dir: &Path,
        connections: usize,
    ) -> Result<Cluster> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let layout = system::layout(members)?;
        let started = Instant::now();
        let mut processes = Vec::with_capacity(members);
        for member in &layout {
            let data_dir = dir.join(&member.name);
            let log = dir.join(format!("{}.log", member.name));
            let args = system::member_args(system, member, &layout, &data_dir);
            let name = format!("{} {}", system.label(), member.name);
            processes.push(ServerProcess::spawn(&name, &program.path, &args, &log)?);
        }
        let addrs: Vec<_> = layout
            .iter()
            .map(|m: &MemberAddrs| (m.name.clone(), m.client))
            .collect();
        let connected = tokio::select! {
            connected = Endpoints::connect(&addrs, connections, START_TIMEOUT) => connected,
            () = first_exit(&mut processes) => Err(anyhow::anyhow!("a member exited while starting")),
        };
        let endpoints = match connected {
            Ok(endpoints) => endpoints,
            Err(err) => {
                let diagnosis = diagnose(&mut processes);
                return Err(anyhow::anyhow!(
                    "{} with {members} member(s) did not start: {err:#}{diagnosis}",
                    system.label()
                ));
            }
        };
        Ok(Cluster {
            processes,
            endpoints,
            started_in: started.elapsed(),
        })
    }

    /// Members that have exited, with the end of their logs: why a
    /// workload's requests failed.
    pub fn exited(&mut self) -> String {
        exited(&mut self.processes)
    }

    /// CPU time every member has used so far, added up.
    pub fn cpu_time(&self) -> Duration {
        self.processes.iter().map(ServerProcess::cpu_time).sum()
    }

    /// Pids of the running members, for the progress line and profilers.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(ServerProcess::pid).collect()
    }

    /// Stops every member (SIGTERM, SIGKILL after `STOP_GRACE`); returns
    /// notes about members that had died during the run or needed SIGKILL.
    pub async fn stop(self) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        for mut process in self.processes {
            let name = process.name().to_string();
            if let Some(status) = process.exited() {
                notes.push(format!(
                    "{name} exited during the run ({status}); figures after that come from fewer members"
                ));
            }
            let (status, killed) = process.stop(STOP_GRACE).await?;
            if killed {
                notes.push(format!(
                    "{name} did not stop within {STOP_GRACE:?} of SIGTERM and was killed ({status})"
                ));
            }
        }
        Ok(notes)
    }
}

/// Resolves once any of `processes` has exited.
async fn first_exit(processes: &mut [ServerProcess]) {
    while !processes.iter_mut().any(|p| p.exited().is_some()) {
        tokio::time::sleep(EXIT_POLL).await;
    }
}

/// Members that have exited, with the end of their logs.
fn exited(processes: &mut [ServerProcess]) -> String {
    let mut out = String::new();
    for process in processes.iter_mut() {
        if let Some(status) = process.exited() {
            out.push_str(&format!("\n  {} exited ({status})\n", process.name()));
            out.push_str(&process.log_tail());
        }
    }
    out
}

/// Why members did not become ready: those that exited, or else the end
/// of the first one's log.
fn diagnose(processes: &mut [ServerProcess]) -> String {
    let out = exited(processes);
    match processes.first() {
        Some(first) if out.is_empty() => format!(
            "\n  every member is still running; the first one's log ends:\n{}",
            first.log_tail()
        ),
        _ => out,
    }
}
