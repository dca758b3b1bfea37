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
//! Every mode runs through the client's one `Namespace` seam, as the mount
//! does: lookups return the entry with its attributes (on the OSDs, a stat
//! of the inode's record after the directory lookup), creates and removes
//! include the POSIX checks the client makes from cached directory
//! attributes (free while the cache is warm), and readdir lists names
//! (`readdir_names`, no attributes). OSD commands per insert are counted on
//! the namespace's own directory code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::meta::Meta;
use client::on_mds::MdsNamespace;
use client::on_osds::OsdNamespace;
use client::{ClientConfig, Namespace};
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use net::MdsClient;
use osdns::fs::Owner;
use osdns::{Dirent, Kind, OsdFs, Protocol};
use proto::layout::LayoutSpec;
use proto::mds::{Creds, MdsReply, NamespaceMode, Op, ROOT_INO};
use serde::Serialize;

const CLUSTER: &str = "dirops";
const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    mode: 0o644,
    rdev: 0,
};
/// The three namespaces compared, in report order.
const MODES: [&str; 3] = ["atomic", "lock", "mds"];
/// The operations measured, in report order.
pub const OPS: [&str; 6] = [
    DirOp::ALL[0].name(),
    DirOp::ALL[1].name(),
    DirOp::ALL[2].name(),
    DirOp::ALL[3].name(),
    DirOp::ALL[4].name(),
    DirOp::ALL[5].name(),
];

/// One directory operation the suite times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirOp {
    /// Create a file (exclusive).
    Create,
    /// Make a directory.
    Mkdir,
    /// Remove a file name.
    Unlink,
    /// Remove an empty directory.
    Rmdir,
    /// Name → entry with attributes.
    Lookup,
    /// List a directory's names.
    Readdir,
}

impl DirOp {
    /// Every operation, in report order.
    pub const ALL: [DirOp; 6] = [
        DirOp::Create,
        DirOp::Mkdir,
        DirOp::Unlink,
        DirOp::Rmdir,
        DirOp::Lookup,
        DirOp::Readdir,
    ];

    /// Its name in the report, the JSON and the charts.
    pub const fn name(self) -> &'static str {
        match self {
            DirOp::Create => "create",
            DirOp::Mkdir => "mkdir",
            DirOp::Unlink => "unlink",
            DirOp::Rmdir => "rmdir",
            DirOp::Lookup => "lookup",
            DirOp::Readdir => "readdir",
        }
    }
}

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

/// A directory: its inode number, in any namespace.
type Dir = u64;

/// One client of a namespace (the MDS's, or the one on the OSDs) with the
/// metadata cache a mount's client keeps beside it: every answer naming an
/// inode is cached, so directory attributes for permission checks come
/// from the cache while fresh, as they do through the mount.
#[derive(Clone)]
struct Ns {
    ns: Arc<dyn Namespace>,
    meta: Arc<Meta>,
}

impl std::ops::Deref for Ns {
    type Target = dyn Namespace;
    fn deref(&self) -> &Self::Target {
        &*self.ns
    }
}

/// The caller every operation runs as.
fn root() -> Creds {
    Creds::root()
}

/// Makes directory `name` in `d`.
async fn mkdir(ns: &Ns, d: Dir, name: &str) -> anyhow::Result<Dir> {
    let mut f = ns
        .mkdir(&root(), d, name, 0o755)
        .await
        .map_err(|e| anyhow::anyhow!("mkdir {name}: {e}"))?;
    ns.meta.absorb(&mut f, ns.meta.commits.last());
    Ok(f.entry.attr.ino)
}

/// Runs `op` on `name` in `d`.
async fn run_op(ns: &Ns, op: DirOp, d: Dir, name: &str) -> anyhow::Result<()> {
    let c = root();
    let since = ns.meta.commits.last();
    let cache = |f: client::Result<proto::mds::Found>| f.map(|mut f| ns.meta.absorb(&mut f, since));
    let r = match op {
        DirOp::Create => cache(ns.create(&c, d, name, 0o644, true).await),
        DirOp::Mkdir => cache(ns.mkdir(&c, d, name, 0o755).await),
        DirOp::Lookup => cache(ns.lookup(&c, d, name).await),
        DirOp::Unlink => ns.unlink(&c, d, name, &|_| false).await.map(drop),
        DirOp::Rmdir => ns.rmdir(&c, d, name).await.map(drop),
        DirOp::Readdir => ns.readdir_names(&c, d).await.map(drop),
    };
    r.map_err(|e| anyhow::anyhow!("{} {name}: {e}", op.name()))
}

/// One cluster and its clients.
struct Mode {
    name: &'static str,
    cluster: LocalCluster,
    clients: Vec<Ns>,
    /// The first client's directory code, where the namespace is on the
    /// OSDs (to count OSD commands).
    osd_fs: Option<Arc<OsdFs>>,
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
    let admin = cluster.admin()?;
    wait_osds(&cluster.mds_client(1)?, 2).await?;
    let mut cs: Vec<Ns> = Vec::new();
    let mut osd_fs = None;
    for _ in 0..clients {
        match protocol {
            Some(_) => {
                let mut cfg = ClientConfig::new(&addr, CLUSTER, admin.clone());
                cfg.osd_connections = 1;
                let meta = Arc::new(Meta::new(2000, 1000, cfg.attr_timeout));
                let ns = OsdNamespace::probe(&cfg, Arc::new(cluster.mds_client(1)?), meta.clone())
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("{name}: the MDS keeps the namespace"))?;
                osd_fs.get_or_insert_with(|| ns.fs.clone());
                cs.push(Ns {
                    ns: Arc::new(ns),
                    meta,
                });
            }
            None => {
                let mut c = MdsClient::new(&addr, CLUSTER, admin.clone(), 1);
                c.prefetch = 0;
                cs.push(Ns {
                    ns: Arc::new(MdsNamespace::new(Arc::new(c))),
                    meta: Arc::new(Meta::new(2000, 1000, Duration::from_secs(1))),
                });
            }
        }
    }
    Ok(Mode {
        name,
        cluster,
        clients: cs,
        osd_fs,
        root: ROOT_INO,
    })
}

async fn wait_osds(c: &MdsClient, n: usize) -> anyhow::Result<()> {
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
async fn timed(ns: &Ns, op: DirOp, d: Dir, names: &[String]) -> anyhow::Result<Vec<f64>> {
    let (ns, names) = (ns.clone(), names.to_vec());
    // On a runtime worker, as a mount's request would be.
    tokio::spawn(async move {
        let mut v = Vec::with_capacity(names.len());
        for n in &names {
            let t = Instant::now();
            run_op(&ns, op, d, n).await?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok::<_, anyhow::Error>(v)
    })
    .await?
}

/// Runs `op` on `names` split over the clients (client `i` takes every
/// `k`-th name); returns operations per second.
async fn spread(clients: &[Ns], op: DirOp, d: Dir, names: &[String]) -> anyhow::Result<f64> {
    let k = clients.len();
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (i, c) in clients.iter().enumerate() {
        let mine: Vec<String> = names.iter().skip(i).step_by(k).cloned().collect();
        let c = c.clone();
        set.spawn(async move {
            for n in &mine {
                run_op(&c, op, d, n).await?;
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
) -> [(DirOp, Dir, &'a [String]); 6] {
    [
        (DirOp::Create, d, files),
        (DirOp::Lookup, d, lookups),
        (DirOp::Unlink, d, files),
        (DirOp::Mkdir, d, dirs),
        (DirOp::Rmdir, d, dirs),
        (DirOp::Readdir, small, reads),
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
        let big = mkdir(c0, m.root, "big").await?;
        let small = mkdir(c0, m.root, "small").await?;
        spread(&m.clients, DirOp::Create, small, &names("s", 0..100)).await?;
        dirs.push((big, small));
    }
    let mut out = Vec::new();
    let mut filled = 0;
    for &level in &cfg.levels {
        pb.set_message(format!("filling to {level} entries"));
        for (m, (big, _)) in modes.iter().zip(&dirs) {
            spread(&m.clients, DirOp::Create, *big, &names("e", filled..level)).await?;
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
        let phases: Vec<Vec<(DirOp, Dir, &[String])>> = dirs
            .iter()
            .map(|&(big, small)| plan(big, small, &files, &lookups, &subdirs, &reads).to_vec())
            .collect();
        let order: Vec<DirOp> = phases[0].iter().map(|p| p.0).collect();
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
                    op: op.name().into(),
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
    let small = mkdir(&m.clients[0], m.root, "small-tp").await?;
    spread(&m.clients, DirOp::Create, small, &names("s", 0..100)).await?;
    for &k in &cfg.clients {
        pb.set_message(format!("{}: {k} clients in one directory", m.name));
        let shared = mkdir(&m.clients[0], m.root, &format!("shared{k}")).await?;
        let cl = &m.clients[..k.min(m.clients.len())];
        let n = cfg.per_phase as u64;
        let files = names("f", 0..n);
        let dirs = names("d", 0..n / 4);
        let mut push = |op: DirOp, v: f64| {
            out.push(Throughput {
                mode: m.name.into(),
                op: op.name().into(),
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
    let Some(fs) = &m.osd_fs else {
        return Ok((1.0, 1.0));
    };
    let ino = mkdir(&m.clients[0], m.root, "rt").await?;
    let home = fs
        .lookup(&fs.dir(ROOT_INO, fs.root_osd()?).await?, "rt")
        .await?;
    let d = fs.dir(ino, home.osd).await?;
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
