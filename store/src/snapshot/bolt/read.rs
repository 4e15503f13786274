//! Reads every top-level bucket of a bbolt database file, checking each
//! bound on the way: a damaged or foreign file is an error, never a panic.

use std::collections::HashSet;

use super::*;

/// Branch levels followed at most (bbolt trees are a handful deep).
const MAX_DEPTH: usize = 64;

fn bad(why: impl Into<String>) -> BoltError {
    BoltError(why.into())
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, BoltError> {
    bytes
        .get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| bad(format!("cut short at byte {at}")))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, BoltError> {
    let b = bytes
        .get(at..at + 4)
        .ok_or_else(|| bad(format!("cut short at byte {at}")))?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, BoltError> {
    let b = bytes
        .get(at..at + 8)
        .ok_or_else(|| bad(format!("cut short at byte {at}")))?;
    let mut out = [0u8; 8];
    out.copy_from_slice(b);
    Ok(u64::from_le_bytes(out))
}

/// A valid meta page's root pgid, high-water mark and txid.
struct Meta {
    page_size: usize,
    root: u64,
    high_water: u64,
    txid: u64,
}

fn meta_at(file: &[u8], at: usize) -> Result<Meta, BoltError> {
    let body = at + PAGE_HEADER;
    if u16_at(file, at + 8)? != META_PAGE {
        return Err(bad("no meta page where one belongs"));
    }
    if u32_at(file, body)? != MAGIC {
        return Err(bad("bad magic number"));
    }
    if u32_at(file, body + 4)? != VERSION {
        return Err(bad("unknown bbolt format version"));
    }
    let summed = file
        .get(body..body + META_SUMMED)
        .ok_or_else(|| bad("meta page cut short"))?;
    if fnv1a_64(summed) != u64_at(file, body + META_SUMMED)? {
        return Err(bad("meta page checksum mismatch"));
    }
    let page_size = u32_at(file, body + 8)? as usize;
    if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(bad(format!("implausible page size {page_size}")));
    }
    Ok(Meta {
        page_size,
        root: u64_at(file, body + 16)?,
        high_water: u64_at(file, body + 40)?,
        txid: u64_at(file, body + 48)?,
    })
}

/// The buckets of the database in `file`, as of its newest valid meta page.
pub fn read(file: &[u8]) -> Result<Buckets, BoltError> {
    let first = meta_at(file, 0);
    let second = match &first {
        Ok(meta) => meta_at(file, meta.page_size),
        // The page size lives in the damaged page: try the usual ones.
        Err(_) => [4096, 8192, 16384, 65536]
            .into_iter()
            .map(|size| meta_at(file, size))
            .find(Result::is_ok)
            .unwrap_or_else(|| Err(bad("no valid meta page"))),
    };
    let meta = match (first, second) {
        (Ok(a), Ok(b)) => {
            if a.txid >= b.txid {
                a
            } else {
                b
            }
        }
        (Ok(m), Err(_)) | (Err(_), Ok(m)) => m,
        (Err(e), Err(_)) => return Err(e),
    };
    let reader = Reader {
        file,
        page_size: meta.page_size,
        high_water: meta.high_water,
    };
    let mut seen = HashSet::new();
    let mut buckets = Buckets::new();
    let mut elements = Vec::new();
    reader.collect(meta.root, 0, &mut seen, &mut elements)?;
    for (flags, name, value) in elements {
        if flags & BUCKET_LEAF == 0 {
            return Err(bad(format!(
                "top-level key {:?} is not a bucket",
                String::from_utf8_lossy(name)
            )));
        }
        let bucket = reader.bucket(name, value, &mut seen)?;
        buckets.insert(name.to_vec(), bucket);
    }
    Ok(buckets)
}

type Element<'a> = (u32, &'a [u8], &'a [u8]);

struct Reader<'a> {
    file: &'a [u8],
    page_size: usize,
    high_water: u64,
}

impl<'a> Reader<'a> {
    /// Page `id` with its overflow pages.
    fn page(&self, id: u64) -> Result<&'a [u8], BoltError> {
        if id < 2 || id >= self.high_water {
            return Err(bad(format!("page {id} is outside the database")));
        }
        let start = usize::try_from(id)
            .ok()
            .and_then(|id| id.checked_mul(self.page_size))
            .ok_or_else(|| bad(format!("page {id} is outside the file")))?;
        let overflow = u32_at(self.file, start + 12)? as usize;
        let end = overflow
            .checked_add(1)
            .and_then(|pages| pages.checked_mul(self.page_size))
            .and_then(|len| len.checked_add(start))
            .filter(|&end| end <= self.file.len())
            .ok_or_else(|| bad(format!("page {id} runs past the end of the file")))?;
        if u64_at(self.file, start)? != id {
            return Err(bad(format!("page {id} names itself otherwise")));
        }
        Ok(&self.file[start..end])
    }

    /// Every leaf element of the tree under page `id`, in order.
    fn collect(
        &self,
        id: u64,
        depth: usize,
        seen: &mut HashSet<u64>,
        out: &mut Vec<Element<'a>>,
    ) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(bad("tree deeper than any bbolt writes"));
        }
        if !seen.insert(id) {
            return Err(bad(format!("page {id} is referenced twice")));
        }
        let page = self.page(id)?;
        match u16_at(page, 8)? {
            LEAF_PAGE => out.extend(leaf_elements(page)?),
            BRANCH_PAGE => {
                let count = u16_at(page, 10)? as usize;
                for i in 0..count {
                    let child = u64_at(page, PAGE_HEADER + ELEMENT * i + 8)?;
                    self.collect(child, depth + 1, seen, out)?;
                }
            }
            other => return Err(bad(format!("page {id} has unexpected type {other:#x}"))),
        }
        Ok(())
    }

    fn bucket(
        &self,
        name: &[u8],
        value: &'a [u8],
        seen: &mut HashSet<u64>,
    ) -> Result<Bucket, BoltError> {
        let root = u64_at(value, 0)?;
        let sequence = u64_at(value, 8)?;
        let mut elements = Vec::new();
        if root == 0 {
            let inline = &value[BUCKET_HEADER..];
            if u16_at(inline, 8)? != LEAF_PAGE {
                return Err(bad("an inline bucket is not a leaf"));
            }
            elements = leaf_elements(inline)?;
        } else {
            self.collect(root, 0, seen, &mut elements)?;
        }
        let mut entries = Vec::with_capacity(elements.len());
        for (flags, key, value) in elements {
            if flags & BUCKET_LEAF != 0 {
                return Err(bad(format!(
                    "bucket {:?} holds a nested bucket, which etcd never writes",
                    String::from_utf8_lossy(name)
                )));
            }
            entries.push((key.to_vec(), value.to_vec()));
        }
        Ok(Bucket { sequence, entries })
    }
}

fn leaf_elements(page: &[u8]) -> Result<Vec<Element<'_>>, BoltError> {
    let count = u16_at(page, 10)? as usize;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = PAGE_HEADER + ELEMENT * i;
        let flags = u32_at(page, at)?;
        let pos = u32_at(page, at + 4)? as usize;
        let key_len = u32_at(page, at + 8)? as usize;
        let value_len = u32_at(page, at + 12)? as usize;
        let key_at = at + pos;
        let value_at = key_at + key_len;
        let key = page
            .get(key_at..value_at)
            .ok_or_else(|| bad("a leaf key runs past its page"))?;
        let value = page
            .get(value_at..value_at + value_len)
            .ok_or_else(|| bad("a leaf value runs past its page"))?;
        out.push((flags, key, value));
    }
    Ok(out)
}
