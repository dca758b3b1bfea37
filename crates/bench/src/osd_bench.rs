//! `tessera bench osd`: what the network costs. The same operations (512 KiB
//! writes and reads, 4 KiB create-and-writes) at queue depth 1 and 16, first
//! on the store in-process, then through an OSD over loopback TCP (real
//! sockets, capabilities checked) with no authentication (an `--insecure`
//! OSD), authenticated (tickets, capabilities bound to them, every frame
//! tagged) and encrypted, in one run on one store; reports each and its
//! ratio to the store in-process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use net::{ConnConfig, OsdClient};
use osd::exec::{Ctx, StoreHandle};
use osd::server::{Osd, ServerConfig};
use proto::clock::now_ms;
use proto::{KeyRing, rights};
use serde::Serialize;
use store::device::{Device, FileDevice};
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store};

use crate::stats::PhaseResult;

/// One comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    /// Operation.
    pub op: String,
    /// Queue depth.
    pub depth: usize,
    /// How the connection is secured: "no auth", "authenticated", "encrypted".
    pub mode: String,
    /// In-process figures.
    pub local: PhaseResult,
    /// Over-the-network figures.
    pub remote: PhaseResult,
    /// remote MB/s (or ops/s for small ops) ÷ local.
    pub ratio: f64,
}

const KEY: [u8; 32] = [0x42; 32];

/// Runs the benchmark with `ops` operations per phase.
pub fn run(dir: &Path, ops: u64) -> anyhow::Result<Vec<Pair>> {
    std::fs::create_dir_all(dir)?;
    let path: PathBuf = dir.join("osd-bench.img");
    let per_run = ops * (512 << 10) * 2 + ops * 8192;
    crate::loopdev::write_zeros(&path, (per_run * 5).max(1 << 30))?;
    let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&path)?);
    store::format(
        dev.clone(),
        &FormatOptions {
            force: true,
            ..FormatOptions::default()
        },
    )?;
    let s = Arc::new(Store::open(dev, &OpenOptions::default())?);
    let big = Bytes::from(vec![0xA5u8; 512 << 10]);
    let small = Bytes::from(vec![0x5Au8; 4096]);
    let next = Arc::new(AtomicU64::new(0x10000));
    let mut local = Vec::new();
    for depth in [1usize, 16] {
        let ids: Vec<u64> = (0..ops)
            .map(|_| next.fetch_add(1, Ordering::Relaxed))
            .collect();
        local.push(threads("write-512k", depth, &ids, |id| {
            s.create_and_write(P, id, &big).map(|()| big.len() as u64)
        })?);
        local.push(threads("read-512k", depth, &ids, |id| {
            s.read(P, id, 0, big.len() as u64).map(|d| d.len() as u64)
        })?);
        let small_ids: Vec<u64> = (0..ops)
            .map(|_| next.fetch_add(1, Ordering::Relaxed))
            .collect();
        local.push(threads("create-write-4k", depth, &small_ids, |id| {
            s.create_and_write(P, id, &small).map(|()| 4096)
        })?);
    }
    let store = Arc::try_unwrap(s).map_err(|_| anyhow::anyhow!("store still shared"))?;
    let handle = Arc::new(StoreHandle::new(path.clone(), store));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut remote = Vec::new();
    for mode in [Mode::Plain, Mode::Authenticated, Mode::Encrypted] {
        remote.push((
            mode,
            rt.block_on(remote_run(
                mode,
                handle.clone(),
                ops,
                next.clone(),
                big.clone(),
                small.clone(),
                mode == Mode::Encrypted,
            ))?,
        ));
    }
    let _ = std::fs::remove_file(&path);
    let mut pairs = Vec::new();
    for (mode, rows) in remote {
        for (l, r) in local.iter().zip(rows) {
            let ratio = if l.phase.contains("4k") {
                r.ops_per_s / l.ops_per_s.max(1e-9)
            } else {
                r.mb_per_s / l.mb_per_s.max(1e-9)
            };
            pairs.push(Pair {
                op: l.phase.clone(),
                depth: l.workers,
                mode: mode.name().into(),
                local: l.clone(),
                remote: r,
                ratio,
            });
        }
    }
    Ok(pairs)
}

/// How the bench's connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// An `--insecure` OSD: no authentication, no capabilities checked.
    Plain,
    /// A ticket, capabilities bound to it, every frame tagged (HMAC-SHA256).
    Authenticated,
    /// As authenticated, and every frame encrypted (AES-256-GCM).
    Encrypted,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "no auth",
            Mode::Authenticated => "authenticated",
            Mode::Encrypted => "encrypted",
        }
    }
}

/// The remote phases against an OSD serving `handle` in `mode`; the
/// `last` run closes the store.
async fn remote_run(
    mode: Mode,
    handle: Arc<StoreHandle>,
    ops: u64,
    next: Arc<AtomicU64>,
    big: Bytes,
    small: Bytes,
    last: bool,
) -> anyhow::Result<Vec<PhaseResult>> {
    let ring = KeyRing::new(vec![(1, KEY)])?;
    let keys = (mode != Mode::Plain).then(|| ring.clone());
    let ctx = Ctx::new(handle.clone(), keys, 1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let server = Osd::new(ctx, ServerConfig::new("bench", 1));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(server.serve(listener, rx));
    let identity: Arc<dyn net::auth::IdentitySource> = match mode {
        Mode::Plain => Arc::new(net::auth::Identity::anonymous()),
        _ => net::auth::MintWithOsdKeys::one(ring),
    };
    let mut cfg = ConnConfig::new("bench", 1, identity);
    cfg.connections = 4;
    cfg.encrypt = mode == Mode::Encrypted;
    let c = Arc::new(OsdClient::connect(&addr, cfg).await?);
    let cap = proto::CapSpec {
        partition: P,
        oid_lo: 0,
        oid_hi: u64::MAX,
        rights: rights::ALL,
        expiry_ms: now_ms() + 3_600_000,
        version: u64::MAX,
        holder: proto::auth::MDS_PRINCIPAL,
    }
    .sign(&KEY, 1, 1);
    let mut out = Vec::new();
    for depth in [1usize, 16] {
        let ids: Vec<u64> = (0..ops)
            .map(|_| next.fetch_add(1, Ordering::Relaxed))
            .collect();
        let (c1, cap1, b1) = (c.clone(), cap.clone(), big.clone());
        out.push(
            tasks("write-512k", depth, ids.clone(), move |id| {
                let (c, cap, b) = (c1.clone(), cap1.clone(), b1.clone());
                async move {
                    c.create_and_write(Some(&cap), P, id, b)
                        .await
                        .map(|()| 512 << 10)
                }
            })
            .await?,
        );
        let (c2, cap2) = (c.clone(), cap.clone());
        out.push(
            tasks("read-512k", depth, ids, move |id| {
                let (c, cap) = (c2.clone(), cap2.clone());
                async move {
                    c.read(Some(&cap), P, id, 0, 512 << 10)
                        .await
                        .map(|d| d.len() as u64)
                }
            })
            .await?,
        );
        let small_ids: Vec<u64> = (0..ops)
            .map(|_| next.fetch_add(1, Ordering::Relaxed))
            .collect();
        let (c3, cap3, s3) = (c.clone(), cap.clone(), small.clone());
        out.push(
            tasks("create-write-4k", depth, small_ids, move |id| {
                let (c, cap, b) = (c3.clone(), cap3.clone(), s3.clone());
                async move {
                    c.create_and_write(Some(&cap), P, id, b)
                        .await
                        .map(|()| 4096)
                }
            })
            .await?,
        );
    }
    drop(c);
    if last {
        // Drains and closes the store.
        let _ = stop.send(true);
        task.await??;
    } else {
        // The next mode serves the same store: stop serving, keep it open.
        task.abort();
        let _ = task.await;
    }
    Ok(out)
}

fn threads<E: std::fmt::Display>(
    name: &str,
    depth: usize,
    ids: &[u64],
    op: impl Fn(u64) -> Result<u64, E> + Sync,
) -> anyhow::Result<PhaseResult> {
    let (lat, bytes, secs) = crate::stats::run_workers(depth, ids, |id| {
        op(id).map_err(|e| anyhow::anyhow!("{name}: {e}"))
    })?;
    Ok(PhaseResult::from_latencies(
        "in-process",
        name,
        depth,
        lat,
        bytes,
        secs,
    ))
}

async fn tasks<F, Fut, E>(
    name: &str,
    depth: usize,
    ids: Vec<u64>,
    op: F,
) -> anyhow::Result<PhaseResult>
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<u64, E>> + Send,
    E: std::fmt::Display,
{
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut hs = Vec::new();
    for _ in 0..depth {
        let (ids, next, op) = (ids.clone(), next.clone(), op.clone());
        let name = name.to_string();
        hs.push(tokio::spawn(async move {
            let (mut lat, mut bytes) = (Vec::new(), 0);
            while let Some(&id) = ids.get(next.fetch_add(1, Ordering::Relaxed) as usize) {
                let t = Instant::now();
                bytes += op(id).await.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
                lat.push(t.elapsed().as_secs_f64());
            }
            Ok::<_, anyhow::Error>((lat, bytes))
        }));
    }
    let mut parts = Vec::new();
    for h in hs {
        parts.push(
            h.await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("task panicked"))),
        );
    }
    collect("osd-loopback", name, depth, parts, started)
}

fn collect(
    target: &str,
    name: &str,
    depth: usize,
    parts: Vec<anyhow::Result<(Vec<f64>, u64)>>,
    started: Instant,
) -> anyhow::Result<PhaseResult> {
    let secs = started.elapsed().as_secs_f64();
    let (mut lat, mut bytes) = (Vec::new(), 0);
    for p in parts {
        let (l, b) = p?;
        lat.extend(l);
        bytes += b;
    }
    Ok(PhaseResult::from_latencies(
        target, name, depth, lat, bytes, secs,
    ))
}

/// Prints the comparison.
pub fn print(pairs: &[Pair]) {
    println!(
        "{:<16} {:>3} {:<14} {:>12} {:>12} {:>10} {:>10} {:>8}",
        "op", "qd", "connection", "local MB/s", "OSD MB/s", "local op/s", "OSD op/s", "ratio"
    );
    for p in pairs {
        println!(
            "{:<16} {:>3} {:<14} {:>12.1} {:>12.1} {:>10.0} {:>10.0} {:>7.2}x",
            p.op,
            p.depth,
            p.mode,
            p.local.mb_per_s,
            p.remote.mb_per_s,
            p.local.ops_per_s,
            p.remote.ops_per_s,
            p.ratio
        );
    }
    for p in pairs
        .iter()
        .filter(|p| p.op == "write-512k" && p.depth == 16)
    {
        println!(
            "512 KiB writes at depth 16 over loopback, {}: {:.2} of in-process (target ≥ 0.85: {})",
            p.mode,
            p.ratio,
            if p.ratio >= 0.85 { "met" } else { "NOT met" }
        );
    }
    // What authentication and encryption cost, against no authentication.
    for p in pairs.iter().filter(|p| p.mode != "no auth") {
        if let Some(base) = pairs
            .iter()
            .find(|b| b.mode == "no auth" && b.op == p.op && b.depth == p.depth)
        {
            println!(
                "{} {} qd {}: {:.2} of no auth",
                p.mode,
                p.op,
                p.depth,
                p.remote.ops_per_s / base.remote.ops_per_s.max(1e-9)
            );
        }
    }
}
