//! The longest OSD lease any MDS of this file system may still have
//! granted, kept in the `meta` table, so that a restarted MDS (or a new
//! group leader) waits out the leases of the one before even when
//! `down_after_ms` was lowered in between. Without it, an MDS restarted
//! with a shorter lease took an OSD it had not heard from for down after
//! the new, shorter time, while that OSD still held the old, longer lease:
//! a replica group could briefly have two heads.
//!
//! The record only grows before a lease of the new length is granted
//! (when the MDS opens), and is lowered to the configured length once
//! every lease granted under the old one has certainly run out (the first
//! OSD report after a whole old lease has passed since the start).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::kv::{Kv, T, Tx, View};
use proto::mds::MdsError;

use crate::service::Mds;

/// Where the `meta` table keeps the longest lease, in ms (LE u64).
const LEASE_KEY: &[u8] = b"osd_lease_ms";

/// What [`open`] found and left: how long after its start this MDS must
/// assume OSDs it has not heard from still hold a lease, and the record.
pub(super) struct LeaseRecord {
    /// The wait after the start: the longest of the recorded lease and
    /// the configured one.
    pub grace: Duration,
    /// The lease length recorded now (ms).
    pub recorded_ms: u64,
}

/// Reads the record and raises it to `lease_ms` (durably, before any
/// lease of that length is granted) if it is shorter. A file system made
/// before the record existed counts as having granted `lease_ms`.
pub(super) fn open(kv: &Kv, lease_ms: u64) -> Result<LeaseRecord, MdsError> {
    // A damaged record is refused, not read as none: that could cut the
    // wait for a longer lease short.
    let before = match kv.read()?.get(T::Meta, LEASE_KEY)? {
        None => None,
        Some(v) => Some(u64::from_le_bytes(<[u8; 8]>::try_from(&v[..]).map_err(
            |_| {
                proto::mds::err(
                    proto::mds::Errno::Io,
                    format!(
                        "the OSD lease record (meta osd_lease_ms) is damaged: {} bytes, not 8",
                        v.len()
                    ),
                )
            },
        )?)),
    };
    let recorded_ms = before.unwrap_or(0).max(lease_ms);
    if before != Some(recorded_ms) {
        kv.write_blocking(move |tx| put(tx, recorded_ms))?;
    }
    Ok(LeaseRecord {
        grace: Duration::from_millis(recorded_ms),
        recorded_ms,
    })
}

fn put(tx: &mut Tx<'_>, ms: u64) -> Result<(), MdsError> {
    tx.put(T::Meta, LEASE_KEY, &ms.to_le_bytes())
}

impl Mds {
    /// Whether a lease granted before this MDS started may still run
    /// (for OSDs it has not heard from since, and for those it has: one
    /// heard again may still hold the older, longer lease too).
    pub(super) fn earlier_leases_may_run(&self) -> bool {
        self.started.elapsed() < self.lease_grace
    }

    /// When every lease an OSD may hold as of `from` has certainly run
    /// out: a lease and a second after `from`, and never before the
    /// grace after this MDS's start (what `lease_lapsed` waits for).
    pub(super) fn leases_out_by(&self, from: std::time::Instant) -> std::time::Instant {
        let slack = Duration::from_secs(1);
        (from + Duration::from_millis(self.cfg.down_after_ms) + slack)
            .max(self.started + self.lease_grace + slack)
    }

    /// The record's new value if it may come down to the configured
    /// lease now (every earlier lease has run out), to be written with
    /// the next report's transaction ([`Mds::lease_record_lowered`]).
    pub(super) fn lease_record_to_lower(&self) -> Option<u64> {
        let want = self.cfg.down_after_ms;
        (self.lease_recorded_ms.load(Ordering::SeqCst) > want && !self.earlier_leases_may_run())
            .then_some(want)
    }

    /// Writes `ms` as the record in `tx` (see [`Mds::lease_record_to_lower`]).
    pub(super) fn lower_lease_record(tx: &mut Tx<'_>, ms: u64) -> Result<(), MdsError> {
        put(tx, ms)
    }

    /// The record is `ms` now (its transaction committed).
    pub(super) fn lease_record_lowered(&self, ms: u64) {
        self.lease_recorded_ms.store(ms, Ordering::SeqCst);
    }

    /// The lease length recorded for the next start (ms).
    pub fn lease_recorded_ms(&self) -> u64 {
        self.lease_recorded_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FormatOptions, MdsConfig};
    use proto::layout::LayoutSpec;

    fn open_mds(dir: &std::path::Path, lease_ms: u64) -> std::sync::Arc<Mds> {
        let cfg = MdsConfig {
            down_after_ms: lease_ms,
            ..MdsConfig::default()
        };
        let kv = std::sync::Arc::new(
            Kv::open_with(
                &crate::service::MdsPaths { dir: dir.into() }.kv(),
                Mds::kv_options(&cfg),
            )
            .unwrap(),
        );
        Mds::open_on(dir, cfg, kv).unwrap()
    }

    #[test]
    fn a_restart_with_a_shorter_lease_waits_out_the_longer_one_then_lowers_the_record() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("mds");
        crate::service::format(&dir, &FormatOptions::new("leases", LayoutSpec::default())).unwrap();
        let m = open_mds(&dir, 1_500);
        assert_eq!(m.lease_recorded_ms(), 1_500);
        drop(m);
        // Lowered to 200 ms across a restart: an OSD not heard from since
        // may still hold the 1.5 s lease.
        let m = open_mds(&dir, 200);
        assert_eq!(
            m.lease_recorded_ms(),
            1_500,
            "not lowered before it ran out"
        );
        std::thread::sleep(Duration::from_millis(400));
        assert!(
            !m.lease_lapsed(3),
            "a 1.5 s lease granted before the restart may still run"
        );
        assert!(m.earlier_leases_may_run());
        assert_eq!(m.lease_record_to_lower(), None);
        std::thread::sleep(Duration::from_millis(1_200));
        assert!(m.lease_lapsed(3));
        assert_eq!(m.lease_record_to_lower(), Some(200));
        m.kv.write_blocking(|tx| Mds::lower_lease_record(tx, 200))
            .unwrap();
        m.lease_record_lowered(200);
        drop(m);
        // Lowered: the next start waits only the new lease.
        let m = open_mds(&dir, 200);
        assert_eq!(m.lease_recorded_ms(), 200);
        std::thread::sleep(Duration::from_millis(250));
        assert!(m.lease_lapsed(3));
        drop(m);
        // Raised: recorded at once, before any lease of it is granted.
        let m = open_mds(&dir, 3_000);
        assert_eq!(m.lease_recorded_ms(), 3_000);
        // A damaged record stops the start with a clear error.
        m.kv.write_blocking(|tx| tx.put(T::Meta, LEASE_KEY, &[1, 2, 3]))
            .unwrap();
        let kv = m.kv.clone();
        drop(m);
        let e = open(&kv, 200).err().expect("a damaged record is refused");
        assert!(
            e.to_string().contains("osd_lease_ms) is damaged: 3 bytes"),
            "{e}"
        );
    }
}
