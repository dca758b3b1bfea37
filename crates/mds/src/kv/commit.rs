//! The committer and the flusher: the two threads behind [`super::Kv`]'s
//! writes (a writer that finds the committer idle may run its own batch
//! in the committer's place: see [`Queue`]).
//!
//! The committer takes all jobs waiting, runs them in order inside one
//! redb write transaction, commits it without a sync (making it visible),
//! and hands the batch's write set to the flusher, which writes the log
//! records of every batch it has and flushes the device once (group
//! commit). A job is answered either after that flush (durable) or, when
//! its caller asked for an early answer and the job changed something,
//! right after the commit with a *transno*: its place in the order of
//! early answers. Clients keep such operations until the durable transno
//! reaches them and replay them after an MDS restart (see `docs/CLIENT.md`,
//! "Durability").
//!
//! A session gets early answers only while a durable record of it exists
//! in `T::Sessions`: its first early-capable job is answered durably and
//! writes that record; a session idle for [`SESSION_IDLE`] has its record
//! removed (by a batch that is itself logged, so everything it was
//! answered is durable first). So the records after a crash name exactly
//! the sessions that may hold early answers the log does not have: the
//! MDS waits for those to replay before it serves anything else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;

/// A session without early-answered jobs for this long loses its record.
pub const SESSION_IDLE: Duration = Duration::from_secs(1);
/// How often idle sessions are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// Most jobs in one batch.
const MAX_BATCH: usize = 512;
/// Where the last assigned transno is kept (in every batch that assigns one).
pub(super) const TRANSNO_KEY: &[u8] = b"transno";

/// How a job was answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ack {
    /// Its transno when answered before it was durable; 0 when durable.
    pub transno: u64,
    /// The durable transno when answered.
    pub durable: u64,
}

pub(super) type Completion = Box<dyn FnOnce(Result<Ack, MdsError>) + Send>;
/// A job: runs in the batch's transaction; says how to answer it and
/// whether it succeeded.
pub(super) type Job = Box<dyn FnOnce(&mut Tx) -> (Completion, bool) + Send>;

/// A job and, when its caller takes early answers, its session.
pub(super) struct Submitted {
    pub job: Job,
    pub early_for: Option<u64>,
}

/// What the flusher is given.
pub(super) enum FlushItem {
    /// A committed batch's log record and the jobs waiting for it.
    Batch {
        lsn: u64,
        payload: Vec<u8>,
        transno: u64,
        footprint: u64,
        done: Vec<Completion>,
    },
    /// Answer once everything before is on the device.
    Drain(mpsc::Sender<()>),
}

/// Durability watermarks, shared by the committer, the flusher and the
/// tasks that wait for them.
pub(super) struct Marks {
    /// Last batch committed to the KV (visible).
    pub applied_lsn: AtomicU64,
    /// Last batch on the device (waiters subscribe).
    pub durable_lsn: tokio::sync::watch::Sender<u64>,
    /// Every early answer up to this transno is durable.
    pub durable_transno: AtomicU64,
    /// Log bytes handed to the flusher and not yet written.
    pub pending_bytes: AtomicU64,
    /// Live log bytes (head − tail), as the flusher last left them: the
    /// committer decides on checkpoints without taking the log's lock,
    /// which the flusher holds through its flushes.
    pub wal_live: AtomicU64,
    /// Set when the replays after a crash are served: the sessions found
    /// recorded at open go back to the idle rule.
    pub release_recovered: AtomicBool,
}

impl Marks {
    pub(super) fn new(lsn: u64, transno: u64) -> Marks {
        Marks {
            applied_lsn: AtomicU64::new(lsn),
            durable_lsn: tokio::sync::watch::Sender::new(lsn),
            durable_transno: AtomicU64::new(transno),
            pending_bytes: AtomicU64::new(0),
            wal_live: AtomicU64::new(0),
            release_recovered: AtomicBool::new(false),
        }
    }

    pub(super) fn set_durable(&self, lsn: u64, transno: u64) {
        self.durable_transno.fetch_max(transno, Ordering::SeqCst);
        self.durable_lsn.send_modify(|d| *d = (*d).max(lsn));
    }

    /// Wakes waiters without progress (the log failed).
    pub(super) fn wake(&self) {
        self.durable_lsn.send_modify(|_| {});
    }
}

/// The committer thread's state.
pub(super) struct Committer {
    pub db: Arc<Database>,
    pub wal: Arc<Mutex<Wal>>,
    /// Last batch's lsn.
    pub lsn: u64,
    /// Last transno assigned.
    pub transno: u64,
    /// Recorded sessions: when each may be forgotten, and the batch that
    /// recorded it (no early answer before that batch is durable: a crash
    /// would forget the session while it held the answer).
    pub sessions: HashMap<u64, (Instant, u64)>,
    pub last_sweep: Instant,
    pub flusher: mpsc::Sender<FlushItem>,
    /// The log's size (fixed).
    pub wal_capacity: u64,
    pub marks: Arc<Marks>,
    pub failed: Arc<AtomicBool>,
    pub stats: Arc<KvStats>,
    /// Set while a leader (a writer on a tokio worker) runs a batch: a
    /// checkpoint then blocks through `block_in_place`.
    pub leading: bool,
    /// A batch panicked: the committer's own state may be off, so it runs
    /// nothing more (the KV is failed).
    pub broken: bool,
    /// A group member's leader: batches are durable once replicated, and
    /// the KV is never checkpointed here (see [`super::group`]).
    pub group: bool,
}

impl Committer {
    /// Sessions recorded at open: kept while they are waited for.
    pub(super) fn hold_recovered(&mut self, sessions: &[u64], hold: Duration) {
        let until = Instant::now() + hold;
        for s in sessions {
            self.sessions.insert(*s, (until, 0));
        }
    }

    /// Runs the next batch of `queue`, if any (the caller holds the
    /// committer); a failure marks the KV failed.
    fn run_next(&mut self, queue: &Queue) -> bool {
        let batch = queue.take(MAX_BATCH);
        if batch.is_empty() {
            return false;
        }
        self.run_one(batch);
        true
    }

    fn run_one(&mut self, batch: Vec<Submitted>) {
        if self.broken {
            // Dropping the jobs answers their writers "committer stopped".
            return;
        }
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_batch(batch)));
        let failure = match ran {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => {
                self.broken = true;
                "a job panicked".to_string()
            }
        };
        tracing::error!(error = %failure, "metadata commit failed; refusing further changes");
        self.failed.store(true, Ordering::SeqCst);
        self.marks.wake();
    }

    /// Whether the log is so full that the next batch may checkpoint
    /// (a device flush and a durable KV commit: the committer thread's
    /// work, never a leader's).
    fn near_checkpoint(&self) -> bool {
        let live = self.marks.wal_live.load(Ordering::SeqCst)
            + self.marks.pending_bytes.load(Ordering::SeqCst);
        live + self.wal_capacity / 8 > self.wal_capacity / 2
    }
}

/// The jobs waiting for the committer, and whether the KV is closing.
#[derive(Default)]
struct Waiting {
    jobs: std::collections::VecDeque<Submitted>,
    closed: bool,
}

/// Where jobs wait. Whoever holds the [`Committer`] runs them: normally
/// the committer thread, woken through `wake`; but a writer on a tokio
/// worker whose job is the only one waiting and that finds the committer
/// idle runs the batch itself (a *leader*), which spares the two thread
/// wake-ups of handing its job over and being answered. Under load jobs
/// queue up, and the thread runs them in large batches as before. Every holder, before it lets the committer go for
/// good, either leaves the queue empty or wakes the thread, so no job is
/// left waiting with nobody to run it.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Mutex<Waiting>,
    wake: std::sync::Condvar,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `s` (an error once the KV is closing); true when nothing
    /// else was waiting.
    pub(super) fn push(&self, s: Submitted) -> Result<bool, MdsError> {
        let mut w = self.lock();
        if w.closed {
            return Err(io_err("committer", "closed"));
        }
        w.jobs.push_back(s);
        Ok(w.jobs.len() == 1)
    }

    /// Wakes the committer thread.
    pub(super) fn wake_thread(&self) {
        self.wake.notify_one();
    }

    /// Takes the jobs of the next batch (at most `max`).
    fn take(&self, max: usize) -> Vec<Submitted> {
        let mut w = self.lock();
        let n = w.jobs.len().min(max);
        w.jobs.drain(..n).collect()
    }

    fn is_empty(&self) -> bool {
        self.lock().jobs.is_empty()
    }

    /// Refuses further jobs and wakes the thread to finish.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

/// The committer and its queue, shared by the committer thread and the
/// leaders.
pub(super) struct Shared {
    pub queue: Queue,
    pub committer: Mutex<Committer>,
}

impl Shared {
    pub(super) fn committer(&self) -> std::sync::MutexGuard<'_, Committer> {
        self.committer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A writer's attempt to run its own job: when the committer is idle
    /// and the log far from a checkpoint, runs the next batch here. Jobs
    /// still waiting afterwards (or jobs it did not run) go to the thread.
    pub(super) fn lead(&self) {
        match self.committer.try_lock() {
            Ok(mut c) if !c.near_checkpoint() => {
                c.leading = true;
                if c.run_next(&self.queue) {
                    c.stats.led.fetch_add(1, Ordering::Relaxed);
                }
                c.leading = false;
            }
            // Near a checkpoint, or poisoned (the thread then fails the
            // jobs): the thread's.
            Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => {}
            // The holder looks at the queue again before it lets go.
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
        if !self.queue.is_empty() {
            self.queue.wake_thread();
        }
    }

    /// The committer thread: runs what is queued whenever woken (and
    /// sweeps idle sessions every [`SWEEP_EVERY`]); once closed, runs what
    /// is left and checkpoints.
    pub(super) fn run(&self) {
        loop {
            let closing = {
                let mut w = self.queue.lock();
                if w.jobs.is_empty() && !w.closed {
                    w = self
                        .queue
                        .wake
                        .wait_timeout(w, SWEEP_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                w.closed
            };
            let mut c = self.committer();
            // An empty batch: the sweep of idle sessions, when due.
            c.run_one(Vec::new());
            while c.run_next(&self.queue) {}
            if closing {
                // Final checkpoint: an empty durable commit recording the
                // log position.
                if c.drain().is_ok() && !c.group {
                    let _ = c.checkpoint_now();
                }
                // Drop the flusher's only sender: it stops once idle.
                c.flusher = mpsc::channel().0;
                return;
            }
        }
    }
}

impl Committer {
    /// Waits until the flusher has written everything handed to it.
    fn drain(&self) -> Result<(), MdsError> {
        let (tx, rx) = mpsc::channel();
        self.flusher
            .send(FlushItem::Drain(tx))
            .map_err(|_| io_err("flusher", "stopped"))?;
        rx.recv().map_err(|_| io_err("flusher", "stopped"))?;
        if self.failed.load(Ordering::SeqCst) {
            return Err(io_err("log write", "an earlier log write failed"));
        }
        Ok(())
    }

    /// The final checkpoint of a clean stop: everything answered is
    /// durable, so no session's record is needed any more.
    fn checkpoint_now(&mut self) -> Result<(), MdsError> {
        let txn = self.db.begin_write().map_err(|e| io_err("begin", e))?;
        {
            let mut t = txn
                .open_table(def(T::Sessions as usize))
                .map_err(|e| io_err("sessions", e))?;
            t.retain(|_, _| false).map_err(|e| io_err("sessions", e))?;
        }
        let mut wal = self.wal.lock().unwrap_or_else(|e| e.into_inner());
        put_checkpoint(
            &txn,
            &Checkpoint {
                lsn: self.lsn,
                wal_pos: wal.head,
            },
        )?;
        txn.commit().map_err(|e| io_err("commit", e))?;
        wal.checkpointed();
        Ok(())
    }

    fn run_batch(&mut self, batch: Vec<Submitted>) -> Result<(), MdsError> {
        if self.marks.release_recovered.swap(false, Ordering::SeqCst) {
            // Replayed (or given up on): idle from now unless they go on.
            let now = Instant::now();
            for (until, recorded) in self.sessions.values_mut() {
                if *recorded == 0 {
                    *until = (*until).min(now + SESSION_IDLE);
                }
            }
        }
        let sweep = self.last_sweep.elapsed() >= SWEEP_EVERY && !self.sessions.is_empty();
        if batch.is_empty() && !sweep {
            return Ok(());
        }
        // On these early failures the jobs are dropped unrun: their callers
        // see "committer stopped" and the KV is marked failed.
        let mut txn = self.db.begin_write().map_err(|e| io_err("begin", e))?;
        // Answered right after the commit, and after the flush.
        let mut early: Vec<(Completion, u64)> = Vec::new();
        let mut durable: Vec<Completion> = Vec::with_capacity(batch.len());
        let redo = {
            let mut tx = open_tx(&txn)?;
            self.stats
                .jobs
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let now = Instant::now();
            let durable_lsn = *self.marks.durable_lsn.borrow();
            for s in batch {
                let before = tx.redo.len();
                let (done, ok) = (s.job)(&mut tx);
                let wrote = tx.redo.len() > before;
                match s.early_for {
                    // A failure or a no-op needs no durability.
                    Some(_) if !ok || !wrote => early.push((done, 0)),
                    Some(session) => match self.sessions.get_mut(&session) {
                        Some((until, recorded)) if *recorded <= durable_lsn => {
                            *until = (*until).max(now + SESSION_IDLE);
                            self.transno += 1;
                            early.push((done, self.transno));
                        }
                        Some((until, _)) => {
                            // Its record is not durable yet: durably too.
                            *until = (*until).max(now + SESSION_IDLE);
                            durable.push(done);
                        }
                        None => {
                            // First early-capable job of the session: it is
                            // answered durably, with the session's record
                            // (if that cannot be written, just durably).
                            let ms = proto::clock::now_ms().to_le_bytes();
                            if tx.put(T::Sessions, &session.to_be_bytes(), &ms).is_ok() {
                                self.sessions
                                    .insert(session, (now + SESSION_IDLE, self.lsn + 1));
                            }
                            durable.push(done);
                        }
                    },
                    None => durable.push(done),
                }
            }
            if sweep {
                self.last_sweep = now;
                let idle: Vec<u64> = self
                    .sessions
                    .iter()
                    .filter(|(_, (until, _))| *until <= now)
                    .map(|(s, _)| *s)
                    .collect();
                for s in idle {
                    tx.del(T::Sessions, &s.to_be_bytes())?;
                    self.sessions.remove(&s);
                }
            }
            if early.iter().any(|(_, t)| *t > 0) {
                tx.put(T::Meta, TRANSNO_KEY, &self.transno.to_le_bytes())?;
            }
            std::mem::take(&mut tx.redo)
        };
        let answer_all =
            |early: Vec<(Completion, u64)>, durable: Vec<Completion>, r: &Result<Ack, MdsError>| {
                for (d, _) in early {
                    d(r.clone());
                }
                for d in durable {
                    d(r.clone());
                }
            };
        let marks = self.marks.clone();
        let durable_now = || Ack {
            transno: 0,
            durable: marks.durable_transno.load(Ordering::SeqCst),
        };
        if redo.is_empty() {
            // Nothing changed (all jobs failed or were reads): no log record.
            drop(txn);
            answer_all(early, durable, &Ok(durable_now()));
            return Ok(());
        }
        let payload = match postcard::to_allocvec(&redo) {
            Ok(p) => p,
            Err(e) => {
                let e = io_err("encode batch", e);
                answer_all(early, durable, &Err(e.clone()));
                return Err(e);
            }
        };
        let next = self.lsn + 1;
        // Checkpoint instead of logging when the log is half full, or when the
        // batch is so large that wrapping could reach the live records.
        let foot = Wal::footprint(payload.len());
        let cap = self.wal_capacity;
        let live = self.marks.wal_live.load(Ordering::SeqCst)
            + self.marks.pending_bytes.load(Ordering::SeqCst);
        if live + foot > cap / 2 || foot > cap / 8 {
            // Make this batch and everything before it durable in the KV
            // itself, once the flusher has written what it holds.
            let checkpoint = || {
                self.drain().and_then(|()| {
                    let mut wal = self.wal.lock().unwrap_or_else(|e| e.into_inner());
                    let cp = Checkpoint {
                        lsn: next,
                        wal_pos: wal.head,
                    };
                    put_checkpoint(&txn, &cp)?;
                    txn.commit().map_err(|e| io_err("checkpoint commit", e))?;
                    wal.checkpointed();
                    self.marks.wal_live.store(wal.live(), Ordering::SeqCst);
                    Ok(())
                })
            };
            // A device flush and a durable commit: on a tokio worker, let
            // the runtime move its other tasks elsewhere meanwhile.
            let outcome = if self.leading {
                tokio::task::block_in_place(checkpoint)
            } else {
                checkpoint()
            };
            return match outcome {
                Ok(()) => {
                    self.lsn = next;
                    self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                    self.stats.batches.fetch_add(1, Ordering::Relaxed);
                    self.marks.applied_lsn.store(next, Ordering::SeqCst);
                    self.marks.set_durable(next, self.transno);
                    let ack = Ack {
                        transno: 0,
                        durable: self.transno,
                    };
                    answer_all(early, durable, &Ok(ack));
                    Ok(())
                }
                Err(e) => {
                    answer_all(early, durable, &Err(e.clone()));
                    Err(e)
                }
            };
        }
        // Before the commit makes it visible: whoever sees it and then
        // syncs waits for this batch.
        self.marks.applied_lsn.store(next, Ordering::SeqCst);
        let committed = txn
            .set_durability(Durability::None)
            .map_err(|e| io_err("durability", e))
            .and_then(|()| txn.commit().map_err(|e| io_err("commit", e)));
        if let Err(e) = committed {
            answer_all(early, durable, &Err(e.clone()));
            return Err(e);
        }
        self.lsn = next;
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        // Visible now: the early answers go before the flush.
        let d = self.marks.durable_transno.load(Ordering::SeqCst);
        for (done, transno) in early {
            done(Ok(Ack {
                transno,
                durable: d,
            }));
        }
        self.marks.pending_bytes.fetch_add(foot, Ordering::SeqCst);
        let item = FlushItem::Batch {
            lsn: next,
            payload,
            transno: self.transno,
            footprint: foot,
            done: durable,
        };
        if let Err(mpsc::SendError(item)) = self.flusher.send(item) {
            let e = io_err("flusher", "stopped");
            if let FlushItem::Batch { done, .. } = item {
                answer_all(Vec::new(), done, &Err(e.clone()));
            }
            return Err(e);
        }
        Ok(())
    }
}

/// The flusher thread: writes the records it is given, flushes once per
/// group, advances the durable marks and answers the jobs that waited.
/// `delay` holds every flush back (fault injection for tests only).
pub(super) fn flush_loop(
    wal: &Mutex<Wal>,
    rx: &mpsc::Receiver<FlushItem>,
    marks: &Marks,
    failed: &AtomicBool,
    stats: &KvStats,
    delay: Duration,
) {
    while let Ok(first) = rx.recv() {
        let mut items = vec![first];
        while items.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(i) => items.push(i),
                Err(_) => break,
            }
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut result: std::io::Result<()> = if failed.load(Ordering::SeqCst) {
            Err(std::io::Error::other("an earlier log write failed"))
        } else {
            Ok(())
        };
        let mut last: Option<(u64, u64)> = None;
        let mut done = Vec::new();
        let mut drains = Vec::new();
        let mut written = 0u64;
        {
            let mut wal = wal.lock().unwrap_or_else(|e| e.into_inner());
            for item in items {
                match item {
                    FlushItem::Batch {
                        lsn,
                        payload,
                        transno,
                        footprint,
                        done: d,
                    } => {
                        if result.is_ok() {
                            result = wal.write_record(lsn, &payload);
                            stats.wal_bytes.fetch_add(footprint, Ordering::Relaxed);
                        }
                        written += footprint;
                        last = Some((lsn, transno));
                        done.extend(d);
                    }
                    FlushItem::Drain(ack) => drains.push(ack),
                }
            }
            if result.is_ok() && last.is_some() {
                result = wal.flush();
            }
            // Live first, then no longer pending: the committer's sum of
            // the two never undercounts what the log holds.
            marks.wal_live.store(wal.live(), Ordering::SeqCst);
            marks.pending_bytes.fetch_sub(written, Ordering::SeqCst);
        }
        match result {
            Ok(()) => {
                let transno = match last {
                    Some((lsn, transno)) => {
                        marks.set_durable(lsn, transno);
                        transno
                    }
                    None => marks.durable_transno.load(Ordering::SeqCst),
                };
                for d in done {
                    d(Ok(Ack {
                        transno: 0,
                        durable: transno,
                    }));
                }
            }
            Err(e) => {
                if !failed.swap(true, Ordering::SeqCst) {
                    tracing::error!(error = %e, "metadata log write failed; refusing further changes");
                }
                let e = io_err("log write", e);
                for d in done {
                    d(Err(e.clone()));
                }
                marks.wake();
            }
        }
        for a in drains {
            let _ = a.send(());
        }
    }
}
