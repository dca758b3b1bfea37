//! Executes one request against the store: capability checks first (every
//! bad case its own error), then the object locks and the checks made
//! under them, then the command ([`commands`], by family), then the
//! request's set and get attribute lists. What each command needs and
//! touches is one table ([`need`]). Synchronous; the server runs it on
//! the blocking pool.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use bytes::Bytes;
use proto::cap::{Need, rights};
use proto::clock::now_ms;
use proto::msg::{AttrKey, Command, Reply, Request, Response};
use proto::{ErrorCode, KeyRing, WireError};
use store::{FormatOptions, OpenOptions, Store, StoreError};

mod commands;
mod need;

use need::{created, need, target};

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
/// its stripe shared from the revocation (version) check to the end of the
/// operation;
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
    check_lease(ctx, req)
}

/// The MDS lease part of [`precheck`]: without a current lease only the
/// MDS (a capability with REVOKE) is served.
fn check_lease(ctx: &Ctx, req: &Request) -> Result<(), WireError> {
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
    respond(|attrs, out| run(ctx, holder, req, &payload, (attrs, out), Capability::Check))
}

/// [`execute`] of a request whose capability [`precheck`] accepted as it
/// was admitted (the server's `admit`), or that carries such a request's
/// capability unchanged (a FORWARD's effect): the check that depends only
/// on the request and the key ring (MAC, holder, range, rights) is not
/// made a second time. Expiry and the lease are checked again (time has
/// passed while the request waited), and so is a COPY's source
/// capability, which `precheck` does not cover.
pub(crate) fn execute_admitted(
    ctx: &Ctx,
    holder: u64,
    req: &Request,
    payload: Bytes,
) -> (Response, Bytes) {
    respond(|attrs, out| {
        run(
            ctx,
            holder,
            req,
            &payload,
            (attrs, out),
            Capability::Admitted,
        )
    })
}

fn respond(
    f: impl FnOnce(&mut Vec<(AttrKey, Vec<u8>)>, &mut Bytes) -> Result<Reply, WireError>,
) -> (Response, Bytes) {
    let mut attrs = Vec::new();
    let mut out = Bytes::new();
    let result = f(&mut attrs, &mut out);
    (Response { result, attrs }, out)
}

/// Whether [`run`] still checks the request's capability.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Capability {
    /// Not checked yet (a request an OSD builds itself).
    Check,
    /// Accepted by [`precheck`] when it was admitted.
    Admitted,
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
        s.check_attrs_fit(pid, oid, &commands::set_list(&req.set))
            .map_err(map_err)?;
    }
    Ok(())
}

/// The object locks a request holds while it runs: its object's stripe
/// (exclusive for SET VERSION, shared otherwise) and, for a COPY, its
/// source's, taken in stripe order.
struct Held<'a> {
    _first: Option<RwLockReadGuard<'a, ()>>,
    _shared: Option<RwLockReadGuard<'a, ()>>,
    _exclusive: Option<RwLockWriteGuard<'a, ()>>,
    _second: Option<RwLockReadGuard<'a, ()>>,
}

/// Takes `req`'s object locks; a COPY's source capability is checked
/// first, like the request's own, before any lock is held.
fn lock_objects<'a>(ctx: &'a Ctx, holder: u64, req: &Request) -> Result<Held<'a>, WireError> {
    let stripe = target(&req.cmd).or(created(&req.cmd)).or(match req.cmd {
        Command::SetVersion { pid, oid, .. } => Some((pid, oid)),
        _ => None,
    });
    let mut source = None;
    let mut first = None;
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
            Some((true, l)) => first = Some(l.read().unwrap_or_else(|e| e.into_inner())),
            Some((false, l)) => source = Some(l),
            None => {}
        }
    }
    let stripe = stripe.map(|(pid, oid)| ctx.locks.stripe(pid, oid));
    let (mut shared, mut exclusive) = (None, None);
    match (&req.cmd, stripe) {
        (Command::SetVersion { .. }, Some(l)) => {
            exclusive = Some(l.write().unwrap_or_else(|e| e.into_inner()))
        }
        (_, Some(l)) => shared = Some(l.read().unwrap_or_else(|e| e.into_inner())),
        _ => {}
    }
    Ok(Held {
        _first: first,
        _shared: shared,
        _exclusive: exclusive,
        _second: source.map(|l| l.read().unwrap_or_else(|e| e.into_inner())),
    })
}

fn run(
    ctx: &Ctx,
    holder: u64,
    req: &Request,
    payload: &Bytes,
    (attrs, out): (&mut Vec<(AttrKey, Vec<u8>)>, &mut Bytes),
    cap: Capability,
) -> Result<Reply, WireError> {
    req.validate(payload.len())?;
    let s = ctx.store.get()?;
    // The capability is checked before any lock is taken: a forged request
    // never holds an object's lock (the version check, which reads the
    // object, comes under the lock below).
    match cap {
        Capability::Check => precheck(ctx, holder, req)?,
        Capability::Admitted => {
            // All of the check but the clock is fixed by the request and
            // the key ring; the clock has moved while the request waited
            // (for reply memory, a chain's view, the object's lock).
            if ctx.keys.is_some() {
                KeyRing::check_expiry(req.cap.as_ref(), now_ms())?;
            }
            check_lease(ctx, req)?
        }
    }
    if let Command::Format { policy } = &req.cmd {
        drop(s);
        return format_store(ctx, policy);
    }
    let _held = lock_objects(ctx, holder, req)?;
    under_lock_checks(ctx, &s, req)?;
    let reply = commands::command(ctx, holder, &s, req, payload, out)?;
    commands::piggyback(&s, req, &reply, attrs)?;
    Ok(reply)
}
