//! The records the MDS keeps in its KV, their keys, and typed access over
//! any [`View`]. Values are postcard; keys holding numbers are big-endian.

use std::ops::Bound;

use proto::layout::{Layout, LayoutSpec};
use proto::mds::{Attr, Errno, FileKind, MdsError};
use proto::placement::OsdMap;
use serde::{Deserialize, Serialize};

use crate::ids::{Counters, DirIds, IdPolicy};
use crate::kv::{T, Tx, View, io_err};

/// An inode: POSIX attributes plus what the kind needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Attributes (ino = namespace id).
    pub attr: Attr,
    /// Directory of the most recent name (directories: their only one).
    pub parent: u64,
    /// That name.
    pub name: String,
    /// Files: the layout.
    pub layout: Option<Layout>,
    /// Symlinks: the target.
    pub target: Option<String>,
    /// Directories: entries and id state.
    pub dir: Option<DirMeta>,
}

/// What a directory keeps besides attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirMeta {
    /// Entries in it.
    pub entries: u64,
    /// Its id-allocation state.
    pub ids: DirIds,
    /// Layout for new files (inherited by new subdirectories).
    pub default_layout: LayoutSpec,
}

/// Fixed at format time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superblock {
    /// Format version of these records.
    pub version: u32,
    /// Cluster id.
    pub cluster_id: String,
    /// Object-id policy.
    pub policy: IdPolicy,
    /// When the file system was made (ms since the epoch).
    pub created_ms: u64,
}

/// Current format version of the records.
pub const RECORDS_VERSION: u32 = 4;

/// Counters that change with operations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsState {
    /// Id-policy counters.
    pub ids: Counters,
    /// The monotonic capability version (Hendricks et al.): caps are issued with it;
    /// revocation sets an object's version to it and then increments it.
    pub cap_version: u64,
    /// Next delete-queue sequence number.
    pub delq_seq: u64,
    /// Inodes in the namespace.
    pub inodes: u64,
    /// Current OSD map epoch.
    pub map_epoch: u64,
}

/// Objects to remove from the OSDs once a file is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteJob {
    /// The file it was (for logs).
    pub ino: u64,
    /// Its layout (spec, map epoch, object sets).
    pub layout: Layout,
}

/// Inode records a prefetch reads per neighbour it may return, on each
/// side of the entry (orphans among them are read and skipped).
pub const NEIGHBOUR_SCAN: usize = 3;

const SUPER_KEY: &[u8] = b"superblock";
const STATE_KEY: &[u8] = b"state";
const NAMESPACE_KEY: &[u8] = b"namespace";
const CHAINS_KEY: &[u8] = b"chains";

/// The key of the mark of the store OSD `osd` was last seen on.
fn store_key(osd: u32) -> Vec<u8> {
    let mut k = b"store.".to_vec();
    k.extend_from_slice(&osd.to_be_bytes());
    k
}

/// Where the namespace lives and, on the OSDs, where its root is. Kept
/// under its own key (absent = the MDS namespace, as before it existed).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NamespaceRecord {
    /// Mode chosen at format time.
    pub mode: proto::mds::NamespaceMode,
    /// OSD of the root directory object (OSD mode, once made).
    pub root_osd: Option<u32>,
    /// OSD mode: directory protocol of the root ("atomic" or "lock"),
    /// used by the first client that makes it.
    pub dir_protocol: String,
    /// OSD mode: the layout new files take.
    pub layout: proto::layout::LayoutSpec,
}

/// Big-endian key of a number.
pub fn num_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Key of a directory entry.
pub fn dentry_key(parent: u64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Key of an extended attribute.
pub fn xattr_key(ino: u64, name: &str) -> Vec<u8> {
    dentry_key(ino, name)
}

fn decode<T: for<'a> Deserialize<'a>>(what: &str, b: &[u8]) -> Result<T, MdsError> {
    postcard::from_bytes(b).map_err(|e| io_err(&format!("decode {what}"), e))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, MdsError> {
    postcard::to_allocvec(v).map_err(|e| io_err("encode", e))
}

fn kind_byte(k: FileKind) -> u8 {
    match k {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::CharDev => 5,
        FileKind::BlockDev => 6,
        FileKind::Socket => 7,
    }
}

fn byte_kind(b: u8) -> Result<FileKind, MdsError> {
    Ok(match b {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::CharDev,
        6 => FileKind::BlockDev,
        7 => FileKind::Socket,
        _ => return Err(io_err("dentry", format!("kind byte {b}"))),
    })
}

/// Decodes a dentry value.
pub fn decode_dentry(v: &[u8]) -> Result<(u64, FileKind), MdsError> {
    if v.len() != 9 {
        return Err(io_err("dentry", format!("{} bytes", v.len())));
    }
    let ino = u64::from_le_bytes(v[..8].try_into().map_err(|e| io_err("dentry", e))?);
    Ok((ino, byte_kind(v[8])?))
}

/// A page of directory entries (name, inode, kind) and whether more follow.
pub type DirPage = (Vec<(String, u64, FileKind)>, bool);

/// Typed reads over any view.
pub trait Records: View {
    /// The superblock.
    fn superblock(&self) -> Result<Superblock, MdsError> {
        let b = self
            .get(T::Meta, SUPER_KEY)?
            .ok_or_else(|| io_err("superblock", "missing: not a formatted MDS"))?;
        decode("superblock", &b)
    }

    /// Where the namespace lives.
    fn namespace(&self) -> Result<NamespaceRecord, MdsError> {
        match self.get(T::Meta, NAMESPACE_KEY)? {
            Some(b) => decode("namespace", &b),
            None => Ok(NamespaceRecord::default()),
        }
    }

    /// The replica chains (namespace on the OSDs with copies), if kept.
    fn chains(&self) -> Result<Option<proto::chain::ChainTable>, MdsError> {
        match self.get(T::Meta, CHAINS_KEY)? {
            Some(b) => Ok(Some(decode("chains", &b)?)),
            None => Ok(None),
        }
    }

    /// The mark of the store OSD `osd` was last seen on, if recorded.
    fn store_mark(&self, osd: u32) -> Result<Option<proto::mds::StoreMark>, MdsError> {
        match self.get(T::Meta, &store_key(osd))? {
            Some(b) => Ok(Some(decode("store mark", &b)?)),
            None => Ok(None),
        }
    }

    /// The counters.
    fn state(&self) -> Result<FsState, MdsError> {
        match self.get(T::Meta, STATE_KEY)? {
            Some(b) => decode("state", &b),
            None => Ok(FsState::default()),
        }
    }

    /// An inode, if it exists.
    fn inode(&self, ino: u64) -> Result<Option<Inode>, MdsError> {
        match self.get(T::Inodes, &num_key(ino))? {
            Some(b) => Ok(Some(decode("inode", &b)?)),
            None => Ok(None),
        }
    }

    /// An inode that must exist (ESTALE otherwise: the client's handle is old).
    fn live_inode(&self, ino: u64) -> Result<Inode, MdsError> {
        self.inode(ino)?
            .ok_or_else(|| MdsError::new(Errno::Stale, format!("inode {ino:#x} does not exist")))
    }

    /// A directory inode (ENOTDIR if it is something else).
    fn dir_inode(&self, ino: u64) -> Result<Inode, MdsError> {
        let i = self.live_inode(ino)?;
        if i.attr.kind != FileKind::Dir {
            return Err(MdsError::new(
                Errno::NotDir,
                format!("inode {ino:#x} is not a directory"),
            ));
        }
        Ok(i)
    }

    /// The entry `name` in `parent`.
    fn dentry(&self, parent: u64, name: &str) -> Result<Option<(u64, FileKind)>, MdsError> {
        match self.get(T::Dentries, &dentry_key(parent, name))? {
            Some(v) => Ok(Some(decode_dentry(&v)?)),
            None => Ok(None),
        }
    }

    /// Entries of `dir` after `after`, at most `max`, in name order.
    fn list_dir(&self, dir: u64, after: Option<&str>, max: usize) -> Result<DirPage, MdsError> {
        let lo = match after {
            Some(a) => dentry_key(dir, a),
            None => dir.to_be_bytes().to_vec(),
        };
        let hi = (dir + 1).to_be_bytes();
        let lo_bound = if after.is_some() {
            Bound::Excluded(&lo[..])
        } else {
            Bound::Included(&lo[..])
        };
        let hi_bound = if dir == u64::MAX {
            Bound::Unbounded
        } else {
            Bound::Excluded(&hi[..])
        };
        let mut out = Vec::new();
        let mut more = false;
        let mut bad = None;
        self.scan(T::Dentries, lo_bound, hi_bound, false, &mut |k, v| {
            if out.len() == max {
                more = true;
                return false;
            }
            let name = String::from_utf8_lossy(&k[8..]).into_owned();
            match decode_dentry(v) {
                Ok((ino, kind)) => out.push((name, ino, kind)),
                Err(e) => bad = Some(e),
            }
            true
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        Ok((out, more))
    }

    /// An OSD map by epoch.
    fn map(&self, epoch: u64) -> Result<Option<OsdMap>, MdsError> {
        match self.get(T::Maps, &num_key(epoch))? {
            Some(b) => Ok(Some(decode("map", &b)?)),
            None => Ok(None),
        }
    }

    /// Up to `n` inodes with ids nearest `ino` (not `ino` itself), nearest
    /// first. Orphans are skipped, but at most [`NEIGHBOUR_SCAN`] records
    /// per `n` are read on each side: after a mass removal the ids next
    /// to a live file are orphans until the delete worker frees them, and
    /// reading them all made every lookup there cost O(orphans).
    fn neighbours(&self, ino: u64, n: usize) -> Result<Vec<Inode>, MdsError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let key = num_key(ino);
        let budget = n.saturating_mul(NEIGHBOUR_SCAN);
        let mut above = Vec::new();
        let mut below = Vec::new();
        let mut bad = None;
        let mut collect = |out: &mut Vec<Inode>, read: &mut usize, v: &[u8]| {
            *read += 1;
            match decode::<Inode>("inode", v) {
                // An orphan has no name to be looked up by: not prefetched.
                Ok(i) if i.attr.nlink == 0 => {}
                Ok(i) => out.push(i),
                Err(e) => bad = Some(e),
            }
            out.len() < n && *read < budget
        };
        let (mut read_above, mut read_below) = (0, 0);
        self.scan(
            T::Inodes,
            Bound::Excluded(&key[..]),
            Bound::Unbounded,
            false,
            &mut |_, v| collect(&mut above, &mut read_above, v),
        )?;
        self.scan(
            T::Inodes,
            Bound::Unbounded,
            Bound::Excluded(&key[..]),
            true,
            &mut |_, v| collect(&mut below, &mut read_below, v),
        )?;
        if let Some(e) = bad {
            return Err(e);
        }
        Ok(crate::ids::nearest_by_id(ino, above, below, n, |i| {
            i.attr.ino
        }))
    }

    /// Extended attribute names of `ino`.
    fn xattr_names(&self, ino: u64) -> Result<Vec<String>, MdsError> {
        let lo = ino.to_be_bytes();
        let hi = ino.wrapping_add(1).to_be_bytes();
        let mut out = Vec::new();
        self.scan(
            T::Xattrs,
            Bound::Included(&lo[..]),
            if ino == u64::MAX {
                Bound::Unbounded
            } else {
                Bound::Excluded(&hi[..])
            },
            false,
            &mut |k, _| {
                out.push(String::from_utf8_lossy(&k[8..]).into_owned());
                true
            },
        )?;
        Ok(out)
    }
}

impl<V: View + ?Sized> Records for V {}

/// Typed writes.
impl Tx<'_> {
    /// Stores an inode.
    pub fn put_inode(&mut self, i: &Inode) -> Result<(), MdsError> {
        self.put(T::Inodes, &num_key(i.attr.ino), &encode(i)?)
    }

    /// Stores a directory entry.
    pub fn put_dentry(
        &mut self,
        parent: u64,
        name: &str,
        ino: u64,
        kind: FileKind,
    ) -> Result<(), MdsError> {
        let mut v = [0u8; 9];
        v[..8].copy_from_slice(&ino.to_le_bytes());
        v[8] = kind_byte(kind);
        self.put(T::Dentries, &dentry_key(parent, name), &v)
    }

    /// Stores the counters.
    pub fn put_state(&mut self, s: &FsState) -> Result<(), MdsError> {
        self.put(T::Meta, STATE_KEY, &encode(s)?)
    }

    /// Takes the next capability version in this transaction: objects
    /// revoked at the returned value refuse every capability issued before.
    pub fn take_cap_version(&mut self) -> Result<u64, MdsError> {
        let mut st = self.state()?;
        let v = st.cap_version;
        st.cap_version += 1;
        self.put_state(&st)?;
        Ok(v)
    }

    /// Stores the namespace record.
    pub fn put_namespace(&mut self, n: &NamespaceRecord) -> Result<(), MdsError> {
        self.put(T::Meta, NAMESPACE_KEY, &encode(n)?)
    }

    /// Stores the replica chains.
    pub fn put_chains(&mut self, t: &proto::chain::ChainTable) -> Result<(), MdsError> {
        self.put(T::Meta, CHAINS_KEY, &encode(t)?)
    }

    /// Records the mark of the store OSD `osd` runs on.
    pub fn put_store_mark(&mut self, osd: u32, m: &proto::mds::StoreMark) -> Result<(), MdsError> {
        self.put(T::Meta, &store_key(osd), &encode(m)?)
    }

    /// Stores the superblock.
    pub fn put_superblock(&mut self, s: &Superblock) -> Result<(), MdsError> {
        self.put(T::Meta, SUPER_KEY, &encode(s)?)
    }

    /// Stores an OSD map.
    pub fn put_map(&mut self, m: &OsdMap) -> Result<(), MdsError> {
        self.put(T::Maps, &num_key(m.epoch), &encode(m)?)
    }

    /// Queues a file's objects for removal.
    pub fn queue_delete(&mut self, st: &mut FsState, job: &DeleteJob) -> Result<(), MdsError> {
        st.delq_seq += 1;
        self.put(T::DeleteQueue, &num_key(st.delq_seq), &encode(job)?)
    }

    /// Records `ino` as an orphan: no name left, kept while a client may
    /// hold it open.
    pub fn put_orphan(&mut self, ino: u64, since_ms: u64) -> Result<(), MdsError> {
        self.put(T::Orphans, &num_key(ino), &since_ms.to_le_bytes())
    }

    /// Removes an inode with its extended attributes and extra object ids.
    pub fn drop_inode(&mut self, i: &Inode) -> Result<(), MdsError> {
        for name in self.xattr_names(i.attr.ino)? {
            self.del(T::Xattrs, &xattr_key(i.attr.ino, &name))?;
        }
        if let Some(l) = &i.layout {
            for &oid in l.objsets.iter().skip(1) {
                self.del(T::Objsets, &num_key(oid & !proto::layout::DATA_OID_TAG))?;
            }
        }
        self.del(T::Inodes, &num_key(i.attr.ino))
    }
}

/// Whether an id is in use (an inode, an object set, or a number delegated
/// with a directory lease): what a policy must not hand out again.
pub(crate) fn taken<'a>(tx: &'a Tx<'_>) -> impl FnMut(u64) -> bool + 'a {
    |id| {
        tx.get(T::Inodes, &num_key(id)).ok().flatten().is_some()
            || tx.get(T::Objsets, &num_key(id)).ok().flatten().is_some()
            || tx.get(T::Delegated, &num_key(id)).ok().flatten().is_some()
    }
}
