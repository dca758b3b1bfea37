//! Passing effects down a chain: to the next member (and, when it cannot
//! take them, to the one after it once the authority has dropped it),
//! again to a member that missed some, or as a whole object to every
//! member when a change failed part way at the head; the effect a request
//! had, in a form whose repetition is harmless; and applying one on a
//! member.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::{ConnConfig, ConnError, OsdClient};
use proto::chain::{Forward, partition_group};
use proto::msg::{AttrKey, Command, Reply, Request, Response};
use proto::{ErrorCode, WireError};

use super::{
    CATCH_UP, ChainView, Chains, Effect, PASS_DEADLINE, lock, min_copies, not_head, stale, stamp,
};
use crate::exec::{Ctx, execute, execute_admitted};

impl Chains {
    /// Gives every other member the head's whole copy of `oid` (the caller
    /// holds its lock).
    pub(super) async fn resync(
        &self,
        ctx: &Ctx,
        view: &ChainView,
        group: u32,
        oid: u64,
    ) -> Result<(), WireError> {
        let chain = view.table.chain(group).cloned().unwrap_or_default();
        for m in chain.order().filter(|m| *m != self.me) {
            self.copy_object(ctx, view, group, m, oid).await?;
        }
        tracing::warn!(
            group,
            oid,
            "a change failed part-way; members given the head's copy"
        );
        Ok(())
    }

    /// Passes down the changes of `obj` that failed to go down before (the
    /// caller holds the object's lock). Returns the answer of the one made
    /// for request `key`, if it is among them; fails (Busy) while any is
    /// still not down the chain.
    pub(super) async fn resend(
        &self,
        obj: (u64, u64),
        key: (u64, u64),
    ) -> Result<Option<Response>, WireError> {
        let pending = lock(&self.unsent).remove(&obj);
        let Some(mut pending) = pending else {
            return Ok(None);
        };
        let mut mine = None;
        while let Some(u) = pending.first() {
            if let Err(e) = self
                .pass_down(u.fwd.clone(), u.set.clone(), u.data.clone())
                .await
            {
                if e.code == ErrorCode::NotHead {
                    // This OSD left the chain: its copy no longer counts
                    // (a fill replaces it if it joins again).
                    return Err(e);
                }
                // Refused as malformed however often it is sent: the
                // members take the head's whole object instead.
                let resynced = e.code == ErrorCode::BadRequest
                    && match (self.ctx.get(), self.view().await) {
                        (Some(ctx), Ok(view)) => {
                            self.resync(ctx, &view, u.fwd.group, obj.1).await.is_ok()
                        }
                        _ => false,
                    };
                if !resynced {
                    lock(&self.unsent).insert(obj, pending);
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!("an earlier change of this object is not yet down the chain: {e}"),
                    ));
                }
            }
            let u = pending.remove(0);
            if u.key == key && key.1 != 0 {
                mine = Some(Response {
                    result: u.answer.0.clone(),
                    attrs: u.answer.1.clone(),
                });
            }
            self.keep(u.key, u.answer);
        }
        Ok(mine)
    }

    /// Passes down every change that failed to go down before (run now
    /// and then, so a change whose client gave up still reaches the chain).
    pub(super) async fn resend_all(&self) {
        let objs: Vec<(u64, u64)> = lock(&self.unsent).keys().copied().collect();
        for obj in objs {
            let (pid, oid) = obj;
            let _held = self.lock_objects(&Command::Remove { pid, oid }).await;
            if let Err(e) = self.resend(obj, (0, 0)).await {
                tracing::warn!(pid, oid, error = %e, "a change is still not down its chain");
            }
        }
    }

    pub(super) async fn apply_forward(
        &self,
        ctx: &Ctx,
        principal: u64,
        name: &str,
        req: Request,
        payload: Bytes,
    ) -> Result<(Response, Bytes), WireError> {
        let Command::Forward(f) = req.cmd else {
            return Err(WireError::bad("command", "not a forward"));
        };
        let f = *f;
        // Only another member passes effects: anyone else is refused
        // before this OSD looks at (or fetches) any chain.
        let member = name
            .strip_prefix("osd.")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| proto::chain::member_principal(*n) == principal);
        if member.is_none() {
            return Err(WireError::new(
                ErrorCode::CapForged,
                format!("{name} is not an OSD: only chain members pass effects"),
            ));
        }
        if f.op.partition().and_then(partition_group) != Some(f.group) {
            return Err(WireError::bad(
                "forward",
                format!("the effect is not in group {}'s partition", f.group),
            ));
        }
        // The object's lock first: effects of one object are applied in the
        // order they arrive, even one that waits below for a chain change.
        let _held = self.lock_objects(&f.op).await;
        let started = Instant::now();
        let mut view = self.view().await?;
        let chain = loop {
            let c = view.table.chain(f.group).cloned().unwrap_or_default();
            if c.epoch == f.epoch {
                break c;
            }
            if c.epoch > f.epoch || started.elapsed() > CATCH_UP {
                return Err(stale(format!(
                    "OSD {} holds group {} at chain epoch {}, the effect came under epoch {}",
                    self.me, f.group, c.epoch, f.epoch
                )));
            }
            // The sender knows of a change this OSD has not seen yet.
            let before = self.current().map(|c| c.1);
            tokio::time::sleep(Duration::from_millis(20)).await;
            view = self.refresh(before).await?;
        };
        let pred = chain.predecessor(self.me);
        if pred.map(proto::chain::member_name).as_deref() != Some(name) {
            return Err(stale(format!(
                "{name} is not the member before OSD {} in group {}'s chain (epoch {}: {:?})",
                self.me, f.group, chain.epoch, pred
            )));
        }
        self.ensure_partition(ctx, proto::chain::group_partition(f.group))?;
        // Marked with a stamp of its own first, the change's once applied
        // (see `stamp`): a crash between leaves a stamp no copy shares.
        let (stamp, set) = stamp::split(&req.set);
        let inner = Request {
            cap: req.cap.clone(),
            id: 0,
            cmd: f.op.clone(),
            get: Vec::new(),
            set,
        };
        let marked = stamp.and_then(|s| Some((stamp::marked_object(&inner.cmd)?, s)));
        if let Some((obj, _)) = marked {
            stamp::mark(ctx, obj, self.stamps.draw())?;
        }
        tokio::task::block_in_place(|| apply(ctx, principal, &inner, payload.clone()))?;
        // Only a full member takes the change's stamp: a joining one
        // applies effects to whatever copy it came back with, which may
        // lack earlier changes its fill has still to bring. Its own stamp
        // stays, so the fill copies the object. A mark that fails leaves
        // that stamp too (the object is copied by the next fill): safe.
        if let Some((obj, s)) = marked
            && chain.members.contains(&self.me)
            && let Err(e) = stamp::mark(ctx, obj, s)
        {
            tracing::warn!(group = f.group, oid = obj.1, error = %e, "an applied effect left its object unmarked");
        }
        let (origin, id, answer) = (f.origin, f.id, (Ok(f.reply.clone()), f.attrs.clone()));
        let matters = !matches!(f.reply, Reply::Done);
        let group = f.group;
        if let Err(e) = self.pass_down(f, req.set, payload).await {
            return Err(self.undo_unpassed(ctx, group, &inner.cmd, e).await);
        }
        // Kept only once the rest of the chain has it: a retry that finds
        // it here (as a new head) is answered with a change every later
        // member holds. (An answer of Done is what a second run answers
        // too, except for a removal: those are kept as well.)
        if matters
            || matches!(
                inner.cmd,
                Command::Remove { .. } | Command::CreateAndWrite { .. }
            )
        {
            self.keep((origin, id), answer);
        }
        Ok((
            Response {
                result: Ok(Reply::Done),
                attrs: Vec::new(),
            },
            Bytes::new(),
        ))
    }

    /// Passes an effect to this OSD's successor in its group's chain, and
    /// to the next one whenever the authority drops a successor that
    /// could not take it; returns once the rest of the chain has it.
    pub(super) async fn pass_down(
        &self,
        mut f: Forward,
        set: Vec<(AttrKey, Vec<u8>)>,
        data: Bytes,
    ) -> Result<(), WireError> {
        let group = f.group;
        let started = Instant::now();
        let mut cap_refreshes = 0;
        while started.elapsed() < PASS_DEADLINE {
            let view = self.view().await?;
            let chain = view.table.chain(group).cloned().unwrap_or_default();
            if !chain.holds(self.me) {
                return Err(not_head(format!(
                    "OSD {} left group {group}'s chain (epoch {}) while passing an effect on",
                    self.me, chain.epoch
                )));
            }
            let Some(next) = chain.successor(self.me) else {
                // Every member now has it — but members dropped on the way
                // may have left fewer than a change needs: the floor holds
                // for the whole change, not only when it started. "Busy":
                // an upstream member must not take this for its
                // successor's failure, and the head keeps the change until
                // a new member is filled.
                let min = min_copies(&view.table);
                if chain.members.len() < min {
                    return Err(WireError::new(
                        ErrorCode::Busy,
                        format!(
                            "group {group}: the change reached {} copies, fewer than the \
                             {min} a change needs; kept until a new member is filled",
                            chain.members.len()
                        ),
                    ));
                }
                return Ok(());
            };
            f.epoch = chain.epoch;
            let req = Request {
                cap: view.caps.get(&(group, next)).cloned(),
                id: 0,
                cmd: Command::Forward(Box::new(f.clone())),
                get: Vec::new(),
                set: set.clone(),
            };
            let sent = match self.peer(&view, next) {
                Ok(c) => c.call(req, data.clone()).await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(_) => {
                    self.full_members.cleared(next);
                    return Ok(());
                }
                Err(ConnError::Remote(w)) if w.code == ErrorCode::NoSpace => {
                    let full = super::full::full_osd(&w.message).unwrap_or(next);
                    if full == next && !chain.members.contains(&next) {
                        // A joining member without room: its fill cannot
                        // finish anyway. Dropped, as a member that refuses.
                        tracing::warn!(group, osd = next, error = %w, "a joining member has no room: asking that it be dropped");
                        let v = self
                            .authority
                            .drop_member(group, chain.epoch, next, true)
                            .await?;
                        self.install(v);
                    } else {
                        // A full member is not dropped (the group would only
                        // refill onto full disks). The successor itself full:
                        // offered again for a little; one further down: the
                        // members after this one have rolled the change back.
                        self.full_members.noted(full);
                        if full != next || started.elapsed() >= super::full::FULL_WAIT {
                            return Err(super::full::no_room(group, full, &w));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                Err(ConnError::Remote(w))
                    if w.code == ErrorCode::CapExpired && cap_refreshes < 3 =>
                {
                    // Expired by the successor's clock, not by this OSD's
                    // (their clocks differ): fresh capabilities, then again,
                    // rather than dropping a live member.
                    cap_refreshes += 1;
                    tracing::warn!(group, osd = next, error = %w, "a successor found this OSD's capability expired: fetching fresh ones");
                    let before = self.current().map(|c| c.1);
                    self.refresh(before).await?;
                }
                Err(ConnError::Remote(w)) if w.code == ErrorCode::StaleChain => {
                    // The successor holds another epoch: look again.
                    let before = self.current().map(|c| c.1);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    self.refresh(before).await?;
                }
                Err(ConnError::Remote(w)) if w.code == ErrorCode::BadRequest => {
                    // The member refuses the effect itself (a bound of the
                    // protocol), not because it failed: dropping it would
                    // cost a live copy. The caller gives the members the
                    // head's whole object instead.
                    tracing::error!(group, osd = next, error = %w, "chain member refused an effect as malformed; resyncing instead of dropping it");
                    return Err(w);
                }
                Err(ConnError::Remote(w))
                    if w.code == ErrorCode::Busy
                        && chain.members.len() < min_copies(&view.table) =>
                {
                    // Below the floor here too: the successor keeps the
                    // change for the same reason. Passed straight up — not
                    // its failure, so it is neither dropped nor waited on.
                    return Err(w);
                }
                Err(ConnError::Remote(w))
                    if matches!(w.code, ErrorCode::Busy | ErrorCode::Bound) =>
                {
                    // "Not now" from a successor that answers: it is up
                    // and reachable, so the MDS would neither drop it nor
                    // learn anything. Offered again shortly.
                    tracing::debug!(group, osd = next, error = %w, "successor busy: offering the effect again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => self.ask_to_drop(group, chain.epoch, next, &e).await?,
            }
        }
        Err(WireError::new(
            ErrorCode::Io,
            format!("group {group}: the effect could not be passed down its chain"),
        ))
    }

    /// Successor `next` of `group`'s chain (at `epoch`) failed to take an
    /// effect with `e`: the authority is asked to drop it, and the chain
    /// it answers installed.
    async fn ask_to_drop(
        &self,
        group: u32,
        epoch: u64,
        next: u32,
        e: &ConnError,
    ) -> Result<(), WireError> {
        // An answer other than "not now" is given every time: that member
        // cannot take the effect (a full one is handled by the caller).
        let refused = matches!(e, ConnError::Remote(w)
        if !matches!(
            w.code,
            ErrorCode::NotReady | ErrorCode::Busy | ErrorCode::Bound
        ));
        tracing::warn!(
            group,
            osd = next,
            epoch,
            refused,
            error = %e,
            "chain member failed to take an effect; asking that it be dropped"
        );
        let v = self
            .authority
            .drop_member(group, epoch, next, refused)
            .await?;
        if v.table.chain(group).is_some_and(|c| c.epoch == epoch) {
            // Not dropped (the authority does not see it down yet): try
            // it again shortly.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.install(v);
        Ok(())
    }

    /// A member's answer when an effect it applied could not go on: with
    /// no room after it, its own copy is rolled back to its successor's
    /// (so "no room" keeps meaning "not on this member nor after it"); a
    /// rollback that fails is an I/O error, which the head does not take
    /// for "no room".
    async fn undo_unpassed(&self, ctx: &Ctx, group: u32, cmd: &Command, e: WireError) -> WireError {
        if e.code != ErrorCode::NoSpace {
            return e;
        }
        let next = match self.view().await {
            Ok(v) => v.table.chain(group).and_then(|c| c.successor(self.me)),
            Err(_) => None,
        };
        match (next, cmd.object()) {
            (Some(next), Some((_, oid))) => match self.roll_back_to(ctx, group, oid, next).await {
                Ok(()) => e,
                Err(r) => WireError::new(
                    ErrorCode::Io,
                    format!("{e}; rolling this member back failed: {r}"),
                ),
            },
            _ => e,
        }
    }

    pub(super) fn peer(&self, view: &ChainView, osd: u32) -> Result<Arc<OsdClient>, ConnError> {
        let addr = view
            .addrs
            .get(&osd)
            .cloned()
            .ok_or_else(|| ConnError::Connect {
                addr: format!("OSD {osd}"),
                why: "no address for this chain member".into(),
            })?;
        let mut peers = lock(&self.peers);
        if let Some((a, c)) = peers.get(&osd)
            && *a == addr
        {
            return Ok(c.clone());
        }
        let mut cfg = ConnConfig::new(&self.cluster_id, osd, self.identity.clone());
        cfg.name = format!("osd.{}-chain", self.me);
        cfg.connections = 2;
        // Longer than any wait below it (a member's own passing on, a
        // chain change), so a forward is not sent twice while one is alive.
        cfg.timeout = Duration::from_secs(60);
        // A successor the network cannot reach is asked about in
        // seconds once the connection is to be made again (a live one's
        // kernel answers a connect at once, busy or not). No TCP user
        // timeout: a busy successor stops reading, and its zero window
        // must not cost the connection (`ConnConfig::dead_peer_after`).
        cfg.connect_timeout = Some(PEER_CONNECT_TIMEOUT);
        let c = Arc::new(OsdClient::new(&addr, cfg));
        peers.insert(osd, (addr, c.clone()));
        Ok(c)
    }
}

/// How long a chain member waits for its successor to accept a
/// connection.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_millis(proto::chain::PEER_CONNECT_TIMEOUT_MS);

/// The effect of a request that changed something, in a form whose
/// repetition is harmless: the command, its set list and its payload as
/// passed down the chain. `None` for a request that changed nothing.
pub fn effect(req: &Request, reply: &Reply, payload: &Bytes) -> Option<Effect> {
    let set = req.set.clone();
    let set_only = |pid, oid, set: Vec<(AttrKey, Vec<u8>)>| {
        (!set.is_empty()).then_some(Effect {
            cmd: Command::SetAttributes { pid, oid },
            set,
            data: Bytes::new(),
        })
    };
    // An attribute the command set, then the request's set list.
    let setting = |pid, oid, key: AttrKey, value: Vec<u8>| {
        set_only(
            pid,
            oid,
            std::iter::once((key, value))
                .chain(req.set.iter().cloned())
                .collect(),
        )
    };
    // The bytes the command wrote, as a plain write at `offset`.
    let written = |pid, oid, offset, set| {
        Some(Effect {
            cmd: Command::Write { pid, oid, offset },
            set,
            data: payload.clone(),
        })
    };
    match (&req.cmd, reply) {
        (Command::Cas { .. }, Reply::Cas { swapped: false, .. }) => None,
        (
            Command::Cas {
                pid, oid, key, new, ..
            },
            _,
        ) => setting(*pid, *oid, *key, new.clone()),
        (
            Command::FetchAdd {
                pid,
                oid,
                key,
                delta,
            },
            Reply::FetchAdd { old },
        ) => setting(
            *pid,
            *oid,
            *key,
            old.wrapping_add(*delta).to_le_bytes().to_vec(),
        ),
        (Command::Append { pid, oid }, Reply::Appended { offset }) => {
            written(*pid, *oid, *offset, set)
        }
        (
            Command::Read { pid, oid, .. }
            | Command::GetAttributes { pid, oid }
            | Command::GetPage { pid, oid, .. }
            | Command::Digest { pid, oid, .. }
            | Command::DataRanges { pid, oid },
            _,
        ) => set_only(*pid, *oid, set),
        (Command::List { .. } | Command::Flush { .. } | Command::Statfs, _) => None,
        (
            Command::Copy {
                pid, oid, offset, ..
            },
            _,
        ) => written(*pid, *oid, *offset, set),
        (cmd, _) => Some(Effect {
            cmd: cmd.clone(),
            set,
            data: payload.clone(),
        }),
    }
}

/// Applies an effect on a member: a create of an object that is there
/// replaces it (the member held a leftover), and an effect on an object
/// that is not there is skipped (it was removed, or the member is joining
/// and the fill brings the object whole).
pub(super) fn apply(
    ctx: &Ctx,
    principal: u64,
    req: &Request,
    payload: Bytes,
) -> Result<(), WireError> {
    // The effect carries the FORWARD's own capability, which admission
    // checked against what the effect needs.
    let run = || {
        execute_admitted(ctx, principal, req, payload.clone())
            .0
            .result
    };
    match run() {
        Ok(_) => Ok(()),
        Err(e) if e.code == ErrorCode::Exists => {
            let (pid, oid) = req.cmd.object().ok_or(e)?;
            let remove = Request {
                cap: req.cap.clone(),
                id: 0,
                cmd: Command::Remove { pid, oid },
                get: Vec::new(),
                set: Vec::new(),
            };
            let _ = execute(ctx, principal, &remove, Bytes::new());
            run().map(|_| ())
        }
        Err(e) if e.code == ErrorCode::NoObject => Ok(()),
        Err(e) => Err(e),
    }
}
