//! `tessera bench small`: small-file namespace speed through the FUSE
//! mount and on local ext4 (a loop device over a file on the same disk),
//! in one run. Empty-file creates (`open(O_CREAT|O_EXCL)` + `close`) and
//! unlinks by 1, 4 and 16 worker threads, all in one shared directory and
//! in one directory per worker. The mount runs twice on one cluster: as
//! mounts do by default (namespace changes answered before the MDS's log
//! flush, kept and replayed by the client) and with `--sync-namespace`
//! (each change durable before it returns). Ratios are against ext4 in
//! the same run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use client::ClientConfig;
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::LayoutSpec;
use serde::Serialize;

use crate::loopdev::{LoopDev, Mount};

/// One point: an operation, a worker count, a directory shape.
#[derive(Debug, Clone, Serialize)]
pub struct SmallRow {
    /// "create" or "unlink".
    pub op: String,
    /// Worker threads.
    pub workers: usize,
    /// All workers in one directory (else one directory each).
    pub shared: bool,
    /// Operations per second through the mount (early answers: a mount's
    /// default).
    pub mount: f64,
    /// The same through a mount that takes no directory leases
    /// (`--no-dir-leases`: every change goes to the MDS first).
    pub mount_no_lease: f64,
    /// Operations per second through a mount whose every namespace change
    /// is durable before it returns (`--sync-namespace`).
    pub mount_sync: f64,
    /// Operations per second on ext4.
    pub ext4: f64,
}

/// Worker counts measured.
pub const WORKERS: [usize; 3] = [1, 4, 16];

/// Creates then unlinks `files` empty files with `workers` threads under
/// `root`: (creates/s, unlinks/s).
fn storm(root: &Path, workers: usize, files: usize, shared: bool) -> anyhow::Result<(f64, f64)> {
    let dirs: Vec<PathBuf> = (0..workers)
        .map(|k| {
            root.join(if shared {
                "shared".into()
            } else {
                format!("w{k}")
            })
        })
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d)?;
    }
    let per = files / workers;
    let mut out = [0.0; 2];
    for (i, unlink) in [false, true].into_iter().enumerate() {
        let start = Arc::new(Barrier::new(workers + 1));
        let handles: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(k, d)| {
                let (d, start) = (d.clone(), start.clone());
                std::thread::spawn(move || -> std::io::Result<(Instant, Instant)> {
                    start.wait();
                    let began = Instant::now();
                    for j in 0..per {
                        let p = d.join(format!("w{k}-{j}"));
                        if unlink {
                            std::fs::remove_file(p)?;
                        } else {
                            std::fs::OpenOptions::new()
                                .write(true)
                                .create_new(true)
                                .open(p)?;
                        }
                    }
                    Ok((began, Instant::now()))
                })
            })
            .collect();
        start.wait();
        // From the first worker's start to the last one's end, as the
        // workers saw them (the main thread may run only after they are
        // done: timing here once gave ext4 500 million unlinks/s).
        let mut span: Option<(Instant, Instant)> = None;
        for h in handles {
            let (b, e) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
            span = Some(span.map_or((b, e), |(sb, se)| (sb.min(b), se.max(e))));
        }
        let (b, e) = span.ok_or_else(|| anyhow::anyhow!("no workers"))?;
        out[i] = (per * workers) as f64 / e.duration_since(b).as_secs_f64().max(1e-9);
    }
    Ok((out[0], out[1]))
}

/// Every point on `root`, in [`WORKERS`] × shared/per-worker order.
fn suite(root: &Path, files: usize) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for shared in [true, false] {
        for w in WORKERS {
            let dir = root.join(format!("{}-{w}", if shared { "s" } else { "p" }));
            out.push(storm(&dir, w, files, shared)?);
        }
    }
    Ok(out)
}

/// Runs both sides under `dir` with `files` files per point.
pub fn run(dir: &Path, files: usize) -> anyhow::Result<Vec<SmallRow>> {
    crate::in_scratch(dir, "small-bench", |work| run_in(work, files))
}

fn run_in(work: &Path, files: usize) -> anyhow::Result<Vec<SmallRow>> {
    let ld = LoopDev::create(&work.join("ext4.img"), 1 << 30)?;
    let ext4 = Mount::make("ext4", ld.dev(), &work.join("ext4"))?;
    let ext = suite(&ext4.dir, files)?;
    drop(ext4);
    drop(ld);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let opts = FormatOptions::new("smallbench", LayoutSpec::default());
    let cl = rt
        .block_on(LocalCluster::start(
            &work.join("cluster"),
            3,
            256 << 20,
            &opts,
        ))
        .map_err(anyhow::Error::msg)?;
    let mut cfg = ClientConfig::new(&cl.mds_addr(), "smallbench", cl.admin()?);
    cfg.early_answers = true;
    let fuse = crate::mounted::mounted(&rt, cfg.clone(), work, |_, mp| {
        suite(&mp.join("early"), files)
    });
    cfg.dir_leases = false;
    let fuse = fuse.and_then(|f| {
        crate::mounted::mounted(&rt, cfg.clone(), work, |_, mp| {
            suite(&mp.join("no-lease"), files)
        })
        .map(|n| (f, n))
    });
    cfg.early_answers = false;
    let fuse_sync = fuse.and_then(|f| {
        crate::mounted::mounted(&rt, cfg, work, |_, mp| suite(&mp.join("sync"), files))
            .map(|s| (f, s))
    });
    rt.block_on(cl.stop()).map_err(anyhow::Error::msg)?;
    let ((fuse, no_lease), fuse_sync) = fuse_sync?;
    let mut rows = Vec::new();
    let shapes = [true, false]
        .into_iter()
        .flat_map(|s| WORKERS.into_iter().map(move |w| (s, w)));
    let points = fuse.iter().zip(&no_lease).zip(&fuse_sync).zip(&ext);
    for ((shared, workers), (((m, nl), ms), e)) in shapes.zip(points) {
        for (op, mount, mount_no_lease, mount_sync, ext4) in [
            ("create", m.0, nl.0, ms.0, e.0),
            ("unlink", m.1, nl.1, ms.1, e.1),
        ] {
            rows.push(SmallRow {
                op: op.into(),
                workers,
                shared,
                mount,
                mount_no_lease,
                mount_sync,
                ext4,
            });
        }
    }
    Ok(rows)
}

/// Prints the table with ratios against ext4.
pub fn print(rows: &[SmallRow], files: usize) {
    println!(
        "small files: {files} empty files created then unlinked per point; Tessera = MDS + 3 OSDs on 127.0.0.1, through the FUSE mount"
    );
    println!(
        "{:<8} {:>8} {:<12} {:>10} {:>11} {:>10} {:>10} {:>11} {:>14} {:>10}",
        "op",
        "workers",
        "directory",
        "mount/s",
        "no-lease/s",
        "sync-ns/s",
        "ext4/s",
        "mount/ext4",
        "mount/no-lease",
        "mount/sync"
    );
    for r in rows {
        println!(
            "{:<8} {:>8} {:<12} {:>10.0} {:>11.0} {:>10.0} {:>10.0} {:>11.3} {:>14.2} {:>10.2}",
            r.op,
            r.workers,
            if r.shared { "shared" } else { "per worker" },
            r.mount,
            r.mount_no_lease,
            r.mount_sync,
            r.ext4,
            r.mount / r.ext4,
            r.mount / r.mount_no_lease,
            r.mount / r.mount_sync
        );
    }
    println!(
        "note: mount = a mount's default (the MDS answers a change once visible; the client keeps it until the MDS log has it and replays it after an MDS crash; fsync makes it durable; a directory only this mount uses is leased: creates and unlinks answered by the client, sent to the MDS after in batches); no-lease = the same with --no-dir-leases; sync-ns = --sync-namespace (every change durable before it returns: one MDS log flush, shared by concurrent operations). ext4's are page-cache operations. In one directory the kernel runs one create or unlink at a time."
    );
}
