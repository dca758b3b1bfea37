//! Tessera's object store: the object file system each OSD runs straight on a
//! raw block device or a preallocated file.
//!
//! Map of the crate (see `docs/ARCHITECTURE.md` and `docs/FORMAT.md`):
//! - [`device`]: the block device trait and its file, memory and fault-injecting forms;
//! - [`format`]: byte layouts of label, commit slots and their codecs;
//! - [`alloc`]: the EBOFS extent and OBFS region allocators;
//! - [`onode`], [`meta`]: object metadata and the whole metadata state;
//! - [`journal`], [`checkpoint`]: how metadata changes become durable;
//! - [`store`]: the object store API (partitions, objects, attributes);
//! - [`fsck`]: the invariant checker; [`crashtest`]: the power-cut driver.

pub mod alloc;
pub mod attrs;
pub mod checkpoint;
pub mod crashtest;
pub mod device;
pub mod error;
pub mod format;
pub mod fsck;
pub mod journal;
pub mod meta;
pub mod onode;
pub mod store;
pub mod table;

pub use error::{Result, StoreError};
pub use format::FORMAT_VERSION;
pub use format::label::Policy;
pub use store::{
    DEFAULT_MAX_ATTR_BYTES, DEFAULT_MAX_ATTRS_PER_OBJECT, DEFAULT_PARTITION, FormatOptions,
    OpenOptions, Store, format,
};
