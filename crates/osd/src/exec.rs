//! Executes one request against the store: capability checks first (every
//! bad case its own error), then the command, then the request's set and get
//! attribute lists. Synchronous; the server runs it on the blocking pool.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use proto::cap::{Need, rights};
use proto::msg::{AttrKey, Command, MAX_PAGE_BYTES, Reply, Request, Response};
use proto::{ErrorCode, KeyRing, WireError};
use store::{FormatOptions, OpenOptions, Store, StoreError};

/// The store an OSD serves, replaceable by FORMAT.
pub struct StoreHandle {
    path: PathBuf,
    store: RwLock<Option<Arc<Store>>>,
}

impl StoreHandle {
    /// Wraps an open store that lives at `path`.
    pub fn new(path: PathBuf, store: Store) -> Self {
        StoreHandle {
            path,
            store: RwLock::new(Some(Arc::new(store))),
        }
    }

    /// Where the store lives.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The current store.
    pub fn get(&self) -> Result<Arc<Store>, WireError> {
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                WireError::new(ErrorCode::Busy, "the OSD is being formatted or shut down")
            })
    }

    /// Which store this is and how far its journal has come (all zeros
    /// while none is open), for the OSD's reports.
    pub fn mark(&self) -> proto::mds::StoreMark {
        self.get()
            .map(|s| proto::mds::StoreMark {
                uuid: s.label().uuid,
                seq: s.durable_seq(),
            })
            .unwrap_or_default()
    }

    /// Closes the store (flushing it) once no request holds it.
    pub fn close(&self) -> Result<(), StoreError> {
        let taken = self.store.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(s) = taken {
            wait_unique(s)?.close()?;
        }
        Ok(())
    }

    fn format(&self, policy: store::Policy) -> Result<(), WireError> {
        let mut slot = self.store.write().unwrap_or_else(|e| e.into_inner());
        let mut opts = OpenOptions::default();
        if let Some(s) = slot.take() {
            opts = s.open_options();
            wait_unique(s).and_then(|s| s.close()).map_err(map_err)?;
        }
        let dev: Arc<dyn store::device::Device> = Arc::new(
            store::device::FileDevice::open(&self.path)
                .map_err(|e| WireError::new(ErrorCode::Io, e.to_string()))?,
        );
        store::format(
            dev.clone(),
            &FormatOptions {
                policy,
                force: true,
                ..FormatOptions::default()
            },
        )
        .map_err(map_err)?;
        *slot = Some(Arc::new(Store::open(dev, &opts).map_err(map_err)?));
        Ok(())
    }
}

fn wait_unique(mut s: Arc<Store>) -> Result<Store, StoreError> {
    for _ in 0..3000 {
        match Arc::try_unwrap(s) {
            Ok(st) => return Ok(st),
            Err(back) => s = back,
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(StoreError::invalid("store", "still in use after 30 s"))
}

/// Striped reader-writer locks by object: every command on an object holds
/// its stripe shared from the capability check to the end of the operation;
/// SET VERSION holds it exclusively. So once a revocation is acknowledged, no
/// operation authorised by a revoked capability is still running or can start.
pub struct ObjectLocks {
    stripes: Vec<RwLock<()>>,
}

impl Default for ObjectLocks {
    fn default() -> Self {
        ObjectLocks {
            stripes: (0..64).map(|_| RwLock::new(())).collect(),
        }
    }
}

impl ObjectLocks {
    fn index(&self, pid: u64, oid: u64) -> usize {
        let h = (pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ oid).wrapping_mul(0xff51_afd7_ed55_8ccd);
        (h >> 58) as usize % self.stripes.len()
    }

    fn stripe(&self, pid: u64, oid: u64) -> &RwLock<()> {
        &self.stripes[self.index(pid, oid)]
    }

    /// The stripe of a second object a command reads (COPY's source), when
    /// it differs from the first's and so must be taken too; taken in
    /// stripe order, so two commands never wait on each other.
    fn second(&self, first: (u64, u64), second: (u64, u64)) -> Option<(bool, &RwLock<()>)> {
        let (a, b) = (self.index(first.0, first.1), self.index(second.0, second.1));
        (a != b).then(|| (b < a, &self.stripes[b]))
    }
}

/// What a request runs with.
pub struct Ctx {
    /// The store.
    pub store: Arc<StoreHandle>,
    /// Accepted keys; `None` on an insecure OSD (no checks at all).
    pub keys: Option<KeyRing>,
    /// This OSD's id (part of every MAC).
    pub osd_id: u32,
    /// Per-object locks that make revocation atomic with operations.
    pub locks: ObjectLocks,
    /// The MDS's lease, when this OSD belongs to a cluster: without a
    /// current one it serves only the MDS (capabilities with REVOKE).
    pub lease: Option<Arc<net::Lease>>,
}

impl Ctx {
    /// A context for `store` with `keys` (`None` = insecure) as OSD `osd_id`.
    pub fn new(store: Arc<StoreHandle>, keys: Option<KeyRing>, osd_id: u32) -> Ctx {
        Ctx {
            store,
            keys,
            osd_id,
            locks: ObjectLocks::default(),
            lease: None,
        }
    }
}

/// FORMAT: a new store in place of the current one — refused on an OSD
/// that belongs to a cluster: its MDS holds what the store held (copies,
/// chain places, the store's mark), so a store wiped under a running
/// member would serve nothing it is counted for. Offline, a new store is
/// recognised as new when the OSD reports again.
fn format_store(ctx: &Ctx, policy: &str) -> Result<Reply, WireError> {
    if ctx.lease.is_some() {
        return Err(WireError::new(
            ErrorCode::BadRequest,
            "FORMAT: this OSD belongs to a cluster; stop it and make its store again \
             (tessera mkfs) instead",
        ));
    }
    let p: store::Policy = policy
        .parse()
        .map_err(|e: store::StoreError| WireError::new(ErrorCode::BadRequest, e.to_string()))?;
    ctx.store.format(p)?;
    Ok(Reply::Done)
}

/// INSTALL from `principal` (a chain member): the copy of `oid` it staged
/// replaces the object.
fn install(s: &Store, principal: u64, pid: u64, oid: u64) -> Result<Reply, StoreError> {
    let Some(group) = proto::chain::partition_group(pid) else {
        return Err(StoreError::invalid("partition", "not a replica group's"));
    };
    if principal & (1 << 63) == 0 {
        return Err(StoreError::invalid(
            "principal",
            "only a chain member installs",
        ));
    }
    let from = proto::chain::staging_partition(group, principal as u32);
    s.move_object((from, oid), (pid, oid)).map(|()| Reply::Done)
}

/// Maps store errors to wire errors, keeping each kind distinct.
pub fn map_err(e: StoreError) -> WireError {
    let code = match &e {
        StoreError::NoObject { .. } => ErrorCode::NoObject,
        StoreError::NoPartition(_) => ErrorCode::NoPartition,
        StoreError::ObjectExists { .. } | StoreError::PartitionExists(_) => ErrorCode::Exists,
        StoreError::NoSpace { .. } => ErrorCode::NoSpace,
        StoreError::MetadataFull { .. } => ErrorCode::Bound,
        StoreError::Checksum { .. } => ErrorCode::Checksum,
        StoreError::Invalid { .. } => ErrorCode::BadRequest,
        StoreError::PartitionNotEmpty(..) => ErrorCode::NotEmpty,
        StoreError::ReadOnlyAttribute { .. } => ErrorCode::ReadOnly,
        StoreError::Io { .. } => ErrorCode::Io,
        StoreError::Corrupt(_)
        | StoreError::Signature(_)
        | StoreError::NewerFormat { .. }
        | StoreError::Failed(_) => ErrorCode::Failed,
    };
    WireError::new(code, e.to_string())
}

/// Root partition: capabilities for FORMAT, STATFS and partition commands name it.
pub const ROOT: u64 = 0;

fn need(cmd: &Command, req: &Request) -> Need {
    let one = |pid: u64, oid: u64, r: u32| Need {
        partition: pid,
        oid_lo: oid,
        oid_hi: oid,
        rights: r,
    };
    let extra = if req.set.is_empty() {
        0
    } else {
        rights::SET_ATTR
    } | if req.get.is_empty() {
        0
    } else {
        rights::GET_ATTR
    };
    let mut n = match *cmd {
        // An effect passed down a chain needs what the effect needs.
        Command::Forward(ref f) => return need(&f.op, req),
        Command::ScrubGroup { group, .. } => one(
            proto::chain::group_partition(group),
            0,
            rights::READ | rights::WRITE,
        ),
        Command::Format { .. } => one(ROOT, 0, rights::FORMAT),
        Command::Statfs => one(ROOT, 0, rights::LIST),
        Command::CreatePartition { pid } => one(ROOT, pid, rights::CREATE | rights::PARTITION),
        Command::RemovePartition { pid } => one(ROOT, pid, rights::REMOVE | rights::PARTITION),
        // Many objects at once, with no per-object revocation check: a
        // partition-wide right (the MDS's), never a file's capability.
        Command::RemoveObjects { pid, ref oids } => Need {
            partition: pid,
            oid_lo: oids.iter().copied().min().unwrap_or(0),
            oid_hi: oids.iter().copied().max().unwrap_or(0),
            rights: rights::REMOVE | rights::PARTITION,
        },
        Command::Create {
            pid,
            oid: Some(o),
            count,
        } => Need {
            partition: pid,
            oid_lo: o,
            oid_hi: o.saturating_add(u64::from(count).saturating_sub(1)),
            rights: rights::CREATE,
        },
        Command::Create { pid, oid: None, .. } => Need {
            partition: pid,
            oid_lo: 0,
            oid_hi: u64::MAX,
            rights: rights::CREATE,
        },
        Command::Remove { pid, oid } => one(pid, oid, rights::REMOVE),
        Command::Read { pid, oid, .. } => one(pid, oid, rights::READ),
        Command::Write { pid, oid, .. } => one(pid, oid, rights::WRITE),
        Command::Append { pid, oid } => one(pid, oid, rights::APPEND),
        Command::CreateAndWrite { pid, oid } => one(pid, oid, rights::CREATE | rights::WRITE),
        Command::Flush { pid } => Need {
            partition: pid,
            oid_lo: req.cap.as_ref().map_or(0, |c| c.oid_lo),
            oid_hi: req.cap.as_ref().map_or(0, |c| c.oid_lo),
            rights: rights::WRITE,
        },
        Command::List {
            pid,
            lo,
            hi,
            ref attrs,
            ..
        } => Need {
            partition: pid,
            oid_lo: lo,
            oid_hi: hi,
            // Attributes per entry are reads of those objects' attributes.
            rights: rights::LIST
                | if attrs.is_empty() {
                    0
                } else {
                    rights::GET_ATTR
                },
        },
        // A deep digest reads a whole object for 24 bytes: a scrub's tool
        // (REVOKE: the MDS's and members' capabilities), not a reader's.
        Command::Digest { pid, oid, deep } => one(
            pid,
            oid,
            rights::READ | if deep { rights::REVOKE } else { 0 },
        ),
        Command::GetAttributes { pid, oid } | Command::GetPage { pid, oid, .. } => {
            one(pid, oid, rights::GET_ATTR)
        }
        Command::SetAttributes { pid, oid } => one(pid, oid, rights::SET_ATTR),
        Command::Cas { pid, oid, .. } | Command::FetchAdd { pid, oid, .. } => {
            one(pid, oid, rights::SET_ATTR | rights::GET_ATTR)
        }
        Command::SetVersion { pid, oid, .. } => one(pid, oid, rights::REVOKE),
        Command::Truncate { pid, oid, .. } | Command::Punch { pid, oid, .. } => {
            one(pid, oid, rights::WRITE)
        }
        Command::DataRanges { pid, oid } => one(pid, oid, rights::READ),
        Command::Reserve { pid, oid, .. } | Command::Copy { pid, oid, .. } => {
            one(pid, oid, rights::WRITE | rights::CREATE)
        }
        Command::Install { pid, oid } => {
            one(pid, oid, rights::WRITE | rights::CREATE | rights::REMOVE)
        }
    };
    n.rights |= extra;
    // A group's staging partition is reached with the group's capability.
    n.partition = proto::chain::cap_partition(n.partition);
    n
}

/// The single existing object a command acts on (for the revocation check
/// and the attribute lists).
fn target(cmd: &Command) -> Option<(u64, u64)> {
    match *cmd {
        Command::Remove { pid, oid }
        | Command::Read { pid, oid, .. }
        | Command::Write { pid, oid, .. }
        | Command::Append { pid, oid }
        | Command::GetAttributes { pid, oid }
        | Command::GetPage { pid, oid, .. }
        | Command::Digest { pid, oid, .. }
        | Command::SetAttributes { pid, oid }
        | Command::Cas { pid, oid, .. }
        | Command::FetchAdd { pid, oid, .. }
        | Command::Truncate { pid, oid, .. }
        | Command::Punch { pid, oid, .. }
        | Command::DataRanges { pid, oid } => Some((pid, oid)),
        _ => None,
    }
}

/// The object a command may create, locked like a target but checked for
/// revocation only when it exists.
fn created(cmd: &Command) -> Option<(u64, u64)> {
    match *cmd {
        Command::Reserve { pid, oid, .. } | Command::Copy { pid, oid, .. } => Some((pid, oid)),
        _ => None,
    }
}

/// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off` (COPY):
/// read through the store's checksums, then one durable write (bytes past
/// the source's end are zeros); a missing destination is created.
fn copy(
    s: &Store,
    pid: u64,
    (src, src_off): (u64, u64),
    (dst, dst_off): (u64, u64),
    len: u32,
) -> Result<Reply, StoreError> {
    let mut data = s.read(pid, src, src_off, u64::from(len))?;
    data.resize(len as usize, 0);
    match s.write(pid, dst, dst_off, &data) {
        Err(StoreError::NoObject { .. }) if dst_off == 0 => s.create_and_write(pid, dst, &data),
        Err(StoreError::NoObject { .. }) => {
            match s.create(pid, Some(dst)) {
                Ok(_) | Err(StoreError::ObjectExists { .. }) => {}
                Err(e) => return Err(e),
            }
            s.write(pid, dst, dst_off, &data)
        }
        other => other,
    }?;
    Ok(Reply::Copied { len })
}

/// A request's set list in the store's terms.
fn set_list(set: &[(AttrKey, Vec<u8>)]) -> Vec<((u32, u32), Vec<u8>)> {
    set.iter()
        .map(|(k, v)| ((k.page, k.number), v.clone()))
        .collect()
}

use proto::clock::now_ms;

/// The checks that need no store: the capability (MAC, holder — the
/// connection's principal —, expiry, rights, range) and the MDS lease. The server runs them before it reserves
/// memory for a reply, so a request with a bad capability never holds
/// any of the byte budget for its answer.
pub fn precheck(ctx: &Ctx, holder: u64, req: &Request) -> Result<(), WireError> {
    if let Some(keys) = &ctx.keys {
        keys.check(
            req.cap.as_ref(),
            ctx.osd_id,
            holder,
            now_ms(),
            &need(&req.cmd, req),
        )?;
    }
    if let Some(lease) = &ctx.lease
        && !lease.current()
        && req
            .cap
            .as_ref()
            .is_none_or(|c| c.rights & rights::REVOKE == 0)
    {
        return Err(WireError::new(
            ErrorCode::NotReady,
            "no current lease from the MDS: serving only the MDS until a report is accepted",
        ));
    }
    Ok(())
}

/// Reads up to this many bytes are *quick*: see [`quick`].
pub const QUICK_READ: u32 = 64 << 10;

/// Whether `req` is a small read: one device read of at most
/// [`QUICK_READ`] bytes, and no attributes set (a set list makes it a
/// change that waits for the device's flush). The server loop answers such a request on the
/// connection's own task when it is the connection's only one, and the
/// store call runs on the worker without handing the worker's other tasks
/// away ([`blocking`]): at depth one each hop is a thread wake-up, and on
/// a small machine a wake-up costs about as much as the work.
pub fn quick(req: &Request) -> bool {
    matches!(req.cmd, Command::Read { len, .. } if len <= QUICK_READ) && req.set.is_empty()
}

/// Runs `f`, a store call that blocks (device I/O, a group-commit wait),
/// on this worker. A [`quick`] request runs as is: one small read holds
/// the worker for one device read (tens of microseconds on flash; a disk
/// that seeks makes the worker's other tasks wait a seek, while the other
/// workers run on). Anything longer runs in `block_in_place`, which hands
/// the worker's other tasks to another thread first: a thread wake-up per
/// call, worth it only for work longer than one.
pub fn blocking<T>(req: &Request, f: impl FnOnce() -> T) -> T {
    if quick(req) {
        f()
    } else {
        tokio::task::block_in_place(f)
    }
}

/// Runs one request from a connection authenticated as principal
/// `holder`. Returns the response header and the response payload.
pub fn execute(ctx: &Ctx, holder: u64, req: &Request, payload: Bytes) -> (Response, Bytes) {
    let mut attrs = Vec::new();
    let mut out = Bytes::new();
    let result = run(ctx, holder, req, payload, &mut attrs, &mut out);
    (Response { result, attrs }, out)
}

/// What `run` checks once the object's lock is held: the capabilities'
/// versions (revocation) against the objects', and that a set list fits
/// the store's bounds — refused before the command changes anything, so
/// a chain then has nothing to mend.
fn under_lock_checks(ctx: &Ctx, s: &Store, req: &Request) -> Result<(), WireError> {
    if ctx.keys.is_some() {
        if let (Some((pid, oid)), Some(cap)) = (created(&req.cmd), req.cap.as_ref()) {
            match s.stat(pid, oid) {
                Ok(st) => KeyRing::check_version(cap, st.version)?,
                Err(StoreError::NoObject { .. }) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        if let Command::Copy {
            pid,
            src_oid,
            src_cap: Some(ref cap),
            ..
        } = req.cmd
        {
            let version = s.stat(pid, src_oid).map_err(map_err)?.version;
            KeyRing::check_version(cap, version)?;
        }
        if let (Some((pid, oid)), Some(cap)) = (target(&req.cmd), req.cap.as_ref()) {
            let version = s.stat(pid, oid).map_err(map_err)?.version;
            KeyRing::check_version(cap, version)?;
        }
    }
    if let (false, Some((pid, oid))) = (req.set.is_empty(), target(&req.cmd)) {
        s.check_attrs_fit(pid, oid, &set_list(&req.set))
            .map_err(map_err)?;
    }
    Ok(())
}

fn run(
    ctx: &Ctx,
    holder: u64,
    req: &Request,
    payload: Bytes,
    attrs: &mut Vec<(AttrKey, Vec<u8>)>,
    out: &mut Bytes,
) -> Result<Reply, WireError> {
    req.validate(payload.len())?;
    let s = ctx.store.get()?;
    // The capability is checked before any lock is taken: a forged request
    // never holds an object's lock (the version check, which reads the
    // object, comes under the lock below).
    precheck(ctx, holder, req)?;
    let stripe = target(&req.cmd).or(created(&req.cmd)).or(match req.cmd {
        Command::SetVersion { pid, oid, .. } => Some((pid, oid)),
        _ => None,
    });
    // COPY also reads its source: its capability is checked like the
    // request's, and its stripe held (in stripe order) for the copy.
    let mut _source = None;
    let mut _source_first = None;
    if let Command::Copy {
        pid,
        oid,
        src_oid,
        ref src_cap,
        ..
    } = req.cmd
    {
        if let Some(keys) = &ctx.keys {
            keys.check(
                src_cap.as_deref(),
                ctx.osd_id,
                holder,
                now_ms(),
                &Need {
                    partition: pid,
                    oid_lo: src_oid,
                    oid_hi: src_oid,
                    rights: rights::READ,
                },
            )?;
        }
        match ctx.locks.second((pid, oid), (pid, src_oid)) {
            Some((true, l)) => _source_first = Some(l.read().unwrap_or_else(|e| e.into_inner())),
            Some((false, l)) => _source = Some(l),
            None => {}
        }
    }
    let stripe = stripe.map(|(pid, oid)| ctx.locks.stripe(pid, oid));
    let _shared;
    let _exclusive;
    match (&req.cmd, stripe) {
        (Command::SetVersion { .. }, Some(l)) => {
            _exclusive = Some(l.write().unwrap_or_else(|e| e.into_inner()))
        }
        (_, Some(l)) => _shared = Some(l.read().unwrap_or_else(|e| e.into_inner())),
        _ => {}
    }
    let _source = _source.map(|l| l.read().unwrap_or_else(|e| e.into_inner()));
    under_lock_checks(ctx, &s, req)?;
    let reply = match &req.cmd {
        Command::Forward(_) | Command::ScrubGroup { .. } => {
            return Err(WireError::bad(
                "command",
                format!(
                    "{} reaches only an OSD that keeps replica chains",
                    req.cmd.name()
                ),
            ));
        }
        Command::Format { policy } => {
            drop(s);
            return format_store(ctx, policy);
        }
        Command::CreatePartition { pid } => s.create_partition(*pid).map(|()| Reply::Done),
        Command::RemovePartition { pid } => s.remove_partition(*pid).map(|()| Reply::Done),
        Command::Create {
            pid,
            oid: Some(oid),
            count: 1,
        } if !req.set.is_empty() => {
            // One object with attributes: one commit, so a crash leaves the
            // object with all of them or no object at all.
            s.create_with_attrs(*pid, *oid, &set_list(&req.set))
                .map(|()| Reply::Created(vec![*oid]))
        }
        Command::Create { pid, oid, count } => {
            let mut ids = Vec::with_capacity(*count as usize);
            for i in 0..u64::from(*count) {
                let want = oid.map(|o| o + i);
                match s.create(*pid, want) {
                    Ok(id) => ids.push(id),
                    Err(e) if ids.is_empty() => return Err(map_err(e)),
                    Err(_) => break,
                }
            }
            Ok(Reply::Created(ids))
        }
        Command::Remove { pid, oid } => s.remove(*pid, *oid).map(|()| Reply::Done),
        Command::Install { pid, oid } => install(&s, holder, *pid, *oid),
        Command::RemoveObjects { pid, oids } => s
            .remove_many(*pid, oids)
            .map(|(removed, absent)| Reply::Removed { removed, absent }),
        Command::Read {
            pid,
            oid,
            offset,
            len,
        } => s
            .read(*pid, *oid, *offset, u64::from(*len))
            .and_then(|data| {
                let size = s.stat(*pid, *oid)?.size;
                *out = Bytes::from(data);
                Ok(Reply::Read { size })
            }),
        Command::Write { pid, oid, offset } => {
            s.write(*pid, *oid, *offset, &payload).map(|()| Reply::Done)
        }
        Command::Append { pid, oid } => s
            .append(*pid, *oid, &payload)
            .map(|offset| Reply::Appended { offset }),
        Command::CreateAndWrite { pid, oid } => s
            .create_and_write(*pid, *oid, &payload)
            .map(|()| Reply::Done),
        Command::Flush { .. } => s.flush().map(|()| Reply::Done),
        Command::Truncate { pid, oid, len } => s.truncate(*pid, *oid, *len).map(|()| Reply::Done),
        Command::Punch {
            pid,
            oid,
            offset,
            len,
        } => s.punch(*pid, *oid, *offset, *len).map(|()| Reply::Done),
        Command::Reserve {
            pid,
            oid,
            offset,
            len,
        } => s
            .reserve(*pid, *oid, *offset, *len, true)
            .map(|()| Reply::Done),
        Command::Copy {
            pid,
            oid,
            offset,
            src_oid,
            src_offset,
            len,
            ..
        } => copy(&s, *pid, (*src_oid, *src_offset), (*oid, *offset), *len),
        Command::DataRanges { pid, oid } => s.data_ranges(*pid, *oid).map(|mut r| {
            if r.len() > proto::msg::MAX_DATA_RANGES {
                let (o, _) = r[proto::msg::MAX_DATA_RANGES - 1];
                let (lo, ll) = r[r.len() - 1];
                r.truncate(proto::msg::MAX_DATA_RANGES);
                r[proto::msg::MAX_DATA_RANGES - 1] = (o, lo + ll - o);
            }
            Reply::DataRanges(r)
        }),
        Command::List {
            pid,
            lo,
            hi,
            after,
            max,
            attrs: want,
        } => s
            .list(*pid, *lo, *hi, *after, *max as usize)
            .and_then(|page| {
                let mut entries = Vec::with_capacity(page.ids.len());
                // Attributes of objects revoked after the capability was issued
                // are withheld (the id itself is covered by LIST).
                let cap_version = if ctx.keys.is_some() {
                    req.cap.as_ref().map(|c| c.version)
                } else {
                    None
                };
                for id in page.ids {
                    let mut a = Vec::new();
                    let revoked = match cap_version {
                        Some(v) if !want.is_empty() => s.stat(*pid, id)?.version >= v,
                        _ => false,
                    };
                    for k in want.iter().filter(|_| !revoked) {
                        if let Some(v) = s.get_attr(*pid, id, k.page, k.number)? {
                            a.push((*k, v));
                        }
                    }
                    entries.push((id, a));
                }
                Ok(Reply::Listed {
                    entries,
                    next: page.next,
                })
            }),
        Command::GetAttributes { .. } | Command::SetAttributes { .. } => Ok(Reply::Done),
        Command::Cas {
            pid,
            oid,
            key,
            expected,
            new,
        } => s
            .cas_attr(*pid, *oid, key.page, key.number, expected, new)
            .map(|o| Reply::Cas {
                swapped: o.swapped,
                old: o.old,
            }),
        Command::FetchAdd {
            pid,
            oid,
            key,
            delta,
        } => s
            .fetch_add(*pid, *oid, key.page, key.number, *delta)
            .map(|old| Reply::FetchAdd { old }),
        Command::GetPage {
            pid,
            oid,
            page,
            after,
            max,
        } => s
            .page_attrs(*pid, *oid, *page, *after, *max as usize, MAX_PAGE_BYTES)
            .map(|(attrs, next)| Reply::Page { attrs, next }),
        Command::SetVersion { pid, oid, version } => {
            s.set_version(*pid, *oid, *version).map(|()| Reply::Done)
        }
        Command::Digest { pid, oid, deep } => crate::digest::digest(&s, *pid, *oid, *deep),
        Command::Statfs => {
            let f = s.statfs();
            Ok(Reply::Statfs {
                total_bytes: f.total_bytes,
                free_bytes: f.free_bytes,
                objects: f.objects,
            })
        }
    }
    .map_err(map_err)?;
    // Piggybacked attribute lists act on the command's object.
    let obj = target(&req.cmd).or(match req.cmd {
        Command::CreateAndWrite { pid, oid } => Some((pid, oid)),
        Command::Create {
            pid,
            oid: Some(o),
            count: 1,
        } => Some((pid, o)),
        _ => None,
    });
    if (!req.set.is_empty()
        || !req.get.is_empty()
        || matches!(req.cmd, Command::GetAttributes { .. }))
        && obj.is_none()
    {
        return Err(WireError::bad(
            "attribute list",
            format!("{} acts on no single object", req.cmd.name()),
        ));
    }
    if let Some((pid, oid)) = obj {
        let created_with_set = matches!(req.cmd, Command::Create { .. });
        // A compare-and-swap's set list goes with the swap: applied only
        // when it swapped (a directory entry and its directory's change
        // time, in one request).
        let cas_failed = matches!(reply, Reply::Cas { swapped: false, .. });
        if !req.set.is_empty() && !created_with_set && !cas_failed {
            // All of the set list in one commit.
            s.set_attrs(pid, oid, &set_list(&req.set))
                .map_err(map_err)?;
        }
        if matches!(req.cmd, Command::GetAttributes { .. }) && req.get.is_empty() {
            for ((page, number), v) in s
                .list_attrs_within(pid, oid, MAX_PAGE_BYTES)
                .map_err(map_err)?
            {
                attrs.push((AttrKey { page, number }, v));
            }
        } else {
            for k in &req.get {
                if let Some(v) = s.get_attr(pid, oid, k.page, k.number).map_err(map_err)? {
                    attrs.push((*k, v));
                }
            }
        }
    }
    Ok(reply)
}
