//! `tessera bench agreement`: does `sim trace` predict what the live mount
//! does? One workload runs through a real FUSE mount under strace, with
//! the MDS's prefetch at 32 and at 0 (a fresh cluster and a cold client
//! each time); the client's own counters give the live figure. The strace
//! log of the prefetch-32 run becomes an nfsdump trace
//! ([`sim::trace::strace`]) that `sim trace`'s replay runs with prefetch
//! 32 and 0 under the cluster's id policy. Both report the share of
//! non-mandatory MDS requests prefetching eliminated.
//!
//! Workloads: **search** (`find . -type f | xargs grep -l` for a string
//! that is nowhere, Hendricks et al.'s Search) and **compile** (`python3
//! -m compileall -q .`: a build that probes for many missing files,
//! writes temporary files and renames them over).

use std::path::{Path, PathBuf};
use std::process::Command;

use client::ClientConfig;
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;
use serde::Serialize;
use sim::trace::namespace::Namespace;
use sim::trace::replay::{ReplayConfig, Requests, replay};
use sim::trace::strace::{convert_log, strace_command};

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// `find . -type f | xargs grep -l` (read only).
    Search,
    /// `python3 -m compileall -q .` (probes, temporary files, renames).
    Compile,
}

impl Workload {
    /// Parses `search` or `compile`.
    pub fn parse(s: &str) -> Result<Workload, String> {
        match s {
            "search" => Ok(Workload::Search),
            "compile" => Ok(Workload::Compile),
            o => Err(format!("unknown workload {o:?}: search or compile")),
        }
    }

    fn script(self) -> &'static str {
        match self {
            Workload::Search => "find . -type f | xargs grep -l zq_tessera_absent_string_qz",
            Workload::Compile => "python3 -m compileall -q .",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct AgreementParams {
    /// The tree the workload runs over (copied into the mount first).
    pub tree: PathBuf,
    /// Which workload.
    pub workload: Workload,
    /// Where clusters and traces go.
    pub dir: PathBuf,
    /// Keep the nfsdump trace here.
    pub keep_trace: Option<PathBuf>,
    /// Whether the mount takes directory leases (its default; the paper's
    /// clients have none).
    pub dir_leases: bool,
}

/// One side's requests with and without prefetch.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Side {
    /// Mandatory requests with prefetch 32.
    pub mandatory_with: u64,
    /// Non-mandatory requests with prefetch 32.
    pub non_mandatory_with: u64,
    /// Mandatory requests with prefetch 0.
    pub mandatory_without: u64,
    /// Non-mandatory requests with prefetch 0.
    pub non_mandatory_without: u64,
}

impl Side {
    /// Share (%) of the prefetch-0 non-mandatory requests that prefetch 32
    /// did not make.
    pub fn eliminated(&self) -> f64 {
        if self.non_mandatory_without == 0 {
            return 0.0;
        }
        100.0 * (1.0 - self.non_mandatory_with as f64 / self.non_mandatory_without as f64)
    }
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    /// The workload.
    pub workload: Workload,
    /// The live mount's counters.
    pub live: Side,
    /// `sim trace` on the recorded run.
    pub sim: Side,
    /// NFS requests in the converted trace.
    pub trace_requests: u64,
    /// Accesses the simulator ignored (names that do not exist…), with prefetch 0.
    pub sim_ignored: u64,
}

const PREFETCH: u32 = 32;
const POLICY: PolicyKind = PolicyKind::ChildClosest;

/// One traced run on a fresh cluster: (mandatory, non-mandatory) requests
/// of the workload, and the strace log written to `log`.
fn traced_run(
    rt: &tokio::runtime::Runtime,
    p: &AgreementParams,
    archive: &Path,
    n: u32,
    log: &Path,
) -> anyhow::Result<(u64, u64, String)> {
    let dir = p.dir.join(format!("agreement-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut opts = FormatOptions::new("agreement", LayoutSpec::default());
    opts.policy = IdPolicy::new(POLICY, Geometry::default()).map_err(anyhow::Error::msg)?;
    let cl = rt
        .block_on(LocalCluster::start(&dir.join("cluster"), 3, 2 << 30, &opts))
        .map_err(anyhow::Error::msg)?;
    let config = || -> anyhow::Result<ClientConfig> {
        let mut cfg = ClientConfig::new(&cl.mds_addr(), &cl.cluster_id, cl.admin()?);
        cfg.prefetch = n;
        cfg.early_answers = true;
        cfg.dir_leases = p.dir_leases;
        Ok(cfg)
    };
    let result = (|| -> anyhow::Result<(u64, u64, String)> {
        // The tree goes in through one mount; the workload runs on another
        // (a cold client cache).
        crate::mounted::mounted(rt, config()?, &dir, |_, mp| {
            let w = mp.join("w");
            std::fs::create_dir_all(&w)?;
            let st = Command::new("tar")
                .arg("xf")
                .arg(archive)
                .current_dir(&w)
                .status()?;
            anyhow::ensure!(st.success(), "tar xf {} failed ({st})", archive.display());
            Ok(())
        })?;
        crate::mounted::mounted(rt, config()?, &dir, |probe, mp| {
            let w = mp.join("w").join("tree");
            let root = w.to_str().map(str::to_string);
            let root = root.ok_or_else(|| anyhow::anyhow!("mount path is not UTF-8"))?;
            let s0 = probe.stats();
            let st = strace_command(log, &["sh", "-c", p.workload.script()])
                .current_dir(&w)
                .output()
                .map_err(|e| anyhow::anyhow!("running strace (is it installed?): {e}"))?;
            // grep finding nothing exits 1 (xargs then 123).
            let code = st.status.code().unwrap_or(-1);
            anyhow::ensure!(
                st.status.success() || code == 123 || code == 1,
                "the {:?} workload failed ({}): {}",
                p.workload,
                st.status,
                String::from_utf8_lossy(&st.stderr)
            );
            let s = probe.stats();
            Ok((
                s.mds_mandatory - s0.mds_mandatory,
                s.mds_non_mandatory - s0.mds_non_mandatory,
                root,
            ))
        })
    })();
    rt.block_on(cl.stop()).map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Replays the nfsdump `trace` with prefetch 32 and 0.
fn simulate(trace: &str) -> anyhow::Result<(Requests, Requests)> {
    let t = sim::trace::nfsdump::parse(trace);
    anyhow::ensure!(!t.events.is_empty(), "the converted trace is empty");
    let ns = Namespace::build(&t);
    let ids = ns
        .assign_ids(&t, POLICY)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = ClientConfig::new("", "", net::auth::Identity::anonymous());
    let cfg = ReplayConfig {
        prefetch: PREFETCH as usize,
        demand_entries: client.cache_demand,
        prefetch_entries: client.cache_prefetch,
        attr_timeout_ms: Some(client.attr_timeout.as_millis() as u64),
    };
    let with: Requests = replay(&t, &ns, &ids, &cfg).into_iter().sum();
    let without: Requests = replay(&t, &ns, &ids, &ReplayConfig { prefetch: 0, ..cfg })
        .into_iter()
        .sum();
    Ok((with, without))
}

/// Runs the comparison.
pub fn run(p: &AgreementParams) -> anyhow::Result<Agreement> {
    std::fs::create_dir_all(&p.dir)?;
    // Absolute and with symlinks resolved: strace prints descriptors' real paths.
    let dir = p.dir.canonicalize()?;
    let work = dir.join(format!("agreement-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let res = run_in(p, &work);
    let _ = std::fs::remove_dir_all(&work);
    res
}

fn run_in(p: &AgreementParams, work: &Path) -> anyhow::Result<Agreement> {
    let tree = p.tree.canonicalize()?;
    let archive = work.join("tree.tar");
    let st = Command::new("tar")
        .arg("cf")
        .arg(&archive)
        .arg("-C")
        .arg(&tree)
        .args(["--transform", "s,^\\.,tree,", "."])
        .status()?;
    anyhow::ensure!(st.success(), "archiving {} failed ({st})", tree.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let inner = AgreementParams {
        dir: work.to_path_buf(),
        ..p.clone()
    };
    let log = work.join("strace.txt");
    let (mw, nw, root) = traced_run(&rt, &inner, &archive, PREFETCH, &log)?;
    let (mo, no, _) = traced_run(&rt, &inner, &archive, 0, &work.join("strace-0.txt"))?;
    let text = std::fs::read(&log)?;
    let (nfs, stats) = convert_log(&text[..], &root, &root, Vec::new())?;
    let requests = stats.requests;
    let nfs = String::from_utf8(nfs)?;
    if let Some(keep) = &p.keep_trace {
        std::fs::write(keep, &nfs)?;
    }
    let (with, without) = simulate(&nfs)?;
    Ok(Agreement {
        workload: p.workload,
        live: Side {
            mandatory_with: mw,
            non_mandatory_with: nw,
            mandatory_without: mo,
            non_mandatory_without: no,
        },
        sim: Side {
            mandatory_with: with.mandatory,
            non_mandatory_with: with.non_mandatory,
            mandatory_without: without.mandatory,
            non_mandatory_without: without.non_mandatory,
        },
        trace_requests: requests,
        sim_ignored: without.ignored,
    })
}

/// Prints the comparison.
pub fn print(a: &Agreement) {
    println!(
        "{:?}: {} NFS requests in the recorded trace; non-mandatory MDS requests, prefetch 0 -> {PREFETCH}:",
        a.workload, a.trace_requests
    );
    for (name, s) in [("live mount", &a.live), ("sim trace", &a.sim)] {
        println!(
            "  {name:<11} {:>7} -> {:>7}  eliminated {:>5.1} %   (mandatory {} / {})",
            s.non_mandatory_without,
            s.non_mandatory_with,
            s.eliminated(),
            s.mandatory_without,
            s.mandatory_with
        );
    }
    println!(
        "  difference {:.1} points; the simulator ignored {} accesses to names that do not exist",
        (a.live.eliminated() - a.sim.eliminated()).abs(),
        a.sim_ignored
    );
}
