//! What an operator's view of the MDS shows beyond `status`: the client
//! principals connected now and how many of their sessions hold early
//! answers, the changes answered early and not yet durable, and how long
//! this MDS has served.

use std::time::Instant;

use super::Mds;

/// One connected client principal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientRow {
    /// `client.NAME` (or `#ID` when removed since it connected).
    pub principal: String,
    /// Authenticated connections it holds now.
    pub connections: usize,
    /// Its sessions answered early lately (changes a crash makes it
    /// replay).
    pub early_sessions: usize,
}

impl Mds {
    /// The client principals connected now or answered early lately,
    /// most connections first.
    pub fn clients(&self) -> Vec<ClientRow> {
        let conns = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let now = Instant::now();
        let early: std::collections::HashMap<u64, usize> = self
            .early_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, s)| {
                let live = s
                    .values()
                    .filter(|at| now.duration_since(**at) < super::replay::EARLY_SESSION_IDLE)
                    .count();
                (*p, live)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let names: std::collections::HashMap<u64, String> = self
            .principals
            .list()
            .into_iter()
            .map(|i| (i.id, i.spec.name))
            .collect();
        let mut ids: Vec<u64> = conns.keys().chain(early.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut rows: Vec<ClientRow> = ids
            .into_iter()
            .map(|id| ClientRow {
                principal: names.get(&id).cloned().unwrap_or_else(|| format!("#{id}")),
                connections: conns.get(&id).copied().unwrap_or(0),
                early_sessions: early.get(&id).copied().unwrap_or(0),
            })
            .collect();
        rows.sort_by(|a, b| {
            b.connections
                .cmp(&a.connections)
                .then_with(|| a.principal.cmp(&b.principal))
        });
        rows
    }

    /// Changes answered early and not yet durable: what clients would
    /// replay if this MDS crashed now.
    pub fn early_pending(&self) -> u64 {
        self.last_early
            .load(std::sync::atomic::Ordering::SeqCst)
            .saturating_sub(self.kv.durable_transno())
    }

    /// How long this MDS has served.
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }
}
