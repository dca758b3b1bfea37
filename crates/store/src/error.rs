//! Errors of the object store: one enum, one variant per distinct failure, so
//! callers (and the OSD's wire error codes) can tell them apart without
//! parsing messages. Corruption variants carry what was expected and found.

use std::io;

/// Every way a store operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The device failed an I/O; `what` names the object or structure involved.
    #[error("I/O error on {what}: {source}")]
    Io {
        /// The object or on-disk structure being read or written.
        what: String,
        /// The underlying device error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes do not match their checksum; nothing is returned.
    #[error(
        "checksum mismatch in {what} at byte {offset}: stored crc32c {expected:#010x}, computed {actual:#010x}"
    )]
    Checksum {
        /// The object or on-disk structure that failed verification.
        what: String,
        /// Byte offset (within the object, or on the device for metadata).
        offset: u64,
        /// The checksum recorded when the bytes were written.
        expected: u32,
        /// The checksum of the bytes read back.
        actual: u32,
    },
    /// On-disk metadata is damaged or inconsistent; the store refuses to open it.
    #[error("corrupt store metadata: {0}")]
    Corrupt(String),
    /// The device carries something that is not a Tessera store (or is one, when formatting).
    #[error("{0}")]
    Signature(String),
    /// The store was written by a newer format version than this build understands.
    #[error(
        "store format version {found} is newer than this build supports ({supported}); upgrade tessera"
    )]
    NewerFormat {
        /// Version found on disk.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// Not enough free space for the request; nothing was changed.
    #[error("no space left on device: need {needed} bytes, {free} bytes free")]
    NoSpace {
        /// Bytes the request needed.
        needed: u64,
        /// Bytes free at the time.
        free: u64,
    },
    /// The store's metadata (all held in memory) would pass its bound;
    /// nothing was changed. Removing objects or attributes makes room.
    #[error("{what}: the bound of {limit} is reached; nothing was changed")]
    MetadataFull {
        /// What is bounded ("metadata bytes", "attributes on object …").
        what: String,
        /// The bound.
        limit: u64,
    },
    /// The partition does not exist.
    #[error("partition {0:#x} not found")]
    NoPartition(u64),
    /// The partition already exists.
    #[error("partition {0:#x} already exists")]
    PartitionExists(u64),
    /// The partition still holds objects.
    #[error("partition {0:#x} is not empty ({1} objects)")]
    PartitionNotEmpty(u64, u64),
    /// The object does not exist.
    #[error("object {oid:#x} not found in partition {pid:#x}")]
    NoObject {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
    },
    /// The object already exists.
    #[error("object {oid:#x} already exists in partition {pid:#x}")]
    ObjectExists {
        /// Partition id.
        pid: u64,
        /// Object id.
        oid: u64,
    },
    /// A request argument is out of its valid domain; `field` names it.
    #[error("invalid argument {field}: {reason}")]
    Invalid {
        /// The offending argument.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// A read-only attribute (one the store maintains) was written.
    #[error("attribute page {page:#x} number {number:#x} is maintained by the store and read-only")]
    ReadOnlyAttribute {
        /// Attribute page.
        page: u32,
        /// Attribute number.
        number: u32,
    },
    /// An earlier device failure left the in-memory state unsure; reopen the store.
    #[error("store is failed after an earlier device error ({0}); reopen it to recover")]
    Failed(String),
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Wraps a device error with the name of what was being accessed.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }

    /// A corruption error with a formatted description.
    pub fn corrupt(msg: impl Into<String>) -> Self {
        StoreError::Corrupt(msg.into())
    }

    /// An invalid-argument error.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        StoreError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
