//! The leader's KV hands its batches to raft here ([`crate::kv::group`]'s
//! [`Replicate`]): each becomes one entry, proposed in the committer's
//! order; a task waits for the entries' commits in the same order and
//! answers the batches' jobs.

use std::sync::Arc;

use openraft::Raft;
use tokio::sync::mpsc;

use crate::kv::group::{Replicate, Replicated};
use crate::raft::log_store::LogStore;
use crate::raft::{Batch, Tc};

enum Item {
    Batch(u64, Vec<u8>, Replicated),
    Barrier(Replicated),
}

/// Hands a leader's batches to raft.
pub struct RaftSink {
    tx: mpsc::UnboundedSender<Item>,
}

impl RaftSink {
    /// Starts proposing on `raft` (on the current tokio runtime), marking
    /// entries with `origin` (the state machine skips this origin's
    /// batches: the leader's KV holds them already).
    /// A batch waits while `log` is over three quarters full (until a
    /// snapshot lets it be purged): a full log would stop the member.
    pub fn start(raft: Raft<Tc>, origin: u64, log: LogStore) -> Arc<RaftSink> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
        let (wtx, mut wrx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(item) = rx.recv().await {
                while log.live_bytes() > log.capacity() / 4 * 3 {
                    let _ = raft.trigger().snapshot().await;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let waiting = match item {
                    Item::Batch(seq, writes, done) => {
                        let batch = Batch {
                            origin,
                            seq,
                            writes,
                        };
                        match raft.client_write_ff(batch).await {
                            Ok(answer) => (Some(answer), done),
                            Err(e) => {
                                done(Err(format!("raft: {e}")));
                                continue;
                            }
                        }
                    }
                    Item::Barrier(done) => (None, done),
                };
                if wtx.send(waiting).is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            while let Some((answer, done)) = wrx.recv().await {
                let r = match answer {
                    None => Ok(()),
                    Some(answer) => match answer.await {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(format!("not committed: {e}")),
                        Err(_) => Err("raft stopped".to_string()),
                    },
                };
                done(r);
            }
        });
        Arc::new(RaftSink { tx })
    }
}

impl Replicate for RaftSink {
    fn replicate(&self, seq: u64, payload: Vec<u8>, done: Replicated) {
        if let Err(mpsc::error::SendError(Item::Batch(_, _, done))) =
            self.tx.send(Item::Batch(seq, payload, done))
        {
            done(Err("raft stopped".into()));
        }
    }

    fn barrier(&self, done: Replicated) {
        if let Err(mpsc::error::SendError(Item::Barrier(done))) = self.tx.send(Item::Barrier(done))
        {
            done(Err("raft stopped".into()));
        }
    }
}
