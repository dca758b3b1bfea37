//! The faults the thrasher injects: drawn from the seed (so a failing
//! seed names its schedule), applied to real processes and store images.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

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
    /// OSD `osd`'s wall clock steps `secs` seconds off the others' in the
    /// middle of the workload (either way, within the five minutes the MDS
    /// takes), and back at the end of the round.
    ClockStep {
        /// Which.
        osd: u32,
        /// By how much.
        secs: i64,
    },
    /// The disks filled: a second client writes files until the cluster
    /// answers ENOSPC; the workload runs again on the full cluster, then
    /// the files are removed (deletes must work on a full cluster).
    Fill,
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
            Fault::Fill => write!(f, "fill the disks to ENOSPC mid-workload, then free them"),
            Fault::ClockStep { osd, secs } => write!(
                f,
                "step OSD {osd}'s clock {secs:+} s mid-workload, back after the round"
            ),
        }
    }
}

/// Draws the next fault: `osds` OSDs keeping `replicas` copies; `snapshot`
/// the OSD whose store was copied aside, if any.
pub fn draw(rng: &mut Rng, osds: u32, replicas: u8, snapshot: Option<u32>) -> Fault {
    let any_osd = |rng: &mut Rng| 1 + rng.below(u64::from(osds)) as u32;
    match rng.below(13) {
        // Half the quiet rounds step a clock (a round of its own costs
        // no other fault's share, so older seeds keep their schedules
        // up to their first quiet round).
        0 if rng.below(2) == 0 => Fault::Calm,
        0 => Fault::ClockStep {
            osd: any_osd(rng),
            secs: rng.below(420) as i64 - 240,
        },
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
        10 | 11 => Fault::FlipBit,
        _ => Fault::Fill,
    }
}

/// Applies a fault that strikes while the workload runs (after `delay`);
/// a fill's files are left for the caller to [`free`].
pub async fn strike(
    cl: &mut Cluster,
    fault: &Fault,
    delay: Duration,
    aside: &Path,
) -> anyhow::Result<Option<Filled>> {
    tokio::time::sleep(delay).await;
    match fault {
        Fault::Calm | Fault::FlipBit => {}
        Fault::ClockStep { osd, secs } => {
            if !cl.step_clock(*osd, *secs)? {
                tracing::warn!("libfaketime is not installed: clock steps are skipped");
            }
        }
        Fault::Fill => return Ok(Some(fill(cl).await?)),
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
    Ok(None)
}

/// What a fill left: its files, and what it wrote against what `statfs`
/// said was free.
#[derive(Debug)]
pub struct Filled {
    /// The files written (the last one cut short by ENOSPC).
    pub names: Vec<String>,
    /// Bytes acknowledged before ENOSPC.
    pub bytes: u64,
    /// What `statfs` said was free before.
    pub free: u64,
}

/// The content of a fill's `k`th file: its own bytes, so a write that
/// landed in the wrong file or place is seen.
fn fill_content(k: usize) -> Vec<u8> {
    super::oracle::content(0xF111_0000 + k as u64, 4 << 20)
}

/// Writes 4 MiB files (fsync'd, as a second client) until the cluster
/// answers ENOSPC — after about what `statfs` said was free, and never
/// more than its capacity — then reads back the last few it acknowledged.
/// Any other error, a fill far short of what `statfs` promised, or an
/// acknowledged file that does not read back is the fault's failure.
async fn fill(cl: &Cluster) -> anyhow::Result<Filled> {
    use proto::mds::Creds;
    let c = super::oracle::connect(&cl.mds_addr, cl.admin()?).await?;
    let st = c.statfs(&Creds::root()).await?;
    let free = st.capacity.saturating_sub(st.used);
    let (mut names, mut bytes) = (Vec::new(), 0u64);
    loop {
        let name = format!("fill-{}", names.len());
        let data = fill_content(names.len());
        let wrote = tokio::time::timeout(
            super::oracle::OP_LIMIT,
            super::oracle::write_whole(&c, &name, &data),
        )
        .await;
        names.push(name);
        match wrote {
            Ok(Ok(())) => bytes += data.len() as u64,
            Ok(Err(e)) if e.raw() == libc::ENOSPC => break,
            Ok(Err(e)) => bail!("a write to a filling cluster failed with {e}, not ENOSPC"),
            Err(_) => bail!("a write to a filling cluster had no answer"),
        }
        if bytes > st.capacity + (64 << 20) {
            bail!(
                "no ENOSPC after {bytes} bytes, more than the capacity statfs gave ({})",
                st.capacity
            );
        }
    }
    // Placement spreads files unevenly, and the first OSD at 95 % refuses
    // new data, so a fill stops somewhat short of what statfs promised.
    if bytes < free / 3 {
        bail!("ENOSPC after {bytes} bytes, though statfs said {free} were free");
    }
    // The files acknowledged nearest to full read back.
    let acked = names.len() - 1;
    let from = acked.saturating_sub(3);
    for (k, name) in names.iter().enumerate().take(acked).skip(from) {
        let got = super::oracle::read_whole(&c, name).await?;
        if got != fill_content(k) {
            bail!(
                "{name}, acknowledged as the cluster filled, reads back {} bytes that differ",
                got.len()
            );
        }
    }
    Ok(Filled { names, bytes, free })
}

/// Removes a fill's files from the full cluster (a delete that fails is
/// the fault's failure) and syncs the namespace — with the namespace on
/// the OSDs, removing the files' objects before this client goes.
pub async fn free(cl: &Cluster, f: &Filled) -> anyhow::Result<()> {
    use proto::mds::{Creds, ROOT_INO};
    let c = super::oracle::connect(&cl.mds_addr, cl.admin()?).await?;
    for name in &f.names {
        match c.unlink(&Creds::root(), ROOT_INO, name).await {
            Ok(()) => {}
            Err(e) if e.raw() == libc::ENOENT => {}
            Err(e) => bail!("removing {name} from a full cluster failed: {e}"),
        }
    }
    c.sync_all().await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind of a fault, for coverage.
    fn kind(f: &Fault) -> &'static str {
        match f {
            Fault::Calm => "calm",
            Fault::KillOsds { .. } => "kill some",
            Fault::KillAll { lost: None, .. } => "kill all",
            Fault::KillAll { lost: Some(_), .. } => "kill all, one store lost",
            Fault::KillMds => "kill the MDS",
            Fault::Snapshot { .. } => "snapshot",
            Fault::RestoreOlder { .. } => "older store",
            Fault::FlipBit => "flip",
            Fault::Fill => "fill",
            Fault::ClockStep { .. } => "clock step",
        }
    }

    /// The faults `rounds` rounds of `seed` draw with 4 OSDs and 3 copies,
    /// using the generator as `thrash` does: the fault, its delay, and for
    /// a flip the file it picks.
    fn schedule(seed: u64, rounds: u64) -> Vec<Fault> {
        let mut rng = Rng(seed);
        let mut snapshot = None;
        let mut out = Vec::new();
        for _ in 0..rounds {
            let f = draw(&mut rng, 4, 3, snapshot);
            rng.below(900);
            if f == Fault::FlipBit {
                rng.next();
            }
            if let Fault::Snapshot { osd } = f {
                snapshot = Some(osd);
            }
            out.push(f);
        }
        out
    }

    /// `crates/tessera/tests/thrash.rs` runs seed 112 in OSD mode and 294
    /// in MDS mode, five rounds each: between them they draw every kind
    /// of fault but a calm round, and each fills the disks once.
    #[test]
    fn the_end_to_end_seeds_draw_every_kind_of_fault() {
        let (osd, mds) = (schedule(112, 5), schedule(294, 5));
        for s in [&osd, &mds] {
            assert!(s.contains(&Fault::Fill), "{s:?}");
        }
        let drawn: std::collections::BTreeSet<&str> = osd.iter().chain(&mds).map(kind).collect();
        let every = [
            "kill some",
            "kill all",
            "kill all, one store lost",
            "kill the MDS",
            "snapshot",
            "older store",
            "flip",
            "fill",
            "clock step",
        ];
        for k in every {
            assert!(drawn.contains(k), "{k} not drawn: {drawn:?}");
        }
    }

    #[test]
    fn a_seed_draws_the_same_schedule_every_time() {
        assert_eq!(schedule(30, 20), schedule(30, 20));
        assert_ne!(schedule(30, 20), schedule(31, 20));
    }
}
