//! `tessera bench replication`: what copies cost and how fast they come
//! back, under both replication policies — copies recorded in layouts
//! (namespace in the MDS, [`on_mds`]) and replica chains (namespace on the
//! OSDs, [`on_osds`]) — in one run, each on clusters of four OSDs in this
//! process (file-backed stores on the same disk), next to fio on a loop
//! device over the same disk:
//!
//! - sequential write MB/s at 1, 2 and 3 copies (every copy lands on the
//!   same disk here, so the ideal for R copies is 1/R of R = 1; the
//!   efficiency is `(MB/s at R ÷ MB/s at 1) × R`, target ≥ 0.9);
//! - cold sequential read of two-copy data, healthy and with an OSD
//!   holding a copy stopped (target ≥ 0.8);
//! - recovery: that OSD marked out once the degraded read is done; the
//!   bytes the other OSDs' stores gain from the stop until `HEALTH_OK`,
//!   and their rate against fio's sequential write of the same disk
//!   (512 KiB, depth 1 — one stream, as recovery writes each copy —
//!   target ≥ 0.3; depth 16 reported too);
//! - rebalance: an OSD added to the four; the bytes its store gains, the
//!   time until the last arrived and the rate, against fio the same way.

mod on_mds;
mod on_osds;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use client::{Client, ClientConfig};
use local::LocalCluster;
use proto::mds::{ClusterStatus, Creds, MdsReply, Op};
use serde::Serialize;

use crate::fio::{FioJob, run_job};
use crate::loopdev::{LoopDev, drop_caches};

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct ReplParams {
    /// Bytes written per replica count.
    pub write: u64,
    /// Bytes of two-copy data whose loss is recovered.
    pub recover: u64,
    /// Seconds each fio job runs.
    pub fio_secs: u32,
    /// Which policies to measure.
    pub policies: Policies,
}

/// Which replication policies a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policies {
    /// Copies recorded in layouts (namespace in the MDS).
    Mds,
    /// Replica chains (namespace on the OSDs).
    Osd,
    /// Both, one after the other.
    Both,
}

/// What one run measured: fio's ceilings, then one report per policy.
#[derive(Debug, Clone, Serialize)]
pub struct ReplSuite {
    /// fio sequential write, 512 KiB at depth 1 (one stream, as recovery
    /// writes each copy), on a loop device over the same disk, MB/s.
    pub fio_write_mb_s: f64,
    /// fio sequential write, 512 KiB at depth 16, MB/s.
    pub fio_write_qd16_mb_s: f64,
    /// One per policy measured.
    pub runs: Vec<ReplReport>,
}

/// What one policy measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReplReport {
    /// "mds" (copies in layouts) or "osd" (replica chains).
    pub namespace: String,
    /// Sequential write MB/s with 1, 2 and 3 copies.
    pub write_mb_s: [f64; 3],
    /// `(MB/s at R ÷ MB/s at 1) × R` for R = 2, 3 (1.0 = ideal on one disk).
    pub write_efficiency: [f64; 2],
    /// Cold read MB/s of two-copy data, healthy.
    pub read_healthy_mb_s: f64,
    /// The same with an OSD holding a copy stopped (chains: once its
    /// groups have a new head).
    pub read_degraded_mb_s: f64,
    /// Degraded ÷ healthy.
    pub read_ratio: f64,
    /// Seconds from stopping the OSD to the first byte read back (chains:
    /// the head's lease running out; layouts: the next copy at once).
    pub failover_seconds: f64,
    /// Bytes recovery copied: what the other OSDs' stores gained.
    pub recovered_bytes: u64,
    /// Seconds from stopping the OSD to HEALTH_OK.
    pub seconds_to_healthy: f64,
    /// Recovery's copying rate (its bytes ÷ time from their first MiB's
    /// arrival to their last), MB/s.
    pub recovery_mb_s: f64,
    /// Recovery ÷ fio at depth 1 (the target's ratio).
    pub recovery_ratio: f64,
    /// Recovery ÷ fio at depth 16.
    pub recovery_ratio_qd16: f64,
    /// Bytes that moved to an added OSD (what its store gained).
    pub rebalance_bytes: u64,
    /// Seconds from adding the OSD until the last of them arrived.
    pub rebalance_seconds: f64,
    /// Rebalance's copying rate (its bytes ÷ time from their first to
    /// their last arrival), MB/s.
    pub rebalance_mb_s: f64,
    /// Rebalance ÷ fio at depth 1.
    pub rebalance_ratio: f64,
}

/// What [`settle`] saw.
struct Settled {
    /// How far the count moved.
    bytes: u64,
    /// When it had first moved by a MiB.
    first: Option<Instant>,
    /// When it last moved.
    last: Instant,
    /// Since when the cluster has been settled (without a break).
    at: Instant,
}

impl Settled {
    /// The bytes, the seconds from `from` until settled (`to_last`: until
    /// the last byte arrived), and the rate between the first and the
    /// last arrival.
    fn moved(&self, from: Instant, to_last: bool) -> Moved {
        let until = if to_last { self.last } else { self.at };
        let seconds = until.saturating_duration_since(from).as_secs_f64();
        Moved {
            bytes: self.bytes,
            seconds,
            mb_s: rate(self.bytes, self.first, self.last, seconds),
        }
    }
}

/// How a policy's recovery and rebalance went, before the ratios to fio.
struct Moved {
    bytes: u64,
    seconds: f64,
    mb_s: f64,
}

const IO: usize = 1 << 20;

/// How long [`settle`] looks for a move that may not come.
const MIN_LOOK: Duration = Duration::from_secs(5);

/// Writes `size` bytes to a new file `name` in directory `dir` with fsync; MB/s.
async fn write_file(c: &Client, dir: u64, name: &str, size: u64) -> anyhow::Result<f64> {
    let buf: Vec<u8> = (0..IO).map(|i| (i * 31 + 7) as u8).collect();
    let t = Instant::now();
    let (_, fh) = c.create(&Creds::root(), dir, name, 0o644, true).await?;
    let mut off = 0;
    while off < size {
        let n = (size - off).min(IO as u64) as usize;
        c.write(fh, off, &buf[..n]).await?;
        off += n as u64;
    }
    c.fsync(fh).await?;
    c.release(fh).await?;
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Reads a whole file with a fresh client (cold caches): MB/s from its
/// first byte on, and when that byte arrived (after the open and, with an
/// OSD lost, the failover).
async fn read_file(cfg: &ClientConfig, dir: u64, name: &str) -> anyhow::Result<(f64, Instant)> {
    drop_caches();
    let c = Client::connect(cfg.clone()).await?;
    let ent = c.lookup(&Creds::root(), dir, name).await?;
    let fh = c.open(&Creds::root(), ent.attr.ino, false).await?;
    let (mut off, mut first) = (0u64, None);
    loop {
        let b = c.read(fh, off, IO as u32).await?;
        let at = *first.get_or_insert_with(Instant::now);
        if b.is_empty() {
            c.release(fh).await?;
            let secs = at.elapsed().as_secs_f64().max(1e-3);
            return Ok((off as f64 / secs / 1e6, at));
        }
        off += b.len() as u64;
    }
}

/// The two-copy data whose loss is recovered: `bytes` in files of at
/// most 64 MiB, in directory `dir`.
async fn write_recovered_data(c: &Client, dir: u64, bytes: u64) -> anyhow::Result<()> {
    let per = (64u64 << 20).min(bytes);
    for k in 0..bytes.div_ceil(per) {
        write_file(c, dir, &format!("data{k}"), per).await?;
    }
    Ok(())
}

/// Bytes in use on the OSDs `which` selects, as they last reported.
fn used(s: &ClusterStatus, which: impl Fn(u32) -> bool) -> u64 {
    s.osds.iter().filter(|o| which(o.id)).map(|o| o.used).sum()
}

/// Marks `osd` out, as `tessera osd out` does.
async fn mark_out(cl: &LocalCluster, osd: u32) -> anyhow::Result<()> {
    match cl
        .mds_client(1)?
        .call(Op::SetOsdOut {
            osd,
            out: true,
            force: false,
        })
        .await
    {
        Ok(MdsReply::Done) => Ok(()),
        other => bail!("osd out answered {other:?}"),
    }
}

/// Waits (up to 10 minutes) until `done` holds of the cluster's status
/// and the count `bytes` reads from it (`start` before the change) has
/// not grown for `quiet`, polling every 100 ms. With `must_move` the
/// count must also have grown by a MiB, and a status must have been seen
/// that is not `done` (one read before the MDS saw the change can look
/// settled); without, it looks at least 5 s (several heartbeats) and
/// `quiet` for growth. Returns how far the count grew, when it first had
/// grown by a MiB, and when it last grew.
async fn settle(
    c: &Client,
    (start, mut bytes): (u64, impl FnMut(&ClusterStatus) -> u64),
    done: impl Fn(&ClusterStatus) -> bool,
    quiet: Duration,
    must_move: bool,
) -> anyhow::Result<Settled> {
    let began = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut first, mut last, mut high) = (None, began, start);
    let (mut unsettled, mut settled_since) = (false, None);
    loop {
        let s = c.status().await?;
        let now = bytes(&s);
        // Growth only, counted once a MiB has arrived: a store's own
        // bookkeeping moves its used bytes a little either way.
        if now > high {
            high = now;
            last = Instant::now();
            if first.is_none() && now - start >= 1 << 20 {
                first = Some(last);
            }
        }
        let settled = done(&s);
        unsettled |= !settled;
        if !settled {
            settled_since = None;
        } else if settled_since.is_none() {
            settled_since = Some(Instant::now());
        }
        let moved = if must_move {
            first.is_some() && unsettled
        } else {
            began.elapsed() >= quiet.max(MIN_LOOK)
        };
        if moved && settled && last.elapsed() >= quiet {
            return Ok(Settled {
                bytes: high - start,
                first,
                last,
                at: settled_since.unwrap_or_else(Instant::now),
            });
        }
        if Instant::now() > deadline {
            bail!(
                "not settled after 10 minutes ({} bytes moved): {:?}",
                high - start,
                s.health()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops `victim`, reads `dir/name` with it gone, then marks it out (as
/// an operator would once the read shows it lost), watching recovery —
/// the bytes the other OSDs' stores gain — from the stop until `settled`.
/// Returns the degraded read's MB/s, the seconds from the stop to its
/// first byte, and the recovery.
async fn lose(
    cl: &mut LocalCluster,
    c: &Client,
    (cfg, dir, name): (&ClientConfig, u64, &str),
    victim: u32,
    settled: fn(&ClusterStatus) -> bool,
) -> anyhow::Result<(f64, f64, Moved)> {
    let others = move |s: &ClusterStatus| used(s, |o| o != victim);
    let before = others(&c.status().await?);
    let lost = Instant::now();
    // Settled for three seconds: the OSDs report their used bytes every
    // 300 ms, and a joiner's store counts what a fill wrote only once it
    // has applied it, so the last copies' bytes arrive after HEALTH_OK
    // does (with one second, a run with chains counted 4 MiB of a 16 MiB
    // group's fill; seen 2 s late by hand).
    let quiet = Duration::from_secs(3);
    let watch = settle(c, (before, others), settled, quiet, true);
    let stop = async {
        cl.stop_osd(victim).await.map_err(anyhow::Error::msg)?;
        let read = read_file(cfg, dir, name).await?;
        mark_out(cl, victim).await?;
        anyhow::Ok(read)
    };
    let (watched, (degraded, first_byte)) = tokio::try_join!(watch, stop)?;
    let failover = first_byte.saturating_duration_since(lost).as_secs_f64();
    Ok((degraded, failover, watched.moved(lost, false)))
}

/// Adds an OSD and waits until nothing more arrives on it (its store's
/// growth), `settled` holding; with `must_move`, something must.
async fn rebalance(
    cl: &mut LocalCluster,
    c: &Client,
    size: u64,
    settled: fn(&ClusterStatus) -> bool,
    must_move: bool,
) -> anyhow::Result<Moved> {
    let added = Instant::now();
    let new = cl.add_osd(size).await.map_err(anyhow::Error::msg)?;
    let on_new = move |s: &ClusterStatus| used(s, |o| o == new);
    // Counted from its first report (a new store's own bookkeeping).
    let start = loop {
        let s = c.status().await?;
        if s.osds.iter().any(|o| o.id == new && o.capacity > 0) {
            break on_new(&s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let quiet = Duration::from_secs(3);
    Ok(settle(c, (start, on_new), settled, quiet, must_move)
        .await?
        .moved(added, true))
}

/// The rate of `bytes` moved between `first` and `last`, MB/s (one poll
/// interval added, as the moves are seen at most 100 ms late).
fn rate(bytes: u64, first: Option<Instant>, last: Instant, fallback_secs: f64) -> f64 {
    let secs = first.map_or(fallback_secs, |f| {
        last.saturating_duration_since(f).as_secs_f64() + 0.1
    });
    bytes as f64 / secs.max(0.1) / 1e6
}

/// One policy's report from its measures (fio's ratios are added by [`run_in`]).
fn report(
    namespace: &str,
    w: [f64; 3],
    (healthy, degraded, failover): (f64, f64, f64),
    recovery: Moved,
    rebalance: Moved,
) -> ReplReport {
    ReplReport {
        namespace: namespace.into(),
        write_mb_s: w,
        write_efficiency: [w[1] / w[0] * 2.0, w[2] / w[0] * 3.0],
        read_healthy_mb_s: healthy,
        read_degraded_mb_s: degraded,
        read_ratio: degraded / healthy,
        failover_seconds: failover,
        recovered_bytes: recovery.bytes,
        seconds_to_healthy: recovery.seconds,
        recovery_mb_s: recovery.mb_s,
        recovery_ratio: 0.0,
        recovery_ratio_qd16: 0.0,
        rebalance_bytes: rebalance.bytes,
        rebalance_seconds: rebalance.seconds,
        rebalance_mb_s: rebalance.mb_s,
        rebalance_ratio: 0.0,
    }
}

/// Runs the suite under `dir` (needs root: a loop device for fio).
pub fn run(dir: &Path, p: ReplParams) -> anyhow::Result<ReplSuite> {
    crate::in_scratch(dir, "replication-bench", |work| run_in(work, p))
}

fn run_in(work: &Path, p: ReplParams) -> anyhow::Result<ReplSuite> {
    // fio's sequential write on the same disk.
    let fio = {
        let ld = LoopDev::create(&work.join("fio.img"), 2 << 30)?;
        let job = |iodepth| FioJob {
            name: "write-512k",
            rw: "write",
            bs: "512k",
            iodepth,
            fdatasync: false,
        };
        [
            run_job(ld.dev(), &job(1), p.fio_secs, "2G")?.mb_per_s,
            run_job(ld.dev(), &job(16), p.fio_secs, "2G")?.mb_per_s,
        ]
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    let with_ratios = |mut r: ReplReport| {
        r.recovery_ratio = r.recovery_mb_s / fio[0];
        r.recovery_ratio_qd16 = r.recovery_mb_s / fio[1];
        r.rebalance_ratio = r.rebalance_mb_s / fio[0];
        r
    };
    if p.policies != Policies::Osd {
        let r = rt.block_on(on_mds::measure(&work.join("layouts"), p))?;
        runs.push(with_ratios(r));
    }
    if p.policies != Policies::Mds {
        let r = rt.block_on(on_osds::measure(&work.join("chains"), p))?;
        runs.push(with_ratios(r));
    }
    Ok(ReplSuite {
        fio_write_mb_s: fio[0],
        fio_write_qd16_mb_s: fio[1],
        runs,
    })
}

/// Prints the suite with its targets.
pub fn print(s: &ReplSuite, p: ReplParams) {
    let mark = |ok: bool| if ok { "met" } else { "NOT MET" };
    println!(
        "fio sequential write on the same disk (512 KiB): depth 1 {:.1} MB/s, depth 16 {:.1} MB/s",
        s.fio_write_mb_s, s.fio_write_qd16_mb_s
    );
    for r in &s.runs {
        let policy = if r.namespace == "osd" {
            "replica chains (namespace on the OSDs)"
        } else {
            "copies in layouts (namespace in the MDS)"
        };
        println!(
            "\n{policy}: clusters of 4 OSDs on one disk ({} MiB per write test, {} MiB of two-copy data lost)",
            p.write >> 20,
            p.recover >> 20
        );
        println!(
            "  write MB/s   R=1 {:>8.1}   R=2 {:>8.1}   R=3 {:>8.1}",
            r.write_mb_s[0], r.write_mb_s[1], r.write_mb_s[2]
        );
        for (i, eff) in r.write_efficiency.iter().enumerate() {
            println!(
                "  R={} efficiency (MB/s ratio × R, 1.0 = ideal on one disk): {eff:.2}  target ≥ 0.9: {}",
                i + 2,
                mark(*eff >= 0.9)
            );
        }
        println!(
            "  read MB/s    healthy {:>8.1}   degraded {:>8.1}   ratio {:.2}  target ≥ 0.8: {}",
            r.read_healthy_mb_s,
            r.read_degraded_mb_s,
            r.read_ratio,
            mark(r.read_ratio >= 0.8)
        );
        println!(
            "  failover     first byte read {:.2} s after the OSD stopped",
            r.failover_seconds
        );
        println!(
            "  recovery     {} MiB copied, HEALTH_OK {:.1} s after the loss, copying at {:.1} MB/s; \
             ÷ fio {:.2} (depth 16: {:.2})  target ≥ 0.3: {}",
            r.recovered_bytes >> 20,
            r.seconds_to_healthy,
            r.recovery_mb_s,
            r.recovery_ratio,
            r.recovery_ratio_qd16,
            mark(r.recovery_ratio >= 0.3)
        );
        if r.rebalance_bytes < 1 << 20 {
            println!("  rebalance    nothing moved to an added OSD (placement kept every group)");
        } else {
            println!(
                "  rebalance    {} MiB moved to an added OSD in {:.1} s, at {:.1} MB/s; ÷ fio {:.2}",
                r.rebalance_bytes >> 20,
                r.rebalance_seconds,
                r.rebalance_mb_s,
                r.rebalance_ratio
            );
        }
    }
}
