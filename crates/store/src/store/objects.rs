//! Partitions, object lifetime, listing, attributes (with atomic
//! compare-and-swap and fetch-and-add), versions, stat and statfs.

use super::{Store, commit, now_ns};
use crate::attrs::*;
use crate::device::BLOCK;
use crate::error::{Result, StoreError};
use crate::journal::record::Record;
use crate::meta::FIRST_USER_ID;
use crate::onode::{MAX_ATTR_LEN, Onode};

/// Rejects reserved partition and object ids.
pub(crate) fn check_ids(pid: u64, oid: u64) -> Result<()> {
    if pid < FIRST_USER_ID {
        return Err(StoreError::invalid(
            "partition id",
            format!("{pid:#x} is reserved (ids start at {FIRST_USER_ID:#x})"),
        ));
    }
    if oid < FIRST_USER_ID {
        return Err(StoreError::invalid(
            "object id",
            format!("{oid:#x} is reserved (ids start at {FIRST_USER_ID:#x})"),
        ));
    }
    Ok(())
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// Object ids in increasing order.
    pub ids: Vec<u64>,
    /// Pass as `after` to get the next page; `None` when the range is done.
    pub next: Option<u64>,
}

/// What `stat` reports about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Logical length in bytes.
    pub size: u64,
    /// Bytes of device space held.
    pub used_bytes: u64,
    /// Version for capability revocation.
    pub version: u64,
    /// Creation time (ns).
    pub created: u64,
    /// Data modification time (ns).
    pub data_modified: u64,
    /// Attribute modification time (ns).
    pub attr_modified: u64,
    /// Data access time (ns).
    pub accessed: u64,
    /// Whether it uses large blocks.
    pub large: bool,
    /// Whether its data lives inline in the onode.
    pub inline: bool,
    /// Number of extents in its block map.
    pub extents: usize,
    /// Number of user attributes.
    pub attributes: usize,
}

/// Space and population of the whole store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceInfo {
    /// Bytes of the data area.
    pub total_bytes: u64,
    /// Free bytes in the data area (reserved blocks count as used).
    pub free_bytes: u64,
    /// Largest contiguous free run in bytes.
    pub largest_free_bytes: u64,
    /// Number of free extents.
    pub free_extents: u64,
    /// Objects in all partitions.
    pub objects: u64,
    /// Partitions.
    pub partitions: u64,
    /// Bytes in the journal ring.
    pub journal_bytes: u64,
    /// Allocation policy.
    pub policy: &'static str,
}

fn u64_attr(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn standard(pid: u64, oid: u64, o: &Onode, page: u32, number: u32) -> Option<Vec<u8>> {
    Some(u64_attr(match (page, number) {
        (PAGE_INFO, INFO_PARTITION_ID) => pid,
        (PAGE_INFO, INFO_OBJECT_ID) => oid,
        (PAGE_INFO, INFO_USED_CAPACITY) => o.used_bytes(),
        (PAGE_INFO, INFO_LOGICAL_LENGTH) => o.size,
        (PAGE_INFO, INFO_VERSION) => o.version,
        (PAGE_TIMES, TIME_CREATED) => o.created,
        (PAGE_TIMES, TIME_ATTR_MODIFIED) => o.attr_mtime,
        (PAGE_TIMES, TIME_DATA_ACCESSED) => o.atime,
        (PAGE_TIMES, TIME_DATA_MODIFIED) => o.data_mtime,
        _ => return None,
    }))
}

pub(super) fn check_attr(page: u32, number: u32, value: &[u8]) -> Result<()> {
    if page < FIRST_USER_PAGE {
        return Err(StoreError::ReadOnlyAttribute { page, number });
    }
    if value.len() > MAX_ATTR_LEN {
        return Err(StoreError::invalid(
            "attribute value",
            format!(
                "{} bytes exceeds the {MAX_ATTR_LEN}-byte limit",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses a change that would leave object `oid` with more than `limit`
/// user attributes (only keys it does not have yet count).
fn check_attr_count(o: Option<&Onode>, oid: u64, attrs: &[Attribute], limit: usize) -> Result<()> {
    let have = o.map_or(0, |o| o.attrs.len());
    if have + attrs.len() <= limit {
        return Ok(());
    }
    // What each key ends as: the last entry for it wins.
    let mut last = std::collections::BTreeMap::new();
    for (k, v) in attrs {
        last.insert(*k, !v.is_empty());
    }
    let had = |k: &(u32, u32)| o.is_some_and(|o| o.attrs.contains_key(k));
    let new = last.iter().filter(|(k, set)| **set && !had(k)).count();
    let gone = last.iter().filter(|(k, set)| !**set && had(k)).count();
    if new > gone && have + new - gone > limit {
        return Err(StoreError::MetadataFull {
            what: format!(
                "attributes on object {oid:#x} ({have} held, {} more asked for)",
                new - gone
            ),
            limit: limit as u64,
        });
    }
    Ok(())
}

/// Journal records setting `attrs` on one object at `time`.
pub(super) fn attr_records(
    pid: u64,
    oid: u64,
    attrs: &[((u32, u32), Vec<u8>)],
    time: u64,
) -> Vec<Record> {
    attrs
        .iter()
        .map(|((page, number), value)| Record::SetAttr {
            pid,
            oid,
            page: *page,
            number: *number,
            value: value.clone(),
            time,
        })
        .collect()
}

/// One attribute: its (page, number) and value.
pub type Attribute = ((u32, u32), Vec<u8>);

/// A page of user attributes: (number, value) in order, and the number to
/// continue after when more remain.
pub type AttrPage = (Vec<(u32, Vec<u8>)>, Option<u32>);

/// Outcome of a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasOutcome {
    /// Whether the value matched and was replaced.
    pub swapped: bool,
    /// The value before the operation (empty when absent).
    pub old: Vec<u8>,
}

impl Store {
    /// Creates a partition.
    pub fn create_partition(&self, pid: u64) -> Result<()> {
        check_ids(pid, FIRST_USER_ID)?;
        let mut st = self.inner.lock_ok()?;
        if st.meta.partitions.contains_key(&pid) {
            return Err(StoreError::PartitionExists(pid));
        }
        let seq = commit::log(
            &self.inner,
            &mut st,
            &[Record::CreatePartition {
                pid,
                time: now_ns(),
            }],
        )?;
        commit::wait(&self.inner, st, seq)
    }

    /// Removes an empty partition.
    pub fn remove_partition(&self, pid: u64) -> Result<()> {
        let mut st = self.inner.lock_ok()?;
        let p = st
            .meta
            .partitions
            .get(&pid)
            .ok_or(StoreError::NoPartition(pid))?;
        if p.objects > 0 {
            return Err(StoreError::PartitionNotEmpty(pid, p.objects));
        }
        let seq = commit::log(&self.inner, &mut st, &[Record::RemovePartition { pid }])?;
        commit::wait(&self.inner, st, seq)
    }

    /// Partition ids in order.
    pub fn partitions(&self) -> Vec<u64> {
        self.inner.lock().meta.partitions.keys().copied().collect()
    }

    /// Creates an empty object with the given id, or with one the store
    /// picks (the partition's next free id) when `oid` is `None`.
    pub fn create(&self, pid: u64, oid: Option<u64>) -> Result<u64> {
        if let Some(oid) = oid {
            check_ids(pid, oid)?;
        } else {
            check_ids(pid, FIRST_USER_ID)?;
        }
        let mut st = self.inner.lock_ok()?;
        let part = st
            .meta
            .partitions
            .get(&pid)
            .ok_or(StoreError::NoPartition(pid))?;
        let oid = match oid {
            Some(oid) => {
                if st.meta.objects.contains_key(&(pid, oid)) {
                    return Err(StoreError::ObjectExists { pid, oid });
                }
                oid
            }
            None => {
                let mut id = part.next_oid.max(FIRST_USER_ID);
                while st.meta.objects.contains_key(&(pid, id)) {
                    id = id
                        .checked_add(1)
                        .ok_or_else(|| StoreError::invalid("object id", "id space exhausted"))?;
                }
                id
            }
        };
        let seq = commit::log(
            &self.inner,
            &mut st,
            &[Record::CreateObject {
                pid,
                oid,
                time: now_ns(),
            }],
        )?;
        commit::wait(&self.inner, st, seq)?;
        Ok(oid)
    }

    /// Moves object `from` (partition, id) to `to`, replacing any object
    /// there, in one journal record: a copy built aside is installed so
    /// that a crash leaves the old object or the new one whole, never a
    /// mix. The object keeps its data, attributes, version and times.
    pub fn move_object(&self, from: (u64, u64), to: (u64, u64)) -> Result<()> {
        check_ids(from.0, from.1)?;
        check_ids(to.0, to.1)?;
        let seq = {
            let _g = self.inner.stripes2(from, to);
            let mut st = self.inner.lock_ok()?;
            if !st.meta.objects.contains_key(&from) {
                return Err(self.missing(&st.meta, from.0, from.1));
            }
            if !st.meta.partitions.contains_key(&to.0) {
                return Err(StoreError::NoPartition(to.0));
            }
            commit::log(
                &self.inner,
                &mut st,
                &[Record::MoveObject {
                    from_pid: from.0,
                    from_oid: from.1,
                    pid: to.0,
                    oid: to.1,
                }],
            )?
        };
        commit::wait(&self.inner, self.inner.lock(), seq)
    }

    /// Removes an object and releases its space.
    pub fn remove(&self, pid: u64, oid: u64) -> Result<()> {
        check_ids(pid, oid)?;
        let seq = {
            let _g = self.inner.stripe(pid, oid);
            let mut st = self.inner.lock_ok()?;
            if !st.meta.objects.contains_key(&(pid, oid)) {
                return Err(self.missing(&st.meta, pid, oid));
            }
            commit::log(&self.inner, &mut st, &[Record::RemoveObject { pid, oid }])?
        };
        commit::wait(&self.inner, self.inner.lock(), seq)
    }

    /// Removes every object of `oids` that exists in partition `pid`, each
    /// one's removal logged as it goes and all of them waited for once (one
    /// device flush for the lot, not one each): (removed, absent). A
    /// missing partition is an error; a missing object is counted. On an
    /// error, what was logged before it is still made durable first.
    pub fn remove_many(&self, pid: u64, oids: &[u64]) -> Result<(u32, u32)> {
        let (mut removed, mut absent, mut last) = (0u32, 0u32, None);
        let mut failure = None;
        for &oid in oids {
            let logged = check_ids(pid, oid).and_then(|()| {
                let _g = self.inner.stripe(pid, oid);
                let mut st = self.inner.lock_ok()?;
                if !st.meta.objects.contains_key(&(pid, oid)) {
                    return match self.missing(&st.meta, pid, oid) {
                        StoreError::NoObject { .. } => Ok(None),
                        e => Err(e),
                    };
                }
                commit::log(&self.inner, &mut st, &[Record::RemoveObject { pid, oid }]).map(Some)
            });
            match logged {
                Ok(Some(seq)) => {
                    removed += 1;
                    last = Some(seq);
                }
                Ok(None) => absent += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(seq) = last {
            commit::wait(&self.inner, self.inner.lock(), seq)?;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok((removed, absent)),
        }
    }

    /// Object `(pid, oid)`, or the error saying whether it or its partition is missing.
    fn object<'m>(
        &self,
        meta: &'m crate::meta::Meta,
        pid: u64,
        oid: u64,
    ) -> Result<std::borrow::Cow<'m, crate::onode::Onode>> {
        meta.objects
            .get(&(pid, oid))
            .ok_or_else(|| self.missing(meta, pid, oid))
    }

    fn missing(&self, meta: &crate::meta::Meta, pid: u64, oid: u64) -> StoreError {
        if meta.partitions.contains_key(&pid) {
            StoreError::NoObject { pid, oid }
        } else {
            StoreError::NoPartition(pid)
        }
    }

    /// Lists object ids in `[lo, hi]` after `after` (exclusive), at most `max`.
    pub fn list(
        &self,
        pid: u64,
        lo: u64,
        hi: u64,
        after: Option<u64>,
        max: usize,
    ) -> Result<ListPage> {
        let st = self.inner.lock();
        if !st.meta.partitions.contains_key(&pid) {
            return Err(StoreError::NoPartition(pid));
        }
        let start = match after {
            Some(a) if a >= hi => {
                return Ok(ListPage {
                    ids: Vec::new(),
                    next: None,
                });
            }
            Some(a) => lo.max(a + 1),
            None => lo,
        };
        if start > hi || max == 0 {
            return Ok(ListPage {
                ids: Vec::new(),
                next: None,
            });
        }
        let mut ids: Vec<u64> = st
            .meta
            .objects
            .range((pid, start)..=(pid, hi))
            .take(max + 1)
            .map(|((_, o), _)| *o)
            .collect();
        let next = if ids.len() > max {
            ids.pop();
            ids.last().copied()
        } else {
            None
        };
        Ok(ListPage { ids, next })
    }

    /// Object metadata.
    pub fn stat(&self, pid: u64, oid: u64) -> Result<ObjectInfo> {
        check_ids(pid, oid)?;
        let st = self.inner.lock();
        let o = self.object(&st.meta, pid, oid)?;
        Ok(ObjectInfo {
            size: o.size,
            used_bytes: o.used_bytes(),
            version: o.version,
            created: o.created,
            data_modified: o.data_mtime,
            attr_modified: o.attr_mtime,
            accessed: o.atime,
            large: o.large,
            inline: o.inline.is_some(),
            extents: o.extents.len(),
            attributes: o.attrs.len(),
        })
    }

    /// The block map: (first logical block, first data block, blocks) per
    /// extent, for inspection (`tessera store stat`) and layout tests.
    pub fn layout(&self, pid: u64, oid: u64) -> Result<Vec<(u64, u64, u64)>> {
        check_ids(pid, oid)?;
        let st = self.inner.lock();
        let o = self.object(&st.meta, pid, oid)?;
        Ok(o.extents
            .iter()
            .map(|e| (e.lblock, e.pblock, e.len()))
            .collect())
    }

    /// Space and population. Blocks released by the most recent commit count
    /// as used until the next commit is durable (see `deferred_frees`).
    pub fn statfs(&self) -> SpaceInfo {
        let st = self.inner.lock();
        let f = st.alloc.free_stats();
        SpaceInfo {
            total_bytes: self.inner.label.data_len,
            free_bytes: free_bytes(&st),
            largest_free_bytes: f.largest_free * BLOCK,
            free_extents: f.free_extents,
            objects: st.meta.objects.len() as u64,
            partitions: st.meta.partitions.len() as u64,
            journal_bytes: self.inner.label.journal_len,
            policy: st.alloc.name(),
        }
    }

    /// (total, free) bytes of the data area as [`Store::statfs`] counts
    /// them, without walking the free space (cheap enough for every write).
    pub fn space(&self) -> (u64, u64) {
        let st = self.inner.lock();
        (self.inner.label.data_len, free_bytes(&st))
    }

    /// Reads attribute (page, number): a user attribute or one the store
    /// maintains. `None` when it is not set.
    pub fn get_attr(&self, pid: u64, oid: u64, page: u32, number: u32) -> Result<Option<Vec<u8>>> {
        check_ids(pid, oid)?;
        let st = self.inner.lock();
        let o = self.object(&st.meta, pid, oid)?;
        if page < FIRST_USER_PAGE {
            return Ok(standard(pid, oid, &o, page, number));
        }
        Ok(o.attrs.get(&(page, number)).map(|v| v.to_vec()))
    }

    /// Every attribute of an object, the store's own first, in (page, number) order.
    pub fn list_attrs(&self, pid: u64, oid: u64) -> Result<Vec<Attribute>> {
        self.list_attrs_within(pid, oid, usize::MAX)
    }

    /// [`Store::list_attrs`], refused (before anything is copied) when
    /// the user attributes come to more than `max_bytes`, each counted as
    /// its value and 16 bytes for its key and length (so many tiny ones
    /// count too): a caller answering over the wire pages them instead.
    pub fn list_attrs_within(
        &self,
        pid: u64,
        oid: u64,
        max_bytes: usize,
    ) -> Result<Vec<Attribute>> {
        check_ids(pid, oid)?;
        let st = self.inner.lock();
        let o = self.object(&st.meta, pid, oid)?;
        let mut v: Vec<_> = STANDARD
            .iter()
            .filter_map(|&(p, n)| standard(pid, oid, &o, p, n).map(|x| ((p, n), x)))
            .collect();
        let mut bytes = 0usize;
        for x in o.attrs.values() {
            bytes = bytes.saturating_add(x.len() + 16);
            if bytes > max_bytes {
                return Err(StoreError::invalid(
                    "attribute list",
                    format!(
                        "object {oid:#x} has {} attributes, more than {max_bytes} bytes of them: list them by page",
                        o.attrs.len()
                    ),
                ));
            }
        }
        v.extend(o.attrs.iter().map(|(k, x)| (*k, x.to_vec())));
        Ok(v)
    }

    /// User attributes of `page` with numbers above `after` (all when
    /// `None`), in number order: at most `max` of them, stopping early once
    /// `max_bytes` of values are gathered (never before the first). The
    /// second value is the number to continue after, if more remain.
    pub fn page_attrs(
        &self,
        pid: u64,
        oid: u64,
        page: u32,
        after: Option<u32>,
        max: usize,
        max_bytes: usize,
    ) -> Result<AttrPage> {
        check_ids(pid, oid)?;
        if page < FIRST_USER_PAGE {
            return Err(StoreError::invalid(
                "attribute page",
                format!(
                    "page {page:#x} is the store's own; pages are listed from {FIRST_USER_PAGE:#x}"
                ),
            ));
        }
        let st = self.inner.lock();
        let o = self.object(&st.meta, pid, oid)?;
        let lo = match after {
            None => std::ops::Bound::Included((page, 0)),
            Some(a) => std::ops::Bound::Excluded((page, a)),
        };
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut it = o
            .attrs
            .range((lo, std::ops::Bound::Included((page, u32::MAX))))
            .peekable();
        while let Some(((_, n), v)) = it.peek() {
            if out.len() >= max || (!out.is_empty() && bytes + v.len() > max_bytes) {
                break;
            }
            bytes += v.len();
            out.push((*n, v.to_vec()));
            it.next();
        }
        let next = match it.peek() {
            Some(_) => out.last().map(|(n, _)| *n),
            None => None,
        };
        Ok((out, next))
    }

    /// Whether setting `attrs` on object `oid` (absent: as on a new one)
    /// would stay within the store's bounds, without setting them.
    pub fn check_attrs_fit(&self, pid: u64, oid: u64, attrs: &[Attribute]) -> Result<()> {
        check_ids(pid, oid)?;
        let st = self.inner.lock_ok()?;
        let o = st.meta.objects.get(&(pid, oid));
        check_attr_count(o.as_deref(), oid, attrs, self.inner.max_attrs_per_object)?;
        commit::check_attr_bytes(&self.inner, &st, &attr_records(pid, oid, attrs, 0))
    }

    /// Sets several user attributes in one commit: all or none survive a
    /// crash. Empty values remove.
    pub fn set_attrs(&self, pid: u64, oid: u64, attrs: &[((u32, u32), Vec<u8>)]) -> Result<()> {
        check_ids(pid, oid)?;
        for ((page, number), v) in attrs {
            check_attr(*page, *number, v)?;
        }
        let mut st = self.inner.lock_ok()?;
        match st.meta.objects.get(&(pid, oid)) {
            None => return Err(self.missing(&st.meta, pid, oid)),
            Some(o) => check_attr_count(Some(&*o), oid, attrs, self.inner.max_attrs_per_object)?,
        }
        let recs = attr_records(pid, oid, attrs, now_ns());
        let seq = commit::log(&self.inner, &mut st, &recs)?;
        commit::wait(&self.inner, st, seq)
    }

    /// Creates object `oid` with user attributes, in one commit: after a
    /// crash it either exists with all of them or not at all.
    pub fn create_with_attrs(
        &self,
        pid: u64,
        oid: u64,
        attrs: &[((u32, u32), Vec<u8>)],
    ) -> Result<()> {
        check_ids(pid, oid)?;
        for ((page, number), v) in attrs {
            check_attr(*page, *number, v)?;
        }
        let mut st = self.inner.lock_ok()?;
        if !st.meta.partitions.contains_key(&pid) {
            return Err(StoreError::NoPartition(pid));
        }
        if st.meta.objects.contains_key(&(pid, oid)) {
            return Err(StoreError::ObjectExists { pid, oid });
        }
        check_attr_count(None, oid, attrs, self.inner.max_attrs_per_object)?;
        let time = now_ns();
        let mut recs = vec![Record::CreateObject { pid, oid, time }];
        recs.extend(attr_records(pid, oid, attrs, time));
        let seq = commit::log(&self.inner, &mut st, &recs)?;
        commit::wait(&self.inner, st, seq)
    }

    /// Sets a user attribute; an empty value removes it.
    pub fn set_attr(&self, pid: u64, oid: u64, page: u32, number: u32, value: &[u8]) -> Result<()> {
        check_ids(pid, oid)?;
        check_attr(page, number, value)?;
        let mut st = self.inner.lock_ok()?;
        match st.meta.objects.get(&(pid, oid)) {
            None => return Err(self.missing(&st.meta, pid, oid)),
            Some(o) => check_attr_count(
                Some(&*o),
                oid,
                &[((page, number), value.to_vec())],
                self.inner.max_attrs_per_object,
            )?,
        }
        let rec = Record::SetAttr {
            pid,
            oid,
            page,
            number,
            value: value.to_vec(),
            time: now_ns(),
        };
        let seq = commit::log(&self.inner, &mut st, &[rec])?;
        commit::wait(&self.inner, st, seq)
    }

    /// Atomic compare-and-swap on one attribute (Ali et al.): if the current
    /// value equals `expected` (empty = absent), it becomes `new` (empty =
    /// removed). The old value is always returned.
    pub fn cas_attr(
        &self,
        pid: u64,
        oid: u64,
        page: u32,
        number: u32,
        expected: &[u8],
        new: &[u8],
    ) -> Result<CasOutcome> {
        check_ids(pid, oid)?;
        check_attr(page, number, new)?;
        let mut st = self.inner.lock_ok()?;
        let o = self.object(&st.meta, pid, oid)?;
        let old = o
            .attrs
            .get(&(page, number))
            .map(|v| v.to_vec())
            .unwrap_or_default();
        if old != expected {
            return Ok(CasOutcome {
                swapped: false,
                old,
            });
        }
        if old.is_empty() && !new.is_empty() {
            check_attr_count(
                Some(&*o),
                oid,
                &[((page, number), new.to_vec())],
                self.inner.max_attrs_per_object,
            )?;
        }
        let rec = Record::SetAttr {
            pid,
            oid,
            page,
            number,
            value: new.to_vec(),
            time: now_ns(),
        };
        let seq = commit::log(&self.inner, &mut st, &[rec])?;
        commit::wait(&self.inner, st, seq)?;
        Ok(CasOutcome { swapped: true, old })
    }

    /// Atomic fetch-and-add on an attribute holding a little-endian u64
    /// (absent = 0); wraps on overflow. Returns the value before the add.
    pub fn fetch_add(&self, pid: u64, oid: u64, page: u32, number: u32, delta: u64) -> Result<u64> {
        check_ids(pid, oid)?;
        check_attr(page, number, &[])?;
        let mut st = self.inner.lock_ok()?;
        let o = self.object(&st.meta, pid, oid)?;
        let old = match o.attrs.get(&(page, number)) {
            None => {
                let counter = [((page, number), vec![0u8; 8])];
                check_attr_count(Some(&*o), oid, &counter, self.inner.max_attrs_per_object)?;
                0
            }
            Some(v) => u64::from_le_bytes(v.as_ref().try_into().map_err(|_| {
                StoreError::invalid(
                    "attribute value",
                    format!(
                        "fetch-and-add needs an 8-byte counter, found {} bytes",
                        v.len()
                    ),
                )
            })?),
        };
        let value = old.wrapping_add(delta).to_le_bytes().to_vec();
        let rec = Record::SetAttr {
            pid,
            oid,
            page,
            number,
            value,
            time: now_ns(),
        };
        let seq = commit::log(&self.inner, &mut st, &[rec])?;
        commit::wait(&self.inner, st, seq)?;
        Ok(old)
    }

    /// Raises the object's version (the OSD's capability revocation
    /// counter) to `version`. Versions only grow: an older revocation that
    /// arrives after a newer one changes nothing, so it cannot revive
    /// capabilities the newer one revoked.
    pub fn set_version(&self, pid: u64, oid: u64, version: u64) -> Result<()> {
        check_ids(pid, oid)?;
        let mut st = self.inner.lock_ok()?;
        match st.meta.objects.get(&(pid, oid)) {
            None => return Err(self.missing(&st.meta, pid, oid)),
            Some(o) if o.version >= version => return Ok(()),
            Some(_) => {}
        }
        let seq = commit::log(
            &self.inner,
            &mut st,
            &[Record::SetVersion { pid, oid, version }],
        )?;
        commit::wait(&self.inner, st, seq)
    }
}

/// Free bytes of the data area: reserved blocks are promised to their
/// objects, so not free.
fn free_bytes(st: &super::State) -> u64 {
    st.alloc
        .free_blocks()
        .saturating_sub(st.meta.reserved_blocks)
        * BLOCK
}
