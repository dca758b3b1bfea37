//! The KV of a replicated MDS group's leader: its batches become durable
//! when a majority of the group holds them (through [`Replicate`], the raft
//! log), not when the local write-ahead log is flushed. The committer is
//! unchanged up to the visible commit; this loop stands in for the
//! flusher. No checkpoint is taken here: the raft layer's snapshots are the
//! group's checkpoints, and the KV's visible-only commits are made durable
//! by them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use super::commit::{FlushItem, Marks};
use super::{Ack, KvStats, io_err};

/// Called once a batch is held by a majority, or with why it is not.
pub type Replicated = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Where a group leader's batches go to become durable.
pub trait Replicate: Send + Sync + 'static {
    /// Hands over batch `seq` (its `postcard(Vec<Write>)`); `done` is
    /// called once a majority holds it, or with why not. Calls complete in
    /// the order they were made.
    fn replicate(&self, seq: u64, payload: Vec<u8>, done: Replicated);
    /// Calls `done` once every batch handed over before has completed.
    fn barrier(&self, done: Replicated);
}

/// The flusher's place in a group: hands each batch to `sink` and answers
/// its jobs when the sink says it is durable. A refusal fails the KV (the
/// member then restarts as a follower: see `docs/HA-PLAN.md`).
pub(super) fn group_loop(
    sink: &dyn Replicate,
    rx: &mpsc::Receiver<FlushItem>,
    marks: &std::sync::Arc<Marks>,
    failed: &std::sync::Arc<AtomicBool>,
    stats: &KvStats,
) {
    while let Ok(item) = rx.recv() {
        match item {
            FlushItem::Batch {
                lsn,
                payload,
                transno,
                footprint,
                done,
            } => {
                stats.wal_bytes.fetch_add(footprint, Ordering::Relaxed);
                marks.pending_bytes.fetch_sub(footprint, Ordering::SeqCst);
                let (marks, failed) = (marks.clone(), failed.clone());
                sink.replicate(
                    lsn,
                    payload,
                    Box::new(move |r| {
                        let r = match r {
                            Ok(()) if !failed.load(Ordering::SeqCst) => {
                                marks.set_durable(lsn, transno);
                                Ok(Ack {
                                    transno: 0,
                                    durable: transno,
                                })
                            }
                            Ok(()) => Err(io_err("replicate", "an earlier batch failed")),
                            Err(why) => {
                                if !failed.swap(true, Ordering::SeqCst) {
                                    tracing::error!(%why, "a batch was not replicated; refusing further changes");
                                }
                                marks.wake();
                                Err(io_err("replicate", why))
                            }
                        };
                        for d in done {
                            d(r.clone());
                        }
                    }),
                );
            }
            FlushItem::Drain(ack) => sink.barrier(Box::new(move |_| {
                let _ = ack.send(());
            })),
        }
    }
}

impl super::Kv {
    /// Runs `f` while the KV holds nothing a majority does not (a group
    /// leader's snapshot point): no batch runs meanwhile, and every batch
    /// made visible has been replicated and applied. False, without
    /// running `f`, when the KV has failed or that takes over 10 s.
    pub fn quiesced(&self, f: &mut dyn FnMut()) -> bool {
        let done = self.quiesced_locked(f);
        // Writers that found the committer busy meanwhile left their jobs
        // to the committer thread.
        self.shared.queue.wake_thread();
        done
    }

    fn quiesced_locked(&self, f: &mut dyn FnMut()) -> bool {
        let _c = self.shared.committer();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if self.failed.load(Ordering::SeqCst) || std::time::Instant::now() > deadline {
                return false;
            }
            let visible = self.marks.applied_lsn.load(Ordering::SeqCst);
            if *self.marks.durable_lsn.borrow() >= visible {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        f();
        true
    }

    /// Whether every batch made visible is durable (replicated, in a
    /// group).
    pub fn all_durable(&self) -> bool {
        *self.marks.durable_lsn.borrow() >= self.marks.applied_lsn.load(Ordering::SeqCst)
    }

    /// Whether the KV has failed (a write or a replication refused).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }
}
