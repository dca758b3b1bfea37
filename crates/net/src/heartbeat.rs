//! The OSD side of registration: [`report_loop`] signs and sends the OSD's
//! report to the MDS every interval the MDS asks for, and keeps the
//! [`Lease`] each accepted report grants.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::mds::{MdsReply, Op, OsdReport};

use crate::mds_client::MdsClient;

/// What an OSD reports about itself each heartbeat.
pub struct ReportSource {
    /// Cluster id.
    pub cluster_id: String,
    /// OSD id.
    pub osd_id: u32,
    /// Address clients use.
    pub addr: String,
    /// Placement weight (16.16 fixed point).
    pub weight: u32,
    /// Failure domain (host name).
    pub host: String,
    /// Key version and key to sign with.
    pub key: (u32, [u8; 32]),
    /// Current (capacity, used, objects).
    pub space: Box<dyn Fn() -> (u64, u64, u64) + Send + Sync>,
    /// The store it runs on now (its identity and newest durable batch).
    pub store: Box<dyn Fn() -> proto::mds::StoreMark + Send + Sync>,
    /// What it has served since it started.
    pub load: Box<dyn Fn() -> proto::mds::OsdLoad + Send + Sync>,
    /// Where the replica chains' epoch each accepted report names is
    /// published (the OSD's chain state fetches the chains when it moves).
    pub chains_epoch: Option<tokio::sync::watch::Sender<u64>>,
}

/// The MDS's permission to serve clients, renewed by every accepted
/// report: it runs from when the report was *sent* for the lease the MDS
/// names, so it always ends before the MDS (which counts from when it
/// received the report) stops waiting for it.
#[derive(Debug, Default)]
pub struct Lease {
    until: Mutex<Option<Instant>>,
    /// The MDS requires encryption of every connection (learnt from an
    /// encrypted report connection; sticky).
    encrypt: std::sync::atomic::AtomicBool,
}

impl Lease {
    /// Whether the lease is current.
    pub fn current(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|u| Instant::now() < u)
    }

    /// From now on every connection to this OSD must be encrypted (the
    /// cluster's MDS requires it; never turned off again).
    pub fn require_encryption(&self) {
        self.encrypt
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether every connection to this OSD must be encrypted.
    pub fn requires_encryption(&self) -> bool {
        self.encrypt.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Extends the lease to `sent + len` (never shortens it).
    pub fn renew(&self, sent: Instant, len: Duration) {
        let mut u = self.until.lock().unwrap_or_else(|e| e.into_inner());
        let new = sent + len;
        if u.is_none_or(|old| old < new) {
            *u = Some(new);
        }
    }
}

/// Registers an OSD with the MDS and heartbeats until the task is dropped,
/// renewing `lease` with every accepted report. Failures are logged and
/// retried (the MDS may start later or restart).
pub async fn report_loop(mds_addr: String, src: ReportSource, lease: std::sync::Arc<Lease>) {
    // The OSD authenticates to the MDS as `osd.N` with its own key.
    let identity =
        crate::auth::Identity::principal(&format!("osd.{}", src.osd_id), src.key.0, src.key.1);
    let client = MdsClient::new(&mds_addr, &src.cluster_id, identity, 1);
    let mut interval = Duration::from_secs(2);
    let mut registered = false;
    let mut last_report = None;
    loop {
        let (capacity, used, objects) = (src.space)();
        let mut r = OsdReport {
            osd_id: src.osd_id,
            addr: src.addr.clone(),
            weight: src.weight,
            host: src.host.clone(),
            capacity,
            used,
            objects,
            key_version: src.key.0,
            at_ms: report_time(&mut last_report, proto::clock::now_ms()),
            store: (src.store)(),
            load: (src.load)(),
            mac: [0; 32],
        };
        r.sign(&src.cluster_id, &src.key.1);
        let sent = Instant::now();
        match client.call(Op::Report(r)).await {
            Ok(MdsReply::Reported {
                epoch,
                interval_ms,
                lease_ms,
                chains_epoch,
            }) => {
                // The chains' epoch first: an OSD that serves under the
                // new lease already knows of every chain change before it.
                if let Some(tx) = &src.chains_epoch {
                    tx.send_if_modified(|e| std::mem::replace(e, chains_epoch) != chains_epoch);
                }
                if client.encrypted().await {
                    // The MDS encrypts every connection: so must this OSD,
                    // from before the lease lets it serve anyone.
                    lease.require_encryption();
                }
                lease.renew(sent, Duration::from_millis(lease_ms));
                if !registered {
                    tracing::info!(mds = %mds_addr, epoch, "registered with the MDS");
                    registered = true;
                }
                interval = Duration::from_millis(interval_ms.clamp(100, 60_000));
            }
            Ok(other) => tracing::warn!(reply = ?other, "unexpected answer to a report"),
            Err(e) => {
                let why = e.to_string();
                // The MDS takes reports at most five minutes off its clock,
                // and this clock at most five minutes off it: a floor
                // further ahead than ten minutes is no report the MDS
                // took, and would keep this OSD out. Ignored.
                let wall = proto::clock::now_ms();
                if let Some(floor) = proto::report::stale_report_floor(&why)
                    .filter(|f| *f < wall.saturating_add(600_000))
                {
                    // Restarted on a clock set back: report after the last.
                    last_report = Some((floor, Instant::now()));
                    tracing::warn!(mds = %mds_addr, floor, "this OSD's clock is behind its last report; reporting after it");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                if registered {
                    tracing::warn!(mds = %mds_addr, error = %e, "heartbeat failed");
                }
                registered = false;
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// A report's time: the wall clock, but never behind the last report's
/// time plus the (monotonic) time since it. The MDS refuses a report no
/// later than the last it took (a replay), so a wall clock stepped back
/// would otherwise silence a live OSD — and make it "down" — until the
/// clock caught up again.
fn report_time(last: &mut Option<(u64, Instant)>, wall_ms: u64) -> u64 {
    let at = match *last {
        Some((t, when)) => {
            let mono = t.saturating_add(when.elapsed().as_millis() as u64);
            wall_ms.max(mono).max(t + 1)
        }
        None => wall_ms,
    };
    *last = Some((at, Instant::now()));
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_times_only_go_forward_when_the_clock_steps_back() {
        let mut last = None;
        let t0 = report_time(&mut last, 10_000_000);
        assert_eq!(t0, 10_000_000);
        std::thread::sleep(Duration::from_millis(20));
        // The wall clock steps back an hour.
        let t1 = report_time(&mut last, 10_000_000 - 3_600_000);
        assert!(t1 >= t0 + 20, "{t1} after {t0}");
        let t2 = report_time(&mut last, 10_000_000 - 3_600_000);
        assert!(t2 > t1);
        // And forward again: the wall clock wins.
        assert_eq!(report_time(&mut last, 20_000_000), 20_000_000);
    }
}
