//! Histories of concurrent puts, compare-and-swaps and linearizable reads,
//! recorded on the simulator while members are partitioned, crashed and
//! restarted, then checked for linearizability. Each seed replays one run.

use rand::Rng;

use super::sim::Sim;
use crate::api::*;
use crate::command::Command;
use crate::mvcc::CommandResult;
use crate::testing::linearizability::{check, Budget, Event, History, Op, Outcome, Verdict};

/// Steps a client waits for an answer before it counts the op as unknown.
const PATIENCE: u64 = 400;

enum Waiting {
    Write { proposal: u64, op: Op },
    Read { read: u64, key: Vec<u8> },
}

struct Client {
    id: u64,
    member: u64,
    waiting: Option<(Waiting, u64, u64)>, // (what, call time, call step)
}

/// Orders every call and return the harness sees.
struct Clock(u64);

impl Clock {
    fn tick(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

fn cas_txn(key: &[u8], expect: &Option<Vec<u8>>, new: &[u8]) -> TxnRequest {
    let compare = match expect {
        Some(value) => Compare {
            result: CompareResult::Equal,
            target: CompareTarget::Value(value.clone()),
            key: key.to_vec(),
            range_end: Vec::new(),
        },
        None => Compare {
            result: CompareResult::Equal,
            target: CompareTarget::Version(0),
            key: key.to_vec(),
            range_end: Vec::new(),
        },
    };
    TxnRequest {
        compare: vec![compare],
        success: vec![RequestOp::Put(PutRequest::new(key.to_vec(), new.to_vec()))],
        failure: vec![],
    }
}

/// Starts a new op for a client; false if the member could not take it.
fn start_op(sim: &mut Sim, client: &mut Client, clock: &mut Clock, serial: &mut u64) -> bool {
    let key = format!("k{}", sim.rng().gen_range(0..3)).into_bytes();
    *serial += 1;
    let value = format!("c{}-{}", client.id, serial).into_bytes();
    let choice = sim.rng().gen_range(0..10);
    let (waiting, ok) = if choice < 4 {
        let op = Op::put(key.clone(), value.clone());
        match sim.propose(client.member, &Command::Put(PutRequest::new(key, value))) {
            Ok(proposal) => (Waiting::Write { proposal, op }, true),
            Err(_) => return false,
        }
    } else if choice < 6 {
        let expect = if sim.rng().gen_bool(0.3) {
            None
        } else {
            Some(
                format!(
                    "c{}-{}",
                    sim.rng().gen_range(1..6),
                    sim.rng().gen_range(1..*serial + 1)
                )
                .into_bytes(),
            )
        };
        let op = Op::cas(key.clone(), expect.clone(), Some(value.clone()));
        match sim.propose(client.member, &Command::Txn(cas_txn(&key, &expect, &value))) {
            Ok(proposal) => (Waiting::Write { proposal, op }, true),
            Err(_) => return false,
        }
    } else {
        match sim.read_index(client.member) {
            Some(read) => (Waiting::Read { read, key }, true),
            None => return false,
        }
    };
    client.waiting = Some((waiting, clock.tick(), sim.now()));
    ok
}

/// Records an op once it is answered; gives up on it after PATIENCE steps.
fn poll(
    sim: &mut Sim,
    client: &mut Client,
    clock: &mut Clock,
    history: &mut History,
    next_client: &mut u64,
) {
    let Some((waiting, call, step)) = client.waiting.take() else {
        return;
    };
    let done = match &waiting {
        Waiting::Write { proposal, op } => {
            sim.take_answer(client.member, *proposal).map(|answer| {
                let outcome = match (op, answer) {
                    (Op::Put { .. }, Ok(CommandResult::Put(_))) => Outcome::Put,
                    (Op::Cas { .. }, Ok(CommandResult::Txn(t))) => Outcome::Cas(t.succeeded),
                    _ => Outcome::Unknown,
                };
                (op.clone(), outcome)
            })
        }
        Waiting::Read { read, key } => sim.take_read(client.member, *read).map(|_| {
            let value = sim.local_get(client.member, key);
            (Op::get(key.clone()), Outcome::Get(value))
        }),
    };
    match done {
        Some((op, outcome)) => {
            let ret = clock.tick();
            history
                .push(Event {
                    client: client.id,
                    op,
                    call,
                    ret,
                    outcome,
                })
                .expect("well-formed history");
        }
        None if sim.now() - step > PATIENCE || !sim.is_running(client.member) => {
            // No answer: a write may still happen, a read says nothing.
            if let Waiting::Write { op, .. } = waiting {
                let ret = clock.tick();
                history
                    .push(Event {
                        client: client.id,
                        op,
                        call,
                        ret,
                        outcome: Outcome::Unknown,
                    })
                    .expect("well-formed history");
            }
            // A client with an op of unknown fate cannot go on: a new one takes its place.
            client.id = *next_client;
            *next_client += 1;
        }
        None => client.waiting = Some((waiting, call, step)),
    }
}

/// Partitions, crashes and restarts, at most a minority at a time.
fn nemesis(sim: &mut Sim, down: &mut Vec<u64>) {
    let ids = sim.ids();
    match sim.rng().gen_range(0..5) {
        0 => {
            let cut = ids[sim.rng().gen_range(0..ids.len())];
            let rest: Vec<u64> = ids.iter().copied().filter(|&id| id != cut).collect();
            sim.partition(&[cut], &rest);
        }
        1 | 2 => sim.heal(),
        3 if down.len() < (ids.len() - 1) / 2 => {
            let victim = ids[sim.rng().gen_range(0..ids.len())];
            if !down.contains(&victim) {
                sim.crash(victim);
                down.push(victim);
            }
        }
        _ => {
            if let Some(back) = down.pop() {
                sim.restart(back);
            }
        }
    }
}

fn run_history(seed: u64, members: u64, steps: u64) -> History {
    let mut sim = Sim::new(seed, members);
    sim.loss_per_mille = 20;
    sim.max_delay = 4;
    let mut clock = Clock(0);
    let mut history = History::new();
    let mut clients: Vec<Client> = (1..=5)
        .map(|id| Client {
            id,
            member: (id - 1) % members + 1,
            waiting: None,
        })
        .collect();
    let mut next_client = 100;
    let mut serial = 0;
    let mut down = Vec::new();
    for _ in 0..steps {
        if sim.rng().gen_ratio(1, 60) {
            nemesis(&mut sim, &mut down);
        }
        for client in clients.iter_mut() {
            poll(&mut sim, client, &mut clock, &mut history, &mut next_client);
            if client.waiting.is_none()
                && sim.is_running(client.member)
                && sim.rng().gen_ratio(1, 3)
            {
                start_op(&mut sim, client, &mut clock, &mut serial);
            }
        }
        sim.step();
    }
    sim.heal();
    for back in down {
        sim.restart(back);
    }
    for _ in 0..PATIENCE + 1 {
        for client in clients.iter_mut() {
            poll(&mut sim, client, &mut clock, &mut history, &mut next_client);
        }
        sim.step();
    }
    history
}

#[test]
fn histories_under_partitions_and_crashes_are_linearizable() {
    for seed in 1..=4 {
        let history = run_history(seed, 3, 2500);
        let answered = history
            .events()
            .iter()
            .filter(|e| !matches!(e.outcome, Outcome::Unknown))
            .count();
        assert!(
            answered > 100,
            "seed {seed}: only {answered} ops answered; nothing was tested"
        );
        let verdict = check(&history, Budget::default());
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict}");
    }
}

#[test]
fn five_members_with_crashes_stay_linearizable() {
    let history = run_history(11, 5, 2500);
    let verdict = check(&history, Budget::default());
    assert!(verdict.is_linearizable(), "{verdict}");
}

/// The harness and checker catch what ReadIndex prevents: a member cut off
/// from the majority answering from its own, stale state.
#[test]
fn stale_local_reads_are_caught() {
    let mut sim = Sim::new(21, 3);
    let mut history = History::new();
    let mut clock = Clock(0);
    let call_old = clock.tick();
    sim.put("k", "old");
    let ret_old = clock.tick();
    assert!(sim.converge(500));
    let leader = sim.wait_for_leader();
    let cut = sim.ids().into_iter().find(|&id| id != leader).unwrap();
    let rest: Vec<u64> = sim.ids().into_iter().filter(|&id| id != cut).collect();
    sim.partition(&[cut], &rest);
    let call = clock.tick();
    sim.put("k", "new");
    let ret = clock.tick();
    history
        .push(Event {
            client: 1,
            op: Op::put("k", "old"),
            call: call_old,
            ret: ret_old,
            outcome: Outcome::Put,
        })
        .unwrap();
    history
        .push(Event {
            client: 1,
            op: Op::put("k", "new"),
            call,
            ret,
            outcome: Outcome::Put,
        })
        .unwrap();
    // A read served locally, without ReadIndex, after the write returned.
    let call = clock.tick();
    let stale = sim.local_get(cut, b"k");
    let ret = clock.tick();
    assert_eq!(
        stale.as_deref(),
        Some(&b"old"[..]),
        "the cut-off member is behind"
    );
    history
        .push(Event {
            client: 2,
            op: Op::get("k"),
            call,
            ret,
            outcome: Outcome::Get(stale),
        })
        .unwrap();
    let verdict = check(&history, Budget::default());
    assert!(
        matches!(verdict, Verdict::NotLinearizable { .. }),
        "{verdict}"
    );
    // And a ReadIndex read there cannot complete while it is cut off.
    let read = sim.read_index(cut);
    if let Some(read) = read {
        sim.run_until(300, |_| false);
        assert!(
            sim.take_read(cut, read).is_none(),
            "a cut-off member confirmed a read"
        );
    }
}
