//! `store-member`: runs one member of a skiff Raft cluster and puts new keys through it
//! from concurrent tasks until it is killed, printing `ack <key> <revision>` after each
//! acknowledged put and `role leader|follower` when its role changes. The Raft process
//! tests SIGKILL members and check every printed ack; it is not a benchmark.

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use skiff_store::{ClusterConfig, PutRequest, Store, StoreConfig, StoreError};
use skiff_tests::line_printer::LinePrinter;
use skiff_tests::writer_protocol::{
    check_prefix, member_prefix, value_for_key, writer_key, Ack, Role, WriterLine,
    DEFAULT_VALUE_SIZE,
};
use tokio::task::JoinSet;

/// How long a put loop waits after a put that may or may not have been applied.
const RETRY_DELAY: Duration = Duration::from_millis(50);
/// How often the member's Raft role is looked at.
const ROLE_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Parser)]
#[command(
    about = "Run one skiff cluster member, put keys through it forever, print each acknowledged put"
)]
struct Args {
    /// This member's name; one of --initial-cluster. It listens for peers at its address there.
    #[arg(long, env = "SKIFF_MEMBER_NAME", default_value = "n1")]
    name: String,
    /// The member's data directory (created if absent); it records the member's identity.
    #[arg(
        long,
        env = "SKIFF_MEMBER_DATA_DIR",
        default_value = "store-member.data"
    )]
    data_dir: PathBuf,
    /// Every founding member, `name=host:port,...`, the same on every member.
    #[arg(
        long,
        env = "SKIFF_MEMBER_INITIAL_CLUSTER",
        default_value = "n1=127.0.0.1:2380"
    )]
    initial_cluster: String,
    /// Concurrent put loops through this member; 0 only serves the cluster.
    #[arg(long, env = "SKIFF_MEMBER_WRITERS", default_value_t = 2)]
    writers: u16,
    /// Keys are `{prefix}{name}/{task}/{seq:08}`; no whitespace.
    #[arg(long, env = "SKIFF_MEMBER_PREFIX", default_value = "/store-member/")]
    prefix: String,
    /// Value bytes per put: the key repeated (at least the whole key).
    #[arg(long, env = "SKIFF_MEMBER_VALUE_SIZE", default_value_t = DEFAULT_VALUE_SIZE)]
    value_size: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    check_prefix(&args.prefix)?;
    let store = Store::open(store_config(&args)?).await.with_context(|| {
        format!(
            "opening member {} in {}",
            args.name,
            args.data_dir.display()
        )
    })?;
    let stdout = LinePrinter::start();
    let revision = store.kv().current_revision();
    stdout.print(WriterLine::Ready { revision }).await?;

    let mut loops = JoinSet::new();
    loops.spawn(print_role_changes(store.clone(), stdout.clone()));
    let prefix = member_prefix(&args.prefix, &args.name);
    for task in 0..usize::from(args.writers) {
        let (store, stdout, prefix) = (store.clone(), stdout.clone(), prefix.clone());
        loops.spawn(put_forever(store, stdout, prefix, task, args.value_size));
    }
    // The loops end only by failing; the first failure ends the process.
    match loops.join_next().await {
        Some(Ok(Err(err))) => Err(err),
        Some(Ok(Ok(never))) => match never {},
        Some(Err(join)) => Err(anyhow!(join).context("a member loop panicked")),
        None => Ok(()),
    }
}

fn store_config(args: &Args) -> Result<StoreConfig> {
    let initial_cluster = ClusterConfig::parse_initial_cluster(&args.initial_cluster)?;
    let peer_listen = initial_cluster
        .iter()
        .find(|(name, _)| *name == args.name)
        .map(|&(_, addr)| addr)
        .with_context(|| {
            format!(
                "--name {} is not in --initial-cluster {}; name one of its members",
                args.name, args.initial_cluster
            )
        })?;
    let mut config = StoreConfig::new(&args.data_dir);
    config.cluster = Some(ClusterConfig {
        name: args.name.clone(),
        peer_listen,
        initial_cluster,
        initial_cluster_state: Default::default(),
        initial_cluster_token: String::new(),
    });
    Ok(config)
}

/// Puts `{prefix}{task}/0`, `/1`, ... one at a time through this member; each is printed
/// only once acknowledged. A put that failed with no leader or a timeout may still have
/// been applied, so its key is left as it is and the loop moves on to the next one: no
/// key is put twice.
async fn put_forever(
    store: Store,
    stdout: LinePrinter,
    prefix: String,
    task: usize,
    value_size: usize,
) -> Result<Infallible> {
    for seq in 0.. {
        let key = writer_key(&prefix, task, seq);
        let value = value_for_key(key.as_bytes(), value_size);
        match store.put(PutRequest::new(key.clone(), value)).await {
            Ok(resp) => {
                let mod_revision = resp.header.revision;
                stdout
                    .print(WriterLine::Ack(Ack { key, mod_revision }))
                    .await?;
            }
            Err(StoreError::NoLeader | StoreError::Timeout) => {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            Err(err) => return Err(anyhow!(err).context(format!("putting {key}"))),
        }
    }
    unreachable!("a u64 sequence of puts does not run out")
}

/// Prints the member's role when first seen and on every change.
async fn print_role_changes(store: Store, stdout: LinePrinter) -> Result<Infallible> {
    let mut poll = tokio::time::interval(ROLE_POLL);
    let mut printed = None;
    loop {
        poll.tick().await;
        let role = if store.is_leader() {
            Role::Leader
        } else {
            Role::Follower
        };
        if printed != Some(role) {
            stdout.print(WriterLine::Role(role)).await?;
            printed = Some(role);
        }
    }
}
