//! Journal records: each one sets absolute state (never a delta), so applying
//! a record twice, or applying a suffix of the journal over a checkpoint that
//! already contains some of it, converges to the same state.

use crate::format::codec::{DecodeError, Reader, Writer};
use crate::onode::{MAX_ATTR_LEN, MapExtent};

/// One metadata change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A partition exists from now on.
    CreatePartition {
        /// Partition id.
        pid: u64,
        /// Creation time.
        time: u64,
    },
    /// A (empty) partition is gone.
    RemovePartition {
        /// Partition id.
        pid: u64,
    },
    /// An empty object exists (replacing any older object of that id).
    CreateObject {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// Creation time.
        time: u64,
    },
    /// The object and all its blocks are gone.
    RemoveObject {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
    },
    /// Logical blocks `[first, end)` now map to exactly `extents` (holes elsewhere in
    /// the range); inline data is dropped; size and class are set.
    SetData {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// First logical block replaced.
        first: u64,
        /// One past the last logical block replaced.
        end: u64,
        /// New mappings inside `[first, end)`.
        extents: Vec<MapExtent>,
        /// New logical size.
        size: u64,
        /// Data modification time.
        mtime: u64,
        /// Whether the object now uses large blocks.
        large: bool,
    },
    /// The object's data is exactly `data`, held inline; all blocks are released.
    SetInline {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// The whole object contents.
        data: Vec<u8>,
        /// Data modification time.
        mtime: u64,
    },
    /// The size is `size`; whole allocation units past it are released.
    Truncate {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// New logical size.
        size: u64,
        /// Data modification time.
        mtime: u64,
    },
    /// Attribute (page, number) is `value`; an empty value removes it.
    SetAttr {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// Attribute page.
        page: u32,
        /// Attribute number.
        number: u32,
        /// New value (empty = removed).
        value: Vec<u8>,
        /// Attribute modification time.
        time: u64,
    },
    /// The unmapped blocks of logical blocks `[first, end)` are reserved
    /// (`fallocate`); mapped blocks and existing reservations are kept.
    Reserve {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// First logical block.
        first: u64,
        /// One past the last logical block.
        end: u64,
    },
    /// Object `from_oid` of partition `from_pid` is now object `oid` of
    /// partition `pid` (data, attributes, version and times), replacing any
    /// object of that id: a copy built aside is installed in one step.
    MoveObject {
        /// Partition the object was in.
        from_pid: u64,
        /// Its id there.
        from_oid: u64,
        /// Partition it is in now.
        pid: u64,
        /// Its id now.
        oid: u64,
    },
    /// The object's version is `version`.
    SetVersion {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
        /// New version.
        version: u64,
    },
}

const T_CREATE_PARTITION: u8 = 1;
const T_REMOVE_PARTITION: u8 = 2;
const T_CREATE_OBJECT: u8 = 3;
const T_REMOVE_OBJECT: u8 = 4;
const T_SET_DATA: u8 = 5;
const T_SET_INLINE: u8 = 6;
const T_TRUNCATE: u8 = 7;
const T_SET_ATTR: u8 = 8;
const T_SET_VERSION: u8 = 9;
const T_RESERVE: u8 = 10;
const T_MOVE_OBJECT: u8 = 11;

impl Record {
    /// Appends the encoding to `w`.
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Record::CreatePartition { pid, time } => {
                w.u8(T_CREATE_PARTITION);
                w.u64(*pid);
                w.u64(*time);
            }
            Record::RemovePartition { pid } => {
                w.u8(T_REMOVE_PARTITION);
                w.u64(*pid);
            }
            Record::CreateObject { pid, oid, time } => {
                w.u8(T_CREATE_OBJECT);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*time);
            }
            Record::RemoveObject { pid, oid } => {
                w.u8(T_REMOVE_OBJECT);
                w.u64(*pid);
                w.u64(*oid);
            }
            Record::MoveObject {
                from_pid,
                from_oid,
                pid,
                oid,
            } => {
                w.u8(T_MOVE_OBJECT);
                w.u64(*from_pid);
                w.u64(*from_oid);
                w.u64(*pid);
                w.u64(*oid);
            }
            Record::SetData {
                pid,
                oid,
                first,
                end,
                extents,
                size,
                mtime,
                large,
            } => {
                w.u8(T_SET_DATA);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*first);
                w.u64(*end);
                w.u64(*size);
                w.u64(*mtime);
                w.u8(u8::from(*large));
                w.u32(extents.len() as u32);
                for e in extents {
                    e.encode(w);
                }
            }
            Record::SetInline {
                pid,
                oid,
                data,
                mtime,
            } => {
                w.u8(T_SET_INLINE);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*mtime);
                w.blob(data);
            }
            Record::Truncate {
                pid,
                oid,
                size,
                mtime,
            } => {
                w.u8(T_TRUNCATE);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*size);
                w.u64(*mtime);
            }
            Record::SetAttr {
                pid,
                oid,
                page,
                number,
                value,
                time,
            } => {
                w.u8(T_SET_ATTR);
                w.u64(*pid);
                w.u64(*oid);
                w.u32(*page);
                w.u32(*number);
                w.u64(*time);
                w.blob(value);
            }
            Record::SetVersion { pid, oid, version } => {
                w.u8(T_SET_VERSION);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*version);
            }
            Record::Reserve {
                pid,
                oid,
                first,
                end,
            } => {
                w.u8(T_RESERVE);
                w.u64(*pid);
                w.u64(*oid);
                w.u64(*first);
                w.u64(*end);
            }
        }
    }

    /// Decodes one record.
    pub fn decode(r: &mut Reader<'_>) -> Result<Record, DecodeError> {
        let tag = r.u8("record.type")?;
        Ok(match tag {
            T_CREATE_PARTITION => Record::CreatePartition {
                pid: r.u64("pid")?,
                time: r.u64("time")?,
            },
            T_REMOVE_PARTITION => Record::RemovePartition { pid: r.u64("pid")? },
            T_CREATE_OBJECT => Record::CreateObject {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                time: r.u64("time")?,
            },
            T_REMOVE_OBJECT => Record::RemoveObject {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
            },
            T_MOVE_OBJECT => Record::MoveObject {
                from_pid: r.u64("from_pid")?,
                from_oid: r.u64("from_oid")?,
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
            },
            T_SET_DATA => {
                let pid = r.u64("pid")?;
                let oid = r.u64("oid")?;
                let first = r.u64("first")?;
                let end = r.u64("end")?;
                let size = r.u64("size")?;
                let mtime = r.u64("mtime")?;
                let large = r.u8("large")? != 0;
                let n = r.count(20, "extents")?;
                let mut extents = Vec::with_capacity(n);
                for _ in 0..n {
                    extents.push(MapExtent::decode(r)?);
                }
                Record::SetData {
                    pid,
                    oid,
                    first,
                    end,
                    extents,
                    size,
                    mtime,
                    large,
                }
            }
            T_SET_INLINE => Record::SetInline {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                mtime: r.u64("mtime")?,
                data: r.blob(4096, "inline data")?.to_vec(),
            },
            T_TRUNCATE => Record::Truncate {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                size: r.u64("size")?,
                mtime: r.u64("mtime")?,
            },
            T_SET_ATTR => Record::SetAttr {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                page: r.u32("page")?,
                number: r.u32("number")?,
                time: r.u64("time")?,
                value: r.blob(MAX_ATTR_LEN, "attribute value")?.to_vec(),
            },
            T_SET_VERSION => Record::SetVersion {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                version: r.u64("version")?,
            },
            T_RESERVE => Record::Reserve {
                pid: r.u64("pid")?,
                oid: r.u64("oid")?,
                first: r.u64("first")?,
                end: r.u64("end")?,
            },
            t => {
                return Err(DecodeError::new(
                    "record.type",
                    format!("unknown record type {t}"),
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::format::codec::Reader;

    fn extent() -> impl Strategy<Value = MapExtent> {
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(any::<u32>(), 1..8),
        )
            .prop_map(|(lblock, pblock, crcs)| MapExtent {
                lblock,
                pblock,
                crcs: crcs.into(),
            })
    }

    fn record() -> impl Strategy<Value = Record> {
        let id = any::<u64>();
        prop_oneof![
            (id, any::<u64>()).prop_map(|(pid, time)| Record::CreatePartition { pid, time }),
            id.prop_map(|pid| Record::RemovePartition { pid }),
            (id, id, any::<u64>()).prop_map(|(pid, oid, time)| Record::CreateObject {
                pid,
                oid,
                time
            }),
            (id, id).prop_map(|(pid, oid)| Record::RemoveObject { pid, oid }),
            (
                id,
                id,
                any::<u64>(),
                any::<u64>(),
                proptest::collection::vec(extent(), 0..4),
                any::<u64>(),
                any::<u64>(),
                any::<bool>()
            )
                .prop_map(|(pid, oid, first, end, extents, size, mtime, large)| {
                    Record::SetData {
                        pid,
                        oid,
                        first,
                        end,
                        extents,
                        size,
                        mtime,
                        large,
                    }
                }),
            (
                id,
                id,
                proptest::collection::vec(any::<u8>(), 0..600),
                any::<u64>()
            )
                .prop_map(|(pid, oid, data, mtime)| Record::SetInline {
                    pid,
                    oid,
                    data,
                    mtime
                }),
            (id, id, any::<u64>(), any::<u64>()).prop_map(|(pid, oid, size, mtime)| {
                Record::Truncate {
                    pid,
                    oid,
                    size,
                    mtime,
                }
            }),
            (
                id,
                id,
                any::<u32>(),
                any::<u32>(),
                proptest::collection::vec(any::<u8>(), 0..300),
                any::<u64>()
            )
                .prop_map(|(pid, oid, page, number, value, time)| Record::SetAttr {
                    pid,
                    oid,
                    page,
                    number,
                    value,
                    time
                }),
            (id, id, id, id).prop_map(|(from_pid, from_oid, pid, oid)| Record::MoveObject {
                from_pid,
                from_oid,
                pid,
                oid
            }),
            (id, id, any::<u64>()).prop_map(|(pid, oid, version)| Record::SetVersion {
                pid,
                oid,
                version
            }),
            (id, id, any::<u64>(), any::<u64>()).prop_map(|(pid, oid, first, end)| {
                Record::Reserve {
                    pid,
                    oid,
                    first,
                    end,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_record_round_trips(r in record()) {
            let mut w = Writer::new();
            r.encode(&mut w);
            let mut rd = Reader::new(&w.buf);
            prop_assert_eq!(Record::decode(&mut rd).unwrap(), r);
            prop_assert_eq!(rd.remaining(), 0);
        }

        #[test]
        fn decoders_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = Record::decode(&mut Reader::new(&bytes));
            let _ = crate::meta::Meta::decode(&bytes);
            let _ = crate::format::label::Label::decode(&bytes);
            let _ = crate::format::slot::Slot::decode(&bytes);
            let mut b = bytes.clone();
            if b.len() >= 8 {
                b[..8].copy_from_slice(b"TSRMETA1");
                let _ = crate::meta::Meta::decode(&b);
            }
        }

        #[test]
        fn truncated_records_are_errors_not_panics(r in record(), cut in 0usize..64) {
            let mut w = Writer::new();
            r.encode(&mut w);
            let n = w.buf.len().saturating_sub(cut + 1);
            prop_assert!(Record::decode(&mut Reader::new(&w.buf[..n])).is_err());
        }
    }
}
