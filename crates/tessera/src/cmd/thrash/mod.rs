//! `tessera thrash`: a cluster of separate daemons on this machine, a
//! workload whose every acknowledged change an oracle records, and a
//! seeded schedule of faults (after Ceph's `thrashosds` and Jepsen): OSDs
//! and the MDS killed with SIGKILL, every OSD at once, a disk replaced by
//! an empty one, a store put back to an older copy, a bit flipped in a
//! store, the disks filled. After each round it waits for HEALTH_OK,
//! then reads back every acknowledged byte through a fresh client; at the
//! end every store must pass fsck. A failing seed prints its schedule and the command that
//! replays it.

mod cluster;
mod faults;
mod oracle;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use proto::mds::{MdsReply, Op, ROOT_INO};

use cluster::Cluster;
use faults::Fault;
use oracle::Oracle;

/// Where the namespace lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// In the MDS (copies recorded in layouts).
    Mds,
    /// On the OSDs (copies kept by replica chains).
    Osd,
}

/// Hunt for lost writes: a local cluster of separate daemons, a workload
/// an oracle checks, and a seeded schedule of crashes and damaged stores.
///
/// Each round runs a workload (new files, rewrites, removals, each
/// fsync'd) while one fault strikes; then waits for HEALTH_OK and reads
/// back every acknowledged file through a fresh client. Faults: kill -9 of
/// some OSDs (fewer than the copies kept), of every OSD at once (one of
/// them perhaps back on a new, empty store), of the MDS; an OSD put back
/// on an older copy of its store; a bit flipped in a file's bytes on one
/// store, then a deep scrub; the disks filled to ENOSPC by a second
/// client, then freed; an OSD's wall clock stepped up to 4 minutes back
/// or 3 forward while it serves, and back at the end of the round (with
/// libfaketime, the Debian package faketime; skipped without it). At the
/// end every store must pass fsck. The schedule follows from the seed: a
/// failure prints it and the command that replays it. Not injected yet:
/// network partitions.
///
/// Example: tessera thrash --seed 7 --rounds 20 --namespace osd
#[derive(clap::Args)]
pub struct Args {
    /// The seed of the schedule and the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds (one fault each).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    rounds: u64,
    /// OSDs (2 to 16).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=16))]
    osds: u32,
    /// Copies of every object (2 to 5, at most --osds).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=5))]
    replicas: u8,
    /// Where the namespace lives.
    #[arg(long, value_enum, default_value_t = Mode::Mds)]
    namespace: Mode,
    /// Changes per round.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    changes: u64,
    /// How long a round may take to be healthy again, in seconds.
    #[arg(long, default_value_t = 180)]
    heal_secs: u64,
    /// (For testing the thrasher itself.) Overwrite an acknowledged file
    /// behind the oracle's back after each round: a change it must report.
    #[arg(long, hide = true)]
    sabotage: bool,
    /// Where the cluster lives (must not exist; default: a new directory
    /// in the system's temporary directory, removed after a run that
    /// passes and kept after one that fails).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// SplitMix64: the thrasher's own generator, so a seed means the same
/// schedule in every build.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// Runs `tessera thrash`; exit status 0 when every round passed.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.replicas as u32 > a.osds {
        bail!(
            "--replicas {} needs at least as many OSDs (--osds {})",
            a.replicas,
            a.osds
        );
    }
    let (dir, temporary) = match &a.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("tessera-thrash-{}-{}", a.seed, std::process::id())),
            true,
        ),
    };
    let rt = super::runtime()?;
    let outcome = rt.block_on(thrash(&a, &dir));
    let replay = format!(
        "tessera thrash --seed {} --rounds {} --osds {} --replicas {} --namespace {} --changes {} \
         --heal-secs {}",
        a.seed,
        a.rounds,
        a.osds,
        a.replicas,
        match a.namespace {
            Mode::Mds => "mds",
            Mode::Osd => "osd",
        },
        a.changes,
        a.heal_secs
    );
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            if temporary {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(0)
        }
        Err(failure) => {
            println!("FAILED (seed {}): {failure:#}", a.seed);
            println!(
                "the cluster, its logs and stores are kept in {}",
                dir.display()
            );
            println!("replay with: {replay}");
            Ok(1)
        }
    }
}

/// The rounds; a summary, or what failed (with the schedule so far).
async fn thrash(a: &Args, dir: &std::path::Path) -> anyhow::Result<String> {
    let mut cl = Cluster::start(dir, a.osds, a.replicas, a.namespace == Mode::Osd)?;
    let heal = Duration::from_secs(a.heal_secs);
    // A new cluster is not a fault healing: on a loaded machine its first
    // redundancy check may take longer than a round's bound.
    if let Err(h) = cl.wait_healthy(heal.max(Duration::from_secs(120))).await {
        bail!("the new cluster never became healthy: {h}");
    }
    let client = oracle::connect(&cl.mds_addr, cl.admin()?).await?;
    let mut schedule_rng = Rng(a.seed);
    let mut work_rng = Rng(a.seed ^ 0x005E_ED0F_3A7E_5EED);
    let mut oracle = Oracle::default();
    let aside = dir.join("older-store.img");
    let (mut snapshot, mut schedule) = (None, Vec::new());
    let (mut written, mut checked) = (0u64, 0u64);
    let started = Instant::now();
    for round in 1..=a.rounds {
        let fault = faults::draw(&mut schedule_rng, a.osds, a.replicas, snapshot);
        let delay = Duration::from_millis(100 + schedule_rng.below(900));
        schedule.push(format!("round {round}: {fault}"));
        let says = |what: String, schedule: &[String]| {
            anyhow::anyhow!(
                "round {round}: {what}\nschedule so far:\n  {}",
                schedule.join("\n  ")
            )
        };
        let tag = format!("r{round}");
        let (mut done, struck) = tokio::join!(
            oracle.work(&client, &mut work_rng, &tag, a.changes),
            faults::strike(&mut cl, &fault, delay, &aside)
        );
        let filled = struck
            .map_err(|e| says(format!("the fault could not be applied: {e:#}"), &schedule))?;
        // A cluster that takes no change at all is not available, however
        // healthy it says it is (a fill may refuse them all, rightly).
        if done.written + done.removed == 0 && done.failed > 0 && fault != Fault::Fill {
            return Err(says(
                format!(
                    "the cluster refused all {} changes of the round",
                    done.failed
                ),
                &schedule,
            ));
        }
        let mut noted = String::new();
        if let Some(f) = filled {
            // The workload again, on the full cluster: what it is told was
            // written must read back like everything else.
            let tag = format!("r{round}full");
            let full = oracle.work(&client, &mut work_rng, &tag, a.changes).await;
            faults::free(&cl, &f)
                .await
                .map_err(|e| says(format!("{e:#}"), &schedule))?;
            noted = format!(
                " ({} MiB written of {} MiB statfs said free, then ENOSPC; while full {} \
                 written, {} refused; freed)",
                f.bytes >> 20,
                f.free >> 20,
                full.written,
                full.failed
            );
            schedule.push(format!("  {}", noted.trim()));
            done.add(&full);
        }
        if let Fault::Snapshot { osd } = fault {
            snapshot = Some(osd);
        }
        written += done.written;
        if a.sabotage
            && let Some(name) = oracle.files.keys().next().cloned()
        {
            // Bytes the oracle was not told of: the read-back must see it.
            oracle::write_whole(&client, &name, b"not what was acknowledged").await?;
            schedule.push(format!(
                "  (sabotage: {name} overwritten behind the oracle's back)"
            ));
        }
        if fault == Fault::FlipBit
            && let Some(what) = flip_and_scrub(&mut cl, &oracle, &mut schedule_rng, heal).await?
        {
            noted = format!(" ({what})");
            schedule.push(format!("  ({what})"));
        }
        // Long enough for the MDS to see any OSD that restarted within its
        // lease (1.5 s) as having restarted, before health is asked.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let healed = cl
            .wait_healthy(heal)
            .await
            .map_err(|h| says(format!("not healthy after {heal:?}: {h}"), &schedule))?;
        let fresh = oracle::connect(&cl.mds_addr, cl.admin()?).await?;
        let bad = oracle.check(&fresh).await;
        if !bad.is_empty() {
            return Err(says(
                format!(
                    "{} of {} acknowledged files do not read back:\n    {}",
                    bad.len(),
                    oracle.files.len(),
                    bad.join("\n    ")
                ),
                &schedule,
            ));
        }
        checked += oracle.files.len() as u64;
        if let Fault::ClockStep { osd, .. } = fault {
            // Back: a step the other way, while the next round runs.
            cl.step_clock(osd, 0)?;
        }
        println!(
            "round {round}/{}: {fault}{noted}; {} written, {} removed, {} not acknowledged; \
             healthy in {:.1} s; {} files read back",
            a.rounds,
            done.written,
            done.removed,
            done.failed,
            healed.as_secs_f64(),
            oracle.files.len()
        );
    }
    drop(client);
    let bad = cl.stop_and_fsck()?;
    if !bad.is_empty() {
        bail!("stores not clean at the end: {}", bad.join("; "));
    }
    Ok(format!(
        "thrash passed: {} rounds (seed {}), {written} files written, {checked} file reads \
         checked, every store clean; {:.0} s",
        a.rounds,
        a.seed,
        started.elapsed().as_secs_f64()
    ))
}

/// Flips a bit of one acknowledged file's bytes in a store that holds a
/// live copy of them, then deep-scrubs; what it did (`None`: no file
/// large enough). A store may also hold the bytes in freed blocks (an
/// older copy, a copy it no longer serves): a flip there changes nothing
/// a scrub can see, so the stores are tried in turn until a scrub finds
/// the flipped copy.
async fn flip_and_scrub(
    cl: &mut Cluster,
    oracle: &Oracle,
    rng: &mut Rng,
    heal: Duration,
) -> anyhow::Result<Option<String>> {
    let large: Vec<(&String, &(u64, usize))> = oracle
        .files
        .iter()
        .filter(|(_, (_, len))| *len >= 65_536)
        .collect();
    // Drawn whether or not there is a file to pick, so the schedule's
    // later rounds do not depend on the workload's sizes.
    let pick = rng.next();
    if large.is_empty() {
        return Ok(None);
    }
    let (name, (seed, len)) = large[(pick % large.len() as u64) as usize];
    let data = oracle::content(*seed, *len);
    let at = (*len / 2) & !4095;
    let needle = &data[at..at + 64];
    // Every copy written down before the images are searched.
    let _ = cl.wait_healthy(heal).await;
    for (osd, at) in faults::holders(cl, needle)? {
        if !faults::flip(cl, osd, needle, &at)? {
            continue;
        }
        // The MDS sees the restart first (a lease and a heartbeat).
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let _ = cl.wait_healthy(heal).await;
        let (inconsistent, repaired) = deep_scrub(cl, heal).await?;
        if inconsistent > 0 {
            return Ok(Some(format!(
                "flipped a bit of {name} on OSD {osd}; deep scrub: {inconsistent} inconsistent, \
                 {repaired} repaired"
            )));
        }
        // Not a live copy (freed blocks): flipped back, so no two stores
        // ever hold a flipped copy of one object.
        let mut flipped = needle.to_vec();
        flipped[needle.len() / 2] ^= 0x40;
        faults::flip(cl, osd, &flipped, &at)?;
    }
    Ok(Some(format!(
        "{name}'s bytes: no store's live copy found to flip"
    )))
}

/// A deep scrub of everything, run again (a second apart, within `heal`)
/// while it could not check everything — an OSD just restarted may not
/// answer yet — as an operator would: (inconsistent, repaired) over the
/// runs.
async fn deep_scrub(cl: &Cluster, heal: Duration) -> anyhow::Result<(u64, u64)> {
    let m = net::MdsClient::new(&cl.mds_addr, cluster::CLUSTER, cl.admin()?, 1);
    let (mut inconsistent, mut repaired) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < heal {
        let r = match m
            .call(Op::Scrub {
                ino: ROOT_INO,
                deep: true,
            })
            .await?
        {
            MdsReply::Scrubbed(r) => r,
            other => bail!("scrub answered {other:?}"),
        };
        inconsistent += r.inconsistent;
        repaired += r.repaired;
        if r.unchecked == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok((inconsistent, repaired))
}
