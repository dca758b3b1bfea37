//! The metadata service: answers [`MdsRequest`]s from the namespace (read
//! from snapshots, written through the KV's group commit), issues
//! capabilities, prefetches neighbours, keeps the OSD map, and acts on the
//! OSDs itself for revocation, truncation and deletion.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use net::keys::{KeyError, KeyFile};
use net::{ConnConfig, ConnError, OsdClient};
use proto::layout::{DATA_OID_TAG, DATA_PARTITION, Layout, data_oid};
use proto::mds::{
    ClusterStatus, Creds, DirEntry, Entry, Errno, FileKind, Found, FsStat, Grant, MdsError,
    MdsReply, MdsRequest, NAME_MAX, NamespaceGrant, NamespaceMode, Op, OsdReport, OsdStatus,
    READDIR_MAX, ROOT_INO,
};
use proto::placement::OsdMap;
use proto::{Capability, Command, ErrorCode, KeyRing, rights};

use crate::cluster::{Live, LiveMap, map_after, verify_report};
use crate::config::{FormatOptions, MdsConfig};
use crate::kv::{Kv, KvPaths, T, View};
use crate::metrics::MdsMetrics;
use crate::ns;
use crate::records::{DeleteJob, FsState, Inode, RECORDS_VERSION, Records, Superblock, num_key};
use posix::perm::{self, R, W};

/// Rights a reader gets on a file's objects.
pub const READ_RIGHTS: u32 = rights::READ | rights::GET_ATTR;
/// Rights a writer gets on a file's objects.
pub const WRITE_RIGHTS: u32 = rights::WRITE | rights::APPEND | rights::CREATE | rights::SET_ATTR;

/// One stripe object: (OSD, object id, object set, stripe index).
pub type ObjectAt = (u32, u64, u64, u32);

/// Files in an MDS data directory.
pub struct MdsPaths {
    /// The directory.
    pub dir: PathBuf,
}

impl MdsPaths {
    /// Settings file.
    pub fn config(&self) -> PathBuf {
        self.dir.join("mds.toml")
    }
    /// OSD key files (`osd-<id>.toml`).
    pub fn keys(&self) -> PathBuf {
        self.dir.join("keys")
    }
    /// KV files.
    pub fn kv(&self) -> KvPaths {
        KvPaths::new(&self.dir)
    }
}

/// Formats an empty file system in `dir`.
pub fn format(dir: &Path, opts: &FormatOptions) -> Result<(), MdsError> {
    opts.layout
        .validate()
        .map_err(|m| MdsError::new(Errno::Inval, m))?;
    opts.policy
        .geo
        .validate()
        .map_err(|m| MdsError::new(Errno::Inval, m))?;
    std::fs::create_dir_all(dir.join("keys"))
        .map_err(|e| MdsError::new(Errno::Io, format!("{}: {e}", dir.display())))?;
    let paths = MdsPaths { dir: dir.into() };
    crate::kv::create(&paths.kv(), opts.wal_bytes)?;
    let kv = Kv::open(&paths.kv(), 16 << 20)?;
    let sb = Superblock {
        version: RECORDS_VERSION,
        cluster_id: opts.cluster_id.clone(),
        policy: opts.policy,
        created_ms: proto::clock::now_ms(),
    };
    let layout = opts.layout;
    let namespace = opts.namespace;
    let dir_protocol = opts.dir_protocol.clone();
    kv.write_blocking(move |tx| {
        tx.put_superblock(&sb)?;
        tx.put_namespace(&crate::records::NamespaceRecord {
            mode: namespace,
            root_osd: None,
            dir_protocol,
            layout,
        })?;
        ns::format_root(tx, &sb.policy, layout, ns::now_ns())?;
        tx.put_map(&OsdMap::default())
    })?;
    kv.close();
    if !paths.config().exists() {
        let text = toml::to_string_pretty(&MdsConfig::default())
            .map_err(|e| MdsError::new(Errno::Io, e.to_string()))?;
        std::fs::write(paths.config(), text)
            .map_err(|e| MdsError::new(Errno::Io, format!("{}: {e}", paths.config().display())))?;
    }
    Ok(())
}

/// Loads every `osd-<id>.toml` key file in `dir`.
pub fn load_keys(dir: &Path, cluster_id: &str) -> Result<HashMap<u32, KeyRing>, KeyError> {
    let mut out = HashMap::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(source) => {
            return Err(KeyError::Io {
                path: dir.into(),
                source,
            });
        }
    };
    for ent in rd.flatten() {
        let p = ent.path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let kf = KeyFile::load(&p)?;
        if kf.cluster_id != cluster_id {
            return Err(KeyError::OtherCluster {
                path: p,
                found: kf.cluster_id,
                expected: cluster_id.into(),
            });
        }
        out.insert(kf.osd_id, kf.ring()?);
    }
    Ok(out)
}

/// Most delete jobs the worker takes from the queue per pass.
pub const DELETE_BATCH: usize = 10_000;

/// The sequence number a delete-queue key holds (8 bytes, big-endian).
fn queue_seq(k: &[u8]) -> Result<u64, MdsError> {
    <[u8; 8]>::try_from(k).map(u64::from_be_bytes).map_err(|_| {
        crate::kv::io_err(
            "delete queue",
            format!("key of {} bytes, expected 8: {k:02x?}", k.len()),
        )
    })
}

/// The running metadata service.
pub struct Mds {
    /// The KV.
    pub kv: Arc<Kv>,
    /// Fixed facts.
    pub sb: Superblock,
    /// Settings.
    pub cfg: MdsConfig,
    keys: Mutex<HashMap<u32, KeyRing>>,
    keys_dir: PathBuf,
    live: Mutex<LiveMap>,
    osds: Mutex<HashMap<u32, (String, Arc<OsdClient>)>>,
    /// Counters for `/metrics`.
    pub metrics: Arc<MdsMetrics>,
    /// Wakes the delete-queue worker.
    pub delete_wake: tokio::sync::Notify,
    /// Where the namespace lives (fixed at format time).
    pub namespace: proto::mds::NamespaceMode,
}

fn err(e: Errno, m: impl Into<String>) -> MdsError {
    MdsError::new(e, m)
}

fn osd_err(osd: u32, e: ConnError) -> MdsError {
    err(Errno::Io, format!("OSD {osd}: {e}"))
}

impl Mds {
    /// Opens the service on a formatted data directory.
    pub fn open(dir: &Path) -> Result<Arc<Mds>, MdsError> {
        let paths = MdsPaths { dir: dir.into() };
        let cfg = MdsConfig::load(&paths.config()).map_err(|m| err(Errno::Inval, m))?;
        let kv = Arc::new(Kv::open(&paths.kv(), cfg.cache_mib << 20)?);
        let sb = kv.read()?.superblock()?;
        if sb.version != RECORDS_VERSION {
            return Err(err(
                Errno::Inval,
                format!(
                    "metadata format version {} (this build reads {RECORDS_VERSION})",
                    sb.version
                ),
            ));
        }
        let keys = load_keys(&paths.keys(), &sb.cluster_id)
            .map_err(|m| err(Errno::Inval, m.to_string()))?;
        let namespace = kv.read()?.namespace()?.mode;
        Ok(Arc::new(Mds {
            namespace,
            kv,
            sb,
            cfg,
            keys: Mutex::new(keys),
            keys_dir: paths.keys(),
            live: Mutex::new(LiveMap::default()),
            osds: Mutex::new(HashMap::new()),
            metrics: Arc::new(MdsMetrics::new()),
            delete_wake: tokio::sync::Notify::new(),
        }))
    }

    fn now_ms() -> u64 {
        proto::clock::now_ms()
    }

    /// The current OSD map.
    pub fn current_map(&self) -> Result<OsdMap, MdsError> {
        let snap = self.kv.read()?;
        let st = snap.state()?;
        Ok(snap.map(st.map_epoch)?.unwrap_or_default())
    }

    /// Capabilities for object ids `[lo, hi]` on every OSD of `map` we hold a key for.
    pub fn grant(&self, map: &OsdMap, lo: u64, hi: u64, rights: u32, version: u64) -> Grant {
        let expiry_ms = Self::now_ms() + self.cfg.cap_ttl_secs * 1000;
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let caps = map
            .osds
            .iter()
            .filter_map(|o| {
                let ring = keys.get(&o.id)?;
                let (kv, key) = ring.newest()?;
                Some((
                    o.id,
                    Capability::sign(
                        key,
                        kv,
                        o.id,
                        DATA_PARTITION,
                        lo,
                        hi,
                        rights,
                        expiry_ms,
                        version,
                    ),
                ))
            })
            .collect();
        Grant {
            lo,
            hi,
            rights,
            expiry_ms,
            caps,
        }
    }

    fn rights_for(i: &Inode, c: &Creds, write: bool) -> u32 {
        let mut r = 0;
        if perm::allowed(&i.attr, c, R) {
            r |= READ_RIGHTS;
        }
        if write && perm::allowed(&i.attr, c, W) {
            r |= WRITE_RIGHTS;
        }
        r
    }

    fn entry(i: &Inode) -> Entry {
        Entry {
            parent: i.parent,
            name: i.name.clone(),
            attr: i.attr.clone(),
            layout: i.layout.clone(),
        }
    }

    /// A lookup-style answer with the entry only (no capabilities, no prefetch).
    fn bare(i: &Inode) -> Found {
        Found {
            entry: Self::entry(i),
            grants: Vec::new(),
            prefetch: Vec::new(),
            prefetch_grants: Vec::new(),
        }
    }

    /// Grants for one file's objects.
    fn file_grants(&self, map: &OsdMap, i: &Inode, rights: u32, version: u64) -> Vec<Grant> {
        match (&i.layout, rights) {
            (Some(l), r) if r != 0 => l
                .objsets
                .iter()
                .map(|&oid| self.grant(map, oid, oid, r, version))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A lookup-style answer with prefetched neighbours.
    fn found(
        &self,
        v: &impl Records,
        c: &Creds,
        i: Inode,
        write: bool,
        prefetch: u32,
    ) -> Result<Found, MdsError> {
        let n = prefetch.min(self.cfg.prefetch_max) as usize;
        if n == 0 && i.layout.is_none() {
            // Nothing to sign: skip reading the counters and the map.
            return Ok(Self::bare(&i));
        }
        let st = v.state()?;
        let map = v.map(st.map_epoch)?.unwrap_or_default();
        let rights = Self::rights_for(&i, c, write);
        let grants = self.file_grants(&map, &i, rights, st.cap_version);
        let mut near = v.neighbours(i.attr.ino, n)?;
        near.sort_by_key(|x| x.attr.ino);
        // One range capability per run of files whose read rights agree
        // (directories and symlinks have no objects and join any run).
        let mut prefetch_grants = Vec::new();
        let mut run: Option<(u64, u64, u32)> = None;
        for x in &near {
            if x.layout.is_none() {
                continue;
            }
            let r = Self::rights_for(x, c, false);
            let oid = data_oid(x.attr.ino);
            run = match run {
                Some((lo, _, rr)) if rr == r => Some((lo, oid, r)),
                Some((lo, hi, rr)) => {
                    if rr != 0 {
                        prefetch_grants.push(self.grant(&map, lo, hi, rr, st.cap_version));
                    }
                    Some((oid, oid, r))
                }
                None => Some((oid, oid, r)),
            };
        }
        if let Some((lo, hi, r)) = run
            && r != 0
        {
            prefetch_grants.push(self.grant(&map, lo, hi, r, st.cap_version));
        }
        Ok(Found {
            entry: Self::entry(&i),
            grants,
            prefetch: near.iter().map(Self::entry).collect(),
            prefetch_grants,
        })
    }

    /// Answers one request.
    pub async fn handle(self: &Arc<Self>, req: MdsRequest) -> Result<MdsReply, MdsError> {
        let c = req.creds;
        let pf = req.prefetch;
        let policy = self.sb.policy;
        let cluster_op = matches!(
            req.op,
            Op::GetMap { .. }
                | Op::Report(_)
                | Op::Status
                | Op::Statfs
                | Op::NamespaceGrant
                | Op::NamespaceRoot { .. }
        );
        if self.namespace == NamespaceMode::Osd && !cluster_op {
            return Err(err(
                Errno::Inval,
                format!(
                    "{}: this file system keeps its namespace on the OSDs (formatted with \
                     --namespace osd); the MDS only hands out maps and capabilities",
                    req.op.name()
                ),
            ));
        }
        match req.op {
            Op::NamespaceGrant => {
                if self.namespace != NamespaceMode::Osd {
                    return Err(err(
                        Errno::Inval,
                        "this file system keeps its namespace in the MDS (formatted with --namespace mds)",
                    ));
                }
                let snap = self.kv.read()?;
                let st = snap.state()?;
                let map = snap.map(st.map_epoch)?.unwrap_or_default();
                let rights = rights::ALL & !(rights::FORMAT | rights::PARTITION | rights::REVOKE);
                let grant = self.grant(&map, DATA_OID_TAG, u64::MAX, rights, st.cap_version);
                let n = snap.namespace()?;
                Ok(MdsReply::Namespace(Box::new(NamespaceGrant {
                    map,
                    grant,
                    root_osd: n.root_osd,
                    dir_protocol: n.dir_protocol,
                    layout: n.layout,
                })))
            }
            Op::NamespaceRoot { osd } => {
                if self.namespace != NamespaceMode::Osd {
                    return Err(err(Errno::Inval, "not a namespace-on-OSDs file system"));
                }
                let rec = self
                    .kv
                    .write(move |tx| {
                        let mut n = tx.namespace()?;
                        if n.root_osd.is_none() {
                            n.root_osd = Some(osd);
                            tx.put_namespace(&n)?;
                        }
                        Ok(n)
                    })
                    .await?;
                Ok(MdsReply::Namespace(Box::new(NamespaceGrant {
                    map: OsdMap::default(),
                    grant: Grant {
                        lo: 0,
                        hi: 0,
                        rights: 0,
                        expiry_ms: 0,
                        caps: Vec::new(),
                    },
                    root_osd: rec.root_osd,
                    dir_protocol: rec.dir_protocol,
                    layout: rec.layout,
                })))
            }
            Op::Lookup { parent, name } => {
                let snap = self.kv.read()?;
                let i = ns::lookup(&snap, &c, parent, &name)?;
                Ok(MdsReply::Found(Box::new(
                    self.found(&snap, &c, i, false, pf)?,
                )))
            }
            Op::GetAttr { ino } => Ok(MdsReply::Attr(self.kv.read()?.live_inode(ino)?.attr)),
            Op::Open { ino, write } => {
                let snap = self.kv.read()?;
                let i = snap.live_inode(ino)?;
                if i.attr.kind == FileKind::Dir && write {
                    return Err(err(Errno::IsDir, "cannot open a directory for writing"));
                }
                perm::check(&i.attr, &c, if write { W } else { R }, "open")?;
                Ok(MdsReply::Found(Box::new(
                    self.found(&snap, &c, i, write, pf)?,
                )))
            }
            Op::Create {
                parent,
                name,
                mode,
                exclusive,
            } => {
                let c2 = c.clone();
                let (i, _) = self
                    .kv
                    .write(move |tx| ns::create(tx, &policy, &c2, parent, &name, mode, exclusive))
                    .await?;
                let snap = self.kv.read()?;
                Ok(MdsReply::Found(Box::new(
                    self.found(&snap, &c, i, true, 0)?,
                )))
            }
            Op::Mkdir { parent, name, mode } => {
                let c2 = c.clone();
                let i = self
                    .kv
                    .write(move |tx| ns::mkdir(tx, &policy, &c2, parent, &name, mode))
                    .await?;
                Ok(MdsReply::Found(Box::new(Self::bare(&i))))
            }
            Op::Symlink {
                parent,
                name,
                target,
            } => {
                let i = self
                    .kv
                    .write(move |tx| ns::symlink(tx, &policy, &c, parent, &name, &target))
                    .await?;
                Ok(MdsReply::Found(Box::new(Self::bare(&i))))
            }
            Op::Link { ino, parent, name } => {
                let i = self
                    .kv
                    .write(move |tx| ns::link(tx, &c, ino, parent, &name))
                    .await?;
                Ok(MdsReply::Found(Box::new(Self::bare(&i))))
            }
            Op::Unlink { parent, name } => {
                let job = self
                    .kv
                    .write(move |tx| ns::unlink(tx, &c, parent, &name))
                    .await?;
                if job.is_some() {
                    self.delete_wake.notify_one();
                }
                Ok(MdsReply::Done)
            }
            Op::Rmdir { parent, name } => {
                self.kv
                    .write(move |tx| ns::rmdir(tx, &c, parent, &name))
                    .await?;
                Ok(MdsReply::Done)
            }
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                noreplace,
            } => {
                let job = self
                    .kv
                    .write(move |tx| {
                        ns::rename(tx, &c, parent, &name, new_parent, &new_name, noreplace)
                    })
                    .await?;
                if job.is_some() {
                    self.delete_wake.notify_one();
                }
                Ok(MdsReply::Done)
            }
            Op::Readlink { ino } => {
                let i = self.kv.read()?.live_inode(ino)?;
                i.target
                    .map(MdsReply::Target)
                    .ok_or_else(|| err(Errno::Inval, format!("inode {ino:#x} is not a symlink")))
            }
            Op::Readdir {
                ino,
                after,
                max,
                plus,
            } => {
                let snap = self.kv.read()?;
                let dir = snap.dir_inode(ino)?;
                perm::check(&dir.attr, &c, R, "readdir")?;
                let max = max.clamp(1, READDIR_MAX) as usize;
                let (list, more) = snap.list_dir(ino, after.as_deref(), max)?;
                let mut entries = Vec::with_capacity(list.len());
                for (name, child, kind) in list {
                    let attr = if plus {
                        snap.inode(child)?.map(|i| i.attr)
                    } else {
                        None
                    };
                    entries.push(DirEntry {
                        name,
                        ino: child,
                        kind,
                        attr,
                    });
                }
                Ok(MdsReply::Dir { entries, more })
            }
            Op::Statfs => {
                let (st, rows) = self.osd_rows()?;
                Ok(MdsReply::Statfs(FsStat {
                    capacity: rows.iter().filter(|r| r.up).map(|r| r.capacity).sum(),
                    used: rows.iter().filter(|r| r.up).map(|r| r.used).sum(),
                    inodes: st.inodes,
                    name_max: NAME_MAX as u32,
                }))
            }
            Op::SetAttr { ino, set } => self.setattr(c, ino, set).await,
            Op::GetXattr { ino, name } => Ok(MdsReply::Xattr(ns::getxattr(
                &self.kv.read()?,
                &c,
                ino,
                &name,
            )?)),
            Op::ListXattr { ino } => {
                let snap = self.kv.read()?;
                snap.live_inode(ino)?;
                Ok(MdsReply::XattrNames(snap.xattr_names(ino)?))
            }
            Op::SetXattr {
                ino,
                name,
                value,
                mode,
            } => {
                self.kv
                    .write(move |tx| ns::setxattr(tx, &c, ino, &name, &value, mode))
                    .await?;
                Ok(MdsReply::Done)
            }
            Op::RemoveXattr { ino, name } => {
                self.kv
                    .write(move |tx| ns::removexattr(tx, &c, ino, &name))
                    .await?;
                Ok(MdsReply::Done)
            }
            Op::CommitSize { ino, size, mtime } => {
                let i = self
                    .kv
                    .write(move |tx| ns::commit_size(tx, &c, ino, size, mtime))
                    .await?;
                Ok(MdsReply::Attr(i.attr))
            }
            Op::ExtendLayout { ino, objset } => {
                let c2 = c.clone();
                let i = self
                    .kv
                    .write(move |tx| ns::extend_layout(tx, &policy, &c2, ino, objset))
                    .await?;
                let snap = self.kv.read()?;
                Ok(MdsReply::Found(Box::new(
                    self.found(&snap, &c, i, true, 0)?,
                )))
            }
            Op::GetLayout { ino } => {
                let i = self.kv.read()?.live_inode(ino)?;
                match (i.layout, i.dir) {
                    (Some(l), _) => Ok(MdsReply::Layout {
                        spec: l.spec,
                        layout: Some(l),
                    }),
                    (None, Some(d)) => Ok(MdsReply::Layout {
                        spec: d.default_layout,
                        layout: None,
                    }),
                    _ => Err(err(Errno::Inval, "symlinks have no layout")),
                }
            }
            Op::SetLayout { ino, spec } => {
                let i = self
                    .kv
                    .write(move |tx| ns::set_layout(tx, &c, ino, spec))
                    .await?;
                let spec = i
                    .layout
                    .as_ref()
                    .map(|l| l.spec)
                    .or(i.dir.as_ref().map(|d| d.default_layout))
                    .unwrap_or_default();
                Ok(MdsReply::Layout {
                    spec,
                    layout: i.layout,
                })
            }
            Op::GetMap { epoch } => {
                let snap = self.kv.read()?;
                let e = match epoch {
                    Some(e) => e,
                    None => snap.state()?.map_epoch,
                };
                snap.map(e)?
                    .map(MdsReply::Map)
                    .ok_or_else(|| err(Errno::NoEnt, format!("no OSD map epoch {e}")))
            }
            Op::Report(r) => self.report(r).await,
            Op::Status => Ok(MdsReply::Status(Box::new(self.status()?))),
            Op::Resolve { path } => {
                let snap = self.kv.read()?;
                let root = snap.live_inode(ROOT_INO)?;
                let mut out = vec![Self::entry(&root)];
                let mut at = ROOT_INO;
                for comp in path.split('/').filter(|s| !s.is_empty() && *s != ".") {
                    if comp == ".." {
                        return Err(err(
                            Errno::Inval,
                            "'..' is not resolved by the MDS; pass a normalised path",
                        ));
                    }
                    let i = ns::lookup(&snap, &c, at, comp)?;
                    at = i.attr.ino;
                    out.push(Self::entry(&i));
                }
                Ok(MdsReply::Path(out))
            }
        }
    }

    async fn setattr(
        self: &Arc<Self>,
        c: Creds,
        ino: u64,
        set: proto::mds::SetAttr,
    ) -> Result<MdsReply, MdsError> {
        // Shrinking a file: revoke old capabilities, then cut the objects,
        // then record the length (so stale bytes can never reappear).
        if let Some(size) = set.size {
            let i = self.kv.read()?.live_inode(ino)?;
            if i.attr.kind == FileKind::File && size < i.attr.size {
                perm::check(&i.attr, &c, W, "truncate")?;
                if let Some(l) = &i.layout {
                    let v = self.bump_version().await?;
                    self.revoke(l, v).await?;
                    self.truncate_objects(l, size).await?;
                }
            }
        }
        let done = self
            .kv
            .write(move |tx| ns::setattr(tx, &c, ino, &set))
            .await?;
        if done.revoke
            && let Some(l) = &done.inode.layout
        {
            let v = self.bump_version().await?;
            self.revoke(l, v).await?;
        }
        Ok(MdsReply::Attr(done.inode.attr))
    }

    /// Takes the next capability version (durably); objects revoked at the
    /// returned value refuse every capability issued before.
    async fn bump_version(&self) -> Result<u64, MdsError> {
        self.kv
            .write(|tx| {
                let mut st = tx.state()?;
                let v = st.cap_version;
                st.cap_version += 1;
                tx.put_state(&st)?;
                Ok(v)
            })
            .await
    }

    /// A client for OSD `id` at its address in `current` (the newest map:
    /// maps only ever add OSDs or change their addresses, so it has every
    /// OSD a file was ever placed on).
    fn osd_client(&self, current: &OsdMap, id: u32) -> Result<Arc<OsdClient>, MdsError> {
        let addr = current.addr(id).ok_or_else(|| {
            err(
                Errno::Io,
                format!("OSD {id} is not in map epoch {}", current.epoch),
            )
        })?;
        let mut pool = self.osds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((a, c)) = pool.get(&id)
            && a == addr
        {
            return Ok(c.clone());
        }
        let mut cfg = ConnConfig::new(&self.sb.cluster_id, id);
        cfg.name = "tessera-mds".into();
        cfg.timeout = Duration::from_secs(10);
        cfg.connections = 1;
        let c = Arc::new(OsdClient::new(addr, cfg));
        pool.insert(id, (addr.to_string(), c.clone()));
        Ok(c)
    }

    /// The MDS's own capability for OSD `id` (all rights on file data).
    fn admin_cap(&self, id: u32) -> Result<Capability, MdsError> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let ring = keys.get(&id).ok_or_else(|| {
            err(
                Errno::Io,
                format!("no key for OSD {id} in {}", self.keys_dir.display()),
            )
        })?;
        let (kv, key) = ring
            .newest()
            .ok_or_else(|| err(Errno::Io, format!("empty key ring for OSD {id}")))?;
        Ok(Capability::sign(
            key,
            kv,
            id,
            DATA_PARTITION,
            0,
            u64::MAX,
            rights::ALL,
            Self::now_ms() + 60_000,
            u64::MAX,
        ))
    }

    /// Every (OSD, object id, object set, stripe) of a layout, placed with
    /// the layout's map epoch, and the current map (for addresses).
    fn objects(&self, l: &Layout) -> Result<(OsdMap, Vec<ObjectAt>), MdsError> {
        let snap = self.kv.read()?;
        let placed = snap.map(l.map_epoch)?.ok_or_else(|| {
            err(
                Errno::Io,
                format!("OSD map epoch {} is missing", l.map_epoch),
            )
        })?;
        let current = snap.map(snap.state()?.map_epoch)?.unwrap_or_default();
        let mut out = Vec::new();
        for (set, &oid) in l.objsets.iter().enumerate() {
            for (j, osd) in placed
                .place(oid, l.spec.stripe_count)
                .into_iter()
                .enumerate()
            {
                out.push((osd, oid, set as u64, j as u32));
            }
        }
        Ok((current, out))
    }

    /// Runs `cmd` on OSD `osd` with the MDS's own capability: `Ok(Err(_))`
    /// is the OSD's (or the network's) answer, `Err(_)` a local problem
    /// (unknown OSD, no key).
    async fn osd_call(
        &self,
        current: &OsdMap,
        osd: u32,
        cmd: Command,
    ) -> Result<Result<(), ConnError>, MdsError> {
        let client = self.osd_client(current, osd)?;
        let cap = self.admin_cap(osd)?;
        Ok(client.run(Some(&cap), cmd, Bytes::new()).await.map(|_| ()))
    }

    /// [`Mds::osd_call`] where a missing object counts as done.
    async fn osd_run(&self, current: &OsdMap, osd: u32, cmd: Command) -> Result<(), MdsError> {
        match self.osd_call(current, osd, cmd).await? {
            Ok(()) => Ok(()),
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => Ok(()),
            Err(e) => Err(osd_err(osd, e)),
        }
    }

    /// Revokes every capability for a file's objects issued before version
    /// `v` (sets each object's version to `v`; creates missing objects so a
    /// stale capability cannot create them either).
    pub async fn revoke(&self, l: &Layout, v: u64) -> Result<(), MdsError> {
        let (current, objs) = self.objects(l)?;
        for (osd, oid, _, _) in objs {
            let set = Command::SetVersion {
                pid: DATA_PARTITION,
                oid,
                version: v,
            };
            match self.osd_call(&current, osd, set.clone()).await? {
                Ok(()) => {}
                Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => {
                    let create = Command::Create {
                        pid: DATA_PARTITION,
                        oid: Some(oid),
                        count: 1,
                    };
                    match self.osd_call(&current, osd, create).await? {
                        Ok(()) => {}
                        Err(ConnError::Remote(e)) if e.code == ErrorCode::Exists => {}
                        Err(e) => return Err(osd_err(osd, e)),
                    }
                    self.osd_call(&current, osd, set)
                        .await?
                        .map_err(|e| osd_err(osd, e))?;
                }
                Err(e) => return Err(osd_err(osd, e)),
            }
            self.metrics.revocations.inc();
        }
        Ok(())
    }

    async fn truncate_objects(&self, l: &Layout, size: u64) -> Result<(), MdsError> {
        let (map, objs) = self.objects(l)?;
        for (osd, oid, set, j) in objs {
            let len = l.spec.object_len(size, set, j);
            self.osd_run(
                &map,
                osd,
                Command::Truncate {
                    pid: DATA_PARTITION,
                    oid,
                    len,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Removes one queued file's objects (all of them, or an error).
    async fn delete_objects(&self, job: &DeleteJob) -> Result<(), MdsError> {
        let (map, objs) = self.objects(&job.layout)?;
        for (osd, oid, _, _) in objs {
            self.osd_run(
                &map,
                osd,
                Command::Remove {
                    pid: DATA_PARTITION,
                    oid,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Entries waiting in the delete queue, oldest first, at most
    /// [`DELETE_BATCH`] of them (what the worker takes per pass).
    pub fn delete_queue(&self) -> Result<Vec<(u64, DeleteJob)>, MdsError> {
        let snap = self.kv.read()?;
        let mut out = Vec::new();
        let mut bad = None;
        snap.scan(
            T::DeleteQueue,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            false,
            &mut |k, v| {
                let job = queue_seq(k).and_then(|seq| {
                    postcard::from_bytes::<DeleteJob>(v)
                        .map(|j| (seq, j))
                        .map_err(|e| crate::kv::io_err("delete job", e))
                });
                match job {
                    Ok(j) => out.push(j),
                    Err(e) => bad = Some(e),
                }
                bad.is_none() && out.len() < DELETE_BATCH
            },
        )?;
        match bad {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// How many entries the delete queue holds, all of them counted (a
    /// malformed key is an error, never a sequence number).
    pub fn delete_queue_len(&self) -> Result<u64, MdsError> {
        let snap = self.kv.read()?;
        let mut n = 0u64;
        let mut bad = None;
        snap.scan(
            T::DeleteQueue,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            false,
            &mut |k, _| {
                match queue_seq(k) {
                    Ok(_) => n += 1,
                    Err(e) => bad = Some(e),
                }
                bad.is_none()
            },
        )?;
        match bad {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// The delete-queue worker: removes queued objects from the OSDs,
    /// retrying while an OSD is unreachable; the queue is in the KV, so it
    /// survives restarts.
    pub async fn delete_worker(self: Arc<Self>) {
        loop {
            let mut pending = false;
            match self.delete_queue() {
                Ok(jobs) => {
                    for (seq, job) in jobs {
                        match self.delete_objects(&job).await {
                            Ok(()) => {
                                let r = self
                                    .kv
                                    .write(move |tx| tx.del(T::DeleteQueue, &num_key(seq)))
                                    .await;
                                if r.is_ok() {
                                    self.metrics.objects_deleted.inc();
                                }
                            }
                            Err(e) => {
                                pending = true;
                                tracing::debug!(ino = job.ino, error = %e, "delete deferred");
                            }
                        }
                    }
                }
                Err(e) => {
                    pending = true;
                    tracing::warn!(error = %e, "cannot read the delete queue");
                }
            }
            let wait = if pending {
                Duration::from_millis(self.cfg.delete_retry_ms)
            } else {
                Duration::from_secs(3600)
            };
            let _ = tokio::time::timeout(wait, self.delete_wake.notified()).await;
        }
    }

    async fn report(self: &Arc<Self>, r: OsdReport) -> Result<MdsReply, MdsError> {
        let ring = {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            if !keys.contains_key(&r.osd_id) {
                // A key file may have been added since start.
                if let Ok(k) = load_keys(&self.keys_dir, &self.sb.cluster_id) {
                    *keys = k;
                }
            }
            keys.get(&r.osd_id).cloned().ok_or_else(|| {
                err(
                    Errno::Access,
                    format!(
                        "OSD {} is unknown: put its key file in {}",
                        r.osd_id,
                        self.keys_dir.display()
                    ),
                )
            })?
        };
        verify_report(&r, &self.sb.cluster_id, &ring)?;
        let now = Self::now_ms();
        if r.at_ms + 300_000 < now || r.at_ms > now + 300_000 {
            return Err(err(
                Errno::Access,
                format!("OSD {} clock is more than 5 minutes off", r.osd_id),
            ));
        }
        {
            // Check and claim the report's time in one critical section, so
            // of two copies racing here exactly one passes.
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            if live.osds.get(&r.osd_id).is_some_and(|l| l.at_ms >= r.at_ms) {
                return Err(err(Errno::Access, "stale or replayed report"));
            }
            live.osds.insert(
                r.osd_id,
                Live {
                    seen: std::time::Instant::now(),
                    at_ms: r.at_ms,
                    capacity: r.capacity,
                    used: r.used,
                    objects: r.objects,
                },
            );
        }
        let r2 = r.clone();
        let epoch = self
            .kv
            .write(move |tx| {
                let mut st = tx.state()?;
                let cur = tx.map(st.map_epoch)?.unwrap_or_default();
                if let Some(m) = map_after(&cur, &r2) {
                    st.map_epoch = m.epoch;
                    tx.put_map(&m)?;
                    tx.put_state(&st)?;
                }
                Ok(st.map_epoch)
            })
            .await?;
        // An OSD coming back may unblock deletions.
        self.delete_wake.notify_one();
        Ok(MdsReply::Reported {
            epoch,
            interval_ms: self.cfg.heartbeat_ms,
        })
    }

    /// The counters and one status row per OSD of the current map.
    fn osd_rows(&self) -> Result<(FsState, Vec<OsdStatus>), MdsError> {
        let snap = self.kv.read()?;
        let st = snap.state()?;
        let map = snap.map(st.map_epoch)?.unwrap_or_default();
        let rows = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .status(&map, Duration::from_millis(self.cfg.down_after_ms));
        Ok((st, rows))
    }

    /// Cluster status.
    pub fn status(&self) -> Result<ClusterStatus, MdsError> {
        let (st, osds) = self.osd_rows()?;
        Ok(ClusterStatus {
            cluster_id: self.sb.cluster_id.clone(),
            epoch: st.map_epoch,
            osds,
            inodes: st.inodes,
            id_policy: self.sb.policy.kind.name().into(),
            mandatory: self.metrics.mandatory(),
            non_mandatory: self.metrics.non_mandatory(),
            delete_queue: self.delete_queue_len()?,
        })
    }
}
