//! The OSD side of registration: [`report_loop`] signs and sends the OSD's
//! report to the MDS every interval the MDS asks for.

use std::time::Duration;

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
    /// Key version and key to sign with.
    pub key: (u32, [u8; 32]),
    /// Current (capacity, used, objects).
    pub space: Box<dyn Fn() -> (u64, u64, u64) + Send + Sync>,
}

/// Registers an OSD with the MDS and heartbeats until the task is dropped.
/// Failures are logged and retried (the MDS may start later or restart).
pub async fn report_loop(mds_addr: String, src: ReportSource) {
    let client = MdsClient::new(&mds_addr, &src.cluster_id, 1);
    let mut interval = Duration::from_secs(2);
    let mut registered = false;
    loop {
        let (capacity, used, objects) = (src.space)();
        let mut r = OsdReport {
            osd_id: src.osd_id,
            addr: src.addr.clone(),
            weight: src.weight,
            capacity,
            used,
            objects,
            key_version: src.key.0,
            at_ms: proto::clock::now_ms(),
            mac: [0; 32],
        };
        r.sign(&src.cluster_id, &src.key.1);
        match client.call(Op::Report(r)).await {
            Ok(MdsReply::Reported { epoch, interval_ms }) => {
                if !registered {
                    tracing::info!(mds = %mds_addr, epoch, "registered with the MDS");
                    registered = true;
                }
                interval = Duration::from_millis(interval_ms.clamp(100, 60_000));
            }
            Ok(other) => tracing::warn!(reply = ?other, "unexpected answer to a report"),
            Err(e) => {
                if registered {
                    tracing::warn!(mds = %mds_addr, error = %e, "heartbeat failed");
                }
                registered = false;
            }
        }
        tokio::time::sleep(interval).await;
    }
}
