//! Write-ahead log: the durable source of truth of the store, later the Raft log.
//! It makes records durable (group commit), replays them and releases old segments;
//! it does not interpret records or apply them to the state machine.
//!
//! # On-disk format
//!
//! `dir` holds segment files named `{seq:016x}-{first_index:016x}.wal` and a
//! `LOCK` file, exclusively locked while a [`Wal`] is open. `seq` goes up by one
//! per segment, and fixed-width hex makes `ls` order log order; `first_index`
//! (the next Entry index when the segment was created) is only a hint for humans.
//! A segment has no file header, just records back to back:
//!
//! ```text
//! len      u32 LE  length of type + payload, 1..=64 MiB
//! crc      u32 LE  CRC-32 (IEEE, crc32fast) of type + payload
//! type     u8      1 = Entry, 2 = HardState, 3 = Snapshot
//! payload          Entry:     index u64 LE, term u64 LE, data (rest of the record)
//!                  HardState: term u64 LE, vote u64 LE, commit u64 LE
//!                  Snapshot:  index u64 LE, term u64 LE
//! ```
//!
//! Every segment after the first starts with copies of the latest HardState and
//! Snapshot, so releasing older segments never loses them (replay reports the
//! copies too). On open, a torn record at the end of the newest segment (short
//! header or body, CRC mismatch, absurd length) is truncated away; any other
//! damage, or damage in an older segment, is an error.
//!
//! The active segment is zero-filled ahead of its records, up to
//! [`PREALLOCATE`] bytes at a time: an fdatasync after a write that grows
//! the file must also commit the file system's journal (the new size and
//! blocks), one into space already written needs only the data (on ext4
//! this took a sync from 138 to 98 µs here). Zeros after the last record
//! are that space, not damage: open cuts them off the newest segment, and a
//! segment is cut back to its records before the next one is created.

mod error;
#[cfg(feature = "failpoints")]
mod power_cut;
mod record;
mod segment;
#[cfg(test)]
mod tests;

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub use error::{names_no_space, WalError};
pub use record::{Corruption, WalRecord};
use segment::{Scan, Segment};

const LOCK_FILE: &str = "LOCK";
const FIRST_SEQ: u64 = 1;

/// Bytes an active segment must hold before a release covering it starts a
/// new segment so that it can go.
pub const ROLL_ON_RELEASE: u64 = 1 << 20;

/// After a large batch the append buffer shrinks back to this, so one burst
/// does not pin its memory for the life of the process.
const PENDING_RETAIN: usize = 1 << 20;

/// How far past its records the active segment is zero-filled when a write
/// reaches the end of what was filled before (never past `segment_size`).
pub const PREALLOCATE: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// A segment that has grown to this many bytes is closed after the next
    /// sync and a new one started. Segments are the unit of release.
    pub segment_size: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: 64 << 20,
        }
    }
}

/// What replay and appends have shown so far about the log as a whole.
#[derive(Debug, Default)]
struct LogState {
    last_index: u64,
    /// While replaying: the index the next Entry may have at most (the one
    /// after the last Entry; a lower one replaces a suffix, as a new leader
    /// does), unless a Snapshot record since allows the one after it.
    next_entry: Option<u64>,
    after_snapshot: Option<u64>,
    /// Latest of each, carried into every new segment.
    hard_state: Option<WalRecord>,
    snapshot: Option<WalRecord>,
}

impl LogState {
    /// While replaying: `Err((expected, found))` when `record` is an Entry
    /// that leaves a gap after the entries before it. Raft appends entries
    /// one after another (or over a suffix), and a snapshot restarts them
    /// after its index, so a gap means a record that was appended is gone.
    fn check_replayed(&mut self, record: &WalRecord) -> Result<(), (u64, u64)> {
        match record {
            WalRecord::Entry { index, .. } => {
                let fits = match self.next_entry {
                    None => true,
                    Some(next) => *index <= next || self.after_snapshot == Some(*index),
                };
                if !fits {
                    return Err((self.next_entry.unwrap_or_default(), *index));
                }
                self.next_entry = Some(index + 1);
                self.after_snapshot = None;
            }
            WalRecord::Snapshot { index, .. } => self.after_snapshot = Some(index + 1),
            WalRecord::HardState { .. } => {}
        }
        Ok(())
    }

    /// Returns the index if `record` is an Entry.
    fn observe(&mut self, record: &WalRecord) -> Option<u64> {
        match record {
            WalRecord::Entry { index, .. } => {
                self.last_index = self.last_index.max(*index);
                return Some(*index);
            }
            WalRecord::HardState { .. } => self.hard_state = Some(record.clone()),
            WalRecord::Snapshot { .. } => self.snapshot = Some(record.clone()),
        }
        None
    }
}

/// An open, exclusively locked write-ahead log.
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    /// Oldest first; the last one is active. Never empty.
    segments: Vec<Segment>,
    active: File,
    /// Length of the active segment's file: its records, then zeros.
    allocated: u64,
    /// Held for the flock on `LOCK`; released when the file is closed.
    _lock: File,
    /// Records appended since the last sync, already framed.
    pending: Vec<u8>,
    /// Lowest and highest Entry index in `pending`.
    pending_indexes: Option<(u64, u64)>,
    state: LogState,
    /// Set by the first failed write, fsync or roll (with whether it was
    /// for want of space). What reached the disk is then unknown (Linux may
    /// drop dirty pages after a failed fsync and report it only once), so
    /// the log only accepts more writes after a restart re-reads it. This
    /// holds for a full disk too: ENOSPC may come from the fdatasync itself
    /// (delayed allocation, thin provisioning, NFS), and after the
    /// fdatasync failed, retrying it can succeed without the data.
    failed: Option<(String, bool)>,
}

impl Wal {
    /// Opens the log in `dir` (creating the dir and a first segment if absent)
    /// and calls `visit` with every record in log order.
    ///
    /// A torn or corrupt tail of the newest segment is truncated away with a
    /// warning; corruption anywhere else is an error. Each segment after the
    /// first replays copies of the latest HardState and Snapshot again. Fails
    /// with [`WalError::Locked`] if the log is already open.
    pub fn open(
        dir: &Path,
        opts: WalOptions,
        mut visit: impl FnMut(WalRecord) -> Result<(), WalError>,
    ) -> Result<Wal, WalError> {
        ensure_dir(dir)?;
        let lock = lock_dir(dir)?;
        let (mut segments, state) = replay(dir, &mut visit)?;
        let active = match segments.last() {
            Some(segment) => open_for_write(&segment.path)?,
            None => {
                let (segment, file) = create_segment(dir, FIRST_SEQ, 1, &[])?;
                segments.push(segment);
                file
            }
        };
        let allocated = segments.last().map_or(0, |segment| segment.size);
        let wal = Wal {
            dir: dir.to_path_buf(),
            opts,
            segments,
            active,
            allocated,
            _lock: lock,
            pending: Vec::new(),
            pending_indexes: None,
            state,
            failed: None,
        };
        tracing::info!(
            dir = %wal.dir.display(),
            segments = wal.segment_count(),
            bytes = wal.size_bytes(),
            last_index = wal.last_index(),
            "opened write-ahead log"
        );
        Ok(wal)
    }

    /// Encodes the record into an in-memory buffer (no syscall). Cheap; reuse the buffer.
    ///
    /// Nothing is durable until [`Wal::sync`] returns Ok. After a failed sync
    /// the record is dropped and every later sync returns [`WalError::Failed`].
    ///
    /// # Panics
    /// If the encoded record exceeds 64 MiB (Entry data over 64 MiB minus 17
    /// bytes): replay would reject it as corruption.
    pub fn append(&mut self, record: &WalRecord) {
        if self.failed.is_some() {
            return;
        }
        record.encode_into(&mut self.pending);
        if let Some(index) = self.state.observe(record) {
            self.pending_indexes = Some(match self.pending_indexes {
                None => (index, index),
                Some((min, max)) => (min.min(index), max.max(index)),
            });
        }
    }

    /// Writes everything appended since the last sync with one write, then one
    /// fdatasync. After Ok the records survive kill -9 and power loss. A segment
    /// that has reached `segment_size` is then closed and a new one started,
    /// holding copies of the latest HardState and Snapshot.
    ///
    /// Any error leaves the log refusing further writes until reopened. An
    /// error from rolling comes after the records were synced, so like any
    /// failed write it means "maybe durable", never "certainly lost".
    pub fn sync(&mut self) -> Result<(), WalError> {
        self.check_usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self.write_pending().and_then(|()| {
            if self.active_segment().size >= self.opts.segment_size {
                self.roll()
            } else {
                Ok(())
            }
        });
        if let Err(err) = &result {
            self.fail(err);
        }
        result
    }

    /// Removes whole segments, oldest first, all of whose Entry records have
    /// index <= `index` (a prefix of segments only). The active segment is
    /// first closed and a new one started when `index` covers it too and it
    /// holds at least [`ROLL_ON_RELEASE`] bytes (or a full segment, if that is
    /// smaller), so a store whose state is durable keeps little log.
    /// Directory fsynced after each removal.
    pub fn release_to(&mut self, index: u64) -> Result<(), WalError> {
        self.check_usable()?;
        let active = &self.segments[self.segments.len() - 1];
        let worth_a_new_file = active.size >= ROLL_ON_RELEASE.min(self.opts.segment_size);
        if self.pending.is_empty()
            && active.max_index.is_some()
            && active.covered_by(index)
            && worth_a_new_file
        {
            if let Err(err) = self.roll() {
                self.fail(&err);
                return Err(err);
            }
        }
        let inactive = self.segments.len() - 1;
        let releasable = self.segments[..inactive]
            .iter()
            .take_while(|segment| segment.covered_by(index))
            .count();
        for _ in 0..releasable {
            let oldest = &self.segments[0];
            fs::remove_file(&oldest.path)
                .map_err(|e| WalError::io("remove released segment", &oldest.path, e))?;
            let removed = self.segments.remove(0);
            // One directory sync per file: a crash then leaves a suffix of the
            // log, never a gap that open would have to refuse.
            if let Err(err) = segment::sync_dir(&self.dir) {
                self.fail(&err);
                return Err(err);
            }
            tracing::info!(
                path = %removed.path.display(),
                min_index = ?removed.min_index,
                max_index = ?removed.max_index,
                released_to = index,
                "released write-ahead log segment"
            );
        }
        Ok(())
    }

    /// Highest Entry index appended (0 if none).
    pub fn last_index(&self) -> u64 {
        self.state.last_index
    }

    /// Bytes on disk across all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|segment| segment.size).sum()
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn active_segment(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a write-ahead log always has an active segment")
    }

    fn check_usable(&self) -> Result<(), WalError> {
        match &self.failed {
            Some((cause, no_space)) => Err(WalError::Failed {
                dir: self.dir.clone(),
                cause: cause.clone(),
                no_space: *no_space,
            }),
            None => Ok(()),
        }
    }

    fn fail(&mut self, err: &WalError) {
        tracing::error!(
            dir = %self.dir.display(),
            error = %err,
            "write-ahead log stopped accepting writes"
        );
        self.failed = Some((err.to_string(), err.is_no_space()));
        self.pending = Vec::new();
        self.pending_indexes = None;
    }

    /// Writes the pending records after the last one, zero-fills ahead if
    /// they reached the end of the file, and syncs both at once.
    fn write_pending(&mut self) -> Result<(), WalError> {
        let Wal {
            active,
            allocated,
            segments,
            pending,
            opts,
            ..
        } = self;
        let segment = segments
            .last_mut()
            .expect("a write-ahead log always has an active segment");
        let end = segment.size + pending.len() as u64;
        active
            .write_all_at(pending, segment.size)
            .map_err(|e| WalError::io("write segment", &segment.path, e))?;
        crate::crash_point!("wal::lose_unsynced", |mode| power_cut::Unsynced {
            file: active,
            path: &segment.path,
            records: segment.size,
            synced_len: *allocated,
            written_end: end,
        }
        .lose(mode.as_deref()));
        if end > *allocated {
            let filled = (end + PREALLOCATE).min(opts.segment_size).max(end);
            write_zeros(active, end, filled)
                .map_err(|e| WalError::io("zero-fill segment", &segment.path, e))?;
            *allocated = filled;
        }
        crate::crash_point!("wal::before_fsync");
        let syncing = std::time::Instant::now();
        active
            .sync_data()
            .map_err(|e| WalError::io("fdatasync segment", &segment.path, e))?;
        crate::crash_point!("wal::after_fsync");
        crate::metrics::observe_wal_fsync(syncing.elapsed());
        segment.size = end;
        if let Some((min, max)) = self.pending_indexes.take() {
            segment.note_entry(min);
            segment.note_entry(max);
        }
        pending.clear();
        pending.shrink_to(PENDING_RETAIN);
        Ok(())
    }

    fn roll(&mut self) -> Result<(), WalError> {
        // Only the newest segment may end in zeros (see the module docs).
        let size = self.active_segment().size;
        if self.allocated > size {
            let path = &self.segments[self.segments.len() - 1].path;
            self.active
                .set_len(size)
                .and_then(|()| self.active.sync_all())
                .map_err(|e| WalError::io("cut a segment back to its records", path, e))?;
        }
        let mut carried = Vec::new();
        for record in [&self.state.hard_state, &self.state.snapshot]
            .into_iter()
            .flatten()
        {
            record.encode_into(&mut carried);
        }
        let seq = self.active_segment().seq + 1;
        let first_index = self.state.last_index.saturating_add(1);
        let (segment, file) = create_segment(&self.dir, seq, first_index, &carried)?;
        tracing::info!(
            path = %segment.path.display(),
            previous_bytes = self.active_segment().size,
            "rolled write-ahead log to a new segment"
        );
        self.allocated = segment.size;
        self.segments.push(segment);
        self.active = file;
        Ok(())
    }
}

impl Drop for Wal {
    /// Leaves the active segment ending at its last record, as a tidy
    /// directory for whoever looks; if this fails, the next open does it.
    fn drop(&mut self) {
        let size = self.active_segment().size;
        if self.allocated > size {
            let _ = self.active.set_len(size);
        }
    }
}

/// Writes zeros over `[from, to)` of `file`.
fn write_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("segments", &self.segments.len())
            .field("last_index", &self.state.last_index)
            .field("pending_bytes", &self.pending.len())
            .field("failed", &self.failed)
            .finish()
    }
}

/// Reads every segment of `dir` in order, feeding records to `visit`, and
/// cuts a torn tail off the newest one.
fn replay(
    dir: &Path,
    visit: &mut impl FnMut(WalRecord) -> Result<(), WalError>,
) -> Result<(Vec<Segment>, LogState), WalError> {
    let listed = segment::list(dir)?;
    let newest = listed.len().saturating_sub(1);
    let mut state = LogState::default();
    let mut segments = Vec::with_capacity(listed.len() + 1);
    for (position, (seq, path)) in listed.into_iter().enumerate() {
        let mut segment = Segment::new(seq, path.clone(), 0);
        let scan = segment::scan(&path, |record| {
            state
                .check_replayed(&record)
                .map_err(|(expected, found)| WalError::EntryGap {
                    path: path.clone(),
                    expected,
                    found,
                })?;
            if let Some(index) = state.observe(&record) {
                segment.note_entry(index);
            }
            visit(record)
        })?;
        if scan.valid_len < scan.file_len {
            // Older segments were fully synced and cut back to their records
            // before the next one was created, so no crash can tear them or
            // leave them zeros: this is real damage.
            if position != newest {
                return Err(WalError::Corrupt {
                    path,
                    offset: scan.valid_len,
                    reason: scan
                        .torn
                        .clone()
                        .unwrap_or(Corruption::AbsurdLength { len: 0 }),
                });
            }
            cut_tail(&path, &scan)?;
        }
        segment.size = scan.valid_len;
        segments.push(segment);
    }
    Ok((segments, state))
}

/// Creates `dir` if needed; a new directory is synced into its parent so the
/// log cannot vanish with a crash right after its first acknowledged write.
fn ensure_dir(dir: &Path) -> Result<(), WalError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| WalError::io("create directory", dir, e))?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => segment::sync_dir(parent),
        _ => segment::sync_dir(Path::new(".")),
    }
}

/// Two writers appending to one log would interleave records and corrupt it.
fn lock_dir(dir: &Path) -> Result<File, WalError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| WalError::io("create lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(WalError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(WalError::io("lock", &path, e)),
    }
}

/// Cuts the newest segment back to its last good record: a torn tail (with
/// a warning) or the zeros written ahead of the records. Appends then start
/// there, with nothing of an older write left after them.
fn cut_tail(path: &Path, scan: &Scan) -> Result<(), WalError> {
    match &scan.torn {
        Some(reason) => tracing::warn!(
            path = %path.display(),
            offset = scan.valid_len,
            bytes_dropped = scan.file_len - scan.valid_len,
            reason = %reason,
            "truncating torn tail of the newest write-ahead log segment"
        ),
        None => tracing::debug!(
            path = %path.display(),
            offset = scan.valid_len,
            "dropping the zero-filled space after the last record"
        ),
    }
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| {
            file.set_len(scan.valid_len)?;
            file.sync_all()
        })
        .map_err(|e| WalError::io("truncate torn tail of segment", path, e))
}

fn open_for_write(path: &Path) -> Result<File, WalError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open segment for writing", path, e))
}

/// Creates segment `seq` holding `initial`, durable (data and directory entry)
/// before it is used.
fn create_segment(
    dir: &Path,
    seq: u64,
    first_index: u64,
    initial: &[u8],
) -> Result<(Segment, File), WalError> {
    let path = dir.join(segment::file_name(seq, first_index));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| WalError::io("create segment", &path, e))?;
    file.write_all(initial)
        .and_then(|()| file.sync_data())
        .map_err(|e| WalError::io("write new segment", &path, e))?;
    segment::sync_dir(dir)?;
    Ok((Segment::new(seq, path, initial.len() as u64), file))
}
