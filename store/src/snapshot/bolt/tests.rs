use super::*;

fn bucket(entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Bucket {
    Bucket {
        sequence: 0,
        entries: entries.into_iter().collect(),
    }
}

fn sample() -> Buckets {
    let mut buckets = Buckets::new();
    // Enough keys for several levels of branch pages.
    buckets.insert(
        b"key".to_vec(),
        bucket(
            (0..20_000u64).map(|i| (i.to_be_bytes().to_vec(), format!("value {i}").into_bytes())),
        ),
    );
    // Values bigger than a page take overflow pages.
    buckets.insert(
        b"big".to_vec(),
        bucket((0..5u8).map(|i| (vec![b'a' + i], vec![i; 3 * PAGE_SIZE + 17]))),
    );
    // Small and empty buckets are written inline.
    buckets.insert(
        b"meta".to_vec(),
        bucket([(b"consistent_index".to_vec(), 7u64.to_be_bytes().to_vec())]),
    );
    buckets.insert(b"members_removed".to_vec(), Bucket::default());
    buckets.insert(
        b"seq".to_vec(),
        Bucket {
            sequence: 42,
            entries: vec![(b"x".to_vec(), Vec::new())],
        },
    );
    buckets
}

#[test]
fn what_is_written_reads_back_the_same() {
    let buckets = sample();
    let file = write(&buckets).unwrap();
    assert_eq!(file.len() % PAGE_SIZE, 0);
    assert_eq!(read(&file).unwrap(), buckets);
    assert_eq!(
        read(&write(&Buckets::new()).unwrap()).unwrap(),
        Buckets::new()
    );
}

#[test]
fn the_file_is_laid_out_as_bbolt_lays_it_out() {
    let file = write(&sample()).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    // Meta pages 0 and 1 (txid 0 and 1), the freelist on page 2.
    for (page, txid) in [(0usize, 0u64), (1, 1)] {
        let at = page * PAGE_SIZE;
        assert_eq!(u64_at(at), page as u64);
        assert_eq!(&file[at + 8..at + 10], &META_PAGE.to_le_bytes());
        assert_eq!(&file[at + 16..at + 20], &MAGIC.to_le_bytes());
        assert_eq!(u64_at(at + 16 + 32), 2, "freelist page");
        assert_eq!(
            u64_at(at + 16 + 40) as usize,
            file.len() / PAGE_SIZE,
            "high water"
        );
        assert_eq!(u64_at(at + 16 + 48), txid);
    }
    assert_eq!(
        &file[2 * PAGE_SIZE + 8..2 * PAGE_SIZE + 10],
        &FREELIST_PAGE.to_le_bytes()
    );
    // Every page after them names itself.
    let mut page = 3;
    while page < file.len() / PAGE_SIZE {
        let at = page * PAGE_SIZE;
        assert_eq!(u64_at(at), page as u64);
        let overflow = u32::from_le_bytes(file[at + 12..at + 16].try_into().unwrap());
        page += 1 + overflow as usize;
    }
    assert_eq!(page, file.len() / PAGE_SIZE);
}

#[test]
fn an_older_meta_page_is_used_when_the_newer_is_damaged() {
    let buckets = sample();
    let mut file = write(&buckets).unwrap();
    file[PAGE_SIZE + 16 + 20] ^= 1;
    assert_eq!(read(&file).unwrap(), buckets);
    file[16 + 20] ^= 1;
    assert!(
        read(&file).unwrap_err().0.contains("checksum"),
        "both metas damaged"
    );
}

#[test]
fn damaged_files_are_errors_not_panics() {
    let file = write(&sample()).unwrap();
    assert!(read(b"").is_err());
    assert!(read(&file[..PAGE_SIZE * 2]).is_err(), "cut after the metas");
    assert!(
        read(&file[..file.len() - PAGE_SIZE]).is_err(),
        "last page missing"
    );
    // Flip bytes all over the data pages: each read errors or returns
    // something, never panics.
    for at in (3 * PAGE_SIZE..file.len()).step_by(3001) {
        let mut damaged = file.clone();
        damaged[at] ^= 0xa5;
        let _ = read(&damaged);
        damaged[at] = 0xff;
        let _ = read(&damaged);
    }
    let mut loop_file = file.clone();
    // A root page pointing at itself.
    let root = u64::from_le_bytes(file[16 + 16..16 + 24].try_into().unwrap()) as usize;
    loop_file[root * PAGE_SIZE + 8..root * PAGE_SIZE + 10]
        .copy_from_slice(&BRANCH_PAGE.to_le_bytes());
    loop_file[root * PAGE_SIZE + 16 + 8..root * PAGE_SIZE + 16 + 16]
        .copy_from_slice(&(root as u64).to_le_bytes());
    assert!(read(&loop_file).is_err());
}

#[test]
fn bad_input_to_the_writer_is_refused() {
    let mut unsorted = Buckets::new();
    unsorted.insert(
        b"b".to_vec(),
        bucket([(b"2".to_vec(), vec![]), (b"1".to_vec(), vec![])]),
    );
    assert!(write(&unsorted).unwrap_err().0.contains("out of order"));
    let mut empty_key = Buckets::new();
    empty_key.insert(b"b".to_vec(), bucket([(Vec::new(), vec![])]));
    assert!(write(&empty_key).unwrap_err().0.contains("empty key"));
}
