//! This OSD's part in the replica chains (`proto::chain`): a request for a
//! group's partition is served only by the group's head, which runs it,
//! passes its effect down the chain and answers once the tail has it; an
//! effect from the member before this one is applied and passed on the
//! same way. Every member holds the object's lock from applying an effect
//! until the rest of the chain has it, and reads at the head wait for that
//! lock, so a read never sees a change that a failover could lose.
//!
//! A member that cannot pass an effect on (its successor is down, cut
//! off, or failed the effect) asks the authority to drop the successor
//! from the chain and passes the effect to the new successor: effects are
//! in a form whose repetition is harmless, so a member that already had it
//! loses nothing. Answers to requests that carried an id are kept (on
//! every member), so a client that retries at the new head after the old
//! one died gets the answer the change had, not a second change.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::OsdClient;
use net::auth::IdentitySource;
use proto::chain::{ChainTable, Forward};
use proto::msg::{AttrKey, Command, Reply, Request, Response};
use proto::{Capability, ErrorCode, WireError};

use crate::exec::{Ctx, execute_admitted};
use head::Ran;

mod bounds;
mod fill;
mod forward;

pub use forward::effect;
mod full;
mod head;
mod restart;
mod scrub;
mod stamp;

pub use bounds::{FORWARDABLE_HEADER, FORWARDED_ATTRS};
use bounds::{admissible_at_head, forwarded_attrs, group_of};
pub use restart::mark_new_store;

/// A boxed future (the authority is called through a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What this OSD knows of the chains: the table, where its successors
/// listen, and the capabilities they accept from it.
#[derive(Debug, Clone, Default)]
pub struct ChainView {
    /// Every group's chain.
    pub table: ChainTable,
    /// OSD id → address, for the members this OSD passes effects to.
    pub addrs: HashMap<u32, String>,
    /// (group, successor) → a capability over the group's partition on
    /// the successor, held by this OSD's principal.
    pub caps: HashMap<(u32, u32), Capability>,
}

/// Who keeps the chains (the MDS, in a cluster).
pub trait ChainAuthority: Send + Sync {
    /// The current view.
    fn fetch(&self) -> BoxFuture<'_, Result<ChainView, WireError>>;
    /// Asks that `osd` leave group `group`'s chain at `epoch` (this OSD is
    /// the member before it and could not pass it an effect); returns the
    /// view after the change, or the current one if the chain had
    /// changed already.
    fn drop_member(
        &self,
        group: u32,
        epoch: u64,
        osd: u32,
        refused: bool,
    ) -> BoxFuture<'_, Result<ChainView, WireError>>;
    /// Reports that this OSD started again without a clean shutdown, on
    /// `store`; returns the view after the authority took it out of its
    /// chains (or kept it alone where no other member is heard from).
    fn restarted(
        &self,
        store: proto::mds::StoreMark,
    ) -> BoxFuture<'_, Result<ChainView, WireError>>;
    /// Reports that this OSD filled `osd`, the first joining member after
    /// it in `group`'s chain at `epoch`; returns the view after.
    fn filled(
        &self,
        group: u32,
        epoch: u64,
        osd: u32,
    ) -> BoxFuture<'_, Result<ChainView, WireError>>;
}

/// Answers kept for retries, per member: at most this many…
const KEPT_ANSWERS: usize = 65_536;
/// …and this many bytes of them (a compare-and-swap's old value can be
/// large), the oldest forgotten first.
const KEPT_BYTES: usize = 32 << 20;
/// Fetch the chains again this long before a successor's capability
/// expires.
const RENEW_MARGIN_MS: u64 = 60_000;
/// How long a member waits for a chain change it was told of (a newer
/// epoch) before it refuses the effect.
const CATCH_UP: Duration = Duration::from_secs(5);
/// How long a member keeps trying to pass an effect on (the authority
/// drops a successor only once it is sure the successor is down, which
/// takes up to an OSD lease) before it fails the request.
const PASS_DEADLINE: Duration = Duration::from_secs(20);

type Kept = (Result<Reply, WireError>, Vec<(AttrKey, Vec<u8>)>);
/// The kept answers by (principal, request id), their order of arrival
/// and their bytes.
#[derive(Default)]
struct KeptAnswers {
    by_id: HashMap<(u64, u64), (Kept, usize)>,
    order: VecDeque<(u64, u64)>,
    bytes: usize,
}

fn kept_size(k: &Kept) -> usize {
    let reply = match &k.0 {
        Ok(Reply::Cas { old, .. }) => old.len(),
        Ok(Reply::Created(ids)) => ids.len() * 8,
        Ok(_) => 0,
        Err(e) => e.message.len(),
    };
    64 + reply + k.1.iter().map(|(_, v)| v.len() + 16).sum::<usize>()
}
/// An effect, as passed down a chain.
#[derive(Debug, Clone)]
pub struct Effect {
    /// The command each member applies.
    pub cmd: Command,
    /// Its set list.
    pub set: Vec<(AttrKey, Vec<u8>)>,
    /// Its payload.
    pub data: Bytes,
}

/// Refuses (NotReady) a request when this OSD's lease from the MDS has
/// run out — the MDS's own (revoking) requests excepted, as at admission.
fn still_leased(ctx: &Ctx, req: &Request) -> Result<(), WireError> {
    if let Some(lease) = &ctx.lease
        && !lease.current()
        && req
            .cap
            .as_ref()
            .is_none_or(|c| c.rights & proto::rights::REVOKE == 0)
    {
        return Err(WireError::new(
            ErrorCode::NotReady,
            "the lease from the MDS ran out while this waited for its object",
        ));
    }
    Ok(())
}

/// This OSD's chain state.
pub struct Chains {
    me: u32,
    cluster_id: String,
    authority: Arc<dyn ChainAuthority>,
    identity: Arc<dyn IdentitySource>,
    view: RwLock<Option<(Arc<ChainView>, Instant)>>,
    fetching: tokio::sync::Mutex<()>,
    /// One lock per object (not striped: two chains passing effects in
    /// opposite directions must never wait on each other through objects
    /// that merely share a stripe).
    locks: Mutex<ObjectLocks>,
    peers: Mutex<HashMap<u32, (String, Arc<OsdClient>)>>,
    kept: Mutex<KeptAnswers>,
    made: Mutex<std::collections::HashSet<u64>>,
    /// The newest chain epoch the MDS has named (in its report answers):
    /// a head whose view is older fetches the chains before it serves.
    known_epoch: std::sync::atomic::AtomicU64,
    /// The store, once the server is made (fills run on it).
    ctx: std::sync::OnceLock<Arc<Ctx>>,
    /// Fills running: (group, joiner).
    filling: Mutex<std::collections::HashSet<(u32, u32)>>,
    /// Changes made at this head that could not be passed down yet, per
    /// object, in order.
    unsent: Mutex<HashMap<(u64, u64), Vec<Unsent>>>,
    /// The chains' epoch the heartbeat last heard from the MDS.
    epochs: std::sync::OnceLock<tokio::sync::watch::Receiver<u64>>,
    /// Whether a resend of unsent changes is running.
    resending: std::sync::atomic::AtomicBool,
    /// Whether this OSD may act as a head yet: after a start that did not
    /// follow a clean shutdown (or the format of its store), only once the
    /// authority has judged its restart.
    ready: std::sync::atomic::AtomicBool,
    /// The stamps this OSD draws for changes ([`stamp`]).
    stamps: stamp::Stamps,
    /// Successors that answered "no space" lately ([`full`]).
    full_members: full::FullMembers,
}

/// Each object's lock, while anyone holds or waits for it.
type ObjectLocks = HashMap<(u64, u64), std::sync::Weak<tokio::sync::Mutex<()>>>;

/// A change made at the head and not yet down the chain.
struct Unsent {
    key: (u64, u64),
    fwd: Forward,
    set: Vec<(AttrKey, Vec<u8>)>,
    data: Bytes,
    answer: Kept,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_head(why: String) -> WireError {
    WireError::new(ErrorCode::NotHead, why)
}

fn stale(why: String) -> WireError {
    WireError::new(ErrorCode::StaleChain, why)
}

impl Chains {
    /// Chain state for OSD `me`, which reaches its successors as
    /// `identity` gives and learns the chains from `authority`.
    pub fn new(
        me: u32,
        cluster_id: &str,
        authority: Arc<dyn ChainAuthority>,
        identity: Arc<dyn IdentitySource>,
    ) -> Arc<Chains> {
        Arc::new(Chains {
            me,
            cluster_id: cluster_id.into(),
            authority,
            identity,
            view: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(()),
            locks: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            kept: Mutex::new(KeptAnswers::default()),
            made: Mutex::new(std::collections::HashSet::new()),
            known_epoch: std::sync::atomic::AtomicU64::new(0),
            ctx: std::sync::OnceLock::new(),
            filling: Mutex::new(std::collections::HashSet::new()),
            unsent: Mutex::new(HashMap::new()),
            epochs: std::sync::OnceLock::new(),
            resending: std::sync::atomic::AtomicBool::new(false),
            ready: std::sync::atomic::AtomicBool::new(false),
            stamps: stamp::Stamps::new(),
            full_members: full::FullMembers::default(),
        })
    }

    /// Gives the chains the server's context (the server does this).
    pub fn attach(&self, ctx: Arc<Ctx>) {
        let _ = self.ctx.set(ctx);
    }

    /// Keeps the view current until the task is dropped: fetches the
    /// chains when the MDS names a newer epoch (`epochs`, from the
    /// heartbeat) and before the capabilities for the successors expire,
    /// and starts the fills this OSD owes a joining member.
    pub async fn run(self: Arc<Self>, mut epochs: tokio::sync::watch::Receiver<u64>) {
        let _ = self.epochs.set(epochs.clone());
        self.after_start().await;
        loop {
            let known = *epochs.borrow_and_update();
            self.known_epoch
                .fetch_max(known, std::sync::atomic::Ordering::SeqCst);
            if known > 0 {
                let due = match self.current() {
                    None => true,
                    Some((v, _)) => {
                        v.table.epoch < known
                            || v.caps
                                .values()
                                .any(|c| c.expiry_ms < proto::clock::now_ms() + RENEW_MARGIN_MS)
                    }
                };
                let got = if due {
                    self.refresh(self.current().map(|c| c.1)).await
                } else {
                    self.view().await
                };
                if !lock(&self.unsent).is_empty()
                    && !self
                        .resending
                        .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    let me = self.clone();
                    tokio::spawn(async move {
                        me.resend_all().await;
                        me.resending
                            .store(false, std::sync::atomic::Ordering::SeqCst);
                    });
                }
                match got {
                    Ok(v) => self.start_fills(&v),
                    Err(e) => tracing::warn!(error = %e, "could not fetch the replica chains"),
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), epochs.changed()).await;
        }
    }

    /// Starts a fill of every joining member this OSD comes right before.
    fn start_fills(self: &Arc<Self>, v: &ChainView) {
        for (g, c) in &v.table.chains {
            let (Some(last), Some(&joiner)) = (c.members.last(), c.joining.first()) else {
                continue;
            };
            if *last != self.me || !lock(&self.filling).insert((*g, joiner)) {
                continue;
            }
            let (me, group, epoch) = (self.clone(), *g, c.epoch);
            tokio::spawn(async move {
                match me.fill(group, epoch, joiner).await {
                    Ok(n) => {
                        tracing::info!(group, osd = joiner, objects = n, "filled a chain member")
                    }
                    Err(e) if e.code == ErrorCode::NoSpace => {
                        // A joiner without room cannot be filled: dropped,
                        // so the group picks another (one not full).
                        tracing::warn!(group, osd = joiner, error = %e, "a joining member has no room for its fill: asking that it be dropped");
                        if let Ok(v) = me.authority.drop_member(group, epoch, joiner, true).await {
                            me.install(v);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(group, osd = joiner, error = %e, "fill failed; retried")
                    }
                }
                lock(&me.filling).remove(&(group, joiner));
            });
        }
    }

    /// Whether a request belongs to a chain (names a group's partition or
    /// its staging partition).
    pub fn handles(req: &Request) -> bool {
        matches!(req.cmd, Command::Forward(_)) || req.cmd.partition().and_then(group_of).is_some()
    }

    fn current(&self) -> Option<(Arc<ChainView>, Instant)> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The view, fetched if there is none yet.
    async fn view(&self) -> Result<Arc<ChainView>, WireError> {
        match self.current() {
            Some((v, _)) => Ok(v),
            None => self.refresh(None).await,
        }
    }

    /// Fetches the view unless one newer than `since` arrived meanwhile
    /// (concurrent callers share one fetch).
    async fn refresh(&self, since: Option<Instant>) -> Result<Arc<ChainView>, WireError> {
        let _one = self.fetching.lock().await;
        if let Some((v, at)) = self.current()
            && since.is_some_and(|s| at > s)
        {
            return Ok(v);
        }
        let v = self.authority.fetch().await?;
        Ok(self.install(v))
    }

    /// Installs a view unless the one held is newer.
    pub fn install(&self, v: ChainView) -> Arc<ChainView> {
        let mut slot = self.view.write().unwrap_or_else(|e| e.into_inner());
        if let Some((old, _)) = slot.as_ref()
            && old.table.epoch > v.table.epoch
        {
            return old.clone();
        }
        let v = Arc::new(v);
        *slot = Some((v.clone(), Instant::now()));
        v
    }

    /// The lock of one object, made when first needed; locks nobody
    /// holds or waits for are forgotten.
    fn object_lock(&self, obj: (u64, u64)) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = lock(&self.locks);
        if let Some(l) = m.get(&obj).and_then(std::sync::Weak::upgrade) {
            return l;
        }
        if m.len() >= 4096 {
            m.retain(|_, w| w.strong_count() > 0);
        }
        let l = Arc::new(tokio::sync::Mutex::new(()));
        m.insert(obj, Arc::downgrade(&l));
        l
    }

    /// Takes the locks of the objects a command touches (COPY: both), in
    /// (partition, object) order.
    async fn lock_objects(&self, cmd: &Command) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut objs: Vec<(u64, u64)> = cmd.object().into_iter().collect();
        if let Command::Copy { pid, src_oid, .. } = *cmd {
            objs.push((pid, src_oid));
        }
        objs.sort_unstable();
        objs.dedup();
        let mut held = Vec::with_capacity(objs.len());
        for o in objs {
            held.push(self.object_lock(o).lock_owned().await);
        }
        held
    }

    /// Makes a group's partition on this OSD the first time it is used.
    fn ensure_partition(&self, ctx: &Ctx, pid: u64) -> Result<(), WireError> {
        if lock(&self.made).contains(&pid) {
            return Ok(());
        }
        match ctx.store.get()?.create_partition(pid) {
            Ok(()) | Err(store::StoreError::PartitionExists(_)) => {
                lock(&self.made).insert(pid);
                Ok(())
            }
            Err(e) => Err(crate::exec::map_err(e)),
        }
    }

    fn kept(&self, key: (u64, u64)) -> Option<Kept> {
        lock(&self.kept).by_id.get(&key).map(|(k, _)| k.clone())
    }

    fn keep(&self, key: (u64, u64), answer: Kept) {
        if key.1 == 0 {
            return;
        }
        let size = kept_size(&answer);
        let mut k = lock(&self.kept);
        match k.by_id.insert(key, (answer, size)) {
            Some((_, old)) => k.bytes -= old,
            None => k.order.push_back(key),
        }
        k.bytes += size;
        while k.order.len() > KEPT_ANSWERS || k.bytes > KEPT_BYTES {
            let Some(old) = k.order.pop_front() else {
                break;
            };
            if let Some((_, n)) = k.by_id.remove(&old) {
                k.bytes -= n;
            }
        }
    }

    /// Serves a request for a group's partition, or a FORWARD, from a
    /// connection authenticated as `principal` (`name`).
    pub async fn serve(
        &self,
        ctx: &Ctx,
        principal: u64,
        name: &str,
        req: Request,
        payload: Bytes,
    ) -> (Response, Bytes) {
        let upstream = match req.cmd {
            Command::Forward(_) | Command::ScrubGroup { .. } => false,
            _ => self.is_upstream(principal, name, &req).await,
        };
        let r = match req.cmd {
            Command::Forward(_) => self.apply_forward(ctx, principal, name, req, payload).await,
            Command::ScrubGroup { group, deep } => {
                if principal == proto::auth::MDS_PRINCIPAL {
                    self.scrub_group(ctx, group, deep).await.map(|reply| {
                        (
                            Response {
                                result: Ok(reply),
                                attrs: Vec::new(),
                            },
                            Bytes::new(),
                        )
                    })
                } else {
                    Err(WireError::new(
                        ErrorCode::CapForged,
                        format!("{name}: only the MDS scrubs a replica group"),
                    ))
                }
            }
            _ if upstream => {
                // The member before this one filling it: served as asked.
                match req.cmd.partition().map(|p| self.ensure_partition(ctx, p)) {
                    Some(Err(e)) => Err(e),
                    _ => {
                        let _held = self.lock_objects(&req.cmd).await;
                        Ok(tokio::task::block_in_place(|| {
                            execute_admitted(ctx, principal, &req, payload.clone())
                        }))
                    }
                }
            }
            _ => self.serve_at_head(ctx, principal, req, payload).await,
        };
        match r {
            Ok(x) => x,
            Err(e) => (
                Response {
                    result: Err(e),
                    attrs: Vec::new(),
                },
                Bytes::new(),
            ),
        }
    }

    /// [`Chains::sent_by_upstream`], with the view fetched again once
    /// when another member asks and this OSD's view does not show it
    /// upstream: a member just restarted has no view yet, or an old one,
    /// and would otherwise take the head's scrub or fill for a client's
    /// request (and refuse it: not the head).
    async fn is_upstream(&self, principal: u64, name: &str, req: &Request) -> bool {
        if self.sent_by_upstream(principal, name, req) {
            return true;
        }
        let from_member = name
            .strip_prefix("osd.")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| proto::chain::member_principal(n) == principal);
        if !from_member || req.cmd.partition().and_then(group_of).is_none() {
            return false;
        }
        let _ = self.refresh(self.current().map(|c| c.1)).await;
        self.sent_by_upstream(principal, name, req)
    }

    /// Whether a request comes from the member before this OSD, or from
    /// the head, in the chain of the group it names (a fill, a scrub or a
    /// repair: the sender holds the object's lock, so nothing of it is on
    /// its way down meanwhile).
    fn sent_by_upstream(&self, principal: u64, name: &str, req: &Request) -> bool {
        let Some(group) = req.cmd.partition().and_then(group_of) else {
            return false;
        };
        let Some(n) = name
            .strip_prefix("osd.")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            return false;
        };
        // A staging partition is its sender's own.
        let own_staging = req
            .cmd
            .partition()
            .and_then(proto::chain::staging_of)
            .is_none_or(|(_, sender)| sender == n);
        proto::chain::member_principal(n) == principal
            && own_staging
            && self.current().is_some_and(|(v, _)| {
                v.table.chain(group).is_some_and(|c| {
                    c.head() != Some(self.me)
                        && (c.predecessor(self.me) == Some(n) || c.head() == Some(n))
                })
            })
    }

    async fn serve_at_head(
        &self,
        ctx: &Ctx,
        principal: u64,
        req: Request,
        payload: Bytes,
    ) -> Result<(Response, Bytes), WireError> {
        let ready = self.ready.load(std::sync::atomic::Ordering::SeqCst);
        let group = admissible_at_head(&req, ready, self.me)?;
        let mut view = self.view().await?;
        let known = self
            .known_epoch
            .load(std::sync::atomic::Ordering::SeqCst)
            .max(self.epochs.get().map_or(0, |r| *r.borrow()));
        if view.table.chain(group).and_then(|c| c.head()) != Some(self.me)
            || view.table.epoch < known
        {
            // Maybe this OSD was made head since it last looked.
            view = self.refresh(self.current().map(|c| c.1)).await?;
        }
        let Some(chain) = view.table.chain(group).cloned() else {
            return Err(not_head(format!("group {group} has no chain")));
        };
        if chain.head() != Some(self.me) {
            return Err(not_head(format!(
                "OSD {} is not the head of group {group} (chain epoch {}: head {:?})",
                self.me,
                chain.epoch,
                chain.head()
            )));
        }
        bounds::check_floor(&req, (group, &chain), &view.table)?;
        if full::takes_space(&req.cmd) {
            full::refuse_when_full(ctx, group)?;
            self.full_members
                .refuse(group, chain.order().filter(|m| *m != self.me))?;
        }
        self.ensure_partition(ctx, proto::chain::group_partition(group))?;
        let key = (principal, req.id);
        if let Command::Create { count, .. } = req.cmd
            && count > 1
        {
            return Err(WireError::bad(
                "count",
                "a replica group's partition takes creates of one object",
            ));
        }
        let _held = self.lock_objects(&req.cmd).await;
        // The lease again, the object now ours: a request admitted just
        // before the lease ran out may have waited for the lock past it,
        // when the next member may be head already (a drain, a partition).
        still_leased(ctx, &req)?;
        // A change of this object that is not down the chain yet goes
        // first (and answers its own retry); until it is, the object
        // serves nothing, so nobody reads what a failover could lose. A
        // removal does not wait for them (they may wait for room on a full
        // member): once it is made, they are dropped.
        let removal = matches!(req.cmd, Command::Remove { .. });
        if !removal
            && let Some(obj) = req.cmd.object()
            && let Some(answer) = self.resend(obj, key).await?
        {
            return Ok((answer, Bytes::new()));
        }
        if req.id != 0
            && let Some((result, attrs)) = self.kept(key)
        {
            return Ok((Response { result, attrs }, Bytes::new()));
        }
        let stamp = self.stamps.draw();
        let (resp, out, reply) = match self
            .run_at_head(
                ctx,
                principal,
                (&req, &payload),
                (&view, group, &chain),
                stamp,
            )
            .await?
        {
            Ran::Done(resp, out, reply, created) => {
                if let (true, Some(obj)) = (removal, req.cmd.object())
                    && lock(&self.unsent).remove(&obj).is_some()
                {
                    tracing::warn!(
                        group,
                        oid = obj.1,
                        "changes not yet down the chain dropped: their object is removed"
                    );
                }
                // A COPY that made its destination passes down as a plain
                // write, which members skip for an object they lack: they
                // get the head's whole object instead.
                if let (true, Command::Copy { oid, .. }) = (created, &req.cmd) {
                    self.resync(ctx, &view, group, *oid).await?;
                    return Ok((resp, out));
                }
                (resp, out, reply)
            }
            Ran::Answer(resp, out) => return Ok((resp, out)),
        };
        let payload = match &req.cmd {
            // A COPY travels as the bytes it wrote (its source capability
            // is the client's, for this OSD only).
            Command::Copy {
                pid, oid, offset, ..
            } => {
                let Reply::Copied { len } = reply else {
                    return Ok((resp, out));
                };
                let s = ctx.store.get()?;
                let bytes =
                    tokio::task::block_in_place(|| s.read(*pid, *oid, *offset, u64::from(len)))
                        .map_err(crate::exec::map_err)?;
                Bytes::from(bytes)
            }
            _ => payload,
        };
        let Some(Effect { cmd: op, set, data }) = effect(&req, &reply, &payload) else {
            return Ok((resp, out));
        };
        let set = stamp::onto(&op, set, stamp);
        let fwd = Forward {
            group,
            epoch: chain.epoch,
            op,
            origin: principal,
            id: req.id,
            reply: reply.clone(),
            attrs: forwarded_attrs(&resp.attrs),
        };
        let answer: Kept = (resp.result.clone(), resp.attrs.clone());
        if let Err(e) = self.pass_down(fwd.clone(), set.clone(), data.clone()).await {
            let unsent = Unsent {
                key,
                fwd,
                set,
                data,
                answer,
            };
            return self
                .not_passed_down(ctx, (&view, group), &req, unsent, e)
                .await
                .map(|()| (resp, out));
        }
        if answer_matters(&req.cmd) {
            self.keep(key, answer);
        }
        Ok((resp, out))
    }
}

/// Full copies a change needs: `replicas - 1` (at least one), and no more
/// than the cluster has OSDs (one group per OSD id).
fn min_copies(table: &proto::chain::ChainTable) -> usize {
    usize::from(table.replicas.saturating_sub(1).max(1)).min(table.chains.len().max(1))
}

/// Whether a retry of a command made once must get the first answer (a
/// second run would answer otherwise): only these answers are kept.
fn answer_matters(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Cas { .. }
            | Command::FetchAdd { .. }
            | Command::Create { .. }
            | Command::CreateAndWrite { .. }
            | Command::Append { .. }
            | Command::Remove { .. }
    )
}
