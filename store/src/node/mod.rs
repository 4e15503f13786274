//! A single-member store: the data directory, the Raft driver that owns the log,
//! and the background loops (sled flush + log release, lease expiry,
//! checkpoints). The member is a one-voter Raft group; peers come next.

mod auto_compaction;
pub mod cluster;
mod corruption;
pub(crate) mod disk_space;
mod driver;
pub(crate) mod durability;
mod lease_expiry;
mod leases;
mod maintenance;
mod members;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::raft::transport::Transport;
use crate::raft::{CoreConfig, RaftCore};

use tokio::sync::{mpsc, oneshot, watch};

pub use crate::api::Member;
use crate::api::*;
use crate::command::{self, Command, MAX_REQUEST_BYTES, MAX_TXN_OPS};
use crate::error::{Result, StoreError};
use crate::lease::{Lessor, LessorConfig};
use crate::mvcc::compaction::Compactor;
use crate::mvcc::{CommandResult, KvStore};
use crate::wal::WalOptions;
use crate::watch::{Notifier, WatchConfig, WatchHub, Watcher};
pub use auto_compaction::AutoCompaction;
pub use cluster::{ClusterConfig, InitialClusterState};
pub use driver::WriterStats;
use driver::{Driver, DriverRequest, Leadership, Proposal};
pub use maintenance::AlarmAction;
pub use members::StoreStatus;

/// The Raft ID of a store that runs alone.
const SINGLE_MEMBER_ID: u64 = 1;
/// The cluster ID a store that runs alone reports.
const SINGLE_CLUSTER_ID: u64 = 0x5c1f_f000_0000_0001;
/// The sled database in a member's data directory, and its tree holding
/// the MVCC state.
pub(crate) use crate::mvcc::backend::{STATE_DB, STATE_TREE};
/// etcd's default space quota: 2 GiB.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// The reserve file a member keeps in its data directory by default (see
/// [`StoreConfig::reserved_space_bytes`]).
pub const DEFAULT_RESERVED_SPACE_BYTES: u64 = 8 << 20;
/// Raft messages from peers waiting for the driver before more are dropped.
const PEER_INBOUND_QUEUE: usize = 8192;

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub lessor: LessorConfig,
    pub watch: WatchConfig,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub wal_segment_size: u64,
    /// How often sled is flushed (and fsynced) so old log segments can go.
    pub flush_interval: Duration,
    /// sled's page cache, in bytes.
    pub cache_capacity: u64,
    /// Proposals taken into one sync at most.
    pub max_batch: usize,
    /// Proposals queued for the Raft driver before callers wait.
    pub proposal_queue: usize,
    /// How long a write may wait to be committed and applied (etcd: about
    /// 5 s) before it fails with "request timed out".
    pub request_timeout: Duration,
    /// Bytes of proposals queued for the Raft driver before callers wait.
    pub proposal_queue_bytes: usize,
    pub auto_compaction: AutoCompaction,
    /// Bytes the state database may take before writes that add to it
    /// are refused and NOSPACE is raised (etcd's --quota-backend-bytes).
    pub quota_backend_bytes: u64,
    /// How often the leader compares its HashKV with its peers' and
    /// raises CORRUPT on a mismatch (etcd's
    /// --experimental-corrupt-check-time); `None`: never.
    pub corrupt_check_interval: Option<Duration>,
    /// Replication: this member and its peers. `None`: a store alone.
    pub cluster: Option<ClusterConfig>,
    /// Log entries a leader keeps for a follower that is behind before it
    /// sends that follower a snapshot instead.
    pub catch_up_entries: u64,
    /// This member's name (the cluster config's when there is one).
    pub name: String,
    /// Where clients reach this member, as the member list shows it.
    pub client_urls: Vec<String>,
    /// Where a store alone would listen for peers, as the member list
    /// shows it (etcd lists `http://localhost:2380` for a member alone);
    /// a member of a cluster lists the peer URL the membership gives it.
    pub peer_urls: Vec<String>,
    /// TLS with peers (`None`: plain TCP).
    pub peer_tls: Option<crate::raft::transport::PeerTls>,
    /// Bytes the member keeps allocated in a file of its data directory
    /// (`reserved-space`) and gives back to itself when the file system
    /// runs short: below half of it available the member refuses what
    /// adds data with NOSPACE; it takes writes again once twice as much is
    /// free. 0 turns this off.
    pub reserved_space_bytes: u64,
    /// What a member does when its log or state database can no longer be
    /// written (a full disk, an I/O error): `true` ends the process with
    /// [`durability::EXIT_STORAGE_FAILED`], as etcd does, so that a
    /// supervisor restarts it from what is on disk; `false` only stops the
    /// member (every request then fails with "server stopped"), for
    /// processes that hold several stores, such as tests.
    pub exit_on_storage_failure: bool,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            data_dir: data_dir.into(),
            lessor: LessorConfig::default(),
            watch: WatchConfig::default(),
            max_request_bytes: MAX_REQUEST_BYTES,
            max_txn_ops: MAX_TXN_OPS,
            wal_segment_size: 64 * 1024 * 1024,
            flush_interval: Duration::from_secs(1),
            cache_capacity: 64 * 1024 * 1024,
            max_batch: 4096,
            proposal_queue: 16 * 1024,
            request_timeout: Duration::from_secs(5),
            proposal_queue_bytes: 64 * 1024 * 1024,
            auto_compaction: AutoCompaction::Off,
            quota_backend_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
            corrupt_check_interval: None,
            cluster: None,
            catch_up_entries: crate::raft::CATCH_UP_ENTRIES,
            name: "default".into(),
            client_urls: Vec::new(),
            peer_urls: Vec::new(),
            peer_tls: None,
            reserved_space_bytes: DEFAULT_RESERVED_SPACE_BYTES,
            exit_on_storage_failure: true,
        }
    }
}

/// A handle to an open store; clones share it.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: StoreConfig,
    kv: Arc<KvStore>,
    lessor: Arc<Lessor>,
    hub: Arc<WatchHub>,
    requests: mpsc::Sender<DriverRequest>,
    /// Bounds the bytes of queued proposals (the queue bounds their count).
    queued_bytes: Arc<tokio::sync::Semaphore>,
    stats: Arc<WriterStats>,
    leadership: Arc<Leadership>,
    member_id: u64,
    cluster_id: u64,
    shutdown: watch::Sender<bool>,
    driver: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    syncer: parking_lot::Mutex<Option<crate::watch::hub::SyncerHandle>>,
    /// A follower's connections to the leader for lease requests.
    leader_link: parking_lot::Mutex<leases::LeaderLink>,
    /// Room on the data directory's file system.
    space: Arc<disk_space::SpaceGuard>,
    /// The flush and lease loops; they stop on `shutdown`.
    tasks: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    _lock: File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

impl Store {
    /// Opens (or creates) the store in `config.data_dir`, replaying the log
    /// from the applied index. Must be called inside a tokio runtime.
    pub async fn open(mut config: StoreConfig) -> Result<Store> {
        if let Some(cluster) = &config.cluster {
            config.name = cluster.name.clone();
        }
        let lock = durability::lock_data_dir(&config.data_dir)?;
        // Before anything is written: on a full file system the reserve
        // gives the log and the state database room to open.
        let space = Arc::new(disk_space::SpaceGuard::open(
            &config.data_dir,
            config.reserved_space_bytes,
        ));
        let identity = match &config.cluster {
            Some(cluster) => Some(
                cluster::resolve_identity(&config.data_dir, cluster, config.peer_tls.as_ref())
                    .await?,
            ),
            None => None,
        };
        let (member_id, voters, learners): (u64, Vec<u64>, Vec<u64>) = match &identity {
            Some(identity) => (
                identity.member_id,
                identity
                    .peers
                    .iter()
                    .map(|peer| peer.id)
                    .filter(|id| !identity.learners.contains(id))
                    .collect(),
                identity.learners.clone(),
            ),
            None => (SINGLE_MEMBER_ID, vec![SINGLE_MEMBER_ID], Vec::new()),
        };
        let (shutdown, _) = watch::channel(false);
        let (kv, recovered) = KvStore::open_in(crate::mvcc::backend::Location {
            data_dir: config.data_dir.clone(),
            cache_capacity: config.cache_capacity,
        })?;
        let kv = Arc::new(kv);
        let lessor = Arc::new(Lessor::new(config.lessor.clone()));
        lessor.replace_all(&recovered.leases, &recovered.lease_keys);
        let compactor = Compactor::start(Arc::clone(&kv))
            .map_err(|e| StoreError::storage("starting the compactor", e))?;
        if let Some((revision, keep)) = recovered.unfinished_compaction {
            compactor.submit(crate::mvcc::CompactionJob { revision, keep });
        }

        let conf_state = recovered
            .conf_state
            .as_deref()
            .map(crate::raft::decode_conf_state)
            .transpose()?;
        let core = RaftCore::open(
            CoreConfig {
                id: member_id,
                initial_voters: voters.clone(),
                initial_learners: learners,
                election_tick: 10,
                heartbeat_tick: 1,
                tick: driver::TICK,
                fixed_election_timeout: false,
                wal_dir: config.data_dir.join("wal"),
                data_dir: config.data_dir.clone(),
                wal: WalOptions {
                    segment_size: config.wal_segment_size,
                },
                proposal_epoch: rand::random(),
                catch_up_entries: config.catch_up_entries,
            },
            Arc::clone(&kv),
            Arc::clone(&lessor),
            conf_state,
        )?;

        let hub = WatchHub::new(Arc::clone(&kv), config.watch.clone());
        let syncer = hub
            .start_syncer()
            .map_err(|e| StoreError::storage("starting the watch syncer", e))?;
        let notifier = Notifier::start(Arc::clone(&hub))
            .map_err(|e| StoreError::storage("starting the watch notifier", e))?;
        let stats = Arc::new(WriterStats::default());
        let leadership = Arc::new(Leadership::default());
        let mut driver = Driver::new(
            core,
            compactor,
            notifier,
            config.max_batch,
            Arc::clone(&stats),
            Arc::clone(&leadership),
        )
        .on_storage_failure(Arc::clone(&space), config.exit_on_storage_failure);
        let mut tasks = Vec::new();
        let mut forwarded = None;
        if let (Some(cluster), Some(identity)) = (&config.cluster, &identity) {
            let (lease_requests, lease_requests_rx) = mpsc::channel(leases::FORWARDED_QUEUE);
            forwarded = Some(lease_requests_rx);
            let (inbound, inbound_rx) = mpsc::channel(PEER_INBOUND_QUEUE);
            let (reports, reports_rx) = mpsc::unbounded_channel();
            let directory: crate::raft::transport::Directory = {
                let kv = Arc::clone(&kv);
                let founders = cluster.founders();
                let cluster_id = identity.cluster_id;
                let tls = config.peer_tls.is_some();
                Arc::new(move || {
                    let members = members::list_members(&kv, &founders, tls).unwrap_or_default();
                    (cluster_id, members)
                })
            };
            // Peers as the applied membership knows them (members added
            // since the start included); a member that has applied
            // nothing yet goes by what it was told.
            let mut peers: Vec<crate::raft::transport::PeerMember> =
                members::list_members(&kv, &cluster.founders(), config.peer_tls.is_some())?
                    .into_iter()
                    .filter_map(|m| {
                        let addr = members::parse_peer_url(m.peer_urls.first()?).ok()?;
                        Some(crate::raft::transport::PeerMember {
                            id: m.id,
                            name: m.name,
                            addr,
                        })
                    })
                    .collect();
            if peers.is_empty() {
                peers = identity.peers.clone();
            }
            let mut transport = Transport::start(
                cluster.peer_listen,
                identity.cluster_id,
                identity.member_id,
                &peers,
                crate::raft::transport::Hooks {
                    inbound,
                    reports,
                    directory,
                    tls: config.peer_tls.clone(),
                    leases: lease_requests,
                },
                shutdown.subscribe(),
            )
            .await
            .map_err(|e| {
                StoreError::storage(
                    "listening for peers",
                    format!("{}: {e}", cluster.peer_listen),
                )
            })?;
            tasks.extend(transport.take_tasks());
            driver = driver.with_peers(transport, inbound_rx, reports_rx);
        }
        if voters == [member_id] {
            driver = tokio::task::spawn_blocking(move || driver.lead_alone().map(|()| driver))
                .await
                .map_err(|e| StoreError::storage("replaying the log", e))??;
        }
        // Time stood still while the store was down: every lease gets its
        // remaining TTL again from now.
        lessor.promote(Duration::ZERO);

        let (requests, requests_rx) = mpsc::channel(config.proposal_queue);
        let queued_bytes = Arc::new(tokio::sync::Semaphore::new(config.proposal_queue_bytes));
        let driver = std::thread::Builder::new()
            .name("skiff-raft-driver".into())
            .spawn(move || driver.run(requests_rx))
            .map_err(|e| StoreError::storage("starting the raft driver", e))?;

        let store = Store {
            inner: Arc::new(Inner {
                config,
                kv,
                lessor,
                hub,
                requests,
                queued_bytes,
                stats,
                leadership,
                member_id,
                cluster_id: identity
                    .as_ref()
                    .map_or(SINGLE_CLUSTER_ID, |i| i.cluster_id),
                shutdown,
                driver: parking_lot::Mutex::new(Some(driver)),
                syncer: parking_lot::Mutex::new(Some(syncer)),
                leader_link: Default::default(),
                space,
                tasks: parking_lot::Mutex::new(tasks),
                _lock: lock,
            }),
        };
        store.spawn_background(forwarded);
        Ok(store)
    }

    fn spawn_background(&self, forwarded: Option<leases::Forwarded>) {
        let inner = &self.inner;
        let flush = tokio::spawn(durability::flush_loop(
            Arc::clone(&inner.kv),
            inner.requests.clone(),
            durability::Flushing {
                every: inner.config.flush_interval,
                space: Arc::clone(&inner.space),
                exit_on_failure: inner.config.exit_on_storage_failure,
            },
            inner.shutdown.subscribe(),
        ));
        let leases = tokio::spawn(lease_expiry::run(
            Arc::clone(&inner.lessor),
            Arc::clone(&inner.leadership),
            inner.requests.clone(),
            inner.shutdown.subscribe(),
        ));
        let compaction = tokio::spawn(auto_compaction::run(
            inner.config.auto_compaction,
            Arc::clone(&inner.kv),
            inner.requests.clone(),
            inner.shutdown.subscribe(),
        ));
        let space = tokio::spawn(disk_space::run(
            Arc::downgrade(&self.inner),
            inner.shutdown.subscribe(),
        ));
        inner
            .tasks
            .lock()
            .extend([flush, leases, compaction, space]);
        if let Some(every) = inner.config.corrupt_check_interval {
            let check = tokio::spawn(corruption::run(
                Arc::downgrade(&self.inner),
                every,
                inner.shutdown.subscribe(),
            ));
            inner.tasks.lock().push(check);
        }
        if inner.config.cluster.is_some() {
            let publish = tokio::spawn(members::publish_loop(
                Arc::downgrade(&self.inner),
                inner.shutdown.subscribe(),
            ));
            inner.tasks.lock().push(publish);
        }
        if let Some(forwarded) = forwarded {
            let serve = tokio::spawn(leases::serve_forwarded(
                Arc::downgrade(&self.inner),
                forwarded,
                inner.shutdown.subscribe(),
            ));
            inner.tasks.lock().push(serve);
        }
    }

    pub fn kv(&self) -> &Arc<KvStore> {
        &self.inner.kv
    }

    /// Hands leadership to member `to` (call it on the leader). The
    /// transfer completes within an election timeout or is abandoned.
    pub async fn transfer_leadership(&self, to: u64) -> Result<()> {
        self.ask_driver(|reply| DriverRequest::TransferLeader(to, reply))
            .await
    }

    /// Sends the Raft driver a request and waits, at most the request
    /// timeout, for its answer.
    pub(crate) async fn ask_driver<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T>>) -> DriverRequest,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .requests
            .send(request(reply))
            .await
            .map_err(|_| StoreError::Stopped)?;
        tokio::time::timeout(self.inner.config.request_timeout, answer)
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|_| StoreError::Stopped)?
    }

    /// This member's Raft ID.
    pub fn member_id(&self) -> u64 {
        self.inner.member_id
    }

    /// The leader this member knows of (0: none).
    pub fn leader_id(&self) -> u64 {
        self.inner
            .leadership
            .leader_id
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// How many times a new leader became known to this member.
    pub fn leader_changes(&self) -> u64 {
        self.inner
            .leadership
            .leader_changes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_leader(&self) -> bool {
        self.inner
            .leadership
            .is_leader
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// A range read. Linearizable unless `serializable` is set: it then
    /// waits for a read index confirmed by a quorum (no log write) and for
    /// this member to apply up to it, so it sees every acknowledged write.
    /// A serializable read is served from this member's state at once.
    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        command::check_range(&req)?;
        if !req.serializable {
            self.linearize().await?;
        }
        self.inner.kv.range(&req)
    }

    /// The keys in `[key, range_end)` with the revision each was last
    /// modified at, and the store's revision: a linearizable read of the
    /// index alone, for callers that keep decoded copies of the values and
    /// need only know whether theirs are current.
    pub async fn mod_revisions(
        &self,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<crate::mvcc::ModRevisions> {
        self.linearize().await?;
        self.inner.kv.mod_revisions(key, range_end)
    }

    pub(crate) async fn linearize(&self) -> Result<()> {
        if self
            .inner
            .leadership
            .reads_local
            .load(std::sync::atomic::Ordering::Acquire)
        {
            // A lone leader applies every write before acknowledging it.
            return Ok(());
        }
        self.inner
            .stats
            .read_index_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ask_driver(DriverRequest::ReadIndex).await
    }

    pub async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        command::check_put(&req)?;
        match self.propose(Command::Put(req)).await? {
            CommandResult::Put(resp) => Ok(resp),
            other => Err(unexpected(other)),
        }
    }

    pub async fn delete_range(&self, req: DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        command::check_delete_range(&req)?;
        match self.propose(Command::DeleteRange(req)).await? {
            CommandResult::DeleteRange(resp) => Ok(resp),
            other => Err(unexpected(other)),
        }
    }

    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        command::check_txn(&req, self.inner.config.max_txn_ops)?;
        match self.propose(Command::Txn(req)).await? {
            CommandResult::Txn(resp) => Ok(resp),
            other => Err(unexpected(other)),
        }
    }

    /// Compacts history below `revision`. With `physical`, answers only
    /// once the records are gone from disk.
    pub async fn compact(&self, revision: i64, physical: bool) -> Result<CompactionResponse> {
        let resp = match self.propose(Command::Compact { revision }).await? {
            CommandResult::Compact(resp) => resp,
            other => return Err(unexpected(other)),
        };
        if physical {
            let mut finished = self.inner.kv.compact_finished.subscribe();
            finished
                .wait_for(|&done| done >= revision)
                .await
                .map_err(|_| StoreError::Stopped)?;
        }
        Ok(resp)
    }

    /// Grants a lease; `id` 0 lets the store choose one.
    pub async fn lease_grant(&self, ttl: i64, id: i64) -> Result<LeaseGrantResponse> {
        self.inner.lessor.effective_ttl(ttl)?;
        let id = if id == 0 { self.unused_lease_id() } else { id };
        match self.propose(Command::LeaseGrant { id, ttl }).await? {
            CommandResult::LeaseGrant(resp) => Ok(resp),
            other => Err(unexpected(other)),
        }
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse> {
        match self.propose(Command::LeaseRevoke { id }).await? {
            CommandResult::LeaseRevoke(resp) => Ok(resp),
            other => Err(unexpected(other)),
        }
    }

    pub fn watch(&self, req: WatchRequest) -> Result<Watcher> {
        self.inner.hub.watch(req)
    }

    /// (synced, unsynced) watchers.
    pub fn watcher_counts(&self) -> (usize, usize) {
        self.inner.hub.watcher_counts()
    }

    fn unused_lease_id(&self) -> i64 {
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id != 0 && !self.inner.lessor.contains(id) {
                return id;
            }
        }
    }

    pub(crate) async fn propose(&self, command: Command) -> Result<CommandResult> {
        self.check_quota(&command).await?;
        let data = command.encode();
        command::check_size(&data, self.inner.config.max_request_bytes)?;
        let cost = data.len().min(self.inner.config.proposal_queue_bytes) as u32;
        let budget = Arc::clone(&self.inner.queued_bytes)
            .acquire_many_owned(cost)
            .await
            .map_err(|_| StoreError::Stopped)?;
        let answer = send_proposal(&self.inner.requests, data, Some(budget));
        let result = tokio::time::timeout(self.inner.config.request_timeout, answer)
            .await
            .map_err(|_| StoreError::Timeout)
            .and_then(|result| result);
        if matches!(
            result,
            Err(StoreError::Timeout | StoreError::NoLeader | StoreError::Stopped)
        ) {
            self.inner
                .stats
                .proposals_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }

    /// Stops the Raft driver after what is queued, flushes sled and syncs it,
    /// and releases the data directory.
    pub async fn close(self) -> Result<()> {
        let inner = self.inner;
        inner.shutdown.send_replace(true);
        let tasks = std::mem::take(&mut *inner.tasks.lock());
        for task in tasks {
            let _ = task.await;
        }
        inner.syncer.lock().take();
        let driver = inner.driver.lock().take();
        let kv = inner.kv.clone();
        // Everything queued before the stop is still written and answered.
        let _ = inner.requests.send(DriverRequest::Stop).await;
        drop(inner);
        tokio::task::spawn_blocking(move || {
            if let Some(driver) = driver {
                let _ = driver.join();
            }
            kv.flush_behind()?;
            kv.sync_to_disk()
        })
        .await
        .map_err(|e| StoreError::storage("closing", e))?
    }
}

/// Proposes a small internal command (lease revokes, checkpoints,
/// compactions), outside the byte budget of client requests.
async fn propose_to(
    requests: &mpsc::Sender<DriverRequest>,
    command: Command,
) -> Result<CommandResult> {
    let answer = send_proposal(requests, command.encode(), None);
    tokio::time::timeout(INTERNAL_REQUEST_TIMEOUT, answer)
        .await
        .map_err(|_| StoreError::Timeout)?
}

/// How long the store's own proposals (revokes, checkpoints, compactions)
/// may wait before they are retried by their loops.
const INTERNAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

async fn send_proposal(
    requests: &mpsc::Sender<DriverRequest>,
    data: Vec<u8>,
    budget: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Result<CommandResult> {
    let (reply, answer) = oneshot::channel();
    requests
        .send(DriverRequest::Propose(Proposal {
            data,
            reply,
            budget,
        }))
        .await
        .map_err(|_| StoreError::Stopped)?;
    answer.await.map_err(|_| StoreError::Stopped)?
}

fn unexpected(result: CommandResult) -> StoreError {
    StoreError::storage("answering", format!("unexpected result {result:?}"))
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A store in a fresh temporary directory, with a fast lessor and syncer.
    pub async fn open_temp() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(test_config(dir.path())).await.expect("open");
        (store, dir)
    }

    pub fn test_config(dir: &std::path::Path) -> StoreConfig {
        let mut config = StoreConfig::new(dir);
        config.lessor.min_ttl = 1;
        config.flush_interval = Duration::from_millis(100);
        config.catch_up_entries = 10;
        config.watch.sync_interval = Duration::from_millis(10);
        config.reserved_space_bytes = 0;
        config.exit_on_storage_failure = false;
        config
    }

    pub async fn put(store: &Store, key: &str, value: &str) -> i64 {
        store
            .put(PutRequest::new(key, value))
            .await
            .expect("put")
            .header
            .revision
    }

    pub async fn get(store: &Store, key: &str) -> Option<KeyValue> {
        let resp = store.range(RangeRequest::key(key)).await.expect("range");
        resp.kvs.into_iter().next()
    }
}

#[cfg(test)]
mod replication_tests;
#[cfg(test)]
mod tests;
