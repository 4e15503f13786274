//! What a power cut leaves of the log, for the `wal::lose_unsynced`
//! failpoint (failpoints builds only): the active segment as of its last
//! fdatasync. Not a recovery path: the process ends right after.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The active segment around one write that has not been fdatasynced.
pub(super) struct Unsynced<'a> {
    pub file: &'a File,
    pub path: &'a Path,
    /// Bytes of records synced: where this write starts.
    pub records: u64,
    /// The file's length at the last sync (records, then zeros written
    /// ahead of them).
    pub synced_len: u64,
    /// Where this write ends.
    pub written_end: u64,
}

impl Unsynced<'_> {
    /// Undoes the write as a power cut may: with `return(torn)` a random
    /// prefix of it stays (a torn record at the end), otherwise none. Also
    /// drops whatever the state database wrote since its last fsync.
    pub fn lose(&self, mode: Option<&str>) {
        let unsynced = self.written_end - self.records;
        let kept = match mode {
            Some("torn") if unsynced > 0 => rand::random::<u64>() % unsynced,
            _ => 0,
        };
        match self.cut(kept) {
            Ok(()) => eprintln!(
                "skiff: wal::lose_unsynced dropped {} of {unsynced} unsynced bytes of {} at offset {}",
                unsynced - kept,
                self.path.display(),
                self.records
            ),
            Err(err) => eprintln!(
                "skiff: wal::lose_unsynced could not cut {}: {err}",
                self.path.display()
            ),
        }
        crate::failpoints::lose_unsynced_state();
    }

    /// Shortens the file to its synced length if the write grew it, and
    /// zeroes what the write put over space that was synced as zeros.
    fn cut(&self, kept: u64) -> std::io::Result<()> {
        let from = self.records + kept;
        if self.written_end > self.synced_len {
            self.file.set_len(self.synced_len.max(from))?;
        }
        let end = self.written_end.min(self.synced_len);
        if end > from {
            self.file
                .write_all_at(&vec![0; (end - from) as usize], from)?;
        }
        self.file.sync_all()
    }
}
