//! bbolt's file format, enough to write a database etcd opens and to read
//! one etcd wrote: two meta pages, a freelist page, and B+tree pages of
//! top-level buckets holding sorted keys. Nested buckets are not written.
//!
//! ```text
//! page      id u64, flags u16, count u16, overflow u32, then the body
//! meta      magic u32, version u32, page size u32, flags u32,
//!           root bucket (root pgid u64, sequence u64), freelist pgid u64,
//!           high-water pgid u64, txid u64, FNV-1a 64 of all that before it
//! branch    count × (pos u32, ksize u32, pgid u64), then the keys
//! leaf      count × (flags u32, pos u32, ksize u32, vsize u32), then
//!           key+value pairs; `pos` counts from the element itself
//! bucket    a leaf value flagged 1: root pgid u64, sequence u64, and when
//!           the root is 0, the bucket's only (leaf) page inline after it
//! ```
//! All integers little-endian, as bbolt writes them on x86-64.

mod read;
mod write;

pub use read::read;
pub use write::write;

/// One top-level bucket: its keys in order (bbolt's byte order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bucket {
    pub sequence: u64,
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A database: its buckets by name.
pub type Buckets = std::collections::BTreeMap<Vec<u8>, Bucket>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a readable bbolt database: {0}")]
pub struct BoltError(pub String);

const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
/// The page size etcd's bbolt uses on Linux (the OS page size).
pub const PAGE_SIZE: usize = 4096;
const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const BUCKET_HEADER: usize = 16;
/// Bytes of the meta body the checksum covers.
const META_SUMMED: usize = 56;

const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
const META_PAGE: u16 = 0x04;
const FREELIST_PAGE: u16 = 0x10;
const BUCKET_LEAF: u32 = 0x01;

fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests;
