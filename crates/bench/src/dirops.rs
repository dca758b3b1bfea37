//! `tessera bench dirops`: directory operations with the namespace on the
//! OSDs (Ali et al.) under the atomic and the lock-based protocol, against
//! the MDS namespace, in one run (three clusters on 127.0.0.1, side by
//! side, so the disk's drift hits all three alike).
//!
//! * Latency of create, mkdir, unlink, rmdir, lookup and readdir (each op
//!   timed alone on one client) as the entries already in the file system
//!   grow (one directory filled to 1k, 10k, 100k entries by 16 clients).
//!   Create, lookup, unlink, mkdir and rmdir act on that directory; readdir
//!   lists a 100-entry directory (a whole listing grows with its size; the
//!   point is the per-entry cost, which should not).
//! * Throughput of the same operations as 1, 4 and 16 clients work in one
//!   shared directory (the contention Ali et al.'s protocols differ in).
//! * OSD commands per insert (atomic: one compare-and-swap) and per create.
//!
//! Lookup means name → inode, what each mode does in one request (the MDS
//! also returns attributes; on the OSDs a stat is one more command to the
//! inode's OSD). Permission checks made by the mount's client from cached
//! directory attributes are not part of these figures.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use net::MdsClient;
use osdns::fs::Owner;
use osdns::{DirHash, DirRef, Dirent, Kind, MdsAuthority, OsdFs, Osds, Protocol};
use proto::layout::LayoutSpec;
use proto::mds::{MdsReply, NamespaceMode, Op, ROOT_INO};
use serde::Serialize;

const CLUSTER: &str = "dirops";
const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    mode: 0o644,
};
/// The three namespaces compared, in report order.
const MODES: [&str; 3] = ["atomic", "lock", "mds"];
/// The operations measured, in report order.
pub const OPS: [&str; 6] = ["create", "mkdir", "unlink", "rmdir", "lookup", "readdir"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Entries in the filled directory at each latency point.
    pub levels: Vec<u64>,
    /// Timed operations per op and level.
    pub samples: usize,
    /// Client counts for throughput.
    pub clients: Vec<usize>,
    /// Operations per phase in the throughput runs (split over clients).
    pub per_phase: usize,
    /// Where the three clusters and the outputs go.
    pub dir: PathBuf,
}

impl Config {
    /// 1k, 10k and 100k entries; a few minutes.
    pub fn quick(dir: PathBuf) -> Config {
        Config {
            levels: vec![1_000, 10_000, 100_000],
            samples: 200,
            clients: vec![1, 4, 16],
            per_phase: 1600,
            dir,
        }
    }

    /// Up to one million entries and more samples.
    pub fn full(dir: PathBuf) -> Config {
        Config {
            levels: vec![1_000, 10_000, 100_000, 1_000_000],
            samples: 1000,
            clients: vec![1, 4, 16],
            per_phase: 8000,
            dir,
        }
    }
}

/// Latency of one op at one fill level in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// atomic, lock or mds.
    pub mode: String,
    /// Operation.
    pub op: String,
    /// Entries in the file system's big directory.
    pub entries: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// Throughput of one op with some clients in one shared directory.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// atomic, lock or mds.
    pub mode: String,
    /// Operation.
    pub op: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Operations per second.
    pub ops_per_sec: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Latency points.
    pub latency: Vec<Latency>,
    /// Throughput points.
    pub throughput: Vec<Throughput>,
    /// OSD commands per directory insert, atomic protocol (target 1).
    pub atomic_insert_round_trips: f64,
    /// OSD commands per directory insert, lock protocol.
    pub lock_insert_round_trips: f64,
    /// OSD commands per create (object + entry; inode numbers batched).
    pub atomic_create_round_trips: f64,
    /// Atomic ÷ lock create throughput with the most clients (target ≥ 2).
    pub atomic_over_lock_create: f64,
    /// Atomic ÷ lock unlink throughput with the most clients.
    pub atomic_over_lock_unlink: f64,
    /// Atomic ÷ MDS lookup median latency at each level (target ≤ 1.2).
    pub lookup_atomic_over_mds: Vec<(u64, f64)>,
    /// Per op and mode: largest ÷ smallest median latency across levels
    /// (1.0 = flat in the number of entries).
    pub flatness: Vec<(String, String, f64)>,
    /// Charts written.
    pub charts: Vec<PathBuf>,
}

/// A directory in either namespace.
#[derive(Debug, Clone, Copy)]
enum Dir {
    Osd(DirRef),
    Mds(u64),
}

/// One client of either namespace.
#[derive(Clone)]
enum Ns {
    Osd(Arc<OsdFs>),
    Mds(Arc<MdsClient>),
}

fn bad(what: &str, r: &MdsReply) -> anyhow::Error {
    anyhow::anyhow!("{what}: the MDS answered {r:?}")
}

impl Ns {
    async fn mkdir(&self, d: Dir, name: &str) -> anyhow::Result<Dir> {
        match (self, d) {
            (Ns::Osd(fs), Dir::Osd(d)) => {
                let (e, ..) = fs
                    .make(&d, name, Kind::Dir, OWNER, None, true)
                    .await
                    .map_err(|e| anyhow::anyhow!("mkdir {name}: {e}"))?;
                Ok(Dir::Osd(fs.dir(e.ino, e.osd).await?))
            }
            (Ns::Mds(c), Dir::Mds(p)) => {
                let op = Op::Mkdir {
                    parent: p,
                    name: name.into(),
                    mode: 0o755,
                };
                match c.call(op).await? {
                    MdsReply::Found(f) => Ok(Dir::Mds(f.entry.attr.ino)),
                    r => Err(bad("mkdir", &r)),
                }
            }
            _ => anyhow::bail!("directory of the other namespace"),
        }
    }

    async fn op(&self, op: &str, d: Dir, name: &str) -> anyhow::Result<()> {
        match (self, d) {
            (Ns::Osd(fs), Dir::Osd(d)) => {
                let r = match op {
                    "create" => fs
                        .make(&d, name, Kind::File, OWNER, None, true)
                        .await
                        .map(|_| ()),
                    "mkdir" => fs
                        .make(&d, name, Kind::Dir, OWNER, None, true)
                        .await
                        .map(|_| ()),
                    "lookup" => fs.lookup(&d, name).await.map(|_| ()),
                    "unlink" => match fs.unlink(&d, name).await {
                        Ok((e, Some(i))) => fs.destroy(e.ino, e.osd, &i).await,
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    },
                    "rmdir" => fs.rmdir(&d, name).await.map(|_| ()),
                    _ => fs.readdir_all(&d).await.map(|_| ()),
                };
                r.map_err(|e| anyhow::anyhow!("{op} {name}: {e}"))
            }
            (Ns::Mds(c), Dir::Mds(p)) => {
                let name = name.to_string();
                let o = match op {
                    "create" => Op::Create {
                        parent: p,
                        name,
                        mode: 0o644,
                        exclusive: true,
                    },
                    "mkdir" => Op::Mkdir {
                        parent: p,
                        name,
                        mode: 0o755,
                    },
                    "lookup" => Op::Lookup { parent: p, name },
                    "unlink" => Op::Unlink { parent: p, name },
                    "rmdir" => Op::Rmdir { parent: p, name },
                    _ => {
                        c.readdir_all(p, false).await?;
                        return Ok(());
                    }
                };
                c.call(o).await?;
                Ok(())
            }
            _ => anyhow::bail!("directory of the other namespace"),
        }
    }
}

/// One cluster and its clients.
struct Mode {
    name: &'static str,
    cluster: LocalCluster,
    clients: Vec<Ns>,
    root: Dir,
}

async fn start_mode(
    work: &Path,
    name: &'static str,
    protocol: Option<Protocol>,
    clients: usize,
) -> anyhow::Result<Mode> {
    let dir = work.join(name);
    let opts = FormatOptions {
        cluster_id: CLUSTER.into(),
        policy: IdPolicy::new(PolicyKind::ChildClosest, Geometry::default())
            .map_err(anyhow::Error::msg)?,
        layout: LayoutSpec::default(),
        wal_bytes: 64 << 20,
        namespace: if protocol.is_some() {
            NamespaceMode::Osd
        } else {
            NamespaceMode::Mds
        },
        dir_protocol: protocol.map(|p| p.name().to_string()).unwrap_or_default(),
    };
    let cluster = LocalCluster::start(&dir, 2, 2 << 30, &opts)
        .await
        .map_err(anyhow::Error::msg)?;
    let addr = cluster.mds_addr();
    wait_osds(&addr, 2).await?;
    let mut cs = Vec::new();
    for _ in 0..clients {
        cs.push(match protocol {
            Some(_) => {
                let auth = Arc::new(MdsAuthority::new(&addr, CLUSTER));
                let osds = Osds::new(CLUSTER, auth, 1).await?;
                Ns::Osd(Arc::new(OsdFs::new(
                    Arc::new(osds),
                    Duration::from_secs(5),
                    LayoutSpec::default(),
                )))
            }
            None => {
                let mut c = MdsClient::new(&addr, CLUSTER, 1);
                c.prefetch = 0;
                Ns::Mds(Arc::new(c))
            }
        });
    }
    let root = match (&cs[0], protocol) {
        (Ns::Osd(fs), Some(p)) => Dir::Osd(fs.format(p, DirHash::V1).await?),
        _ => Dir::Mds(ROOT_INO),
    };
    // Every client learns where the root is.
    for c in &cs {
        if let Ns::Osd(fs) = c {
            fs.osds.refresh().await?;
        }
    }
    Ok(Mode {
        name,
        cluster,
        clients: cs,
        root,
    })
}

async fn wait_osds(addr: &str, n: usize) -> anyhow::Result<()> {
    let c = MdsClient::new(addr, CLUSTER, 1);
    for _ in 0..400 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().filter(|o| o.up).count() >= n
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    anyhow::bail!("the OSDs did not register with the MDS")
}

/// Runs `op` on `names` with one client, each timed alone (µs).
async fn timed(ns: &Ns, op: &str, d: Dir, names: &[String]) -> anyhow::Result<Vec<f64>> {
    let (ns, op, names) = (ns.clone(), op.to_string(), names.to_vec());
    // On a runtime worker, as a mount's request would be.
    tokio::spawn(async move {
        let mut v = Vec::with_capacity(names.len());
        for n in &names {
            let t = Instant::now();
            ns.op(&op, d, n).await?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok::<_, anyhow::Error>(v)
    })
    .await?
}

/// Runs `op` on `names` split over the clients (client `i` takes every
/// `k`-th name); returns operations per second.
async fn spread(clients: &[Ns], op: &str, d: Dir, names: &[String]) -> anyhow::Result<f64> {
    let k = clients.len();
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, c) in clients.iter().enumerate() {
        let mine: Vec<String> = names.iter().skip(i).step_by(k).cloned().collect();
        let (c, op) = (c.clone(), op.to_string());
        set.spawn(async move {
            for n in &mine {
                c.op(&op, d, n).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(names.len() as f64 / t0.elapsed().as_secs_f64())
}

fn p50_p99(v: Vec<f64>) -> (f64, f64) {
    let [a, b] = crate::meta_bench::percentiles(v);
    (a, b)
}

fn names(prefix: &str, range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i:07}")).collect()
}

/// The phases of one measurement, in order: create `files` in `d`, look
/// up `lookups`, unlink `files`, mkdir and rmdir `dirs` in `d`, and list
/// `small` once per element of `reads`.
fn plan<'a>(
    d: Dir,
    small: Dir,
    files: &'a [String],
    lookups: &'a [String],
    dirs: &'a [String],
    reads: &'a [String],
) -> [(&'static str, Dir, &'a [String]); 6] {
    [
        ("create", d, files),
        ("lookup", d, lookups),
        ("unlink", d, files),
        ("mkdir", d, dirs),
        ("rmdir", d, dirs),
        ("readdir", small, reads),
    ]
}

/// Rounds the timed operations of one phase are split into, the modes
/// taking turns within each round, so the disk's drift during a phase hits
/// all three alike.
const ROUNDS: usize = 5;

/// Latency points of every mode, level by level: each mode's big
/// directory is filled to the level, then each phase runs in `ROUNDS`
/// rounds with the modes taking turns.
async fn latency_points(
    modes: &[Mode],
    cfg: &Config,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<Latency>> {
    let mut dirs = Vec::new();
    for m in modes {
        let c0 = &m.clients[0];
        let big = c0.mkdir(m.root, "big").await?;
        let small = c0.mkdir(m.root, "small").await?;
        spread(&m.clients, "create", small, &names("s", 0..100)).await?;
        dirs.push((big, small));
    }
    let mut out = Vec::new();
    let mut filled = 0;
    for &level in &cfg.levels {
        pb.set_message(format!("filling to {level} entries"));
        for (m, (big, _)) in modes.iter().zip(&dirs) {
            spread(&m.clients, "create", *big, &names("e", filled..level)).await?;
        }
        filled = level;
        pb.set_message(format!("timing at {level} entries"));
        let s = cfg.samples as u64;
        let files = names(&format!("l{level}-"), 0..s);
        let subdirs = names(&format!("d{level}-"), 0..s);
        // Lookups are cheap: five times the samples, spread over the level.
        let lookups: Vec<String> = (0..5 * s)
            .map(|k| format!("e{:07}", (k * 7919) % level))
            .collect();
        let reads = vec![String::new(); (cfg.samples / 4).max(10)];
        let phases: Vec<Vec<(&str, Dir, &[String])>> = dirs
            .iter()
            .map(|&(big, small)| plan(big, small, &files, &lookups, &subdirs, &reads).to_vec())
            .collect();
        let order: Vec<&str> = phases[0].iter().map(|p| p.0).collect();
        for (k, &op) in order.iter().enumerate() {
            let mut samples = vec![Vec::new(); modes.len()];
            for r in 0..ROUNDS {
                for (i, m) in modes.iter().enumerate() {
                    let (_, d, all) = phases[i][k];
                    let per = all.len().div_ceil(ROUNDS);
                    let part = &all[(r * per).min(all.len())..((r + 1) * per).min(all.len())];
                    samples[i].extend(timed(&m.clients[0], op, d, part).await?);
                }
            }
            for (m, v) in modes.iter().zip(samples) {
                let (p50, p99) = p50_p99(v);
                out.push(Latency {
                    mode: m.name.into(),
                    op: op.into(),
                    entries: level,
                    p50_us: p50,
                    p99_us: p99,
                });
            }
        }
        pb.inc(3);
    }
    Ok(out)
}

async fn throughput_points(
    m: &Mode,
    cfg: &Config,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<Throughput>> {
    let mut out = Vec::new();
    let small = m.clients[0].mkdir(m.root, "small-tp").await?;
    spread(&m.clients, "create", small, &names("s", 0..100)).await?;
    for &k in &cfg.clients {
        pb.set_message(format!("{}: {k} clients in one directory", m.name));
        let shared = m.clients[0].mkdir(m.root, &format!("shared{k}")).await?;
        let cl = &m.clients[..k.min(m.clients.len())];
        let n = cfg.per_phase as u64;
        let files = names("f", 0..n);
        let dirs = names("d", 0..n / 4);
        let mut push = |op: &str, v: f64| {
            out.push(Throughput {
                mode: m.name.into(),
                op: op.into(),
                clients: k,
                ops_per_sec: v,
            })
        };
        let reads = vec![String::new(); (n / 20).max(k as u64) as usize];
        for (op, d, ns) in plan(shared, small, &files, &files, &dirs, &reads) {
            push(op, spread(cl, op, d, ns).await?);
        }
        pb.inc(1);
    }
    Ok(out)
}

/// OSD commands per insert and per create, on a fresh directory.
async fn round_trips(m: &Mode, n: u64) -> anyhow::Result<(f64, f64)> {
    let Ns::Osd(fs) = &m.clients[0] else {
        return Ok((1.0, 1.0));
    };
    let Dir::Osd(d) = m.clients[0].mkdir(m.root, "rt").await? else {
        anyhow::bail!("not an OSD directory");
    };
    // Entries naming no object: only the directory's commands count.
    let ents: Vec<Dirent> = (0..n)
        .map(|i| Dirent {
            name: format!("i{i}"),
            kind: Kind::File,
            ino: (1 << 40) + i,
            osd: d.osd,
        })
        .collect();
    let before = fs.round_trips();
    for e in &ents {
        if fs.insert(&d, e).await?.is_err() {
            anyhow::bail!("insert of a fresh name found it taken");
        }
    }
    let per_insert = (fs.round_trips() - before) as f64 / n as f64;
    for e in &ents {
        fs.remove(&d, e).await?;
    }
    let before = fs.round_trips();
    for i in 0..n {
        fs.make(&d, &format!("c{i}"), Kind::File, OWNER, None, true)
            .await?;
    }
    let per_create = (fs.round_trips() - before) as f64 / n as f64;
    Ok((per_insert, per_create))
}

/// Runs the suite (three clusters under `cfg.dir`), writes
/// `dirops.json` and the charts there, and returns the report.
pub fn run(cfg: &Config) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", cfg.dir.display()))?;
    let work = cfg.dir.join(format!("dirops-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let most = cfg.clients.iter().copied().max().unwrap_or(1).max(16);
    let pb = indicatif::ProgressBar::new((3 * (cfg.levels.len() + cfg.clients.len())) as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let res = rt.block_on(async {
        let mut modes = Vec::new();
        for (name, p) in [
            ("atomic", Some(Protocol::Atomic)),
            ("lock", Some(Protocol::Lock)),
            ("mds", None),
        ] {
            modes.push(start_mode(&work, name, p, most).await?);
        }
        let mut latency = Vec::new();
        let mut throughput = Vec::new();
        let mut rts = Vec::new();
        // Interleave the modes phase by phase so drift hits all alike.
        for m in &modes {
            rts.push(round_trips(m, 200).await?);
        }
        for m in &modes {
            throughput.extend(throughput_points(m, cfg, &pb).await?);
        }
        latency.extend(latency_points(&modes, cfg, &pb).await?);
        for m in modes {
            m.cluster.stop().await.map_err(anyhow::Error::msg)?;
        }
        Ok::<_, anyhow::Error>((latency, throughput, rts))
    });
    pb.finish_and_clear();
    let _ = std::fs::remove_dir_all(&work);
    let (latency, throughput, rts) = res?;
    let mut r = summarize(latency, throughput, rts, cfg);
    r.charts = charts(&r, &cfg.dir)?;
    std::fs::write(
        cfg.dir.join("dirops.json"),
        serde_json::to_string_pretty(&r)?,
    )?;
    Ok(r)
}

fn summarize(
    latency: Vec<Latency>,
    throughput: Vec<Throughput>,
    rts: Vec<(f64, f64)>,
    cfg: &Config,
) -> Report {
    let most = cfg.clients.iter().copied().max().unwrap_or(1);
    let tp = |mode: &str, op: &str| {
        throughput
            .iter()
            .find(|t| t.mode == mode && t.op == op && t.clients == most)
            .map_or(0.0, |t| t.ops_per_sec)
    };
    let lat = |mode: &str, op: &str, level: u64| {
        latency
            .iter()
            .find(|l| l.mode == mode && l.op == op && l.entries == level)
            .map_or(f64::NAN, |l| l.p50_us)
    };
    let mut flatness = Vec::new();
    for mode in MODES {
        for op in OPS {
            let v: Vec<f64> = cfg.levels.iter().map(|&l| lat(mode, op, l)).collect();
            let hi = v.iter().copied().fold(f64::MIN, f64::max);
            let lo = v.iter().copied().fold(f64::MAX, f64::min);
            flatness.push((mode.to_string(), op.to_string(), hi / lo.max(1e-9)));
        }
    }
    Report {
        atomic_insert_round_trips: rts.first().map_or(0.0, |r| r.0),
        lock_insert_round_trips: rts.get(1).map_or(0.0, |r| r.0),
        atomic_create_round_trips: rts.first().map_or(0.0, |r| r.1),
        atomic_over_lock_create: tp("atomic", "create") / tp("lock", "create").max(1e-9),
        atomic_over_lock_unlink: tp("atomic", "unlink") / tp("lock", "unlink").max(1e-9),
        lookup_atomic_over_mds: cfg
            .levels
            .iter()
            .map(|&l| (l, lat("atomic", "lookup", l) / lat("mds", "lookup", l)))
            .collect(),
        flatness,
        latency,
        throughput,
        charts: Vec::new(),
    }
}

fn charts(r: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for op in OPS {
        let lat: Vec<(&str, f64, f64)> = r
            .latency
            .iter()
            .filter(|l| l.op == op)
            .map(|l| (l.mode.as_str(), l.entries as f64, l.p50_us / 1000.0))
            .collect();
        let title = format!("{op}: median latency vs entries in the file system");
        out.push(chart(
            dir,
            &format!("latency-{op}"),
            &title,
            ("entries", "ms"),
            &lat,
        )?);
        let tp: Vec<(&str, f64, f64)> = r
            .throughput
            .iter()
            .filter(|t| t.op == op)
            .map(|t| (t.mode.as_str(), t.clients as f64, t.ops_per_sec))
            .collect();
        let title = format!("{op}: operations/s vs clients in one directory");
        out.push(chart(
            dir,
            &format!("throughput-{op}"),
            &title,
            ("clients", "ops/s"),
            &tp,
        )?);
    }
    Ok(out)
}

/// One chart `dirops-<name>.svg`: a line per mode through its
/// (mode, x, y) points, x on a log scale.
fn chart(
    dir: &Path,
    name: &str,
    title: &str,
    (x, y): (&str, &str),
    pts: &[(&str, f64, f64)],
) -> anyhow::Result<PathBuf> {
    use sim::plot::{Chart, Scale, Series, lines_svg};
    let series: Vec<Series> = MODES
        .iter()
        .map(|m| {
            let line = pts.iter().filter(|p| p.0 == *m).map(|p| (p.1, p.2));
            (m.to_string(), line.collect())
        })
        .collect();
    let p = dir.join(format!("dirops-{name}.svg"));
    let c = Chart {
        title,
        x,
        y,
        x_scale: Scale::Log,
        y_scale: Scale::Linear,
    };
    lines_svg(&p, &c, &series)?;
    Ok(p)
}

/// Prints one table: a row per op and `key`, a column per mode, and the
/// ratio of the atomic protocol to mode `over`.
fn table(key: &str, keys: &[u64], over: &str, value: impl Fn(&str, &str, u64) -> f64) {
    println!(
        "{:<8} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "op",
        key,
        "atomic",
        "lock",
        "mds",
        format!("atom/{over}")
    );
    for op in OPS {
        for &k in keys {
            let (a, l, m) = (
                value("atomic", op, k),
                value("lock", op, k),
                value("mds", op, k),
            );
            let o = value(over, op, k);
            println!(
                "{op:<8} {k:>9} {a:>10.0} {l:>10.0} {m:>10.0} {:>10.2}",
                a / o
            );
        }
    }
}

/// Prints the tables, the targets and where the charts are.
pub fn print(r: &Report) {
    println!("directory operations: namespace on the OSDs (atomic, lock) vs the MDS, one run");
    println!("\nmedian latency (µs) by entries already in the file system");
    let mut levels: Vec<u64> = r.latency.iter().map(|l| l.entries).collect();
    levels.sort_unstable();
    levels.dedup();
    table("entries", &levels, "mds", |m, op, e| {
        r.latency
            .iter()
            .find(|l| l.mode == m && l.op == op && l.entries == e)
            .map_or(f64::NAN, |l| l.p50_us)
    });
    println!("\noperations per second, clients in one shared directory");
    let mut ks: Vec<u64> = r.throughput.iter().map(|t| t.clients as u64).collect();
    ks.sort_unstable();
    ks.dedup();
    table("clients", &ks, "lock", |m, op, k| {
        r.throughput
            .iter()
            .find(|t| t.mode == m && t.op == op && t.clients as u64 == k)
            .map_or(f64::NAN, |t| t.ops_per_sec)
    });
    println!("\ntargets (benchmark figures, not tests)");
    println!(
        "  atomic insert: {:.2} OSD commands (target 1); lock: {:.2}; a create is {:.2}",
        r.atomic_insert_round_trips, r.lock_insert_round_trips, r.atomic_create_round_trips
    );
    println!(
        "  atomic ÷ lock throughput, most clients, one directory: create {:.2}, unlink {:.2} (target ≥ 2)",
        r.atomic_over_lock_create, r.atomic_over_lock_unlink
    );
    for (l, x) in &r.lookup_atomic_over_mds {
        println!("  lookup atomic ÷ MDS at {l} entries: {x:.2} (target ≤ 1.2)");
    }
    let worst = r
        .flatness
        .iter()
        .filter(|f| f.0 == "atomic")
        .map(|f| format!("{} {:.2}", f.1, f.2))
        .collect::<Vec<_>>()
        .join(", ");
    println!("  atomic latency, largest ÷ smallest median across levels (1 = flat): {worst}");
    for c in &r.charts {
        println!("  chart: {}", c.display());
    }
}
