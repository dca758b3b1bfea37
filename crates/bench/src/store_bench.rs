//! `tessera bench store`: the OBFS object benchmark. On one loop device, in
//! one run: fio's ceilings on the raw device, then for each target (the store
//! under both policies, ext4 and XFS flat directories) age the device to 60 %
//! with random creates and deletes, then time create-write, read (cold),
//! rewrite and delete of the object mix with 1 and with 16 workers, and a
//! durable 4 KiB object create. Reports every figure and the ratios.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use store::device::{Device, FileDevice};
use store::{FormatOptions, OpenOptions, Policy, Store};

use crate::fio::{self, JOBS};
use crate::loopdev::{LoopDev, Mount, drop_caches};
use crate::mix;
use crate::stats::PhaseResult;
use crate::target::{FlatDirTarget, ObjectTarget, StoreTarget};

/// Benchmark parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Loop device size in bytes.
    pub device_len: u64,
    /// Objects per timed phase.
    pub objects: usize,
    /// Worker counts to run each phase with.
    pub workers: Vec<usize>,
    /// Fraction of the device filled before timing.
    pub age_to: f64,
    /// Seconds per fio job.
    pub fio_seconds: u32,
    /// Seed of object sizes, contents and aging.
    pub seed: u64,
    /// Directory for the loop device's backing file and the outputs.
    pub dir: PathBuf,
}

impl Config {
    /// The `--quick` settings: about two minutes here.
    pub fn quick(dir: PathBuf) -> Self {
        Config {
            device_len: 2 << 30,
            objects: 320,
            workers: vec![1, 16],
            age_to: 0.6,
            fio_seconds: 3,
            seed: 42,
            dir,
        }
    }
    /// The full settings.
    pub fn full(dir: PathBuf) -> Self {
        Config {
            device_len: 8 << 30,
            objects: 800,
            fio_seconds: 10,
            ..Self::quick(dir)
        }
    }
}

/// One comparison line.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// What is compared.
    pub what: String,
    /// Tessera's figure.
    pub tessera: f64,
    /// The baseline's figure.
    pub baseline: f64,
    /// The baseline's name.
    pub baseline_name: String,
    /// tessera / baseline (for latencies: baseline / tessera, so > 1 is better).
    pub ratio: f64,
    /// The target for this ratio, if any.
    pub target: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Parameters.
    pub config: Config,
    /// Machine description.
    pub machine: String,
    /// fio ceilings.
    pub fio: Vec<PhaseResult>,
    /// Every timed phase on every target.
    pub phases: Vec<PhaseResult>,
    /// The ratios.
    pub ratios: Vec<Ratio>,
    /// Baselines that could not run, and why.
    pub skipped: Vec<String>,
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs, Linux {}, loop device with direct I/O over a file",
        kernel.trim()
    )
}

/// Runs `op` on every id with `workers` threads; returns per-op latencies and wall time.
fn timed<T: ObjectTarget + ?Sized>(
    t: &T,
    ids: &[u64],
    workers: usize,
    op: &(dyn Fn(&T, u64) -> anyhow::Result<u64> + Sync),
) -> anyhow::Result<(Vec<f64>, u64, f64)> {
    crate::stats::run_workers(workers, ids, |id| op(t, id))
}

/// Fills the target to `age_to` of `capacity` with random creates and deletes.
fn age(t: &dyn ObjectTarget, cfg: &Config, capacity: u64, next_id: &mut u64) -> anyhow::Result<()> {
    let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0xA9E);
    let mut live: Vec<u64> = Vec::new();
    let mut used = 0u64;
    let goal = (capacity as f64 * cfg.age_to) as u64;
    while used < goal {
        if !live.is_empty() && rng.random_bool(0.3) {
            let i = rng.random_range(0..live.len());
            let id = live.swap_remove(i);
            t.delete(id)?;
            used -= mix::size_of(id, cfg.seed) as u64;
        } else {
            let id = *next_id;
            *next_id += 1;
            t.create(id, &mix::contents(id, cfg.seed, 0))?;
            used += mix::size_of(id, cfg.seed) as u64;
            live.push(id);
        }
    }
    Ok(())
}

fn run_target(
    t: &dyn ObjectTarget,
    cfg: &Config,
    capacity: u64,
    out: &mut Vec<PhaseResult>,
) -> anyhow::Result<()> {
    let name = t.name();
    let seed = cfg.seed;
    let mut next_id = 0x100000u64;
    eprintln!("  {name}: aging to {:.0} %", cfg.age_to * 100.0);
    age(t, cfg, capacity, &mut next_id)?;
    for &w in &cfg.workers {
        let ids: Vec<u64> = (next_id..next_id + cfg.objects as u64).collect();
        next_id += cfg.objects as u64;
        eprintln!("  {name}: {w} worker(s)");
        // Contents are made before the clock starts: generating them is not
        // what is measured, and it would dilute every ratio toward 1.
        let first: std::collections::HashMap<u64, Vec<u8>> = ids
            .iter()
            .map(|&id| (id, mix::contents(id, seed, 1)))
            .collect();
        let second: std::collections::HashMap<u64, Vec<u8>> = ids
            .iter()
            .map(|&id| (id, mix::contents(id, seed, 2)))
            .collect();
        let (lat, bytes, secs) = timed(t, &ids, w, &|t, id| {
            let d = &first[&id];
            t.create(id, d)?;
            Ok(d.len() as u64)
        })?;
        out.push(PhaseResult::from_latencies(
            &name,
            "create-write",
            w,
            lat,
            bytes,
            secs,
        ));
        t.cold();
        let mut shuffled = ids.clone();
        shuffled.shuffle(&mut SmallRng::seed_from_u64(seed));
        let (lat, bytes, secs) = timed(t, &shuffled, w, &|t, id| {
            let want = mix::size_of(id, seed);
            let got = t.read(id, want)?;
            if got.len() != want {
                bail!(
                    "{}: object {id:#x} read {} bytes, expected {want}",
                    t.name(),
                    got.len()
                );
            }
            Ok(got.len() as u64)
        })?;
        out.push(PhaseResult::from_latencies(
            &name, "read", w, lat, bytes, secs,
        ));
        let (lat, bytes, secs) = timed(t, &ids, w, &|t, id| {
            let d = &second[&id];
            t.rewrite(id, d)?;
            Ok(d.len() as u64)
        })?;
        out.push(PhaseResult::from_latencies(
            &name, "rewrite", w, lat, bytes, secs,
        ));
        let (lat, _, secs) = timed(t, &ids, w, &|t, id| {
            t.delete(id)?;
            Ok(0)
        })?;
        out.push(PhaseResult::from_latencies(
            &name, "delete", w, lat, 0, secs,
        ));
    }
    // Durable 4 KiB object creates, one writer.
    let ids: Vec<u64> = (next_id..next_id + 300).collect();
    let small = vec![0x5Au8; 4096];
    let (lat, bytes, secs) = timed(t, &ids, 1, &|t, id| {
        t.create(id, &small)?;
        Ok(4096)
    })?;
    out.push(PhaseResult::from_latencies(
        &name,
        "create-4k",
        1,
        lat,
        bytes,
        secs,
    ));
    Ok(())
}

fn has(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the whole benchmark.
pub fn run(cfg: &Config) -> anyhow::Result<Report> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "bench store needs root: it attaches a loop device and makes and mounts ext4 and XFS on it"
        );
    }
    std::fs::create_dir_all(&cfg.dir)?;
    let mut skipped = Vec::new();
    let lo = LoopDev::create(&cfg.dir.join("bench-device.img"), cfg.device_len)
        .context("setting up the loop device")?;
    eprintln!(
        "device {} ({} MiB, direct I/O)",
        lo.dev(),
        cfg.device_len >> 20
    );

    let mut fio_results = Vec::new();
    if has("fio") {
        for job in &JOBS {
            eprintln!("  fio {}", job.name);
            fio_results.push(fio::run_job(lo.dev(), job, cfg.fio_seconds, "1G")?);
        }
    } else {
        skipped.push("fio (not installed: apt-get install fio)".into());
    }

    let mut phases = Vec::new();
    for policy in [Policy::Extent, Policy::Region] {
        let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&lo.path)?);
        store::format(
            dev.clone(),
            &FormatOptions {
                policy,
                force: true,
                ..FormatOptions::default()
            },
        )?;
        let s = Arc::new(Store::open(dev, &OpenOptions::default())?);
        let capacity = s.label().data_len;
        let t = StoreTarget { store: s.clone() };
        run_target(&t, cfg, capacity, &mut phases)?;
        drop(t);
        if let Ok(s) = Arc::try_unwrap(s) {
            s.close()?;
        }
    }
    for (fs, tool) in [("ext4", "mkfs.ext4"), ("xfs", "mkfs.xfs")] {
        if !has(tool) {
            skipped.push(format!("{fs} ({tool} not installed)"));
            continue;
        }
        let mnt = Mount::make(fs, lo.dev(), &cfg.dir.join(format!("mnt-{fs}")))?;
        let dir = mnt.dir.join("objects");
        std::fs::create_dir_all(&dir)?;
        let capacity = fs_capacity(&mnt.dir)?;
        let t = FlatDirTarget {
            label: fs.into(),
            dir,
        };
        run_target(&t, cfg, capacity, &mut phases)?;
        drop(mnt);
    }
    drop_caches();
    let ratios = ratios(&phases, &fio_results);
    Ok(Report {
        config: cfg.clone(),
        machine: machine(),
        fio: fio_results,
        phases,
        ratios,
        skipped,
    })
}

fn fs_capacity(dir: &Path) -> anyhow::Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(st.f_blocks * st.f_frsize)
}

fn find<'a>(p: &'a [PhaseResult], target: &str, phase: &str, w: usize) -> Option<&'a PhaseResult> {
    p.iter()
        .find(|r| r.target == target && r.phase == phase && r.workers == w)
}

/// Tessera (the better policy) against the better of ext4/XFS, and against fio.
pub fn ratios(p: &[PhaseResult], fio: &[PhaseResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let best = |names: &[&str], phase: &str, w: usize| -> Option<(String, f64)> {
        names
            .iter()
            .filter_map(|n| find(p, n, phase, w).map(|r| (n.to_string(), r.mb_per_s)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let targets: &[(&str, usize, Option<f64>)] = &[
        ("create-write", 1, Some(3.0)),
        ("create-write", 16, None),
        ("read", 1, Some(1.0)),
        ("read", 16, Some(1.0)),
        ("rewrite", 1, Some(2.0)),
        ("rewrite", 16, None),
        ("delete", 1, None),
        ("delete", 16, None),
    ];
    for &(phase, w, goal) in targets {
        let tess = best(&["tessera-extent", "tessera-region"], phase, w);
        let base = best(&["ext4", "xfs"], phase, w);
        if let (Some((tn, tv)), Some((bn, bv))) = (tess, base) {
            let (tv, bv) = if phase == "delete" {
                let ops = |n: &str| find(p, n, phase, w).map_or(0.0, |r| r.ops_per_s);
                (ops(&tn), ops(&bn))
            } else {
                (tv, bv)
            };
            out.push(Ratio {
                what: format!(
                    "{phase} x{w} ({tn}, {})",
                    if phase == "delete" { "ops/s" } else { "MB/s" }
                ),
                tessera: tv,
                baseline: bv,
                baseline_name: bn,
                ratio: tv / bv.max(1e-9),
                target: goal,
            });
        }
    }
    let fio_of = |name: &str| fio.iter().find(|r| r.phase == name);
    if let (Some((tn, tv)), Some(f)) = (
        best(&["tessera-extent", "tessera-region"], "create-write", 16),
        fio_of("write-512k-qd16"),
    ) {
        out.push(Ratio {
            what: format!("create-write x16 vs raw device ({tn}, MB/s)"),
            tessera: tv,
            baseline: f.mb_per_s,
            baseline_name: "fio write 512k qd16".into(),
            ratio: tv / f.mb_per_s.max(1e-9),
            target: Some(0.8),
        });
    }
    if let (Some((tn, tv)), Some(f)) = (
        best(&["tessera-extent", "tessera-region"], "read", 16),
        fio_of("randread-512k-qd16"),
    ) {
        out.push(Ratio {
            what: format!("read x16 vs raw device ({tn}, MB/s)"),
            tessera: tv,
            baseline: f.mb_per_s,
            baseline_name: "fio randread 512k qd16".into(),
            ratio: tv / f.mb_per_s.max(1e-9),
            target: Some(0.9),
        });
    }
    let small = ["tessera-extent", "tessera-region"]
        .iter()
        .filter_map(|n| find(p, n, "create-4k", 1))
        .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us));
    if let (Some(s), Some(f)) = (small, fio_of("write-4k-fdatasync")) {
        out.push(Ratio {
            what: format!(
                "4 KiB durable create p50 latency ({}, µs; ratio = fio/tessera)",
                s.target
            ),
            tessera: s.p50_us,
            baseline: f.p50_us,
            baseline_name: "fio 4k write+fdatasync".into(),
            ratio: f.p50_us / s.p50_us.max(1e-9),
            target: Some(0.5),
        });
    }
    out
}

/// Prints the report as tables.
pub fn print(r: &Report) {
    println!("machine: {}", r.machine);
    println!(
        "\n{:<16} {:<20} {:>3} {:>8} {:>9} {:>10} {:>10} {:>10}",
        "target", "phase", "w", "ops", "MB/s", "ops/s", "p50 µs", "p99 µs"
    );
    for x in r.fio.iter().chain(&r.phases) {
        println!(
            "{:<16} {:<20} {:>3} {:>8} {:>9.1} {:>10.1} {:>10.0} {:>10.0}",
            x.target, x.phase, x.workers, x.ops, x.mb_per_s, x.ops_per_s, x.p50_us, x.p99_us
        );
    }
    println!("\nratios (> 1: Tessera better)");
    for q in &r.ratios {
        let goal = q.target.map_or(String::new(), |g| {
            format!(
                "  target ≥ {g}: {}",
                if q.ratio >= g { "met" } else { "NOT met" }
            )
        });
        println!(
            "  {:<62} {:>9.1} vs {:>9.1} ({}) = {:.2}x{goal}",
            q.what, q.tessera, q.baseline, q.baseline_name, q.ratio
        );
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
}
