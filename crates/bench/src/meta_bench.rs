//! `tessera bench meta`: mdtest-style metadata throughput. Create, stat,
//! readdir and unlink from 1, 4 and 16 client tasks (each in its own
//! directory) against the MDS over 127.0.0.1 (every change durable before
//! it is acknowledged), and the same operations on a local directory of the
//! host file system on the same disk, in the same run; ratios printed.

use std::path::Path;
use std::time::Instant;

use mds::ids::{Geometry, IdPolicy, PolicyKind};
use mds::local::{LocalMds, LocalOsd, osd_dir, provision_osd};
use mds::{FormatOptions, MdsClient};
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

async fn tessera_phase(
    addr: &str,
    tasks: usize,
    per: usize,
    dirs: &[u64],
    op: &str,
) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut js = Vec::new();
    for (t, &d) in dirs.iter().enumerate().take(tasks) {
        let addr = addr.to_string();
        let op = op.to_string();
        js.push(tokio::spawn(async move {
            let mut c = MdsClient::new(&addr, CLUSTER, 1);
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

/// Runs the suite with `per_task` files per task, under `dir`.
pub fn run(dir: &Path, per_task: usize) -> anyhow::Result<Vec<MetaResult>> {
    std::fs::create_dir_all(dir)?;
    let work = tempfile_dir(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let res = rt.block_on(async {
        let mds_dir = work.join("mds");
        mds::service::format(
            &mds_dir,
            &FormatOptions {
                cluster_id: CLUSTER.into(),
                policy: IdPolicy::new(PolicyKind::ChildClosest, Geometry::default())
                    .map_err(anyhow::Error::msg)?,
                layout: LayoutSpec::default(),
                wal_bytes: 64 << 20,
            },
        )?;
        provision_osd(
            &osd_dir(&work, 0),
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
        let o = LocalOsd::start(&osd_dir(&work, 0), "127.0.0.1:0", Some(addr.clone()))
            .await
            .map_err(anyhow::Error::msg)?;
        let c = MdsClient::new(&addr, CLUSTER, 1);
        for _ in 0..400 {
            if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
                && s.osds.iter().any(|o| o.up)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
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
