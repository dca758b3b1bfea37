//! The in-memory object table: every onode, by (partition, id), in order.
//!
//! Memory is the constraint (the store keeps all onodes in memory): a small
//! onode is kept *packed* — a varint encoding of about 25 bytes for a
//! one-extent object, held inside the table node itself when it fits in 30
//! bytes — and unpacked on access; an onode whose packed form
//! exceeds [`PACK_LIMIT`] (many extents or attributes) is kept unpacked so
//! big objects and attribute-heavy objects (directories, Ali et al.) pay no
//! decode per access. The packed form lives only in memory; checkpoints use
//! the documented format of `onode.rs`.
//!
//! Invariant: `get` after `insert` (or after a mutation through `get_mut`)
//! returns an onode equal to what was stored, whichever form it is kept in.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut, RangeBounds};

use crate::onode::{MapExtent, Onode};

/// Packed onodes larger than this are kept unpacked.
pub const PACK_LIMIT: usize = 160;

/// Key: (partition, object id).
pub type Key = (u64, u64);

/// Packed onodes up to this size are held inside the table's node itself
/// (no allocation of their own).
pub const INLINE_LIMIT: usize = 30;

/// How one onode is held.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// Packed, inside the slot (a 4 KiB one-extent object fits).
    Inline { len: u8, bytes: [u8; INLINE_LIMIT] },
    /// Packed, in its own allocation.
    Packed(Box<[u8]>),
    /// Unpacked (big onodes).
    Full(Box<Onode>),
}

const _: () = assert!(
    std::mem::size_of::<Slot>() == 32,
    "a table slot is 32 bytes"
);

fn put(v: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        v.push((x as u8) | 0x80);
        x >>= 7;
    }
    v.push(x as u8);
}

fn get(b: &[u8], i: &mut usize) -> u64 {
    let mut x = 0u64;
    let mut shift = 0;
    loop {
        let byte = b[*i];
        *i += 1;
        x |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return x;
        }
        shift += 7;
    }
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(x: u64) -> i64 {
    ((x >> 1) as i64) ^ -((x & 1) as i64)
}

/// Creation times are packed as a difference from this moment (2025-01-01),
/// a few bytes instead of eight.
const TIME_BASE: u64 = 1_735_689_600_000_000_000;

fn pack(o: &Onode) -> Vec<u8> {
    let mut v = Vec::with_capacity(48);
    put(&mut v, o.size);
    put(&mut v, o.version);
    put(&mut v, zigzag(o.created.wrapping_sub(TIME_BASE) as i64));
    for t in [o.data_mtime, o.attr_mtime, o.atime] {
        put(&mut v, zigzag(t.wrapping_sub(o.created) as i64));
    }
    put(&mut v, o.generation);
    v.push(u8::from(o.large) | if o.inline.is_some() { 2 } else { 0 });
    if let Some(d) = &o.inline {
        put(&mut v, d.len() as u64);
        v.extend_from_slice(d);
    }
    put(&mut v, o.extents.len() as u64);
    let mut prev_end = 0u64;
    for e in &o.extents {
        put(&mut v, e.lblock - prev_end);
        put(&mut v, e.pblock);
        put(&mut v, e.len());
        for c in e.crcs.iter() {
            v.extend_from_slice(&c.to_le_bytes());
        }
        prev_end = e.lend();
    }
    put(&mut v, o.attrs.len() as u64);
    for ((p, n), val) in &o.attrs {
        put(&mut v, u64::from(*p));
        put(&mut v, u64::from(*n));
        put(&mut v, val.len() as u64);
        v.extend_from_slice(val);
    }
    v
}

/// Decodes what [`pack`] wrote (trusted input: only this module makes it).
fn unpack(b: &[u8]) -> Onode {
    let mut i = 0;
    let size = get(b, &mut i);
    let version = get(b, &mut i);
    let created = TIME_BASE.wrapping_add(unzigzag(get(b, &mut i)) as u64);
    let mut times = [0u64; 3];
    for x in &mut times {
        *x = created.wrapping_add(unzigzag(get(b, &mut i)) as u64);
    }
    let generation = get(b, &mut i);
    let flags = b[i];
    i += 1;
    let inline = (flags & 2 != 0).then(|| {
        let n = get(b, &mut i) as usize;
        let d: Box<[u8]> = b[i..i + n].into();
        i += n;
        d
    });
    let n = get(b, &mut i) as usize;
    let mut extents = Vec::with_capacity(n);
    let mut prev_end = 0u64;
    for _ in 0..n {
        let lblock = prev_end + get(b, &mut i);
        let pblock = get(b, &mut i);
        let len = get(b, &mut i) as usize;
        let crcs: Box<[u32]> = b[i..i + 4 * len]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        i += 4 * len;
        prev_end = lblock + len as u64;
        extents.push(MapExtent {
            lblock,
            pblock,
            crcs,
        });
    }
    let n = get(b, &mut i) as usize;
    let mut attrs = BTreeMap::new();
    for _ in 0..n {
        let p = get(b, &mut i) as u32;
        let num = get(b, &mut i) as u32;
        let len = get(b, &mut i) as usize;
        attrs.insert((p, num), b[i..i + len].into());
        i += len;
    }
    Onode {
        size,
        version,
        created,
        data_mtime: times[0],
        attr_mtime: times[1],
        atime: times[2],
        large: flags & 1 != 0,
        inline,
        extents,
        attrs,
        reserved: Vec::new(),
        generation,
    }
}

fn slot_of(o: Onode) -> Slot {
    // Clearly big onodes skip the trial packing (it is O(size)).
    let crcs: usize = o.extents.iter().map(|e| e.crcs.len()).sum();
    let inline = o.inline.as_ref().map_or(0, |d| d.len());
    // Onodes with reservations (rare) are kept unpacked too.
    if o.extents.len() > 4
        || crcs > 24
        || o.attrs.len() > 4
        || inline > PACK_LIMIT
        || !o.reserved.is_empty()
    {
        return Slot::Full(Box::new(o));
    }
    let p = pack(&o);
    if p.len() <= INLINE_LIMIT {
        let mut bytes = [0u8; INLINE_LIMIT];
        bytes[..p.len()].copy_from_slice(&p);
        Slot::Inline {
            len: p.len() as u8,
            bytes,
        }
    } else if p.len() <= PACK_LIMIT {
        Slot::Packed(p.into_boxed_slice())
    } else {
        Slot::Full(Box::new(o))
    }
}

fn view(s: &Slot) -> Cow<'_, Onode> {
    match s {
        Slot::Inline { len, bytes } => Cow::Owned(unpack(&bytes[..*len as usize])),
        Slot::Packed(b) => Cow::Owned(unpack(b)),
        Slot::Full(o) => Cow::Borrowed(o),
    }
}

/// All onodes, ordered by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectTable {
    map: BTreeMap<Key, Slot>,
}

/// Write access to one onode; re-packs it when dropped.
pub struct OnodeMut<'a> {
    slot: &'a mut Slot,
    onode: Option<Onode>,
}

impl Deref for OnodeMut<'_> {
    type Target = Onode;
    fn deref(&self) -> &Onode {
        self.onode
            .as_ref()
            .unwrap_or_else(|| unreachable!("present until drop"))
    }
}

impl DerefMut for OnodeMut<'_> {
    fn deref_mut(&mut self) -> &mut Onode {
        self.onode
            .as_mut()
            .unwrap_or_else(|| unreachable!("present until drop"))
    }
}

impl Drop for OnodeMut<'_> {
    fn drop(&mut self) {
        if let Some(o) = self.onode.take() {
            *self.slot = slot_of(o);
        }
    }
}

impl ObjectTable {
    /// Number of objects.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Whether the key exists.
    pub fn contains_key(&self, k: &Key) -> bool {
        self.map.contains_key(k)
    }
    /// The onode (unpacked on the fly if packed).
    pub fn get(&self, k: &Key) -> Option<Cow<'_, Onode>> {
        self.map.get(k).map(view)
    }
    /// Mutable access; the change is kept when the guard drops.
    pub fn get_mut(&mut self, k: &Key) -> Option<OnodeMut<'_>> {
        let slot = self.map.get_mut(k)?;
        let onode = match slot {
            Slot::Inline { len, bytes } => unpack(&bytes[..*len as usize]),
            Slot::Packed(b) => unpack(b),
            Slot::Full(o) => std::mem::take(&mut **o),
        };
        Some(OnodeMut {
            slot,
            onode: Some(onode),
        })
    }
    /// Inserts or replaces.
    pub fn insert(&mut self, k: Key, o: Onode) {
        self.map.insert(k, slot_of(o));
    }
    /// Removes and returns.
    pub fn remove(&mut self, k: &Key) -> Option<Onode> {
        self.map.remove(k).map(|s| match s {
            Slot::Inline { len, bytes } => unpack(&bytes[..len as usize]),
            Slot::Packed(b) => unpack(&b),
            Slot::Full(o) => *o,
        })
    }
    /// Onodes with keys in `r`, in order.
    pub fn range<R: RangeBounds<Key>>(
        &self,
        r: R,
    ) -> impl DoubleEndedIterator<Item = (&Key, Cow<'_, Onode>)> {
        self.map.range(r).map(|(k, s)| (k, view(s)))
    }
    /// Every onode, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, Cow<'_, Onode>)> {
        self.map.iter().map(|(k, s)| (k, view(s)))
    }
    /// Every onode, in key order.
    pub fn values(&self) -> impl Iterator<Item = Cow<'_, Onode>> {
        self.map.values().map(view)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn onode() -> impl Strategy<Value = Onode> {
        let ext = (
            0u64..8,
            any::<u32>(),
            proptest::collection::vec(any::<u32>(), 1..40),
        );
        (
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
            ),
            any::<bool>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..600)),
            proptest::collection::vec(ext, 0..6),
            proptest::collection::btree_map(
                (any::<u32>(), any::<u32>()),
                proptest::collection::vec(any::<u8>(), 0..50),
                0..5,
            ),
        )
            .prop_map(
                |((size, version, created, dm, am, at, generation), large, inline, exts, attrs)| {
                    let mut l = 0;
                    let extents = exts
                        .into_iter()
                        .map(|(gap, p, crcs)| {
                            let e = MapExtent {
                                lblock: l + gap,
                                pblock: u64::from(p),
                                crcs: crcs.into(),
                            };
                            l = e.lend();
                            e
                        })
                        .collect::<Vec<_>>();
                    // Some onodes carry a reservation past their data.
                    let reserved = if generation % 3 == 0 {
                        vec![(l + 1, l + 5)]
                    } else {
                        Vec::new()
                    };
                    Onode {
                        reserved,
                        size,
                        version,
                        created,
                        data_mtime: dm,
                        attr_mtime: am,
                        atime: at,
                        large,
                        inline: inline.map(Into::into),
                        extents,
                        attrs: attrs.into_iter().map(|(k, v)| (k, v.into())).collect(),
                        generation,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn packed_and_full_onodes_read_back_equal(o in onode()) {
            let mut t = ObjectTable::default();
            t.insert((1, 2), o.clone());
            prop_assert_eq!(&*t.get(&(1, 2)).unwrap(), &o);
            {
                let mut m = t.get_mut(&(1, 2)).unwrap();
                m.size = m.size.wrapping_add(1);
            }
            let mut want = o;
            want.size = want.size.wrapping_add(1);
            prop_assert_eq!(t.remove(&(1, 2)).unwrap(), want);
        }
    }

    #[test]
    fn a_small_object_packs_small() {
        let o = Onode {
            size: 4096,
            created: 1_763_000_000_000_000_000,
            data_mtime: 1_763_000_000_000_000_100,
            attr_mtime: 1_763_000_000_000_000_000,
            atime: 1_763_000_000_000_000_100,
            generation: 1,
            extents: vec![MapExtent {
                lblock: 0,
                pblock: 123_456,
                crcs: vec![0xdead_beef].into(),
            }],
            ..Onode::default()
        };
        let p = pack(&o);
        assert!(p.len() <= INLINE_LIMIT, "{} bytes", p.len());
        assert_eq!(unpack(&p), o);
    }
}
