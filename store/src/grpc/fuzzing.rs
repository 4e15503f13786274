//! The bodies of the fuzz targets over what an etcd client sends
//! (`fuzz/fuzz_targets/`): gRPC request messages decoded as the services
//! decode them, converted and checked as they convert and check them, then
//! applied to an MVCC store of their own, with watches reading what was
//! written. Here so that a stable test replays the committed corpora
//! through the same code. Not an API: each function panics when an
//! invariant is broken.

use std::sync::Arc;

use prost::Message;
use tonic::{Code, Status};

use super::pb::etcdserverpb as pb;
use super::{codec, convert, status};
use crate::api::{self, EventType};
use crate::command::{self, Command};
use crate::lease::{Lessor, LessorConfig};
use crate::mvcc::{Applier, KeyRange, KvStore};
use crate::watch::{WatchConfig, WatchHub, Watcher};

/// The fuzz targets of this crate, by the name of their corpus folder.
pub const TARGETS: &[skiff_machinery::fuzzing::Target] = &[
    ("etcd_requests", etcd_requests),
    ("etcd_txn_decode", etcd_txn_decode),
];

/// Requests read from one input, at most: each may write a revision.
const MAX_REQUESTS: usize = 64;
/// Catch-up rounds of the watchers after a request, at most.
const MAX_SYNC_ROUNDS: usize = 64;

/// A sequence of etcd requests against one empty store. Each request is a
/// frame: a byte naming the RPC (Range, Put, DeleteRange, Txn, Compact,
/// LeaseGrant, LeaseRevoke, Watch, by its value modulo 8), a big-endian
/// u16 length, then that many bytes of the request message. Invariants:
/// a refusal is a status, a command survives the log's encoding, a
/// command changes at most one revision, a range stays in its range and
/// limit, and a watch sees its range's events in revision order, filtered
/// as asked.
pub fn etcd_requests(data: &[u8]) {
    let mut store = Harness::open();
    for (rpc, message) in frames(data).take(MAX_REQUESTS) {
        let refused = store.request(rpc, message).err();
        if let Some(refusal) = refused {
            assert_ne!(refusal.code(), Code::Ok, "a refusal with status OK");
        }
        store.drain_watchers();
    }
}

/// The hand decoder of `TxnRequest` (which bounds its nesting) against
/// prost's: what one reads it writes back and reads again the same, and it
/// refuses what prost reads only when the nesting is past its bound.
pub fn etcd_txn_decode(data: &[u8]) {
    let by_hand = codec::decode_txn_request(&mut &data[..]);
    let by_prost = pb::TxnRequest::decode(data);
    match (by_hand, by_prost) {
        (Ok(txn), _) => {
            let encoded = txn.encode_to_vec();
            let again = codec::decode_txn_request(&mut encoded.as_slice())
                .unwrap_or_else(|err| panic!("a decoded txn written again: {err:?}"));
            assert_eq!(again, txn, "a txn changes on its way back");
            let by_prost = pb::TxnRequest::decode(encoded.as_slice())
                .unwrap_or_else(|err| panic!("prost cannot read a txn read by hand: {err}"));
            assert_eq!(by_prost, txn, "prost reads a txn otherwise");
            let _ = convert::txn_request(txn).map(|req| command::check_txn(&req, 128));
        }
        (Err(refusal), Ok(_)) => assert_eq!(
            (refusal.code(), refusal.message()),
            (Code::InvalidArgument, status::TOO_MANY_OPS),
            "refused by hand, read by prost"
        ),
        (Err(_), Err(_)) => {}
    }
}

/// The frames of an input: (RPC, message bytes).
fn frames(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let [rpc, high, low, rest @ ..] = data else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([*high, *low])).min(rest.len());
        let (message, after) = rest.split_at(len);
        data = after;
        Some((*rpc, message))
    })
}

/// An MVCC store on a temporary sled database, its lessor and watch hub,
/// applied to directly as the Raft log's single writer does.
struct Harness {
    _db: sled::Db,
    kv: Arc<KvStore>,
    lessor: Lessor,
    hub: Arc<WatchHub>,
    index: u64,
    next_lease: i64,
    watches: Vec<Watch>,
}

/// A watch and what it must see.
struct Watch {
    watcher: Watcher,
    request: api::WatchRequest,
    /// The revision of the last events it was sent.
    last_revision: i64,
    ended: bool,
}

impl Harness {
    fn open() -> Harness {
        let db = sled::Config::new()
            .temporary(true)
            .flush_every_ms(None)
            .open()
            .expect("a temporary sled database");
        let tree = db.open_tree("mvcc").expect("a sled tree");
        let (kv, _) = KvStore::open(tree).expect("an empty MVCC store");
        let kv = Arc::new(kv);
        Harness {
            _db: db,
            hub: WatchHub::new(Arc::clone(&kv), WatchConfig::default()),
            kv,
            lessor: Lessor::new(LessorConfig::default()),
            index: 0,
            next_lease: 1,
            watches: Vec::new(),
        }
    }

    /// One RPC as its service handles it; a refusal is the status sent.
    fn request(&mut self, rpc: u8, message: &[u8]) -> Result<(), Status> {
        let malformed = |err: prost::DecodeError| Status::internal(err.to_string());
        match rpc % 8 {
            0 => {
                let req =
                    convert::range_request(pb::RangeRequest::decode(message).map_err(malformed)?)?;
                self.range(&req)
            }
            1 => {
                let req = convert::put_request(pb::PutRequest::decode(message).map_err(malformed)?);
                command::check_put(&req).map_err(status::from_store)?;
                self.apply(Command::Put(req))
            }
            2 => {
                let req = convert::delete_range_request(
                    pb::DeleteRangeRequest::decode(message).map_err(malformed)?,
                );
                command::check_delete_range(&req).map_err(status::from_store)?;
                self.apply(Command::DeleteRange(req))
            }
            3 => {
                let req = convert::txn_request(codec::decode_txn_request(&mut &message[..])?)?;
                command::check_txn(&req, command::MAX_TXN_OPS).map_err(status::from_store)?;
                self.apply(Command::Txn(req))
            }
            4 => {
                let req = pb::CompactionRequest::decode(message).map_err(malformed)?;
                self.apply(Command::Compact {
                    revision: req.revision,
                })
            }
            5 => {
                let req = pb::LeaseGrantRequest::decode(message).map_err(malformed)?;
                self.lessor
                    .effective_ttl(req.ttl)
                    .map_err(status::from_store)?;
                let id = match req.id {
                    0 => {
                        self.next_lease += 1;
                        self.next_lease
                    }
                    id => id,
                };
                self.apply(Command::LeaseGrant { id, ttl: req.ttl })
            }
            6 => {
                let req = pb::LeaseRevokeRequest::decode(message).map_err(malformed)?;
                self.apply(Command::LeaseRevoke { id: req.id })
            }
            _ => {
                let req = pb::WatchRequest::decode(message).map_err(malformed)?;
                self.watch(req)
            }
        }
    }

    fn range(&self, req: &api::RangeRequest) -> Result<(), Status> {
        command::check_range(req).map_err(status::from_store)?;
        let resp = self.kv.range(req).map_err(status::from_store)?;
        let range = KeyRange::new(&req.key, &req.range_end);
        for kv in &resp.kvs {
            assert!(range.contains(&kv.key), "a range read a key outside it");
        }
        if req.limit > 0 {
            assert!(resp.kvs.len() as i64 <= req.limit, "a range past its limit");
        }
        if !req.count_only {
            assert!(
                resp.count >= resp.kvs.len() as i64,
                "a count below the keys"
            );
        }
        Ok(())
    }

    /// Proposes `command` as a member does (encoded for the log, within
    /// the size limit) and applies it at the next index as every member
    /// does: it changes at most one revision, which readers and watchers
    /// then see; a compaction is carried out on disk at once.
    fn apply(&mut self, command: Command) -> Result<(), Status> {
        let encoded = command.encode();
        command::check_size(&encoded, command::MAX_REQUEST_BYTES).map_err(status::from_store)?;
        let logged = Command::decode(&encoded).expect("a command reads back from the log");
        assert_eq!(logged, command, "a command changes in the log");
        self.index += 1;
        let before = self.kv.current_revision();
        let mut applier = Applier::new(&self.kv, &self.lessor);
        let result = applier
            .apply(self.index, &logged)
            .expect("a new index is applied");
        let committed = applier.commit().expect("a batch commits");
        assert!(
            committed.revision == before || committed.revision == before + 1,
            "one command moved the revision from {before} to {}",
            committed.revision
        );
        self.kv.publish_revision(committed.revision);
        self.hub.publish(committed.revision, &committed.events);
        for job in &committed.compactions {
            crate::mvcc::compaction::compact_on_disk(&self.kv, job).expect("a compaction on disk");
        }
        result.map(|_| ()).map_err(status::from_store)
    }

    /// A watch stream's request: a create is converted and refused as the
    /// stream does, then watched; cancel and progress requests are the
    /// stream's own business.
    fn watch(&mut self, req: pb::WatchRequest) -> Result<(), Status> {
        use pb::watch_request::RequestUnion;
        let Some(RequestUnion::CreateRequest(create)) = req.request_union else {
            return Ok(());
        };
        let request = convert::watch_request(&create);
        if KeyRange::new(&request.key, &request.range_end).is_empty() || request.start_revision < 0
        {
            return Ok(());
        }
        let watcher = self
            .hub
            .watch(request.clone())
            .map_err(status::from_store)?;
        self.watches.push(Watch {
            watcher,
            last_revision: request.start_revision.max(1) - 1,
            request,
            ended: false,
        });
        Ok(())
    }

    /// Catches unsynced watchers up from disk and reads every watcher's
    /// responses, checking each.
    fn drain_watchers(&mut self) {
        for _ in 0..MAX_SYNC_ROUNDS {
            match self.hub.sync_round() {
                Ok(true) => continue,
                Ok(false) => break,
                Err(err) => panic!("a catch-up round failed: {err}"),
            }
        }
        for watch in &mut self.watches {
            while let Some(resp) = watch.watcher.try_next() {
                watch.check(&resp);
            }
        }
    }
}

impl Watch {
    fn check(&mut self, resp: &api::WatchResponse) {
        assert!(!self.ended, "a response after the watch ended");
        if resp.canceled {
            self.ended = true;
            return;
        }
        let range = KeyRange::new(&self.request.key, &self.request.range_end);
        let Some(first) = resp.events.first() else {
            return;
        };
        let revision = first.kv.mod_revision;
        assert!(
            revision > self.last_revision,
            "a watch went back from revision {} to {revision}",
            self.last_revision
        );
        for event in &resp.events {
            assert_eq!(
                event.kv.mod_revision, revision,
                "one response, two revisions"
            );
            assert!(range.contains(&event.kv.key), "an event outside the watch");
            match event.kind {
                EventType::Put => assert!(!self.request.no_put, "a put despite NOPUT"),
                EventType::Delete => assert!(!self.request.no_delete, "a delete despite NODELETE"),
            }
        }
        self.last_revision = revision;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replays_the_fuzz_corpora() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        skiff_machinery::fuzzing::replay_corpora(&root, super::TARGETS);
    }
}
