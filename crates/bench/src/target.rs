//! What a benchmark runs against: the store, or one file per object in a
//! flat directory of a host file system (the OBFS paper's baseline).

use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use store::{DEFAULT_PARTITION, Store};

/// An object store under test. Every `put` is durable when it returns.
pub trait ObjectTarget: Send + Sync {
    /// Name in reports.
    fn name(&self) -> String;
    /// Creates object `id` with `data`, durably.
    fn create(&self, id: u64, data: &[u8]) -> anyhow::Result<()>;
    /// Replaces the contents of an existing object, durably.
    fn rewrite(&self, id: u64, data: &[u8]) -> anyhow::Result<()>;
    /// Reads the whole object.
    fn read(&self, id: u64, len: usize) -> anyhow::Result<Vec<u8>>;
    /// Deletes the object, durably.
    fn delete(&self, id: u64) -> anyhow::Result<()>;
    /// Makes the next reads come from the device (drop caches).
    fn cold(&self) {}
}

/// The Tessera store.
pub struct StoreTarget {
    /// The open store.
    pub store: Arc<Store>,
}

impl ObjectTarget for StoreTarget {
    fn name(&self) -> String {
        format!("tessera-{}", self.store.label().policy.name())
    }
    fn create(&self, id: u64, data: &[u8]) -> anyhow::Result<()> {
        self.store.create_and_write(DEFAULT_PARTITION, id, data)?;
        Ok(())
    }
    fn rewrite(&self, id: u64, data: &[u8]) -> anyhow::Result<()> {
        self.store.write(DEFAULT_PARTITION, id, 0, data)?;
        Ok(())
    }
    fn read(&self, id: u64, len: usize) -> anyhow::Result<Vec<u8>> {
        Ok(self.store.read(DEFAULT_PARTITION, id, 0, len as u64)?)
    }
    fn delete(&self, id: u64) -> anyhow::Result<()> {
        self.store.remove(DEFAULT_PARTITION, id)?;
        Ok(())
    }
}

/// One file per object in one flat directory, fsync per object.
pub struct FlatDirTarget {
    /// Label (ext4 / xfs).
    pub label: String,
    /// The directory.
    pub dir: PathBuf,
}

impl FlatDirTarget {
    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}"))
    }
}

impl ObjectTarget for FlatDirTarget {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn create(&self, id: u64, data: &[u8]) -> anyhow::Result<()> {
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .open(self.path(id))?;
        f.write_all(data)?;
        f.sync_all()?;
        Ok(())
    }
    fn rewrite(&self, id: u64, data: &[u8]) -> anyhow::Result<()> {
        let mut f = File::options().write(true).open(self.path(id))?;
        f.write_all(data)?;
        f.set_len(data.len() as u64)?;
        f.sync_all()?;
        Ok(())
    }
    fn read(&self, id: u64, len: usize) -> anyhow::Result<Vec<u8>> {
        let mut v = Vec::with_capacity(len);
        File::open(self.path(id))?.read_to_end(&mut v)?;
        Ok(v)
    }
    fn delete(&self, id: u64) -> anyhow::Result<()> {
        std::fs::remove_file(self.path(id))?;
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }
    fn cold(&self) {
        crate::loopdev::drop_caches();
    }
}
