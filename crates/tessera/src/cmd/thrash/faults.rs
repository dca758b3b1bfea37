//! The faults the thrasher injects: drawn from the seed (so a failing
//! seed names its schedule), applied to real processes and store images.

use std::path::Path;
use std::time::Duration;

use super::Rng;
use super::cluster::Cluster;

/// One round's fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// None: a calm round.
    Calm,
    /// SIGKILL to these OSDs in the middle of the workload; each back on
    /// its store after `down_ms`.
    KillOsds {
        /// Which (fewer than the copies kept).
        ids: Vec<u32>,
        /// How long they stay down.
        down_ms: u64,
    },
    /// SIGKILL to every OSD at once; all back after `down_ms`, `lost` (if
    /// any) on a new, empty store.
    KillAll {
        /// How long they stay down.
        down_ms: u64,
        /// An OSD whose disk is replaced meanwhile.
        lost: Option<u32>,
    },
    /// SIGKILL to the MDS in the middle of the workload; back at once.
    KillMds,
    /// OSD `osd` stopped cleanly, its store copied aside, and started again.
    Snapshot {
        /// Which.
        osd: u32,
    },
    /// SIGKILL to OSD `osd`, back on the copy of its store the last
    /// snapshot took: an older store.
    RestoreOlder {
        /// Which.
        osd: u32,
    },
    /// A bit flipped in an acknowledged file's bytes on one OSD's store
    /// (stopped cleanly for it), then a deep scrub.
    FlipBit,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Calm => write!(f, "calm"),
            Fault::KillOsds { ids, down_ms } => {
                write!(
                    f,
                    "kill -9 OSDs {ids:?} mid-workload, back after {down_ms} ms"
                )
            }
            Fault::KillAll {
                down_ms,
                lost: None,
            } => {
                write!(f, "kill -9 every OSD, back after {down_ms} ms")
            }
            Fault::KillAll {
                down_ms,
                lost: Some(l),
            } => write!(
                f,
                "kill -9 every OSD, back after {down_ms} ms, OSD {l} on a new empty store"
            ),
            Fault::KillMds => write!(f, "kill -9 the MDS mid-workload"),
            Fault::Snapshot { osd } => write!(f, "stop OSD {osd}, copy its store aside"),
            Fault::RestoreOlder { osd } => {
                write!(f, "kill -9 OSD {osd}, back on the older copy of its store")
            }
            Fault::FlipBit => write!(f, "flip a bit of a file in one OSD's store, deep scrub"),
        }
    }
}

/// Draws the next fault: `osds` OSDs keeping `replicas` copies; `snapshot`
/// the OSD whose store was copied aside, if any.
pub fn draw(rng: &mut Rng, osds: u32, replicas: u8, snapshot: Option<u32>) -> Fault {
    let any_osd = |rng: &mut Rng| 1 + rng.below(u64::from(osds)) as u32;
    match rng.below(12) {
        0 => Fault::Calm,
        1..=3 => {
            // Fewer than the copies kept, so every object keeps one up.
            let n = 1 + rng.below(u64::from(replicas.max(2) - 1)) as u32;
            let mut ids: Vec<u32> = (1..=osds).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            ids.truncate(n as usize);
            ids.sort_unstable();
            Fault::KillOsds {
                ids,
                down_ms: rng.below(4000),
            }
        }
        4 | 5 => Fault::KillAll {
            down_ms: 500 + rng.below(4000),
            lost: (rng.below(2) == 0).then(|| any_osd(rng)),
        },
        6 | 7 => Fault::KillMds,
        8 => Fault::Snapshot { osd: any_osd(rng) },
        9 if snapshot.is_some() => Fault::RestoreOlder {
            osd: snapshot.unwrap_or(1),
        },
        9 => Fault::Snapshot { osd: any_osd(rng) },
        _ => Fault::FlipBit,
    }
}

/// Applies a fault that strikes while the workload runs (after `delay`).
pub async fn strike(
    cl: &mut Cluster,
    fault: &Fault,
    delay: Duration,
    aside: &Path,
) -> anyhow::Result<()> {
    tokio::time::sleep(delay).await;
    match fault {
        Fault::Calm | Fault::FlipBit => {}
        Fault::KillOsds { ids, down_ms } => {
            for id in ids {
                cl.kill_osd(*id);
            }
            tokio::time::sleep(Duration::from_millis(*down_ms)).await;
            for id in ids {
                cl.start_osd(*id)?;
            }
        }
        Fault::KillAll { down_ms, lost } => {
            for id in 1..=cl.osd_count() {
                cl.kill_osd(id);
            }
            tokio::time::sleep(Duration::from_millis(*down_ms)).await;
            if let Some(l) = lost {
                cl.replace_store(*l)?;
            }
            for id in 1..=cl.osd_count() {
                cl.start_osd(id)?;
            }
        }
        Fault::KillMds => {
            cl.kill_mds();
            cl.start_mds()?;
        }
        Fault::Snapshot { osd } => {
            cl.stop_osd(*osd)?;
            Cluster::copy_image(&cl.image(*osd), aside)?;
            cl.start_osd(*osd)?;
        }
        Fault::RestoreOlder { osd } => {
            cl.kill_osd(*osd);
            Cluster::copy_image(aside, &cl.image(*osd))?;
            cl.start_osd(*osd)?;
        }
    }
    Ok(())
}

/// The OSDs whose stores hold `needle`, with where (read while they run).
pub fn holders(cl: &Cluster, needle: &[u8]) -> anyhow::Result<Vec<(u32, Vec<u64>)>> {
    let mut out = Vec::new();
    for id in 1..=cl.osd_count() {
        let img = std::fs::read(cl.image(id))?;
        let at: Vec<u64> = img
            .windows(needle.len())
            .enumerate()
            .filter(|(_, w)| *w == needle)
            .map(|(i, _)| i as u64)
            .collect();
        if !at.is_empty() {
            out.push((id, at));
        }
    }
    Ok(out)
}

/// Flips a bit in the middle of `needle` at each of `at` in OSD `osd`'s
/// store where it still is — in place, with the OSD stopped cleanly for a
/// moment (well inside its lease, so it keeps its places); whether any.
pub fn flip(cl: &mut Cluster, osd: u32, needle: &[u8], at: &[u64]) -> anyhow::Result<bool> {
    use std::os::unix::fs::FileExt;
    cl.stop_osd(osd)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(cl.image(osd))?;
    let mut flipped = false;
    for &off in at {
        let mut got = vec![0u8; needle.len()];
        f.read_exact_at(&mut got, off)?;
        if got == needle {
            let mid = off + needle.len() as u64 / 2;
            f.write_all_at(&[got[needle.len() / 2] ^ 0x40], mid)?;
            flipped = true;
        }
    }
    f.sync_all()?;
    drop(f);
    cl.start_osd(osd)?;
    Ok(flipped)
}
