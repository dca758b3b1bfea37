//! `tessera bench group`: what a replicated MDS group costs. Empty-file
//! creates from 1 and 16 client tasks (each in its own directory) against
//! a single MDS and against a group of three members, both with every
//! change durable before it is answered and with early answers, in one
//! run on the same machine; the ratio group ÷ single is the figure (the
//! issue's target is ≥ 0.7). The members run in this process, each with
//! its own KV, raft log and sockets (a member that would step down aborts
//! the run: it cannot restart itself here).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use local::{LocalOsd, osd_dir, provision_osd};
use mds::FormatOptions;
use net::MdsClient;
use proto::layout::LayoutSpec;
use proto::mds::{MdsReply, Op, ROOT_INO};
use serde::Serialize;

const CLUSTER: &str = "bench";

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct GroupResult {
    /// "durable" or "early".
    pub mode: String,
    /// Client tasks.
    pub tasks: usize,
    /// Creates per second, single MDS.
    pub single_ops: f64,
    /// Creates per second, group of three.
    pub group_ops: f64,
}

impl GroupResult {
    /// Group ÷ single.
    pub fn ratio(&self) -> f64 {
        self.group_ops / self.single_ops.max(1e-9)
    }
}

fn free_port() -> anyhow::Result<String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string())
}

async fn wait_up(c: &MdsClient) -> anyhow::Result<()> {
    for _ in 0..1200 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().any(|o| o.up)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    anyhow::bail!("the OSD did not register with the MDS")
}

/// Creates `per` files from each of `tasks` clients; creates per second.
async fn creates(
    addr: &str,
    id: &net::auth::Identity,
    tasks: usize,
    per: usize,
    early: bool,
    tag: &str,
) -> anyhow::Result<f64> {
    let setup = MdsClient::new(addr, CLUSTER, id.clone(), 1);
    let mut dirs = Vec::new();
    for t in 0..tasks {
        let MdsReply::Found(f) = setup
            .call(Op::Mkdir {
                parent: ROOT_INO,
                name: format!("{tag}-{t}"),
                mode: 0o755,
            })
            .await?
        else {
            anyhow::bail!("mkdir answered something else")
        };
        dirs.push(f.entry.attr.ino);
    }
    let t0 = Instant::now();
    let mut js = Vec::new();
    for d in dirs {
        let (addr, id) = (addr.to_string(), id.clone());
        js.push(tokio::spawn(async move {
            let mut c = MdsClient::new(&addr, CLUSTER, id, 1);
            c.prefetch = 0;
            c.set_early(early);
            for i in 0..per {
                c.call(Op::Create {
                    parent: d,
                    name: format!("f{i}"),
                    mode: 0o644,
                    exclusive: true,
                })
                .await?;
            }
            // Early answers count once durable.
            c.sync().await?;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for j in js {
        j.await??;
    }
    Ok((tasks * per) as f64 / t0.elapsed().as_secs_f64())
}

/// A group of three members and one OSD under `work`: the members'
/// address list, the admin, the OSD and the switch that stops the members.
async fn group(
    work: &Path,
) -> anyhow::Result<(
    String,
    net::auth::Identity,
    LocalOsd,
    tokio::sync::watch::Sender<bool>,
)> {
    let formatted = work.join("group-format");
    mds::service::format(
        &formatted,
        &FormatOptions::new(CLUSTER, LayoutSpec::default()),
    )?;
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(mds::GroupMember {
            id,
            addr: free_port()?,
            peer: free_port()?,
        });
    }
    let dirs = mds::group::files::make_members(&formatted, &work.join("group"), &members, 64 << 20)
        .map_err(anyhow::Error::msg)?;
    for d in &dirs {
        provision_osd(&osd_dir(work, 2), 1, CLUSTER, 64 << 20, &d.join("keys"))
            .map_err(anyhow::Error::msg)?;
    }
    let (stop, rx) = tokio::sync::watch::channel(false);
    let step_down: mds::group::member::StepDown = Arc::new(|why: &str| {
        eprintln!("bench group: a member stepped down ({why}); the run is void");
        std::process::abort();
    });
    for d in dirs.clone() {
        let (rx, step_down) = (rx.clone(), step_down.clone());
        tokio::spawn(async move { mds::group::run(&d, rx, step_down, |_| {}).await });
    }
    let list: Vec<&str> = members.iter().map(|m| m.addr.as_str()).collect();
    let list = list.join(",");
    let admin =
        net::auth::ClientKey::load(&mds::principals::admin_key_path(&dirs[0]))?.identity()?;
    let o = LocalOsd::start(&osd_dir(work, 2), "127.0.0.1:0", Some(list.clone()))
        .await
        .map_err(anyhow::Error::msg)?;
    wait_up(&MdsClient::new(&list, CLUSTER, admin.clone(), 1)).await?;
    Ok((list, admin, o, stop))
}

/// Runs the comparison with `per_task` creates per task (×4 at 1 task).
pub fn run(dir: &Path, per_task: usize) -> anyhow::Result<Vec<GroupResult>> {
    std::fs::create_dir_all(dir)?;
    let work = dir.join(format!("group-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let res = rt.block_on(async {
        let (m, o1, _) = crate::meta_bench::start_cluster(&work).await?;
        let (list, admin, o2, stop) = group(&work).await?;
        let single_addr = m.addr.to_string();
        let mut out = Vec::new();
        for (mode, early) in [("durable", false), ("early", true)] {
            for tasks in [1usize, 16] {
                let per = if tasks == 1 { per_task * 4 } else { per_task };
                // Alternate who goes first: neither always runs on a
                // warmer machine.
                let tag = format!("{mode}-{tasks}");
                let s = creates(&single_addr, &m.admin, tasks, per, early, &tag).await?;
                let g = creates(&list, &admin, tasks, per, early, &tag).await?;
                let g2 = creates(&list, &admin, tasks, per, early, &format!("{tag}b")).await?;
                let s2 = creates(
                    &single_addr,
                    &m.admin,
                    tasks,
                    per,
                    early,
                    &format!("{tag}b"),
                )
                .await?;
                out.push(GroupResult {
                    mode: mode.into(),
                    tasks,
                    single_ops: (s + s2) / 2.0,
                    group_ops: (g + g2) / 2.0,
                });
            }
        }
        let _ = stop.send(true);
        tokio::time::sleep(Duration::from_millis(500)).await;
        o1.stop().await.map_err(anyhow::Error::msg)?;
        o2.stop().await.map_err(anyhow::Error::msg)?;
        m.stop().await;
        Ok::<_, anyhow::Error>(out)
    });
    let _ = std::fs::remove_dir_all(&work);
    res
}

/// Prints the table with ratios.
pub fn print(rs: &[GroupResult]) {
    println!(
        "{:<8} {:>6} {:>14} {:>14} {:>8}",
        "mode", "tasks", "single MDS/s", "group of 3/s", "ratio"
    );
    for r in rs {
        println!(
            "{:<8} {:>6} {:>14.0} {:>14.0} {:>8.2}",
            r.mode,
            r.tasks,
            r.single_ops,
            r.group_ops,
            r.ratio()
        );
    }
    println!("(empty-file creates; target: group ≥ 0.7 × single)");
}
