//! `tessera bench meta`: mdtest-style metadata throughput. Create, stat,
//! readdir and unlink from 1, 4 and 16 client tasks (each in its own
//! directory) against the MDS over 127.0.0.1 (every change durable before
//! it is acknowledged), and the same operations on a local directory of the
//! host file system on the same disk, in the same run; ratios printed.

use std::path::Path;
use std::time::Instant;

use local::{LocalMds, LocalOsd, osd_dir, provision_osd};
use mds::FormatOptions;
use net::MdsClient;
use proto::layout::LayoutSpec;
use proto::mds::{MdsReply, Op, ROOT_INO};
use serde::Serialize;

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct MetaResult {
    /// create, stat, readdir or unlink.
    pub op: String,
    /// Client tasks.
    pub tasks: usize,
    /// Tessera operations per second.
    pub tessera_ops: f64,
    /// Local file system operations per second.
    pub local_ops: f64,
}

impl MetaResult {
    /// Tessera ÷ local.
    pub fn ratio(&self) -> f64 {
        self.tessera_ops / self.local_ops.max(1e-9)
    }
}

const CLUSTER: &str = "bench";

/// Where the bench's MDS listens and who it connects as.
#[derive(Clone)]
pub(crate) struct Target {
    addr: String,
    id: net::auth::Identity,
}

impl Target {
    fn client(&self) -> MdsClient {
        MdsClient::new(&self.addr, CLUSTER, self.id.clone(), 1)
    }
}

async fn tessera_phase(
    addr: &Target,
    tasks: usize,
    per: usize,
    dirs: &[u64],
    op: &str,
) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut js = Vec::new();
    for (t, &d) in dirs.iter().enumerate().take(tasks) {
        let addr = addr.clone();
        let op = op.to_string();
        js.push(tokio::spawn(async move {
            let mut c = addr.client();
            // Raw MDS rates: prefetch is a client-cache optimisation measured elsewhere.
            c.prefetch = 0;
            if op == "readdir" {
                // the whole directory (`per` entries) in pages, with attributes
                c.readdir_all(d, true).await?;
                return Ok(());
            }
            for i in 0..per {
                let name = format!("t{t}-f{i}");
                match op.as_str() {
                    "create" => {
                        c.call(Op::Create {
                            parent: d,
                            name,
                            mode: 0o644,
                            exclusive: true,
                        })
                        .await?
                    }
                    "stat" => c.call(Op::Lookup { parent: d, name }).await?,
                    _ => c.call(Op::Unlink { parent: d, name }).await?,
                };
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for j in js {
        j.await??;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok((tasks * per) as f64 / secs)
}

fn local_phase(root: &Path, tasks: usize, per: usize, op: &str) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..tasks)
            .map(|t| {
                let d = root.join(format!("dir{t}"));
                let op = op.to_string();
                s.spawn(move || -> anyhow::Result<()> {
                    if op == "readdir" {
                        for e in std::fs::read_dir(&d)? {
                            std::hint::black_box(e?.metadata()?);
                        }
                        return Ok(());
                    }
                    for i in 0..per {
                        let p = d.join(format!("t{t}-f{i}"));
                        match op.as_str() {
                            "create" => {
                                std::fs::OpenOptions::new()
                                    .write(true)
                                    .create_new(true)
                                    .open(&p)?;
                            }
                            "stat" => {
                                std::hint::black_box(std::fs::metadata(&p)?);
                            }
                            _ => std::fs::remove_file(&p)?,
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    Ok((tasks * per) as f64 / secs)
}

/// Formats and starts an MDS and one OSD under `work`; returns them and
/// the MDS address once the OSD is up.
/// A single MDS and one OSD under `work` (`mds/`, `osd-0/`), the OSD
/// registered.
pub(crate) async fn start_cluster(work: &Path) -> anyhow::Result<(LocalMds, LocalOsd, Target)> {
    let mds_dir = work.join("mds");
    mds::service::format(
        &mds_dir,
        &FormatOptions::new(CLUSTER, LayoutSpec::default()),
    )?;
    provision_osd(
        &osd_dir(work, 0),
        0,
        CLUSTER,
        64 << 20,
        &mds_dir.join("keys"),
    )
    .map_err(anyhow::Error::msg)?;
    let m = LocalMds::start(&mds_dir, "127.0.0.1:0")
        .await
        .map_err(anyhow::Error::msg)?;
    let addr = m.addr.to_string();
    let o = LocalOsd::start(&osd_dir(work, 0), "127.0.0.1:0", Some(addr.clone()))
        .await
        .map_err(anyhow::Error::msg)?;
    let addr = Target {
        addr,
        id: m.admin.clone(),
    };
    let c = addr.client();
    for _ in 0..400 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().any(|o| o.up)
        {
            return Ok((m, o, addr));
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    anyhow::bail!("the OSD did not register with the MDS")
}

/// Runs the suite with `per_task` files per task, under `dir`.
pub fn run(dir: &Path, per_task: usize) -> anyhow::Result<Vec<MetaResult>> {
    std::fs::create_dir_all(dir)?;
    let work = tempfile_dir(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let res = rt.block_on(async {
        let (m, o, addr) = start_cluster(&work).await?;
        let c = addr.client();
        let mut out = Vec::new();
        for tasks in [1usize, 4, 16] {
            let per = (per_task * 4 / tasks).max(50);
            let mut dirs = Vec::new();
            let local = work.join(format!("local-{tasks}"));
            for t in 0..tasks {
                let MdsReply::Found(f) = c
                    .call(Op::Mkdir {
                        parent: ROOT_INO,
                        name: format!("run{tasks}-{t}"),
                        mode: 0o755,
                    })
                    .await?
                else {
                    anyhow::bail!("mkdir answered something else")
                };
                dirs.push(f.entry.attr.ino);
                std::fs::create_dir_all(local.join(format!("dir{t}")))?;
            }
            for op in ["create", "stat", "readdir", "unlink"] {
                let te = tessera_phase(&addr, tasks, per, &dirs, op).await?;
                let l = local.clone();
                let op2 = op.to_string();
                let lo = tokio::task::spawn_blocking(move || local_phase(&l, tasks, per, &op2))
                    .await??;
                out.push(MetaResult {
                    op: op.into(),
                    tasks,
                    tessera_ops: te,
                    local_ops: lo,
                });
            }
        }
        o.stop().await.map_err(anyhow::Error::msg)?;
        m.stop().await;
        Ok::<_, anyhow::Error>(out)
    });
    let _ = std::fs::remove_dir_all(&work);
    res
}

fn tempfile_dir(parent: &Path) -> anyhow::Result<std::path::PathBuf> {
    let p = parent.join(format!("meta-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

/// Prints a table with ratios.
pub fn print(rs: &[MetaResult]) {
    println!(
        "metadata operations per second (Tessera MDS over 127.0.0.1, durable; local FS directory on the same disk)"
    );
    println!(
        "{:<8} {:>5} {:>12} {:>12} {:>8}",
        "op", "tasks", "tessera/s", "local/s", "ratio"
    );
    for r in rs {
        println!(
            "{:<8} {:>5} {:>12.0} {:>12.0} {:>8.2}",
            r.op,
            r.tasks,
            r.tessera_ops,
            r.local_ops,
            r.ratio()
        );
    }
}

/// What one big directory looks like to clients.
#[derive(Debug, Clone, Serialize)]
pub struct BigDirResult {
    /// Entries in the big directory.
    pub entries: u64,
    /// Creates per second while filling it (16 tasks).
    pub fill_creates_per_sec: f64,
    /// Latency of one 1,000-entry readdir page at the start, middle and end (ms).
    pub page_ms: [f64; 3],
    /// Whole-directory readdir, entries per second.
    pub readdir_entries_per_sec: f64,
    /// Lookup latency in the big directory, p50 and p99 (µs).
    pub lookup_us: [f64; 2],
    /// The same in a 1,000-entry directory, same run (µs).
    pub small_lookup_us: [f64; 2],
    /// Resident memory the MDS process grew by per inode looked up after a
    /// restart (KV page cache, bounded by `cache_mib`), in bytes.
    pub bytes_per_cached_inode: f64,
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<u64>().ok())
            })
        })
        .unwrap_or(0)
        * 1024
}

/// The median and 99th percentile of `v`.
pub(crate) fn percentiles(mut v: Vec<f64>) -> [f64; 2] {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    [at(0.5), at(0.99)]
}

async fn lookup_latencies(
    c: &MdsClient,
    dir: u64,
    n: u64,
    samples: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(samples);
    let step = (n / samples as u64).max(1);
    for k in 0..samples as u64 {
        let i = (k * step + k * 7919 % step.max(1)) % n;
        let t = Instant::now();
        c.call(Op::Lookup {
            parent: dir,
            name: format!("e{i:07}"),
        })
        .await?;
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(out)
}

async fn fill(addr: &Target, dir: u64, n: u64) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let tasks = 16u64;
    let mut js = Vec::new();
    for t in 0..tasks {
        let addr = addr.clone();
        js.push(tokio::spawn(async move {
            let mut c = addr.client();
            c.prefetch = 0;
            let mut i = t;
            while i < n {
                c.call(Op::Create {
                    parent: dir,
                    name: format!("e{i:07}"),
                    mode: 0o644,
                    exclusive: true,
                })
                .await?;
                i += tasks;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for j in js {
        j.await??;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// Fills one directory with `n` entries and measures paginated readdir,
/// lookups (against a 1,000-entry directory in the same run) and the MDS's
/// memory per cached inode.
pub fn big_dir(dir: &Path, n: u64) -> anyhow::Result<BigDirResult> {
    std::fs::create_dir_all(dir)?;
    let work = tempfile_dir(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Measured on a runtime worker, not the thread blocked in `block_on`
    // (waking that one per reply would add ~150 µs to every latency).
    let work2 = work.clone();
    let res = rt.block_on(async move {
        tokio::spawn(async move { big_dir_on(&work2, n).await })
            .await
            .map_err(|e| anyhow::anyhow!("benchmark task: {e}"))?
    });
    let _ = std::fs::remove_dir_all(&work);
    res
}

async fn big_dir_on(work: &Path, n: u64) -> anyhow::Result<BigDirResult> {
    let (m, o, addr) = start_cluster(work).await?;
    let mut c = addr.client();
    c.prefetch = 0;
    let mk = |name: &'static str| Op::Mkdir {
        parent: ROOT_INO,
        name: name.into(),
        mode: 0o755,
    };
    let ino = |r: MdsReply| match r {
        MdsReply::Found(f) => Ok(f.entry.attr.ino),
        r => Err(anyhow::anyhow!("mkdir answered {r:?}")),
    };
    let big = ino(c.call(mk("big")).await?)?;
    let small = ino(c.call(mk("small")).await?)?;
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(format!("creating {n} entries in one directory"));
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    let fill_rate = fill(&addr, big, n).await?;
    fill(&addr, small, 1000).await?;
    pb.finish_and_clear();
    // Restart the MDS so its cache starts cold, then look everything up.
    let mds_dir = work.join("mds");
    let listen = addr.addr.clone();
    m.stop().await;
    let m = LocalMds::start(&mds_dir, &listen)
        .await
        .map_err(anyhow::Error::msg)?;
    let rss0 = rss_bytes();
    let mut pages = [0.0; 3];
    let t0 = Instant::now();
    let mut seen = 0u64;
    let mut after: Option<String> = None;
    let marks = [0, n / 2 / 1000, (n.saturating_sub(1)) / 1000];
    let mut page = 0u64;
    loop {
        let t = Instant::now();
        let MdsReply::Dir { entries, more } = c
            .call(Op::Readdir {
                ino: big,
                after: after.clone(),
                max: 1000,
                plus: true,
            })
            .await?
        else {
            anyhow::bail!("readdir answered something else")
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        for (k, &mk) in marks.iter().enumerate() {
            if page == mk {
                pages[k] = ms;
            }
        }
        seen += entries.len() as u64;
        after = entries.last().map(|e| e.name.clone());
        page += 1;
        if !more {
            break;
        }
    }
    anyhow::ensure!(seen == n, "readdir saw {seen} of {n} entries");
    let readdir_rate = n as f64 / t0.elapsed().as_secs_f64();
    let rss1 = rss_bytes();
    let lookups = lookup_latencies(&c, big, n, 5000).await?;
    let small_lookups = lookup_latencies(&c, small, 1000, 5000).await?;
    let r = BigDirResult {
        entries: n,
        fill_creates_per_sec: fill_rate,
        page_ms: pages,
        readdir_entries_per_sec: readdir_rate,
        lookup_us: percentiles(lookups),
        small_lookup_us: percentiles(small_lookups),
        bytes_per_cached_inode: rss1.saturating_sub(rss0) as f64 / n as f64,
    };
    o.stop().await.map_err(anyhow::Error::msg)?;
    m.stop().await;
    Ok(r)
}

/// Prints the big-directory figures.
pub fn print_big(r: &BigDirResult) {
    println!(
        "one directory of {} entries (MDS over 127.0.0.1)",
        r.entries
    );
    println!(
        "  filled at {:.0} creates/s (16 tasks)",
        r.fill_creates_per_sec
    );
    println!(
        "  readdir page of 1,000 with attributes: first {:.2} ms, middle {:.2} ms, last {:.2} ms; whole directory {:.0} entries/s",
        r.page_ms[0], r.page_ms[1], r.page_ms[2], r.readdir_entries_per_sec
    );
    println!(
        "  lookup p50/p99: {:.0}/{:.0} µs (1,000-entry directory in the same run: {:.0}/{:.0} µs; p50 ratio {:.2})",
        r.lookup_us[0],
        r.lookup_us[1],
        r.small_lookup_us[0],
        r.small_lookup_us[1],
        r.lookup_us[0] / r.small_lookup_us[0].max(1e-9)
    );
    println!(
        "  MDS memory per cached inode (RSS growth over a cold full readdir): {:.0} bytes",
        r.bytes_per_cached_inode
    );
}
