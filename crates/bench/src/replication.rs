//! `tessera bench replication`: what copies cost and how fast they come
//! back, in one run on one cluster (four OSDs in this process, file-backed
//! stores on the same disk) next to fio on a loop device over the same disk:
//!
//! - sequential write MB/s into directories of 1, 2 and 3 copies (every
//!   copy lands on the same disk here, so the ideal for R copies is 1/R of
//!   R = 1; the efficiency is `(MB/s at R ÷ MB/s at 1) × R`, target ≥ 0.9);
//! - cold sequential read of a two-copy file, healthy and with the OSD of
//!   its preferred copy stopped (target ≥ 0.8);
//! - recovery: an OSD holding a quarter of 1 GiB of two-copy data stopped
//!   and marked out at once; the time until `HEALTH_OK` and the copying
//!   rate against fio's sequential write of the same disk (512 KiB, depth
//!   1 — one stream, as recovery writes each copy — target ≥ 0.3; depth 16
//!   reported too).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::{FormatOptions, MdsConfig};
use proto::layout::LayoutSpec;
use proto::mds::{ClusterStatus, Creds, MdsReply, Op, ROOT_INO};
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
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReplReport {
    /// Sequential write MB/s with 1, 2 and 3 copies.
    pub write_mb_s: [f64; 3],
    /// `(MB/s at R ÷ MB/s at 1) × R` for R = 2, 3 (1.0 = ideal on one disk).
    pub write_efficiency: [f64; 2],
    /// Cold read MB/s of a two-copy file, healthy.
    pub read_healthy_mb_s: f64,
    /// The same with the OSD of its preferred copy stopped.
    pub read_degraded_mb_s: f64,
    /// Degraded ÷ healthy.
    pub read_ratio: f64,
    /// Bytes recovery copied.
    pub recovered_bytes: u64,
    /// Seconds from the OSD's loss to HEALTH_OK.
    pub seconds_to_healthy: f64,
    /// Recovery's copying rate (bytes copied ÷ time from the first byte
    /// copied to HEALTH_OK), MB/s.
    pub recovery_mb_s: f64,
    /// fio sequential write, 512 KiB at depth 1 (one stream, as recovery
    /// writes each copy), on a loop device over the same disk, MB/s.
    pub fio_write_mb_s: f64,
    /// Recovery ÷ fio at depth 1 (the target's ratio).
    pub recovery_ratio: f64,
    /// fio sequential write, 512 KiB at depth 16, MB/s.
    pub fio_write_qd16_mb_s: f64,
    /// Recovery ÷ fio at depth 16.
    pub recovery_ratio_qd16: f64,
}

const IO: usize = 1 << 20;

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

/// Reads a whole file with a fresh client (cold caches); MB/s.
async fn read_file(cfg: &ClientConfig, dir: u64, name: &str) -> anyhow::Result<f64> {
    drop_caches();
    let c = Client::connect(cfg.clone()).await?;
    let t = Instant::now();
    let ent = c.lookup(&Creds::root(), dir, name).await?;
    let fh = c.open(&Creds::root(), ent.attr.ino, false).await?;
    let mut off = 0u64;
    loop {
        let b = c.read(fh, off, IO as u32).await?;
        if b.is_empty() {
            break;
        }
        off += b.len() as u64;
    }
    c.release(fh).await?;
    Ok(off as f64 / t.elapsed().as_secs_f64() / 1e6)
}

async fn status(c: &Client) -> anyhow::Result<ClusterStatus> {
    Ok(c.status().await?)
}

/// Runs the suite under `dir` (needs root: a loop device for fio).
pub fn run(dir: &Path, p: ReplParams) -> anyhow::Result<ReplReport> {
    let work = dir.join(format!("replication-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let res = run_in(&work, p);
    let _ = std::fs::remove_dir_all(&work);
    res
}

fn run_in(work: &Path, p: ReplParams) -> anyhow::Result<ReplReport> {
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
            run_job(ld.dev(), &job(1), 5, "2G")?.mb_per_s,
            run_job(ld.dev(), &job(16), 5, "2G")?.mb_per_s,
        ]
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(cluster_part(work, p, fio))
}

async fn cluster_part(work: &Path, p: ReplParams, fio: [f64; 2]) -> anyhow::Result<ReplReport> {
    let root_dir = work.join("cluster");
    // Settings before format (format keeps an existing mds.toml): quick
    // failure detection, no recovery throttle, frequent passes.
    let mds_dir = root_dir.join("mds");
    std::fs::create_dir_all(&mds_dir)?;
    let cfg = MdsConfig {
        heartbeat_ms: 300,
        down_after_ms: 1500,
        recovery_interval_ms: 200,
        recovery_mib_per_sec: 0,
        ..MdsConfig::default()
    };
    std::fs::write(mds_dir.join("mds.toml"), toml::to_string_pretty(&cfg)?)?;
    let opts = FormatOptions::new("replbench", LayoutSpec::default());
    let osd_size = (p.write * 6 + p.recover * 2) / 4 + (1 << 30);
    let mut cl = LocalCluster::start(&root_dir, 4, osd_size, &opts)
        .await
        .context("cannot start the cluster")?;
    let ccfg = ClientConfig::new(&cl.mds_addr(), "replbench", cl.admin()?);
    let c = Client::connect(ccfg.clone()).await?;
    let mut dirs = [0u64; 3];
    for r in 1..=3u8 {
        let d = c
            .mkdir(&Creds::root(), ROOT_INO, &format!("r{r}"), 0o755)
            .await?;
        let spec = LayoutSpec {
            replicas: r,
            ..LayoutSpec::default()
        };
        c.set_layout(&Creds::root(), d.attr.ino, spec).await?;
        dirs[r as usize - 1] = d.attr.ino;
    }
    // Writes: 1, 2, 3 copies (and 1 again, to see drift).
    let mut w = [0f64; 3];
    for (i, &d) in dirs.iter().enumerate() {
        w[i] = write_file(&c, d, "big", p.write).await?;
    }
    let w1b = write_file(&c, dirs[0], "big2", p.write).await?;
    w[0] = (w[0] + w1b) / 2.0;
    // The data whose loss is recovered: two copies, many files.
    let per = 64u64 << 20;
    let n = p.recover.div_ceil(per);
    for k in 0..n {
        write_file(&c, dirs[1], &format!("data{k}"), per).await?;
    }
    // Reads of a two-copy file, healthy then with its preferred copy's OSD stopped.
    let healthy = read_file(&ccfg, dirs[1], "big").await?;
    let ent = c.lookup(&Creds::root(), dirs[1], "big").await?;
    let layout = c
        .layout(&Creds::root(), ent.attr.ino)
        .await?
        .context("no layout")?;
    let victim = *layout
        .homes
        .first()
        .and_then(|h| h.stripes.first())
        .and_then(|s| s.fresh.first())
        .context("no recorded copy")?;
    let before = status(&c).await?.redundancy.bytes_recovered;
    let lost = Instant::now();
    cl.stop_osd(victim).await.map_err(anyhow::Error::msg)?;
    let degraded = read_file(&ccfg, dirs[1], "big").await?;
    // The loss: marked out at once (the operator's `tessera osd out`).
    let m = cl.mds_client(1)?;
    match m
        .call(Op::SetOsdOut {
            osd: victim,
            out: true,
            force: false,
        })
        .await
    {
        Ok(MdsReply::Done) => {}
        other => bail!("osd out answered {other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut first_copy: Option<Instant> = None;
    let s = loop {
        let s = status(&c).await?;
        if first_copy.is_none() && s.redundancy.bytes_recovered > before {
            first_copy = Some(Instant::now());
        }
        if s.health().level == "HEALTH_OK" && s.redundancy.checked && s.redundancy.objects_left == 0
        {
            break s;
        }
        if Instant::now() > deadline {
            bail!("not HEALTH_OK after 30 minutes: {:?}", s.health());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let secs = lost.elapsed().as_secs_f64();
    let copied = s.redundancy.bytes_recovered - before;
    // The copying rate: from the first byte copied (status is polled every
    // 100 ms) to HEALTH_OK; the time before it is failure detection.
    let copying = first_copy.map_or(secs, |t| t.elapsed().as_secs_f64() + 0.1);
    let rate = copied as f64 / copying / 1e6;
    cl.stop().await.map_err(anyhow::Error::msg)?;
    Ok(ReplReport {
        write_mb_s: w,
        write_efficiency: [w[1] / w[0] * 2.0, w[2] / w[0] * 3.0],
        read_healthy_mb_s: healthy,
        read_degraded_mb_s: degraded,
        read_ratio: degraded / healthy,
        recovered_bytes: copied,
        seconds_to_healthy: secs,
        recovery_mb_s: rate,
        fio_write_mb_s: fio[0],
        recovery_ratio: rate / fio[0],
        fio_write_qd16_mb_s: fio[1],
        recovery_ratio_qd16: rate / fio[1],
    })
}

/// Prints the report with its targets.
pub fn print(r: &ReplReport, p: ReplParams) {
    let mark = |ok: bool| if ok { "met" } else { "NOT MET" };
    println!(
        "replication, one cluster of 4 OSDs on one disk ({} MiB per write test, {} MiB of two-copy data lost)",
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
        "  recovery     {} MiB copied, HEALTH_OK {:.1} s after the loss, copying at {:.1} MB/s",
        r.recovered_bytes >> 20,
        r.seconds_to_healthy,
        r.recovery_mb_s
    );
    println!(
        "  fio sequential write (512 KiB, depth 1) {:.1} MB/s; recovery ÷ fio {:.2}  target ≥ 0.3: {}",
        r.fio_write_mb_s,
        r.recovery_ratio,
        mark(r.recovery_ratio >= 0.3)
    );
    println!(
        "  fio sequential write (512 KiB, depth 16) {:.1} MB/s; recovery ÷ fio {:.2}",
        r.fio_write_qd16_mb_s, r.recovery_ratio_qd16
    );
}
