//! A chain member's start and clean shutdown: the marker a clean
//! shutdown (or the format of a new store) leaves beside the store, and
//! CHAIN RESTARTED (with the store's mark) after any other start, before
//! the OSD acts as a head.

use std::time::Duration;

use super::{Chains, lock};

/// The file beside a store saying its OSD shut down cleanly with every
/// change passed down its chains.
fn clean_marker(store: &std::path::Path) -> std::path::PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".chains-clean");
    p.into()
}

/// Marks the store just formatted at `store` (its device path), whose
/// identity is `uuid`, as needing no CHAIN RESTARTED at its OSD's first
/// start: it holds no change the OSD could have failed to pass down.
/// Without it every OSD of a new cluster would leave its chains at its
/// first start and be filled again (empty into empty), and a namespace on
/// the OSDs could not be made meanwhile. The mark names the store: found
/// beside any other store (an image copied over the path), it is ignored.
/// A replaced disk is still caught: the MDS judges the store's mark (a new
/// identity) in the OSD's first report, before it grants the OSD a lease
/// to serve, and takes it out of its chains then.
pub fn mark_new_store(store: &std::path::Path, uuid: &[u8; 16]) -> std::io::Result<()> {
    std::fs::write(clean_marker(store), new_mark(uuid))
}

fn new_mark(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("new {hex}\n")
}

/// Whether the marker's text lets this start skip CHAIN RESTARTED: a
/// clean shutdown's, or a new store's naming this very store.
fn marker_holds(text: &[u8], uuid: &[u8; 16]) -> bool {
    match text.strip_prefix(b"new ") {
        Some(_) => text == new_mark(uuid).as_bytes(),
        None => true,
    }
}

/// Removes every staging partition: at a start no copy is being built,
/// so what is there is what copies cut short left (space, not data).
fn drop_staged(ctx: &crate::exec::Ctx) {
    let Ok(store) = ctx.store.get() else { return };
    for pid in store.partitions() {
        if proto::chain::staging_of(pid).is_some()
            && let Err(e) = store.remove_partition(pid)
        {
            tracing::warn!(pid, error = %e, "cannot remove a staging partition");
        }
    }
}

impl Chains {
    /// After a start: a clean shutdown before it (the marker) keeps this
    /// OSD's places; otherwise it may hold changes it never passed down,
    /// or a new empty store, so it asks to leave its chains (to be filled
    /// again) before it acts as a head.
    pub(super) async fn after_start(&self) {
        let ctx = loop {
            if let Some(c) = self.ctx.get() {
                break c.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        drop_staged(&ctx);
        let marker = clean_marker(ctx.store.path());
        let uuid = ctx.store.mark().uuid;
        if let Ok(text) = std::fs::read(&marker)
            && std::fs::remove_file(&marker).is_ok()
            && marker_holds(&text, &uuid)
        {
            self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        loop {
            match self.authority.restarted(ctx.store.mark()).await {
                Ok(v) => {
                    self.install(v);
                    self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                // A file system without chains: nothing to leave.
                Err(e) if e.message.contains("no replica chains") => {
                    self.ready.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot tell the MDS of the restart yet");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// At a clean shutdown (every request drained): leaves the marker if
    /// every change made here is down its chain.
    pub fn shut_down_cleanly(&self) {
        let (Some(ctx), true) = (self.ctx.get(), lock(&self.unsent).is_empty()) else {
            return;
        };
        if let Err(e) = std::fs::write(clean_marker(ctx.store.path()), b"clean\n") {
            tracing::warn!(error = %e, "cannot leave the clean-shutdown marker");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_stores_mark_holds_only_beside_that_store() {
        let u = [7u8; 16];
        assert!(marker_holds(b"clean\n", &u), "a clean shutdown's");
        assert!(marker_holds(new_mark(&u).as_bytes(), &u));
        // Another store copied over the path: its start must be judged.
        assert!(!marker_holds(new_mark(&[8u8; 16]).as_bytes(), &u));
        assert!(!marker_holds(b"new garbage\n", &u));
    }
}
