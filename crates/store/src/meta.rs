//! The store's metadata state: partitions and onodes, changed only by
//! applying journal [`Record`]s, and serialised whole into checkpoints.
//!
//! Invariant: the state after a checkpoint plus the records after it equals
//! the state the running store had when the last of those records committed.

use std::collections::BTreeMap;

use crate::alloc::Extent;
use crate::device::BLOCK;
use crate::format::codec::{DecodeError, Reader, Writer};
use crate::journal::record::Record;
use crate::onode::Onode;
use crate::table::ObjectTable;

/// First object id users may use; ids below are reserved (T10 OSD).
pub const FIRST_USER_ID: u64 = 0x10000;

/// One partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partition {
    /// Creation time.
    pub created: u64,
    /// Next id the store hands out when asked to pick one.
    pub next_oid: u64,
    /// Number of objects.
    pub objects: u64,
}

/// All metadata: partitions and their objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Partitions by id.
    pub partitions: BTreeMap<u64, Partition>,
    /// Objects by (partition, object id), in id order.
    pub objects: ObjectTable,
    /// Upper bound of [`Meta::encode`]'s length, kept up to date by
    /// [`Meta::apply`] in O(1) per attribute change and O(extents) per data
    /// change, so the store can always keep room for its next checkpoint.
    pub approx_bytes: u64,
    /// What user attributes take of [`Meta::approx_bytes`] (values and
    /// their keys): what [`crate::OpenOptions::max_attr_bytes`] bounds.
    pub attr_bytes: u64,
    /// Blocks reserved by every object ([`Onode::reserved`]): counted as
    /// used, kept up to date by [`Meta::apply`].
    pub reserved_blocks: u64,
}

const HEADER_BYTES: u64 = 24;
const PARTITION_BYTES: u64 = 24;
/// Key plus the fixed onode fields and counts.
const ONODE_BYTES: u64 = 16 + 49 + 8;
/// Bytes an attribute takes beside its value (page, number, length).
pub(crate) const ATTR_OVERHEAD: u64 = 12;

/// Bytes `o`'s user attributes take.
fn attrs_bytes(o: &Onode) -> u64 {
    o.attrs
        .values()
        .map(|v| ATTR_OVERHEAD + v.len() as u64)
        .sum()
}

/// Bytes an onode's data description takes in a checkpoint.
fn data_bytes(o: &Onode) -> u64 {
    let blocks: u64 = o.extents.iter().map(|e| e.len()).sum();
    o.extents.len() as u64 * 20
        + blocks * 4
        + o.inline.as_ref().map_or(0, |d| 4 + d.len() as u64)
        + if o.reserved.is_empty() {
            0
        } else {
            // The ranges, plus what their blocks will cost once written
            // (an extent header per range, a crc per block): the room kept
            // for checkpoints then already covers them.
            4 + 36 * o.reserved.len() as u64 + 4 * o.reserved_blocks()
        }
}

/// Bytes a whole onode takes in a checkpoint.
fn onode_bytes(o: &Onode) -> u64 {
    ONODE_BYTES + data_bytes(o) + attrs_bytes(o)
}

/// A record that does not fit the current state (a bug or corruption).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal record does not apply: {0}")]
pub struct ApplyError(pub String);

impl Default for Meta {
    fn default() -> Self {
        Meta {
            partitions: BTreeMap::new(),
            objects: ObjectTable::default(),
            approx_bytes: HEADER_BYTES,
            attr_bytes: 0,
            reserved_blocks: 0,
        }
    }
}

impl Meta {
    /// Applies one record; returns the physical extents it released.
    pub fn apply(&mut self, rec: &Record, unit_of_large: u64) -> Result<Vec<Extent>, ApplyError> {
        let missing =
            |pid: u64, oid: u64| ApplyError(format!("object {pid:#x}/{oid:#x} does not exist"));
        Ok(match rec {
            Record::CreatePartition { pid, time } => {
                if !self.partitions.contains_key(pid) {
                    self.approx_bytes += PARTITION_BYTES;
                }
                self.partitions.entry(*pid).or_insert(Partition {
                    created: *time,
                    next_oid: FIRST_USER_ID,
                    objects: 0,
                });
                Vec::new()
            }
            Record::RemovePartition { pid } => {
                let freed = self.remove_range(*pid);
                if self.partitions.remove(pid).is_some() {
                    self.approx_bytes -= PARTITION_BYTES;
                }
                freed
            }
            Record::CreateObject { pid, oid, time } => self.create_object(*pid, *oid, *time)?,
            Record::RemoveObject { pid, oid } => self.remove_object(*pid, *oid),
            Record::MoveObject {
                from_pid,
                from_oid,
                pid,
                oid,
            } => self.move_object((*from_pid, *from_oid), (*pid, *oid))?,
            Record::SetData {
                pid,
                oid,
                first,
                end,
                extents,
                size,
                mtime,
                large,
            } => self.change_data(*pid, *oid, *size, *mtime, |o| {
                let freed = o.unmap(*first, *end);
                o.unreserve(*first, *end);
                o.inline = None;
                o.map(extents.clone());
                o.large = *large;
                Ok(freed)
            })?,
            Record::SetInline {
                pid,
                oid,
                data,
                mtime,
            } => self.change_data(*pid, *oid, data.len() as u64, *mtime, |o| {
                let freed = o.unmap(0, u64::MAX);
                o.reserved.clear();
                o.inline = Some(data.clone().into());
                o.large = false;
                Ok(freed)
            })?,
            Record::Truncate {
                pid,
                oid,
                size,
                mtime,
            } => self.change_data(*pid, *oid, *size, *mtime, |o| {
                if o.inline.is_some() && *size > BLOCK {
                    return Err(ApplyError(format!(
                        "truncate of inline object {pid:#x}/{oid:#x} to {size} bytes"
                    )));
                }
                let unit = if o.large { unit_of_large } else { 1 };
                let past = size.div_ceil(BLOCK).next_multiple_of(unit);
                let freed = o.unmap(past, u64::MAX);
                o.unreserve(past, u64::MAX);
                if let Some(d) = &mut o.inline {
                    let mut v = d.to_vec();
                    v.resize(*size as usize, 0);
                    *d = v.into();
                }
                Ok(freed)
            })?,
            Record::SetAttr {
                pid,
                oid,
                page,
                number,
                value,
                time,
            } => {
                let mut o = self
                    .objects
                    .get_mut(&(*pid, *oid))
                    .ok_or_else(|| missing(*pid, *oid))?;
                let old = if value.is_empty() {
                    o.attrs.remove(&(*page, *number))
                } else {
                    o.attrs.insert((*page, *number), value.clone().into())
                };
                let cost = |n: usize| ATTR_OVERHEAD + n as u64;
                self.approx_bytes += if value.is_empty() {
                    0
                } else {
                    cost(value.len())
                };
                self.approx_bytes -= old.as_ref().map_or(0, |v| cost(v.len()));
                self.attr_bytes += if value.is_empty() {
                    0
                } else {
                    cost(value.len())
                };
                self.attr_bytes -= old.map_or(0, |v| cost(v.len()));
                o.attr_mtime = *time;
                Vec::new()
            }
            Record::Reserve {
                pid,
                oid,
                first,
                end,
            } => {
                let mut o = self
                    .objects
                    .get_mut(&(*pid, *oid))
                    .ok_or_else(|| missing(*pid, *oid))?;
                if o.inline.is_some()
                    || first >= end
                    || *end > crate::store::MAX_OBJECT_SIZE / BLOCK
                {
                    return Err(ApplyError(format!(
                        "reservation of blocks [{first}, {end}) in object {pid:#x}/{oid:#x}"
                    )));
                }
                let before = data_bytes(&o);
                let added = o.reserve(*first, *end);
                self.approx_bytes = self.approx_bytes + data_bytes(&o) - before;
                self.reserved_blocks += added;
                Vec::new()
            }
            Record::SetVersion { pid, oid, version } => {
                let mut o = self
                    .objects
                    .get_mut(&(*pid, *oid))
                    .ok_or_else(|| missing(*pid, *oid))?;
                o.version = *version;
                Vec::new()
            }
        })
    }

    /// Changes an object's data with `change` (which returns the blocks it
    /// released), then sets its size and data time, bumps its generation and
    /// keeps [`Meta::approx_bytes`] up to date.
    fn change_data(
        &mut self,
        pid: u64,
        oid: u64,
        size: u64,
        mtime: u64,
        change: impl FnOnce(&mut Onode) -> Result<Vec<Extent>, ApplyError>,
    ) -> Result<Vec<Extent>, ApplyError> {
        let mut o = self
            .objects
            .get_mut(&(pid, oid))
            .ok_or_else(|| ApplyError(format!("object {pid:#x}/{oid:#x} does not exist")))?;
        let before = data_bytes(&o);
        let reserved = o.reserved_blocks();
        let freed = change(&mut o)?;
        o.size = size;
        o.data_mtime = mtime;
        o.generation += 1;
        self.approx_bytes = self.approx_bytes + data_bytes(&o) - before;
        self.reserved_blocks = self.reserved_blocks + o.reserved_blocks() - reserved;
        Ok(freed)
    }

    fn remove_object(&mut self, pid: u64, oid: u64) -> Vec<Extent> {
        match self.objects.remove(&(pid, oid)) {
            Some(o) => {
                if let Some(p) = self.partitions.get_mut(&pid) {
                    p.objects -= 1;
                }
                self.approx_bytes -= onode_bytes(&o);
                self.attr_bytes -= attrs_bytes(&o);
                self.reserved_blocks -= o.reserved_blocks();
                o.physical().collect()
            }
            None => Vec::new(),
        }
    }

    /// Makes an empty object, replacing (and freeing) any object of its id.
    fn create_object(&mut self, pid: u64, oid: u64, time: u64) -> Result<Vec<Extent>, ApplyError> {
        let freed = self.remove_object(pid, oid);
        let part = self
            .partitions
            .get_mut(&pid)
            .ok_or_else(|| ApplyError(format!("partition {pid:#x} does not exist")))?;
        part.objects += 1;
        part.next_oid = part.next_oid.max(oid.saturating_add(1));
        self.approx_bytes += ONODE_BYTES;
        self.objects.insert(
            (pid, oid),
            Onode {
                created: time,
                data_mtime: time,
                attr_mtime: time,
                atime: time,
                ..Onode::default()
            },
        );
        Ok(freed)
    }

    /// Moves object `from` to `to`, replacing (and freeing) any object there.
    fn move_object(&mut self, from: (u64, u64), to: (u64, u64)) -> Result<Vec<Extent>, ApplyError> {
        if !self.partitions.contains_key(&to.0) {
            return Err(ApplyError(format!("partition {:#x} does not exist", to.0)));
        }
        if !self.objects.contains_key(&from) {
            return Err(ApplyError(format!(
                "object {:#x} of partition {:#x} does not exist",
                from.1, from.0
            )));
        }
        if from == to {
            return Ok(Vec::new());
        }
        let freed = self.remove_object(to.0, to.1);
        let o = self
            .objects
            .remove(&from)
            .ok_or_else(|| ApplyError("the object to move vanished".into()))?;
        if let Some(p) = self.partitions.get_mut(&from.0) {
            p.objects -= 1;
        }
        let part = self
            .partitions
            .get_mut(&to.0)
            .ok_or_else(|| ApplyError(format!("partition {:#x} does not exist", to.0)))?;
        part.objects += 1;
        part.next_oid = part.next_oid.max(to.1.saturating_add(1));
        self.objects.insert(to, o);
        Ok(freed)
    }

    fn remove_range(&mut self, pid: u64) -> Vec<Extent> {
        let keys: Vec<_> = self
            .objects
            .range((pid, 0)..=(pid, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .flat_map(|(p, o)| self.remove_object(p, o))
            .collect()
    }

    /// Serialises the whole state (the checkpoint payload).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(b"TSRMETA1");
        w.u32(self.partitions.len() as u32);
        for (pid, p) in &self.partitions {
            w.u64(*pid);
            w.u64(p.created);
            w.u64(p.next_oid);
        }
        w.u64(self.objects.len() as u64);
        for ((pid, oid), o) in self.objects.iter() {
            w.u64(*pid);
            w.u64(*oid);
            o.encode(&mut w);
        }
        w.buf
    }

    /// Parses a checkpoint payload, checking that objects belong to
    /// partitions and ids are ordered.
    pub fn decode(buf: &[u8]) -> Result<Meta, DecodeError> {
        let mut r = Reader::new(buf);
        if r.take(8, "meta.magic")? != b"TSRMETA1" {
            return Err(DecodeError::new("meta.magic", "not a metadata checkpoint"));
        }
        let mut m = Meta {
            approx_bytes: HEADER_BYTES,
            ..Meta::default()
        };
        let n = r.count(24, "meta.partitions")?;
        for _ in 0..n {
            let pid = r.u64("partition.id")?;
            let created = r.u64("partition.created")?;
            let next_oid = r.u64("partition.next_oid")?;
            m.partitions.insert(
                pid,
                Partition {
                    created,
                    next_oid,
                    objects: 0,
                },
            );
            m.approx_bytes += PARTITION_BYTES;
        }
        let n = r.u64("meta.objects")?;
        let mut prev: Option<(u64, u64)> = None;
        for _ in 0..n {
            let key = (r.u64("object.partition")?, r.u64("object.id")?);
            if prev.is_some_and(|p| p >= key) {
                return Err(DecodeError::new(
                    "meta.objects",
                    format!("object {key:x?} out of order"),
                ));
            }
            prev = Some(key);
            let o = Onode::decode(&mut r)?;
            let part = m.partitions.get_mut(&key.0).ok_or_else(|| {
                DecodeError::new(
                    "meta.objects",
                    format!("object {:#x} in missing partition {:#x}", key.1, key.0),
                )
            })?;
            part.objects += 1;
            m.approx_bytes += onode_bytes(&o);
            m.attr_bytes += attrs_bytes(&o);
            m.reserved_blocks += o.reserved_blocks();
            m.objects.insert(key, o);
        }
        if r.remaining() != 0 {
            return Err(DecodeError::new(
                "meta",
                format!("{} trailing bytes", r.remaining()),
            ));
        }
        Ok(m)
    }
}
