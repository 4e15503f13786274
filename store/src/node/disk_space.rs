//! Room on the file system of a member's data directory. The member keeps
//! a reserve file there and gives it back to itself when the file system
//! runs short, so that the NOSPACE alarm and what frees space (deletes,
//! compaction) can still be written; while short it refuses what adds
//! data. Not for a write that fails for want of space all the same: the
//! member then stops (see `durability::stop_member`).
//!
//! Why not carry on after such a failure: the write-ahead log cannot retry
//! a failed write or fdatasync (after a failed fsync Linux may have dropped
//! the dirty pages and reports the error once: PostgreSQL's "fsyncgate"),
//! and sled keeps its first I/O error for the life of the database, so
//! nothing written after it could be made durable. A restart re-reads both
//! from disk, and the reserve (or any space freed) lets it start.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::Inner;

/// The reserve file in the data directory. An operator may delete it by
/// hand to get room to start a member whose file system is full.
pub(crate) const RESERVE_FILE: &str = "reserved-space";

/// How often the member looks at its file system when nothing else does.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Watches the space left on the file system of one data directory.
#[derive(Debug)]
pub(crate) struct SpaceGuard {
    dir: PathBuf,
    /// Size of the reserve file; 0 turns the guard off.
    reserve: u64,
    /// Below `reserve / 2` bytes available and not yet back above
    /// `2 * reserve`.
    short: AtomicBool,
    /// The reserve file is (as far as this member knows) on disk.
    reserved: AtomicBool,
}

impl SpaceGuard {
    /// Looks at the file system of `dir` and makes the reserve file if
    /// there is room for it; if there is not, the member starts short of
    /// space (after giving the reserve back, if it was there).
    pub(crate) fn open(dir: &Path, reserve: u64) -> SpaceGuard {
        let guard = SpaceGuard {
            dir: dir.to_path_buf(),
            reserve,
            short: AtomicBool::new(false),
            reserved: AtomicBool::new(dir.join(RESERVE_FILE).exists()),
        };
        if reserve == 0 {
            return guard;
        }
        if !guard.check() {
            let complete = fs::metadata(guard.reserve_path()).is_ok_and(|m| m.len() >= reserve);
            if !complete {
                if let Err(err) = guard.make_reserve() {
                    tracing::warn!(dir = %dir.display(), error = %err, "could not reserve space in the data directory; starting short of space");
                    guard.short.store(true, Ordering::Release);
                }
            }
        }
        guard
    }

    /// Whether the file system is short of space, looked at now. Gives the
    /// reserve back the first time it is. A few microseconds: callers may
    /// call it before every write.
    pub(crate) fn check(&self) -> bool {
        if self.reserve == 0 {
            return false;
        }
        let available = match available_bytes(&self.dir) {
            Ok(available) => available,
            Err(err) => {
                tracing::debug!(dir = %self.dir.display(), error = %err, "statvfs failed");
                return self.is_short();
            }
        };
        if available < self.low_water() {
            if !self.short.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    dir = %self.dir.display(),
                    available_bytes = available,
                    "the data directory's file system is almost full; refusing writes that add data (NOSPACE) until space is freed"
                );
            }
            self.release_reserve();
        }
        self.is_short()
    }

    pub(crate) fn is_short(&self) -> bool {
        self.short.load(Ordering::Acquire)
    }

    /// When short: if the file system has room again for the reserve and
    /// as much again, makes the reserve anew and stops being short.
    /// Blocking (it allocates the reserve file).
    pub(crate) fn try_recover(&self) -> bool {
        if !self.is_short() {
            return true;
        }
        let Ok(available) = available_bytes(&self.dir) else {
            return false;
        };
        let needed = if self.reserved.load(Ordering::Acquire) {
            self.reserve
        } else {
            2 * self.reserve
        };
        if available < needed {
            return false;
        }
        if let Err(err) = self.make_reserve() {
            tracing::debug!(error = %err, "could not make the reserve file again yet");
            return false;
        }
        self.short.store(false, Ordering::Release);
        tracing::info!(
            dir = %self.dir.display(),
            available_bytes = available,
            "the data directory's file system has room again; writes that add data are taken (a NOSPACE alarm raised meanwhile stays until `etcdctl alarm disarm`)"
        );
        true
    }

    fn low_water(&self) -> u64 {
        self.reserve / 2
    }

    fn reserve_path(&self) -> PathBuf {
        self.dir.join(RESERVE_FILE)
    }

    fn release_reserve(&self) {
        if !self.reserved.swap(false, Ordering::AcqRel) {
            return;
        }
        match fs::remove_file(self.reserve_path()) {
            Ok(()) => tracing::warn!(
                path = %self.reserve_path().display(),
                bytes = self.reserve,
                "gave the reserved space back to this member so that it can still raise NOSPACE and take deletes and compaction"
            ),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %self.reserve_path().display(), error = %err, "could not remove the reserve file")
            }
        }
    }

    fn make_reserve(&self) -> io::Result<()> {
        let path = self.reserve_path();
        let made = allocate(&path, self.reserve);
        match &made {
            Ok(()) => self.reserved.store(true, Ordering::Release),
            Err(_) => {
                let _ = fs::remove_file(&path);
                self.reserved.store(false, Ordering::Release);
            }
        }
        made
    }
}

/// Bytes an unprivileged writer may still take on the file system of `dir`.
pub(crate) fn available_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs only writes into `stat`, which is a plain C struct
    // for which all zeros is a valid value; `path` is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// Makes `path` a file of `len` bytes whose blocks are allocated, so that
/// removing it frees that much.
fn allocate(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let length =
        libc::off_t::try_from(len).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: fallocate on a file descriptor we own, for as long as `file` lives.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(err);
        }
        write_zeros(&file, len)?;
    }
    file.sync_all()
}

fn write_zeros(file: &File, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Looks at the file system every [`CHECK_EVERY`]: gives the reserve back
/// when it runs short, raises NOSPACE for a member that is the only voter
/// (see [`super::Store::raise_nospace_if_alone`]), and makes the reserve again once
/// space is freed.
pub(crate) async fn run(inner: Weak<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let space = Arc::clone(&inner.space);
        if !space.check() {
            continue;
        }
        let store = super::Store { inner };
        store.raise_nospace_if_alone().await;
        let recovered = tokio::task::spawn_blocking(move || space.try_recover()).await;
        if let Err(err) = recovered {
            tracing::warn!(error = %err, "checking the data directory's space failed");
        }
    }
}

impl super::Store {
    /// Raises NOSPACE for this member through the log (as the quota does),
    /// if it is the only voter and has not raised it yet.
    ///
    /// Only then: a full disk on one member of several is a fault of that
    /// member, like a crash, and the others (a quorum) go on taking writes
    /// without it. A NOSPACE alarm makes every member refuse what adds
    /// data (etcd's rule, for a database past its quota, which is the
    /// same on all), so raising it for one member's disk would turn a
    /// fault the cluster tolerates into a write outage of the whole
    /// cluster. That member refuses its own clients' writes with NOSPACE
    /// and, if it can no longer store what the leader sends, stops.
    pub(crate) async fn raise_nospace_if_alone(&self) {
        if !self.inner.leadership.sole_voter.load(Ordering::Acquire) || self.nospace_raised() {
            return;
        }
        tracing::warn!("the data directory's file system is full; raising NOSPACE");
        self.propose_nospace().await;
    }
}

#[cfg(test)]
pub(crate) mod tiny_fs {
    //! A small tmpfs of our own for the tests that fill a file system: it
    //! needs root. Without it a test is skipped, but under CI=true it fails.

    use std::path::{Path, PathBuf};
    use std::process::Command;

    pub(crate) struct TinyFs {
        /// Holds the mount point; removed after the unmount.
        _dir: tempfile::TempDir,
        mount: PathBuf,
    }

    impl TinyFs {
        /// A tmpfs of `mib` MiB, or `None` (with a note) when this process
        /// cannot mount one.
        pub(crate) fn mount(test: &str, mib: u64) -> Option<TinyFs> {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let dir = tempfile::tempdir().expect("temp dir");
            let mount = dir.path().join("fs");
            std::fs::create_dir(&mount).expect("mount point");
            let mounted = root
                && Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                    .arg(&mount)
                    .status()
                    .is_ok_and(|status| status.success());
            if mounted {
                return Some(TinyFs { _dir: dir, mount });
            }
            let why = format!(
                "{test}: needs root to mount a {mib} MiB tmpfs (root: {root}); run the tests as root"
            );
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                panic!("{why}");
            }
            eprintln!("skipped {why}");
            None
        }

        pub(crate) fn path(&self) -> &Path {
            &self.mount
        }

        /// Takes every byte left with one file (fallocate, then writes
        /// until the kernel says there is no room); returns its path.
        pub(crate) fn fill(&self, name: &str) -> PathBuf {
            use std::io::Write;
            let path = self.mount.join(name);
            let available = super::available_bytes(&self.mount).expect("statvfs");
            let _ = super::allocate(&path, available);
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .expect("filler");
            for chunk in [4096usize, 1] {
                let bytes = vec![1u8; chunk];
                while file.write_all(&bytes).is_ok() {}
            }
            assert_eq!(super::available_bytes(&self.mount).expect("statvfs"), 0);
            path
        }
    }

    impl Drop for TinyFs {
        fn drop(&mut self) {
            let unmounted = Command::new("umount")
                .arg(&self.mount)
                .status()
                .is_ok_and(|status| status.success());
            if !unmounted {
                // Something still holds it open: detach it now, gone when released.
                let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tiny_fs::TinyFs;
    use super::*;

    const RESERVE: u64 = 4 << 20;

    #[test]
    fn the_reserve_is_given_back_when_the_disk_fills_and_made_again_when_freed() {
        let Some(fs) = TinyFs::mount(
            "the_reserve_is_given_back_when_the_disk_fills_and_made_again_when_freed",
            16,
        ) else {
            return;
        };
        let guard = SpaceGuard::open(fs.path(), RESERVE);
        assert!(!guard.is_short());
        assert_eq!(
            fs::metadata(fs.path().join(RESERVE_FILE)).unwrap().len(),
            RESERVE
        );

        let filler = fs.fill("filler");
        assert!(guard.check(), "a full file system is short of space");
        assert!(!fs.path().join(RESERVE_FILE).exists(), "reserve given back");
        assert!(available_bytes(fs.path()).unwrap() >= RESERVE - 4096);
        assert!(!guard.try_recover(), "not while the filler holds the space");
        assert!(guard.check(), "still short with the reserve's room left");

        fs::remove_file(filler).unwrap();
        assert!(guard.try_recover());
        assert!(!guard.check());
        assert!(fs.path().join(RESERVE_FILE).exists(), "reserve made again");
    }

    #[test]
    fn a_member_starting_on_a_full_disk_starts_short_and_frees_its_reserve() {
        let Some(fs) = TinyFs::mount(
            "a_member_starting_on_a_full_disk_starts_short_and_frees_its_reserve",
            16,
        ) else {
            return;
        };
        drop(SpaceGuard::open(fs.path(), RESERVE));
        let _filler = fs.fill("filler");
        let guard = SpaceGuard::open(fs.path(), RESERVE);
        assert!(guard.is_short());
        assert!(available_bytes(fs.path()).unwrap() >= RESERVE - 4096);
    }

    /// Every key under `prefix`, read linearizably.
    async fn keys(store: &crate::node::Store, prefix: &str) -> Vec<String> {
        let read = store
            .range(crate::api::RangeRequest::prefix(prefix))
            .await
            .expect("reads keep working");
        read.kvs
            .into_iter()
            .map(|kv| String::from_utf8(kv.key).unwrap())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_member_on_a_full_disk_refuses_writes_with_nospace_until_freed_and_disarmed() {
        use crate::error::StoreError;
        use crate::mvcc::alarm::{self, AlarmMember};
        use crate::node::testing::{put, test_config};
        use crate::node::{AlarmAction, Store};
        let Some(fs) = TinyFs::mount(
            "a_lone_member_on_a_full_disk_refuses_writes_with_nospace_until_freed_and_disarmed",
            32,
        ) else {
            return;
        };
        let mut config = test_config(&fs.path().join("data"));
        config.reserved_space_bytes = RESERVE;
        let store = Store::open(config.clone()).await.unwrap();
        let me = store.member_id();
        let mut acked = Vec::new();
        for i in 0..20 {
            let key = format!("k/{i:02}");
            put(&store, &key, "before").await;
            acked.push(key);
        }

        let filler = fs.fill("filler");
        let err = store
            .put(crate::api::PutRequest::new("k/full", "v"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NoSpace), "{err:?}");
        assert_eq!(store.alarms(), [AlarmMember::new(me, alarm::NOSPACE)]);
        assert_eq!(keys(&store, "k/").await, acked, "reads go on");
        // What frees space goes on too, within the reserve.
        let deleted = store
            .delete_range(crate::api::DeleteRangeRequest {
                key: b"k/00".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(deleted.deleted, 1);
        acked.remove(0);

        fs::remove_file(filler).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.inner.space.is_short() {
            assert!(
                std::time::Instant::now() < deadline,
                "space never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let early = store.put(crate::api::PutRequest::new("k/early", "v")).await;
        assert!(
            matches!(early, Err(StoreError::NoSpace)),
            "before disarm: {early:?}"
        );
        store
            .alarm(AlarmAction::Deactivate, me, alarm::NOSPACE)
            .await
            .unwrap();
        put(&store, "k/later", "after").await;
        acked.push("k/later".into());
        store.close().await.unwrap();

        let store = Store::open(config).await.unwrap();
        assert_eq!(keys(&store, "k/").await, acked, "every acknowledged write");
        assert!(store.alarms().is_empty());
        store.close().await.unwrap();
    }

    /// Without the reserve the disk fills under the log and sled: the
    /// write that finds it full fails with NOSPACE and the member stops
    /// taking writes (it does not exit here: the test config says so).
    /// That a restart then finds every acknowledged write is the process
    /// test's part (tests/tests/store_full_disk.rs,
    /// `without_the_reserve_…`): only a process that has ended leaves
    /// sled's files as a restart finds them, where this one's sled threads
    /// live on.
    ///
    /// Ignored: after ENOSPC sled 0.34 can deadlock (a flush waiting in
    /// `make_stable` while a batch waits for its lock), and the test's
    /// runtime then waits forever for the blocked flush at its end. A
    /// member never gets there: it exits (74) at the first failed write.
    /// The process test runs the same fill in every CI run.
    #[ignore = "sled can deadlock after ENOSPC in a process that goes on; see the doc comment"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_finds_the_disk_full_fails_with_nospace_and_stops_the_member() {
        use crate::error::StoreError;
        use crate::node::testing::test_config;
        use crate::node::Store;
        let Some(fs) = TinyFs::mount(
            "a_write_that_finds_the_disk_full_fails_with_nospace_and_stops_the_member",
            16,
        ) else {
            return;
        };
        let config = test_config(&fs.path().join("data"));
        assert_eq!(config.reserved_space_bytes, 0);
        let store = Store::open(config.clone()).await.unwrap();
        let value = vec![b'v'; 32 << 10];
        let mut acked = 0;
        let failure = loop {
            let key = format!("k/{acked:04}");
            match store
                .put(crate::api::PutRequest::new(key, value.clone()))
                .await
            {
                Ok(_) => acked += 1,
                Err(err) => break err,
            }
            assert!(acked < 2000, "a 16 MiB file system never filled");
        };
        assert!(failure.is_no_space(), "{failure:?}");
        let after = store.put(crate::api::PutRequest::new("k/after", "v")).await;
        assert!(
            matches!(after, Err(StoreError::Stopped | StoreError::Timeout)),
            "a stopped member takes no write: {after:?}"
        );
        // Not closed: sled waits forever in its drop for a flush that
        // failed (the process would have ended here, see
        // `StoreConfig::exit_on_storage_failure`).
        // The tmpfs, still held by sled's open files, is detached on drop.
        std::mem::forget(store);
    }

    #[test]
    fn without_a_reserve_the_guard_is_off() {
        let dir = tempfile::tempdir().unwrap();
        let guard = SpaceGuard::open(dir.path(), 0);
        assert!(!guard.check());
        assert!(!dir.path().join(RESERVE_FILE).exists());
    }
}
