//! The victims on one node (kube-scheduler's SelectVictimsOnNode): remove
//! every lower-priority pod, check the pod fits, then put back as many as
//! still let it fit, the most important first and PDB-protected ones before
//! the rest.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::framework::{Code, PodInfo, Snapshot, Status};

use super::pdb::{self, Budget};
use super::{FilterRunner, PreFilterRunner};

/// The pods to evict on a node, most important first.
#[derive(Debug, Clone)]
pub(super) struct Victims {
    pub pods: Vec<Arc<PodInfo>>,
    /// How many of them take a PodDisruptionBudget below zero.
    pub pdb_violations: usize,
}

/// One preemption attempt: the preemptor, the cluster, and how to run the
/// profile's PreFilter and Filter on a changed copy of it.
pub(super) struct WhatIf<'a> {
    pub pod: &'a PodInfo,
    pub snapshot: &'a Snapshot,
    pub pre_filter: &'a PreFilterRunner,
    pub filter: &'a FilterRunner,
    pub budgets: Vec<Budget>,
    /// The start time of pods that have none yet, in Unix nanoseconds.
    pub now: i128,
}

impl WhatIf<'_> {
    /// The victims on `snapshot.nodes[at]`, or why preempting there does
    /// not help (`Code::Error` if a runner failed).
    pub fn select_victims_on(&self, at: usize) -> Result<Victims, Status> {
        let priority = self.pod.priority();
        let mut potential: Vec<Arc<PodInfo>> = self.snapshot.nodes[at]
            .pods
            .iter()
            .filter(|p| p.priority() < priority)
            .cloned()
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(
                "No preemption victims found for incoming pod",
            ));
        }
        let mut snapshot = self.snapshot.clone();
        let node = Arc::make_mut(&mut snapshot.nodes[at]);
        for victim in &potential {
            node.remove_pod(&victim.key);
        }
        let status = self.fits(&snapshot, at)?;
        if !status.is_success() {
            return Err(status);
        }
        potential.sort_by(|a, b| more_important(a, b, self.now));
        let (violating, non_violating) = pdb::split_by_violation(potential, &self.budgets);
        let mixed = !violating.is_empty() && !non_violating.is_empty();
        let mut victims = Vec::new();
        let mut pdb_violations = 0;
        for pod in violating {
            if !self.reprieve(&mut snapshot, at, &pod)? {
                victims.push(pod);
                pdb_violations += 1;
            }
        }
        for pod in non_violating {
            if !self.reprieve(&mut snapshot, at, &pod)? {
                victims.push(pod);
            }
        }
        if mixed {
            victims.sort_by(|a, b| more_important(a, b, self.now));
        }
        Ok(Victims {
            pods: victims,
            pdb_violations,
        })
    }

    /// Puts `pod` back on the node; if the preemptor no longer fits, takes
    /// it off again and answers false.
    fn reprieve(
        &self,
        snapshot: &mut Snapshot,
        at: usize,
        pod: &Arc<PodInfo>,
    ) -> Result<bool, Status> {
        Arc::make_mut(&mut snapshot.nodes[at]).add_pod(pod.clone());
        let fits = self.fits(snapshot, at)?.is_success();
        if !fits {
            Arc::make_mut(&mut snapshot.nodes[at]).remove_pod(&pod.key);
        }
        Ok(fits)
    }

    /// The Filter answer for the preemptor on `snapshot.nodes[at]`, after a
    /// fresh PreFilter on `snapshot`. A PreFilter rejection is the answer;
    /// a PreFilter error is `Err`.
    fn fits(&self, snapshot: &Snapshot, at: usize) -> Result<Status, Status> {
        let mut state = match (self.pre_filter.0)(self.pod, snapshot) {
            Ok(state) => state,
            Err(status) if status.code == Code::Error => return Err(status),
            Err(status) => return Ok(status),
        };
        Ok((self.filter.0)(
            &mut state,
            self.pod,
            &snapshot.nodes[at],
            snapshot,
        ))
    }
}

/// kube-scheduler's MoreImportantPod as a sort order: higher priority
/// first, then the longer running (earlier start) first.
pub(super) fn more_important(a: &PodInfo, b: &PodInfo, now: i128) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| start_time(a, now).cmp(&start_time(b, now)))
}

/// `status.startTime` in Unix nanoseconds; `now` for pods not started yet.
pub(super) fn start_time(pod: &PodInfo, now: i128) -> i128 {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now, |t| t.0.as_nanosecond())
}

pub(super) fn now_nanos() -> i128 {
    k8s_openapi::jiff::Timestamp::now().as_nanosecond()
}
