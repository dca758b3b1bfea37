//! Early answers and replay (the durability design of `docs/CLIENT.md`,
//! "Durability"; Lustre's transnos and recovery window are the model).
//!
//! A client that asks for it gets namespace changes answered once they are
//! visible, before the log flush that makes them durable, with a transno;
//! it keeps each until an answer says the durable transno reached it.
//! After a crash the KV knows the sessions that may hold such answers (see
//! [`crate::kv`]); the MDS then serves nothing but replays until each of
//! those sessions has sent its list or `replay_window_ms` has passed, and
//! redoes every listed operation above the durable transno in transno
//! order, as the original requests, checking each makes the inode it
//! first did. Only then do other requests run.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::mds::{
    Creds, EarlyReply, Errno, MdsError, MdsReply, MdsRequest, Op, ROOT_INO, ReplayOp,
};

use super::{Caller, Mds, err};
use crate::kv::{Ack, Kv};

type Results = Vec<Result<(), MdsError>>;

tokio::task_local! {
    /// While a replayed operation is redone: the inode number it first
    /// made, which it makes again if that is free.
    static REDO_INO: Option<u64>;
}

/// The inode number the operation being redone must make, if any.
fn redo_ino() -> Option<u64> {
    REDO_INO.try_with(|i| *i).ok().flatten()
}

/// One session's replay, waiting for the others.
struct Waiting {
    caller: Caller,
    session: u64,
    ops: Vec<ReplayOp>,
    done: tokio::sync::oneshot::Sender<Results>,
}

/// Replays waited for after a crash.
pub(super) struct Recovering {
    /// Sessions not yet heard from.
    awaiting: HashSet<u64>,
    /// Replays received.
    waiting: Vec<Waiting>,
    /// When to stop waiting.
    deadline: Instant,
    /// Early answers up to here were durable before the crash.
    durable: u64,
    /// Wakes the worker when the last awaited session arrives.
    arrived: Arc<tokio::sync::Notify>,
}

impl Recovering {
    /// What the KV found at open: `None` when no session may hold early
    /// answers beyond the log (a clean stop, or none were given).
    pub(super) fn after_open(kv: &Kv, window_ms: u64) -> Option<Recovering> {
        let sessions = kv.recovered_sessions();
        if sessions.is_empty() {
            return None;
        }
        tracing::info!(
            sessions = sessions.len(),
            durable_transno = kv.recovered_transno(),
            window_ms,
            "waiting for clients to replay early-answered operations"
        );
        Some(Recovering {
            awaiting: sessions.iter().copied().collect(),
            waiting: Vec::new(),
            deadline: Instant::now() + Duration::from_millis(window_ms),
            durable: kv.recovered_transno(),
            arrived: Arc::new(tokio::sync::Notify::new()),
        })
    }
}

/// Most sessions of one principal answered early at once (a mount is one
/// session): more get durable answers until some go quiet.
pub const EARLY_SESSIONS_PER_PRINCIPAL: usize = 64;
/// How long after its last early answer a session still counts against
/// its principal's bound (longer than the KV keeps its record idle).
pub(super) const EARLY_SESSION_IDLE: Duration = Duration::from_secs(5);

/// The bytes an early answer's seal is the MAC of: the session's record
/// key, the MDS instance that answered, the transno, and the credentials,
/// operation and inode the client keeps and replays. (The instance: a
/// transno lost in a crash is given again by the next instance, so an
/// answer must not be replayable as another instance's.)
fn sealed_bytes(
    (key, instance): (u64, u64),
    transno: u64,
    creds: &Creds,
    op: &Op,
    ino: Option<u64>,
) -> Vec<u8> {
    let mut msg = b"tessera: early answer seal v2".to_vec();
    msg.extend_from_slice(&key.to_le_bytes());
    msg.extend_from_slice(&instance.to_le_bytes());
    msg.extend_from_slice(&transno.to_le_bytes());
    msg.extend(postcard::to_allocvec(&(creds, op, ino)).unwrap_or_default());
    msg
}

impl Mds {
    /// The seal of an early answer to `key`'s session by `instance` (see
    /// [`proto::mds::EarlyReply::seal`]).
    pub(super) fn seal(
        &self,
        (key, instance): (u64, u64),
        transno: u64,
        creds: &Creds,
        op: &Op,
        ino: Option<u64>,
    ) -> [u8; proto::mds::SEAL_LEN] {
        let msg = sealed_bytes((key, instance), transno, creds, op, ino);
        let d = proto::cap::mac(&self.seal_key, &msg);
        let mut out = [0u8; proto::mds::SEAL_LEN];
        out.copy_from_slice(&d[..proto::mds::SEAL_LEN]);
        out
    }

    /// Whether a replayed operation carries the seal its early answer to
    /// `key`'s session by `instance` had (compared in constant time).
    fn sealed(&self, (key, instance): (u64, u64), op: &ReplayOp) -> bool {
        let want = self.seal((key, instance), op.transno, &op.creds, &op.op, op.ino);
        want.iter()
            .zip(op.seal.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// How a request that may be answered early asks for it: the
    /// session, if the request allows it — and if its principal has fewer
    /// than [`EARLY_SESSIONS_PER_PRINCIPAL`] sessions answered early
    /// lately; past that it is answered durable (every recorded session
    /// is one a restarted MDS waits for).
    pub(super) fn early_for(&self, req: &MdsRequest) -> Option<u64> {
        if !(req.early && req.session != 0 && req.op.may_answer_early()) {
            return None;
        }
        let principal = super::auth::holder();
        let key = super::auth::session_key(principal, req.session);
        let mut all = self
            .early_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mine = all.entry(principal).or_default();
        let now = Instant::now();
        if !mine.contains_key(&key) && mine.len() >= EARLY_SESSIONS_PER_PRINCIPAL {
            mine.retain(|_, at| now.duration_since(*at) < EARLY_SESSION_IDLE);
            if mine.len() >= EARLY_SESSIONS_PER_PRINCIPAL {
                return None;
            }
        }
        mine.insert(key, now);
        Some(key)
    }

    /// Writes a namespace change: early for `early`'s session, else
    /// durable before it returns.
    pub(super) async fn write_ns<R: Send + 'static>(
        &self,
        early: Option<u64>,
        f: impl FnOnce(&mut crate::kv::Tx) -> Result<R, MdsError> + Send + 'static,
    ) -> Result<(R, Ack), MdsError> {
        match early {
            Some(session) => self.kv.write_early(session, f).await,
            None => Ok((self.kv.write(f).await?, Ack::default())),
        }
    }

    /// [`Mds::write_ns`] for a change that makes an inode with the id
    /// policy: when a replayed one is redone, it makes the inode number it
    /// first made (if free).
    pub(super) async fn write_made<R: Send + 'static>(
        &self,
        early: Option<u64>,
        f: impl FnOnce(&mut crate::kv::Tx, &crate::ids::IdPolicy) -> Result<R, MdsError>
        + Send
        + 'static,
    ) -> Result<(R, Ack), MdsError> {
        let (policy, want) = (self.sb.policy, redo_ino());
        self.write_ns(early, move |tx| {
            crate::ids::forcing(want, || f(tx, &policy))
        })
        .await
    }

    /// `reply`, wrapped as an early answer when `ack` gave it a transno.
    pub(super) fn answer(&self, reply: MdsReply, ack: Ack) -> MdsReply {
        if ack.transno == 0 {
            return reply;
        }
        self.metrics.early_answers.inc();
        self.last_early
            .fetch_max(ack.transno, std::sync::atomic::Ordering::SeqCst);
        MdsReply::Early(Box::new(EarlyReply {
            transno: ack.transno,
            durable: ack.durable,
            instance: self.instance,
            // Sealed where the request's session and principal are known.
            seal: [0; proto::mds::SEAL_LEN],
            reply,
        }))
    }

    /// Waits while replays are being waited for.
    pub(super) async fn replays_served(&self) {
        let mut rx = self.replaying.subscribe();
        let _ = rx.wait_for(|r| !*r).await;
    }

    /// While replays are waited for: the sessions not yet heard from and
    /// the ms left of the window.
    pub(super) fn replay_wait(&self) -> Option<(u32, u64)> {
        let g = self.replays.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|r| {
            let left = r.deadline.saturating_duration_since(Instant::now());
            (r.awaiting.len() as u32, left.as_millis() as u64)
        })
    }

    /// Whether replays are waited for (the worker must run).
    pub fn replay_pending(&self) -> bool {
        *self.replaying.borrow()
    }

    /// SYNC: everything answered so far is durable.
    pub(super) async fn sync_op(&self) -> Result<MdsReply, MdsError> {
        let durable = self.kv.sync().await?;
        Ok(MdsReply::Synced { durable })
    }

    /// REPLAY from `caller`'s `session` (whose record is `key`, see
    /// [`session_key`]).
    pub(super) async fn replay(
        self: &Arc<Self>,
        caller: &Caller,
        (key, session): (u64, u64),
        instance: u64,
        ops: Vec<ReplayOp>,
    ) -> Result<MdsReply, MdsError> {
        if ops.len() > proto::mds::REPLAY_MAX {
            return Err(err(
                Errno::Inval,
                format!(
                    "replay of {} operations: at most {} are kept by a client",
                    ops.len(),
                    proto::mds::REPLAY_MAX
                ),
            ));
        }
        if let Some(op) = ops.iter().find(|o| !o.op.may_answer_early()) {
            return Err(err(
                Errno::Inval,
                format!(
                    "replay of {}: only early-answered changes are replayed",
                    op.op.name()
                ),
            ));
        }
        if ops.windows(2).any(|w| w[0].transno >= w[1].transno) {
            return Err(err(
                Errno::Inval,
                "replay: operations must come in strictly increasing transno order",
            ));
        }
        // Only what this MDS (or the one before it) answered this session,
        // at the place it gave: nothing forged, nothing of another's. An
        // operation without its seal fails on its own (EACCES), so one bad
        // entry never costs a client the rest, nor its connection.
        let (mut good, mut refused) = (Vec::new(), Vec::new());
        for (i, op) in ops.into_iter().enumerate() {
            if self.sealed((key, instance), &op) {
                good.push(op);
            } else {
                refused.push(i);
            }
        }
        let n = good.len() + refused.len();
        let reply = self
            .replay_sealed(caller, (key, session), instance, good)
            .await?;
        let MdsReply::Replayed { instance, results } = reply else {
            return Ok(reply);
        };
        let mut results = results.into_iter();
        let merged = (0..n)
            .map(|i| {
                if refused.contains(&i) {
                    Err(err(
                        Errno::Access,
                        format!(
                            "replay: operation {i} does not carry the seal the MDS gave this \
                             session for it"
                        ),
                    ))
                } else {
                    results
                        .next()
                        .unwrap_or_else(|| Err(err(Errno::Io, "replay: result missing")))
                }
            })
            .collect();
        Ok(MdsReply::Replayed {
            instance,
            results: merged,
        })
    }

    /// [`Mds::replay`] of the operations whose seals hold.
    async fn replay_sealed(
        self: &Arc<Self>,
        caller: &Caller,
        (key, session): (u64, u64),
        instance: u64,
        ops: Vec<ReplayOp>,
    ) -> Result<MdsReply, MdsError> {
        let all_ok = |n: usize| MdsReply::Replayed {
            instance: self.instance,
            results: (0..n).map(|_| Ok(())).collect(),
        };
        if instance == self.instance {
            // This MDS gave the answers: it has every operation.
            return Ok(all_ok(ops.len()));
        }
        let rx = {
            let mut g = self.replays.lock().unwrap_or_else(|e| e.into_inner());
            let awaited = g.as_mut().is_some_and(|r| r.awaiting.remove(&key));
            // Only the instance that crashed last gave answers this start
            // knows the fate of: older ones were settled (or lost) by an
            // earlier recovery, and their transnos may have been reused.
            let known = instance == self.prev_instance;
            if awaited
                && !known
                && let Some(rec) = g.as_mut()
                && rec.awaiting.is_empty()
            {
                rec.arrived.notify_one();
            }
            match g.as_mut() {
                Some(rec) if awaited && known => {
                    let (done, rx) = tokio::sync::oneshot::channel();
                    rec.waiting.push(Waiting {
                        caller: caller.clone(),
                        session,
                        ops,
                        done,
                    });
                    if rec.awaiting.is_empty() {
                        rec.arrived.notify_one();
                    }
                    Some(rx)
                }
                _ => {
                    drop(g);
                    // Not waited for: its answers were durable (its record
                    // outlived them), or it came back too late.
                    let durable = self.kv.recovered_transno();
                    let results = ops
                        .iter()
                        .map(|o| {
                            if known && o.transno <= durable {
                                Ok(())
                            } else {
                                Err(err(
                                    Errno::Stale,
                                    format!(
                                        "{} (transno {}) lost: the MDS restarted and stopped \
                                         waiting for replays before this client came back",
                                        o.op.name(),
                                        o.transno
                                    ),
                                ))
                            }
                        })
                        .collect();
                    return Ok(MdsReply::Replayed {
                        instance: self.instance,
                        results,
                    });
                }
            }
        };
        let results = match rx {
            Some(rx) => rx
                .await
                .map_err(|_| err(Errno::Io, "replay abandoned: the MDS is stopping"))?,
            None => Vec::new(),
        };
        Ok(MdsReply::Replayed {
            instance: self.instance,
            results,
        })
    }

    /// Waits for the sessions' replays (or the window's end), redoes them
    /// in transno order, then lets other requests run.
    pub async fn replay_worker(self: Arc<Self>) {
        let (deadline, arrived) = {
            let g = self.replays.lock().unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(r) => (r.deadline, r.arrived.clone()),
                None => return,
            }
        };
        loop {
            let left = {
                let g = self.replays.lock().unwrap_or_else(|e| e.into_inner());
                g.as_ref().map_or(0, |r| r.awaiting.len())
            };
            self.metrics.replay_waiting.set(left as i64);
            if left == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    sessions = left,
                    "replay window over: sessions that did not come back lose their \
                     early-answered operations"
                );
                break;
            }
            let _ = tokio::time::timeout(deadline - now, arrived.notified()).await;
        }
        let Some(rec) = self
            .replays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let mut all: Vec<(u64, usize, usize)> = Vec::new();
        for (w, r) in rec.waiting.iter().enumerate() {
            for (i, op) in r.ops.iter().enumerate() {
                all.push((op.transno, w, i));
            }
        }
        all.sort_unstable();
        let mut results: Vec<Results> = rec
            .waiting
            .iter()
            .map(|r| r.ops.iter().map(|_| Ok(())).collect())
            .collect();
        let (mut redone, mut failed) = (0u64, 0u64);
        // Numbers whose objects still await deletion: a replayed create
        // never takes one (its new file would share the old objects).
        let deleting = self.ids_awaiting_deletion().unwrap_or_else(|e| {
            tracing::error!(error = %e, "delete queue unreadable: replayed creates refused");
            None
        });
        for (transno, w, i) in all {
            if transno <= rec.durable {
                continue;
            }
            let r = &rec.waiting[w];
            let op = &r.ops[i];
            let outcome = match unissued(op, deleting.as_ref()) {
                Err(e) => Err(e),
                Ok(()) => self.redo(&r.caller, r.session, op).await,
            };
            match &outcome {
                Ok(()) => redone += 1,
                Err(e) => {
                    failed += 1;
                    tracing::warn!(transno, op = op.op.name(), error = %e, "replay failed");
                }
            }
            results[w][i] = outcome;
        }
        // Redone early (one flush for all, not one each): durable before
        // any client hears of it.
        if let Err(e) = self.kv.sync().await {
            for r in results.iter_mut().flatten() {
                *r = Err(e.clone());
            }
            failed += redone;
            redone = 0;
        }
        self.metrics.replayed.inc_by(redone);
        self.metrics.replay_failed.inc_by(failed);
        tracing::info!(
            redone,
            failed,
            sessions = rec.waiting.len(),
            "replays done; serving"
        );
        for (r, res) in rec.waiting.into_iter().zip(results) {
            let _ = r.done.send(res);
        }
        self.serving_since_ms
            .store(proto::clock::now_ms(), std::sync::atomic::Ordering::SeqCst);
        self.kv.release_recovered_sessions();
        self.metrics.replay_waiting.set(0);
        self.replaying.send_replace(false);
    }

    /// Inode numbers and object ids the delete queue still holds
    /// (`None`: it could not be read).
    fn ids_awaiting_deletion(&self) -> Result<Option<HashSet<u64>>, MdsError> {
        let mut ids = HashSet::new();
        self.scan_delete_queue(|_, v| {
            let job = postcard::from_bytes::<crate::records::DeleteJob>(v)
                .map_err(|e| crate::kv::io_err("delete job", e))?;
            ids.insert(job.ino);
            ids.extend(job.layout.objsets.iter().copied());
            ids.extend(
                job.layout
                    .objsets
                    .iter()
                    .map(|&o| o & !proto::layout::DATA_OID_TAG),
            );
            Ok(true)
        })?;
        Ok(Some(ids))
    }

    /// Redoes one replayed operation as its original request.
    async fn redo(
        self: &Arc<Self>,
        caller: &Caller,
        session: u64,
        op: &ReplayOp,
    ) -> Result<(), MdsError> {
        let req = MdsRequest {
            creds: op.creds.clone(),
            prefetch: 0,
            session,
            early: true,
            op: op.op.clone(),
        };
        let redo = REDO_INO.scope(op.ino, Box::pin(self.serve_checked(caller, req)));
        let reply = match redo.await? {
            MdsReply::Early(e) => e.reply,
            r => r,
        };
        if let MdsReply::DirDone { failed, .. } = &reply
            && let Some((i, e)) = failed.first()
        {
            return Err(err(
                e.errno,
                format!("change {i} of a batch redone: {}", e.message),
            ));
        }
        match (op.ino, reply.named_ino()) {
            (Some(want), Some(got)) if want != got => Err(err(
                Errno::Stale,
                format!(
                    "{} redone as inode {got:#x}, first answered as {want:#x} (an earlier \
                     operation was not replayed)",
                    op.op.name()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Whether a replayed operation's inode number is one this MDS could have
/// issued and not yet taken back: an inode number (not an object id), and
/// not one whose objects await deletion. A number in use is refused later,
/// when the create finds it taken.
fn unissued(op: &ReplayOp, deleting: Option<&HashSet<u64>>) -> Result<(), MdsError> {
    // Only a change that makes an inode takes the number it names.
    if !matches!(
        op.op,
        Op::Create { .. } | Op::Symlink { .. } | Op::Mknod { .. }
    ) {
        return Ok(());
    }
    let Some(ino) = op.ino else { return Ok(()) };
    let refuse = |why: &str| {
        Err(err(
            Errno::Stale,
            format!(
                "{} (transno {}) names inode {ino:#x}, {why}: not redone",
                op.op.name(),
                op.transno
            ),
        ))
    };
    if ino == ROOT_INO || !proto::layout::is_inode_number(ino) {
        return refuse("outside the id space");
    }
    match deleting {
        None => refuse("and the delete queue could not be read"),
        Some(d) if d.contains(&ino) || d.contains(&proto::layout::data_oid(ino)) => {
            refuse("whose objects await deletion")
        }
        Some(_) => Ok(()),
    }
}
