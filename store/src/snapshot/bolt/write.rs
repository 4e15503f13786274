//! Writes a whole bbolt database at once: every bucket's keys packed into
//! leaf pages in order, branch pages above them, the root bucket's tree
//! above the buckets, an empty freelist and the two meta pages.

use super::*;

/// One element of a leaf page.
struct LeafElement<'a> {
    flags: u32,
    key: &'a [u8],
    value: std::borrow::Cow<'a, [u8]>,
}

impl LeafElement<'_> {
    fn size(&self) -> usize {
        ELEMENT + self.key.len() + self.value.len()
    }
}

/// The database file holding `buckets`. Keys must be non-empty and
/// strictly ascending within a bucket, as bbolt keeps them.
pub fn write(buckets: &Buckets) -> Result<Vec<u8>, BoltError> {
    for (name, bucket) in buckets {
        if name.is_empty() {
            return Err(BoltError("a bucket has an empty name".into()));
        }
        if let Some((key, _)) = bucket.entries.iter().find(|(key, _)| key.is_empty()) {
            return Err(BoltError(format!(
                "bucket {:?} has an empty key after {key:?}",
                String::from_utf8_lossy(name)
            )));
        }
        if bucket.entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(BoltError(format!(
                "bucket {:?} has keys out of order or twice",
                String::from_utf8_lossy(name)
            )));
        }
    }
    let mut file = File {
        bytes: vec![0; 3 * PAGE_SIZE],
    };
    let mut root_elements = Vec::with_capacity(buckets.len());
    for (name, bucket) in buckets {
        let elements: Vec<LeafElement> = bucket
            .entries
            .iter()
            .map(|(key, value)| LeafElement {
                flags: 0,
                key,
                value: value.as_slice().into(),
            })
            .collect();
        let mut value = Vec::with_capacity(BUCKET_HEADER);
        if leaf_size(&elements) <= PAGE_SIZE / 4 {
            // Small buckets live inline in their parent, as bbolt keeps them.
            value.extend_from_slice(&0u64.to_le_bytes());
            value.extend_from_slice(&bucket.sequence.to_le_bytes());
            value.extend_from_slice(&leaf_page(0, &elements));
        } else {
            let root = file.write_tree(elements);
            value.extend_from_slice(&root.to_le_bytes());
            value.extend_from_slice(&bucket.sequence.to_le_bytes());
        }
        root_elements.push(LeafElement {
            flags: BUCKET_LEAF,
            key: name,
            value: value.into(),
        });
    }
    let root = file.write_tree(root_elements);
    let high_water = (file.bytes.len() / PAGE_SIZE) as u64;

    // An empty freelist: every page is in use.
    file.bytes[2 * PAGE_SIZE..2 * PAGE_SIZE + 16].copy_from_slice(&page_header(
        2,
        FREELIST_PAGE,
        0,
        0,
    ));
    for txid in 0..2u64 {
        let at = txid as usize * PAGE_SIZE;
        let page = meta_page(txid, root, 2, high_water);
        file.bytes[at..at + page.len()].copy_from_slice(&page);
    }
    Ok(file.bytes)
}

/// The file being written, a whole number of pages long.
struct File {
    bytes: Vec<u8>,
}

impl File {
    /// Appends `page` (padded to whole pages), numbering it by where it
    /// lands and marking its overflow; returns its page ID.
    fn append(&mut self, mut page: Vec<u8>) -> u64 {
        let id = (self.bytes.len() / PAGE_SIZE) as u64;
        let pages = page.len().div_ceil(PAGE_SIZE).max(1);
        page.resize(pages * PAGE_SIZE, 0);
        page[..8].copy_from_slice(&id.to_le_bytes());
        page[12..16].copy_from_slice(&((pages - 1) as u32).to_le_bytes());
        self.bytes.extend_from_slice(&page);
        id
    }

    /// Writes the B+tree of `elements` (in key order); returns its root.
    fn write_tree(&mut self, elements: Vec<LeafElement>) -> u64 {
        let mut level: Vec<(Vec<u8>, u64)> = Vec::new();
        for group in pack(&elements, LeafElement::size) {
            let page = leaf_page(0, &elements[group.clone()]);
            let first = elements[group.start].key.to_vec();
            level.push((first, self.append(page)));
        }
        if level.is_empty() {
            return self.append(leaf_page(0, &[]));
        }
        while level.len() > 1 {
            let mut above = Vec::new();
            for group in pack(&level, |(key, _)| ELEMENT + key.len()) {
                let page = branch_page(&level[group.clone()]);
                above.push((level[group.start].0.clone(), self.append(page)));
            }
            level = above;
        }
        level[0].1
    }
}

/// Splits `items` into runs that each fit a page (a run of one item may
/// not, and then takes overflow pages).
fn pack<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut used) = (0, PAGE_HEADER);
    for (i, item) in items.iter().enumerate() {
        let item_size = size(item);
        if i > start && used + item_size > PAGE_SIZE {
            groups.push(start..i);
            (start, used) = (i, PAGE_HEADER);
        }
        used += item_size;
    }
    if start < items.len() {
        groups.push(start..items.len());
    }
    groups
}

fn leaf_size(elements: &[LeafElement]) -> usize {
    PAGE_HEADER + elements.iter().map(LeafElement::size).sum::<usize>()
}

fn page_header(id: u64, flags: u16, count: usize, overflow: u32) -> [u8; PAGE_HEADER] {
    let mut header = [0u8; PAGE_HEADER];
    header[..8].copy_from_slice(&id.to_le_bytes());
    header[8..10].copy_from_slice(&flags.to_le_bytes());
    header[10..12].copy_from_slice(&(count as u16).to_le_bytes());
    header[12..16].copy_from_slice(&overflow.to_le_bytes());
    header
}

/// A leaf page (not padded); its ID and overflow are set where it lands.
fn leaf_page(id: u64, elements: &[LeafElement]) -> Vec<u8> {
    let mut page = Vec::with_capacity(leaf_size(elements));
    page.extend_from_slice(&page_header(id, LEAF_PAGE, elements.len(), 0));
    let mut data_at = PAGE_HEADER + ELEMENT * elements.len();
    for (i, element) in elements.iter().enumerate() {
        let element_at = PAGE_HEADER + ELEMENT * i;
        page.extend_from_slice(&element.flags.to_le_bytes());
        page.extend_from_slice(&((data_at - element_at) as u32).to_le_bytes());
        page.extend_from_slice(&(element.key.len() as u32).to_le_bytes());
        page.extend_from_slice(&(element.value.len() as u32).to_le_bytes());
        data_at += element.key.len() + element.value.len();
    }
    for element in elements {
        page.extend_from_slice(element.key);
        page.extend_from_slice(&element.value);
    }
    page
}

fn branch_page(children: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut page = Vec::new();
    page.extend_from_slice(&page_header(0, BRANCH_PAGE, children.len(), 0));
    let mut data_at = PAGE_HEADER + ELEMENT * children.len();
    for (i, (key, child)) in children.iter().enumerate() {
        let element_at = PAGE_HEADER + ELEMENT * i;
        page.extend_from_slice(&((data_at - element_at) as u32).to_le_bytes());
        page.extend_from_slice(&(key.len() as u32).to_le_bytes());
        page.extend_from_slice(&child.to_le_bytes());
        data_at += key.len();
    }
    for (key, _) in children {
        page.extend_from_slice(key);
    }
    page
}

/// Meta page `txid % 2` of a database whose root bucket's tree starts at
/// `root`.
fn meta_page(txid: u64, root: u64, freelist: u64, high_water: u64) -> Vec<u8> {
    let mut page = page_header(txid % 2, META_PAGE, 0, 0).to_vec();
    let body_at = page.len();
    page.extend_from_slice(&MAGIC.to_le_bytes());
    page.extend_from_slice(&VERSION.to_le_bytes());
    page.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
    page.extend_from_slice(&0u32.to_le_bytes());
    page.extend_from_slice(&root.to_le_bytes());
    page.extend_from_slice(&0u64.to_le_bytes());
    page.extend_from_slice(&freelist.to_le_bytes());
    page.extend_from_slice(&high_water.to_le_bytes());
    page.extend_from_slice(&txid.to_le_bytes());
    let checksum = fnv1a_64(&page[body_at..body_at + META_SUMMED]);
    page.extend_from_slice(&checksum.to_le_bytes());
    page
}
