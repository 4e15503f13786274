//! Behaviour of the whole log across reopen, torn writes, rolling and release.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::record::HEADER_LEN;
use super::*;

/// Large enough that a test never rolls unless it means to.
const NO_ROLL: u64 = 1 << 40;

fn open(dir: &Path, segment_size: u64) -> (Wal, Vec<WalRecord>) {
    let mut replayed = Vec::new();
    let wal = Wal::open(dir, WalOptions { segment_size }, |record| {
        replayed.push(record);
        Ok(())
    })
    .expect("open write-ahead log");
    (wal, replayed)
}

fn open_err(dir: &Path, segment_size: u64) -> WalError {
    Wal::open(dir, WalOptions { segment_size }, |_| Ok(())).expect_err("open must fail")
}

fn entry(index: u64, data: &[u8]) -> WalRecord {
    WalRecord::Entry {
        index,
        term: 1,
        data: data.to_vec(),
    }
}

fn encoded_len(records: &[WalRecord]) -> u64 {
    let mut buf = Vec::new();
    for record in records {
        record.encode_into(&mut buf);
    }
    buf.len() as u64
}

fn entry_indexes(records: &[WalRecord]) -> Vec<u64> {
    records
        .iter()
        .filter_map(|record| match record {
            WalRecord::Entry { index, .. } => Some(*index),
            _ => None,
        })
        .collect()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wal"))
        .collect();
    paths.sort();
    paths
}

fn bytes_on_disk(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .map(|path| fs::metadata(path).unwrap().len())
        .sum()
}

fn records_in(path: &Path) -> Vec<WalRecord> {
    let mut records = Vec::new();
    segment::scan(path, |record| {
        records.push(record);
        Ok(())
    })
    .unwrap();
    records
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

fn chop(path: &Path, bytes: u64) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - bytes).unwrap();
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(bytes).unwrap();
}

/// Syncs each entry on its own, as a slow trickle of writes would.
fn write_entries(wal: &mut Wal, indexes: impl IntoIterator<Item = u64>) {
    for index in indexes {
        wal.append(&entry(index, &[index as u8; 100]));
        wal.sync().unwrap();
    }
}

#[test]
fn every_record_kind_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let large: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let written = vec![
        entry(1, b"put /registry/pods/default/web-0"),
        WalRecord::Entry {
            index: 2,
            term: 7,
            data: large,
        },
        entry(3, b""),
        WalRecord::HardState {
            term: 7,
            vote: 2,
            commit: 3,
        },
        WalRecord::Snapshot { index: 3, term: 7 },
        entry(4, b"after the snapshot"),
    ];
    {
        let (mut wal, replayed) = open(dir.path(), NO_ROLL);
        assert!(replayed.is_empty());
        for record in &written[..3] {
            wal.append(record);
        }
        wal.sync().unwrap();
        for record in &written[3..] {
            wal.append(record);
        }
        wal.sync().unwrap();
        assert_eq!(wal.last_index(), 4);
    }

    let (wal, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(replayed, written);
    assert_eq!(wal.last_index(), 4);
    assert_eq!(wal.segment_count(), 1);
    assert_eq!(wal.size_bytes(), encoded_len(&written));
    assert_eq!(wal.size_bytes(), bytes_on_disk(dir.path()));
}

#[test]
fn unsynced_appends_are_not_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        wal.append(&entry(1, b"durable"));
        wal.sync().unwrap();
        wal.append(&entry(2, b"never synced"));
    }
    let (_, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(replayed, [entry(1, b"durable")]);
}

/// Three records, the last one long enough to cut in several places.
fn write_three(dir: &Path) -> (Vec<WalRecord>, PathBuf) {
    let records = vec![entry(1, b"one"), entry(2, b"two"), entry(3, &[3; 100])];
    let (mut wal, _) = open(dir, NO_ROLL);
    for record in &records {
        wal.append(record);
    }
    wal.sync().unwrap();
    let path = segment_files(dir).pop().unwrap();
    (records, path)
}

/// Reopens after damage: `survivors` replay, the file is cut back to them, and
/// a new append is durable across one more reopen.
fn assert_recovers(dir: &Path, path: &Path, survivors: &[WalRecord]) {
    let next = entry_indexes(survivors).into_iter().max().unwrap_or(0) + 1;
    {
        let (mut wal, replayed) = open(dir, NO_ROLL);
        assert_eq!(replayed, survivors);
        assert_eq!(fs::metadata(path).unwrap().len(), encoded_len(survivors));
        assert_eq!(wal.size_bytes(), encoded_len(survivors));
        wal.append(&entry(next, b"after recovery"));
        wal.sync().unwrap();
    }
    let (wal, replayed) = open(dir, NO_ROLL);
    let mut expected = survivors.to_vec();
    expected.push(entry(next, b"after recovery"));
    assert_eq!(replayed, expected);
    assert_eq!(wal.last_index(), next);
}

#[test]
fn torn_tail_cut_mid_record_is_truncated() {
    let last_len = encoded_len(&[entry(3, &[3; 100])]);
    // Leaves: all but one byte, exactly the header, part of the header, one byte.
    for cut in [1, last_len - HEADER_LEN as u64, last_len - 3, last_len - 1] {
        let dir = tempfile::tempdir().unwrap();
        let (records, path) = write_three(dir.path());
        chop(&path, cut);
        assert_recovers(dir.path(), &path, &records[..2]);
    }
}

#[test]
fn garbage_after_the_last_record_is_truncated() {
    let mut bad_crc = Vec::new();
    bad_crc.extend_from_slice(&10u32.to_le_bytes());
    bad_crc.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    bad_crc.extend_from_slice(&[1; 10]);
    let garbage: [&[u8]; 3] = [&[0xab; 13], &[0; 4096], &bad_crc];
    for bytes in garbage {
        let dir = tempfile::tempdir().unwrap();
        let (records, path) = write_three(dir.path());
        append_bytes(&path, bytes);
        assert_recovers(dir.path(), &path, &records);
    }
}

#[test]
fn flipped_byte_in_the_last_record_drops_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let (records, path) = write_three(dir.path());
    let len = fs::metadata(&path).unwrap().len();
    flip_byte(&path, len - 10);
    assert_recovers(dir.path(), &path, &records[..2]);
}

#[test]
fn checksummed_record_of_unknown_type_is_an_error_even_at_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (_, path) = write_three(dir.path());
    let body = [42u8, 0, 0];
    let mut record = Vec::new();
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    record.extend_from_slice(&body);
    append_bytes(&path, &record);
    let len = fs::metadata(&path).unwrap().len();

    let err = open_err(dir.path(), NO_ROLL);
    assert!(
        matches!(
            &err,
            WalError::Corrupt {
                reason: Corruption::UnknownType { record_type: 42 },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), len, "must not truncate");
}

/// 125-byte entries in 300-byte segments: a few entries per segment.
fn write_rolled_log(dir: &Path) -> Vec<PathBuf> {
    let (mut wal, _) = open(dir, 300);
    write_entries(&mut wal, 1..=12);
    let files = segment_files(dir);
    assert!(files.len() >= 4, "expected several segments, got {files:?}");
    files
}

#[test]
fn corruption_in_an_older_segment_is_an_error() {
    for damage in ["flip", "chop"] {
        let dir = tempfile::tempdir().unwrap();
        let files = write_rolled_log(dir.path());
        let len = fs::metadata(&files[1]).unwrap().len();
        let last_record = len - encoded_len(&[entry(0, &[0; 100])]);
        match damage {
            "flip" => flip_byte(&files[1], len - 1),
            _ => chop(&files[1], 1),
        }

        let err = open_err(dir.path(), 300);
        match &err {
            WalError::Corrupt { path, offset, .. } => {
                assert_eq!(path, &files[1]);
                assert_eq!(*offset, last_record);
            }
            other => panic!("expected corruption, got {other}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(&files[1].display().to_string()),
            "{message}"
        );
        assert!(
            message.contains(&format!("offset {last_record}")),
            "{message}"
        );
        assert_eq!(segment_files(dir.path()), files, "nothing may be removed");
    }
}

/// Entries replay one after another, over a suffix (a new leader's), or
/// after a snapshot's index; a record missing between two is an error.
#[test]
fn an_entry_missing_from_the_middle_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), NO_ROLL);
    write_entries(&mut wal, [1, 2, 3, 2, 3, 4]);
    wal.append(&WalRecord::Snapshot { index: 10, term: 1 });
    write_entries(&mut wal, [11, 12]);
    drop(wal);
    let (_, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(entry_indexes(&replayed), [1, 2, 3, 2, 3, 4, 11, 12]);

    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), NO_ROLL);
    write_entries(&mut wal, [1, 2, 4]);
    drop(wal);
    let err = open_err(dir.path(), NO_ROLL);
    assert!(
        matches!(
            err,
            WalError::EntryGap {
                expected: 3,
                found: 4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_missing_middle_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_rolled_log(dir.path());
    fs::remove_file(&files[1]).unwrap();
    let err = open_err(dir.path(), 300);
    assert!(matches!(err, WalError::SegmentGap { .. }), "{err}");
}

#[test]
fn rolling_spreads_records_over_segments_and_replays_them_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (count, size) = {
        let (mut wal, _) = open(dir.path(), 300);
        write_entries(&mut wal, 1..=12);
        (wal.segment_count(), wal.size_bytes())
    };
    let (wal, replayed) = open(dir.path(), 300);
    assert_eq!(entry_indexes(&replayed), (1..=12).collect::<Vec<_>>());
    assert!(count >= 4, "{count} segments");
    assert_eq!(wal.segment_count(), count);
    assert_eq!(wal.segment_count(), segment_files(dir.path()).len());
    assert_eq!(wal.size_bytes(), size);
    assert_eq!(wal.size_bytes(), bytes_on_disk(dir.path()));
    assert_eq!(wal.last_index(), 12);
}

#[test]
fn sync_with_nothing_appended_neither_writes_nor_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), 1);
    wal.append(&WalRecord::HardState {
        term: 1,
        vote: 1,
        commit: 0,
    });
    wal.sync().unwrap();
    assert_eq!(wal.segment_count(), 2, "a full segment rolls after sync");
    let size = wal.size_bytes();
    wal.sync().unwrap();
    wal.sync().unwrap();
    assert_eq!(wal.segment_count(), 2);
    assert_eq!(wal.size_bytes(), size);
}

#[test]
fn release_removes_only_fully_covered_prefix_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), 300);
    write_entries(&mut wal, 1..=12);
    let before = wal.segment_count();

    wal.release_to(0).unwrap();
    assert_eq!(
        wal.segment_count(),
        before,
        "no segment is covered by index 0"
    );

    wal.release_to(6).unwrap();
    let files = segment_files(dir.path());
    assert!(files.len() < before, "some prefix must be released");
    assert_eq!(wal.segment_count(), files.len());
    let oldest = entry_indexes(&records_in(&files[0]));
    assert!(
        oldest.iter().any(|index| *index > 6),
        "the oldest kept segment {oldest:?} was fully covered and should have gone"
    );
    drop(wal);

    let (wal, replayed) = open(dir.path(), 300);
    let kept = entry_indexes(&replayed);
    assert!(kept.ends_with(&(7..=12).collect::<Vec<_>>()), "{kept:?}");
    assert!(
        kept[0] <= 7,
        "entry 7 was not covered but is gone: {kept:?}"
    );
    assert_eq!(wal.size_bytes(), bytes_on_disk(dir.path()));
}

#[test]
fn release_never_removes_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        write_entries(&mut wal, 1..=3);
        wal.release_to(u64::MAX).unwrap();
        assert_eq!(wal.segment_count(), 1);
    }
    let (_, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(entry_indexes(&replayed), [1, 2, 3]);
}

#[test]
fn latest_hard_state_and_snapshot_survive_release() {
    let dir = tempfile::tempdir().unwrap();
    let hard_state = WalRecord::HardState {
        term: 2,
        vote: 3,
        commit: 8,
    };
    let snapshot = WalRecord::Snapshot { index: 8, term: 2 };
    {
        let (mut wal, _) = open(dir.path(), 300);
        wal.append(&WalRecord::HardState {
            term: 1,
            vote: 1,
            commit: 0,
        });
        wal.append(&WalRecord::Snapshot { index: 0, term: 1 });
        write_entries(&mut wal, 1..=8);
        wal.append(&hard_state);
        wal.append(&snapshot);
        write_entries(&mut wal, 9..=14);
        let last = segment_files(dir.path()).pop().unwrap();

        wal.release_to(u64::MAX).unwrap();
        assert_eq!(wal.segment_count(), 1);
        assert_eq!(
            segment_files(dir.path()),
            [last],
            "the active segment stays"
        );
    }
    let (wal, replayed) = open(dir.path(), 300);
    let latest = |kind: fn(&WalRecord) -> bool| replayed.iter().rfind(|r| kind(r)).cloned();
    assert_eq!(
        latest(|r| matches!(r, WalRecord::HardState { .. })),
        Some(hard_state)
    );
    assert_eq!(
        latest(|r| matches!(r, WalRecord::Snapshot { .. })),
        Some(snapshot)
    );
    assert_eq!(wal.segment_count(), 1);
    assert_eq!(wal.size_bytes(), bytes_on_disk(dir.path()));
}

#[test]
fn indexes_need_not_be_monotonic() {
    // Raft rewrites a suffix by appending a lower index again; last_index
    // stays the highest seen.
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        for index in [1, 2, 3, 2] {
            wal.append(&entry(index, b"x"));
        }
        wal.sync().unwrap();
        assert_eq!(wal.last_index(), 3);
    }
    let (wal, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(entry_indexes(&replayed), [1, 2, 3, 2]);
    assert_eq!(wal.last_index(), 3);
}

#[test]
fn a_failed_write_stops_all_further_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        write_entries(&mut wal, 1..=2);
        // A read-only handle makes the next write fail like a dying disk would.
        let path = segment_files(dir.path()).pop().unwrap();
        wal.active = File::open(&path).unwrap();
        wal.append(&entry(3, b"lost"));
        let err = wal.sync().unwrap_err();
        assert!(
            matches!(
                err,
                WalError::Io {
                    op: "write segment",
                    ..
                }
            ),
            "{err}"
        );

        wal.append(&entry(4, b"refused"));
        let err = wal.sync().unwrap_err();
        assert!(matches!(err, WalError::Failed { .. }), "{err}");
        assert!(err.to_string().contains("write segment"), "{err}");
        let err = wal.release_to(u64::MAX).unwrap_err();
        assert!(matches!(err, WalError::Failed { .. }), "{err}");
    }
    let (mut wal, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(entry_indexes(&replayed), [1, 2]);
    wal.append(&entry(3, b"retried after restart"));
    wal.sync().unwrap();
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path(), NO_ROLL);
    let err = open_err(dir.path(), NO_ROLL);
    assert!(matches!(err, WalError::Locked { .. }), "{err}");
    drop(wal);
    open(dir.path(), NO_ROLL);
}

#[test]
fn open_creates_missing_directories_and_a_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("member").join("wal");
    let (wal, replayed) = open(&wal_dir, NO_ROLL);
    assert!(replayed.is_empty());
    assert_eq!(wal.segment_count(), 1);
    assert_eq!(wal.size_bytes(), 0);
    assert_eq!(wal.last_index(), 0);
    assert_eq!(segment_files(&wal_dir).len(), 1);
}

#[test]
fn a_visitor_error_aborts_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        write_entries(&mut wal, 1..=3);
    }
    let mut seen = 0;
    let err = Wal::open(dir.path(), WalOptions::default(), |_| {
        seen += 1;
        Err(WalError::Replay("state machine refused entry".into()))
    })
    .unwrap_err();
    assert!(matches!(err, WalError::Replay(_)), "{err}");
    assert_eq!(seen, 1);
}

#[test]
fn release_covering_a_large_active_segment_starts_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![7u8; 600 * 1024];
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        wal.append(&entry(1, &big));
        wal.append(&entry(2, &big));
        wal.sync().unwrap();
        let before = segment_files(dir.path());
        wal.release_to(1).unwrap();
        assert_eq!(segment_files(dir.path()), before, "entry 2 is not covered");
        wal.release_to(2).unwrap();
        let after = segment_files(dir.path());
        assert_eq!(after.len(), 1);
        assert_ne!(after, before, "the covered segment is gone");
        assert!(wal.size_bytes() < 1024);
        wal.append(&entry(3, b"after"));
        wal.sync().unwrap();
    }
    let (_, replayed) = open(dir.path(), NO_ROLL);
    assert_eq!(entry_indexes(&replayed), [3]);
}

#[test]
fn the_active_segment_is_zero_filled_ahead_and_open_cuts_the_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let records = [entry(1, b"one"), entry(2, b"two")];
    {
        let (mut wal, _) = open(dir.path(), NO_ROLL);
        wal.append(&records[0]);
        wal.sync().unwrap();
        let path = segment_files(dir.path()).pop().unwrap();
        let bytes = fs::read(&path).unwrap();
        let used = encoded_len(&records[..1]) as usize;
        assert_eq!(bytes.len(), used + PREALLOCATE as usize);
        assert!(bytes[used..].iter().all(|&b| b == 0));
        assert_eq!(wal.size_bytes(), used as u64);
        // A write inside the filled space does not grow the file.
        wal.append(&records[1]);
        wal.sync().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), bytes.len() as u64);
        // A crash: the zeros stay behind (a clean close cuts them).
        let at_crash = fs::read(&path).unwrap();
        drop(wal);
        fs::write(&path, at_crash).unwrap();
    }
    let path = segment_files(dir.path()).pop().unwrap();
    assert_recovers(dir.path(), &path, &records);
}

#[test]
fn a_closed_log_ends_at_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let (_, path) = write_three(dir.path());
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        encoded_len(&records_in(&path))
    );
}

#[test]
fn stale_bytes_after_the_zeros_are_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (records, path) = write_three(dir.path());
    let mut tail = vec![0u8; 4096];
    entry(4, b"stale, never acknowledged").encode_into(&mut tail);
    append_bytes(&path, &tail);
    assert_recovers(dir.path(), &path, &records);
}

#[test]
fn only_the_active_segment_is_zero_filled() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = open(dir.path(), 4096);
    write_entries(&mut wal, 1..=100);
    let files = segment_files(dir.path());
    assert!(files.len() > 2, "{files:?}");
    let (active, closed) = files.split_last().unwrap();
    for path in closed {
        assert_eq!(
            fs::metadata(path).unwrap().len(),
            encoded_len(&records_in(path)),
            "{path:?} ends in zeros"
        );
    }
    assert_eq!(fs::metadata(active).unwrap().len(), 4096);
    drop(wal);
    let (_, replayed) = open(dir.path(), 4096);
    assert_eq!(entry_indexes(&replayed), (1..=100).collect::<Vec<_>>());
}

#[test]
fn zeros_at_the_end_of_an_older_segment_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_rolled_log(dir.path());
    append_bytes(&files[1], &[0; 512]);
    let err = open_err(dir.path(), 300);
    assert!(matches!(err, WalError::Corrupt { .. }), "{err}");
}

/// A log on a file system that fills up: the sync that finds no room
/// fails with ENOSPC and the log refuses every later write (a failed
/// write or fdatasync cannot be retried); once space is freed a reopen
/// finds every record whose sync succeeded, nothing torn left, and takes
/// writes again.
#[test]
fn a_full_file_system_fails_the_log_cleanly_and_a_reopen_keeps_every_synced_record() {
    use crate::node::disk_space::tiny_fs::TinyFs;
    let Some(fs) = TinyFs::mount(
        "a_full_file_system_fails_the_log_cleanly_and_a_reopen_keeps_every_synced_record",
        8,
    ) else {
        return;
    };
    let dir = fs.path().join("wal");
    // Small segments: the log also rolls (and creates files) as it fills.
    let segment_size = 1 << 20;
    let (mut wal, _) = open(&dir, segment_size);
    let data = vec![7u8; 16 << 10];
    let mut synced = 0;
    let failure = loop {
        let index = synced + 1;
        wal.append(&entry(index, &data));
        match wal.sync() {
            Ok(()) => synced = index,
            Err(err) => break err,
        }
        assert!(index < 10_000, "an 8 MiB file system never filled");
    };
    assert!(failure.is_no_space(), "{failure}");
    assert!(
        synced > 100,
        "only {synced} records before the disk was full"
    );
    wal.append(&entry(synced + 1, b"after the failure"));
    let refused = wal.sync().expect_err("a failed log refuses writes");
    assert!(
        matches!(refused, WalError::Failed { no_space: true, .. }),
        "{refused}"
    );
    drop(wal);

    // Opening needs no room: it only cuts the newest segment back.
    let (mut wal, replayed) = open(&dir, segment_size);
    let indexes = entry_indexes(&replayed);
    let expected: Vec<u64> = (1..=synced).collect();
    assert_eq!(
        indexes[..synced as usize],
        expected[..],
        "every synced record is replayed, in order"
    );
    // The batch whose sync failed may or may not have reached the disk;
    // nothing else may be there.
    let last = *indexes.last().unwrap();
    assert!(
        last <= synced + 1,
        "replayed up to {last} of {synced} synced"
    );
    assert!(replayed.iter().all(|record| match record {
        WalRecord::Entry { data: got, .. } => got == &data,
        _ => true,
    }));

    // Space freed (here by releasing the older half of the log): the same
    // log takes writes again.
    assert!(
        segment_files(&dir).len() > 2,
        "the log rolled while filling"
    );
    wal.release_to(synced / 2).unwrap();
    wal.append(&entry(last + 1, b"after space was freed"));
    wal.sync().expect("writes go on once there is room");
    drop(wal);
    let (_, after) = open(&dir, segment_size);
    assert_eq!(entry_indexes(&after).last(), Some(&(last + 1)));
}
