//! An OSD's report to the MDS (registration and heartbeat), and the mark
//! of the store it runs on.

use serde::{Deserialize, Serialize};

use crate::cap::{KEY_LEN, KeyRing, mac, mac_ok};

/// Which store an OSD runs on, and how far its journal has come: the
/// store's random identity (made at mkfs) and the sequence number of its
/// newest durable journal batch. The MDS remembers both per OSD. Another
/// identity is a new (empty) store; a smaller sequence under the same
/// identity is an older copy of the store. Neither holds what the OSD's
/// copies held, so the OSD leaves every replica chain it was in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMark {
    /// The store's identity (all zeros: not known, nothing is checked).
    pub uuid: [u8; 16],
    /// Its newest durable journal batch.
    pub seq: u64,
}

impl StoreMark {
    /// Whether the mark names a store (all zeros: the OSD could not say).
    pub fn known(&self) -> bool {
        self.uuid != [0; 16]
    }
}

/// What an OSD has served since it started: counters that only grow (the
/// MDS turns two reports into rates for `status` and the dashboard). A
/// restarted OSD starts again from zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdLoad {
    /// Requests served.
    pub requests: u64,
    /// Requests that carried object data in (writes, appends, fills).
    pub writes: u64,
    /// Requests that carried object data out (reads).
    pub reads: u64,
    /// Object data bytes received.
    pub bytes_in: u64,
    /// Object data bytes sent.
    pub bytes_out: u64,
    /// Sum of every request's service time, microseconds.
    pub busy_us: u64,
}

/// What an MDS's refusal of a report no later than the OSD's last one
/// says before that time (ms since the epoch): the OSD's next reports are
/// later than it, so an OSD restarted on a clock set back is not refused
/// until its clock catches up.
pub const STALE_REPORT_AFTER: &str = "the OSD last reported at ";

/// The last report time a refusal names ([`STALE_REPORT_AFTER`]).
pub fn stale_report_floor(message: &str) -> Option<u64> {
    let rest = &message[message.find(STALE_REPORT_AFTER)? + STALE_REPORT_AFTER.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// An OSD's registration and heartbeat, authenticated with its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdReport {
    /// OSD id.
    pub osd_id: u32,
    /// Address clients reach it at.
    pub addr: String,
    /// Placement weight asked for (16.16 fixed point; 0 = take no new data).
    pub weight: u32,
    /// Failure domain: the host it runs on.
    pub host: String,
    /// Bytes of capacity.
    pub capacity: u64,
    /// Bytes in use.
    pub used: u64,
    /// Objects stored.
    pub objects: u64,
    /// Key version the MAC is made with.
    pub key_version: u32,
    /// The OSD's clock (ms since the epoch): replays are refused.
    pub at_ms: u64,
    /// The store it runs on: an empty or older store is never trusted to
    /// hold what the one before it held.
    pub store: StoreMark,
    /// What it has served since it started.
    pub load: OsdLoad,
    /// HMAC-SHA256 over [`OsdReport::signed_bytes`] with the OSD's key.
    pub mac: [u8; 32],
}

impl OsdReport {
    /// The bytes the MAC covers.
    pub fn signed_bytes(&self, cluster_id: &str) -> Vec<u8> {
        let mut b = b"TSREPORT4".to_vec();
        for part in [
            cluster_id.as_bytes(),
            self.addr.as_bytes(),
            self.host.as_bytes(),
        ] {
            b.extend_from_slice(&(part.len() as u32).to_le_bytes());
            b.extend_from_slice(part);
        }
        b.extend_from_slice(&self.osd_id.to_le_bytes());
        b.extend_from_slice(&self.weight.to_le_bytes());
        b.extend_from_slice(&self.capacity.to_le_bytes());
        b.extend_from_slice(&self.used.to_le_bytes());
        b.extend_from_slice(&self.objects.to_le_bytes());
        b.extend_from_slice(&self.key_version.to_le_bytes());
        b.extend_from_slice(&self.at_ms.to_le_bytes());
        b.extend_from_slice(&self.store.uuid);
        b.extend_from_slice(&self.store.seq.to_le_bytes());
        let l = &self.load;
        for n in [
            l.requests,
            l.writes,
            l.reads,
            l.bytes_in,
            l.bytes_out,
            l.busy_us,
        ] {
            b.extend_from_slice(&n.to_le_bytes());
        }
        b
    }

    /// Signs the report with the OSD's key (what the OSD does).
    pub fn sign(&mut self, cluster_id: &str, key: &[u8; KEY_LEN]) {
        self.mac = mac(key, &self.signed_bytes(cluster_id));
    }

    /// Whether the MAC verifies with the OSD's key ring (what the MDS does).
    pub fn verify(&self, cluster_id: &str, ring: &KeyRing) -> bool {
        ring.key(self.key_version)
            .is_some_and(|k| mac_ok(k, &self.signed_bytes(cluster_id), &self.mac))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_report_refusal_names_the_time_to_pass() {
        let m = format!("EACCES: stale or replayed report: {STALE_REPORT_AFTER}1764236000123 ms");
        assert_eq!(stale_report_floor(&m), Some(1_764_236_000_123));
        assert_eq!(stale_report_floor("stale or replayed report"), None);
        assert_eq!(stale_report_floor(STALE_REPORT_AFTER), None);
    }
}
