//! `tessera bench prefetch`: Hendricks et al.'s four workloads through a
//! real FUSE mount on real trees, with the MDS's prefetch at 32 and at 0,
//! for each object-id policy — MDS requests (mandatory and non-mandatory)
//! and wall time, as their figure 3 reports them.
//!
//! For each policy and prefetch count, a fresh cluster; each workload on a
//! fresh mount (a cold client cache), in order:
//! 1. **untar**: extract an archive of the source tree (and of the build
//!    source, when given) into the mount with `tar`;
//! 2. **build**: `make -j2` compiling every C file of the build source with
//!    `cc`, then archiving the objects with `ar` (a Makefile written by the
//!    benchmark; the sources are the real ones);
//! 3. **patch**: `patch` changes three C files, then `make -j2` again (make
//!    stats every target; three compile again);
//! 4. **search**: `find . -type f | xargs grep -l` for a string that is
//!    nowhere, over the whole extracted tree.
//!
//! Requests are the mount client's own counts; "eliminated" is the share
//! of the prefetch-0 run's requests that the prefetch-32 run did not make.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use client::ClientConfig;
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;
use serde::Serialize;

/// The workloads, in the order they run.
pub const WORKLOADS: [&str; 4] = ["untar", "build", "patch", "search"];

/// What to run.
#[derive(Debug, Clone)]
pub struct PrefetchParams {
    /// A real source tree (archived, then extracted into the mount).
    pub tree: PathBuf,
    /// A C source tree to build (`None`: the build and patch workloads are
    /// not run).
    pub build_src: Option<PathBuf>,
    /// Id policies to run.
    pub policies: Vec<PolicyKind>,
    /// Where clusters and the archive go.
    pub dir: PathBuf,
}

/// One workload's run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Mandatory MDS requests (namespace and length changes).
    pub mandatory: u64,
    /// Non-mandatory MDS requests (fetches).
    pub non_mandatory: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// One workload under one policy, with prefetch 32 and 0.
#[derive(Debug, Clone, Serialize)]
pub struct PrefetchRow {
    /// Id policy.
    pub policy: String,
    /// Workload.
    pub workload: String,
    /// With prefetch 32.
    pub with: Run,
    /// With prefetch 0.
    pub without: Run,
}

impl PrefetchRow {
    /// Share of the prefetch-0 run's MDS requests the prefetch-32 run did
    /// not make.
    pub fn eliminated(&self) -> f64 {
        let (a, b) = (
            self.with.mandatory + self.with.non_mandatory,
            self.without.mandatory + self.without.non_mandatory,
        );
        if b == 0 {
            0.0
        } else {
            1.0 - a as f64 / b as f64
        }
    }
}

fn sh(dir: &Path, script: &str) -> anyhow::Result<()> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()?;
    // grep -l finding nothing exits 1 (xargs then 123): not a failure.
    let code = out.status.code().unwrap_or(-1);
    if !out.status.success() && !(script.contains("grep") && (code == 1 || code == 123)) {
        anyhow::bail!(
            "`{script}` in {} failed ({}): {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The Makefile of the build workload: every `.c` under `src` compiled to
/// a `.o` beside it (headers found in every directory holding one), the
/// objects archived into `libbench.a`.
fn makefile(src: &Path) -> anyhow::Result<String> {
    let mut cs = Vec::new();
    let mut incs = std::collections::BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(src.join(&rel))? {
            let e = e?;
            let p = rel.join(e.file_name());
            if e.file_type()?.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "c") {
                cs.push(p.to_string_lossy().into_owned());
            } else if p.extension().is_some_and(|x| x == "h") {
                incs.insert(rel.to_string_lossy().into_owned());
            }
        }
    }
    anyhow::ensure!(!cs.is_empty(), "{}: no C files to build", src.display());
    cs.sort();
    let flags: Vec<String> = incs
        .iter()
        .map(|d| format!("-I./{d}"))
        .chain(["-O0".into(), "-w".into()])
        .collect();
    let objs: Vec<String> = cs.iter().map(|c| c.replace(".c", ".o")).collect();
    Ok(format!(
        "CFLAGS = {}\nlibbench.a: {}\n\tar rcs $@ $^\n%.o: %.c\n\tcc $(CFLAGS) -c $< -o $@\n",
        flags.join(" "),
        objs.join(" ")
    ))
}

/// The first three C files of `src`: what the patch workload changes.
fn patch_targets(src: &Path) -> anyhow::Result<Vec<String>> {
    let mk = makefile(src)?;
    let line = mk
        .lines()
        .find(|l| l.starts_with("libbench.a:"))
        .unwrap_or_default();
    Ok(line
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|o| o.replace(".o", ".c"))
        .collect())
}

/// A unified diff appending a comment to each of `files` (relative to
/// `src`), for `patch -p0`.
fn diff(src: &Path, files: &[String]) -> anyhow::Result<String> {
    let mut d = String::new();
    for f in files {
        let text = std::fs::read_to_string(src.join(f))?;
        let n = text.lines().count();
        let last = text.lines().last().unwrap_or_default();
        d.push_str(&format!(
            "--- {f}\n+++ {f}\n@@ -{n},1 +{n},2 @@\n {last}\n+/* patched by tessera bench prefetch */\n"
        ));
    }
    Ok(d)
}

struct Prepared {
    archive: PathBuf,
    build: Option<(String, Vec<String>, PathBuf)>,
}

/// Archives the tree (and build source) once, outside any mount.
fn prepare(p: &PrefetchParams, work: &Path) -> anyhow::Result<Prepared> {
    let stage = work.join("stage");
    std::fs::create_dir_all(&stage)?;
    let tree = p.tree.canonicalize()?;
    sh(&stage, &format!("cp -r '{}' tree", tree.display()))?;
    let build = match &p.build_src {
        Some(b) => {
            let b = b.canonicalize()?;
            sh(&stage, &format!("cp -r '{}' build", b.display()))?;
            let mk = makefile(&stage.join("build"))?;
            std::fs::write(stage.join("build/Makefile"), &mk)?;
            let targets = patch_targets(&stage.join("build"))?;
            let patch = work.join("bench.patch");
            std::fs::write(&patch, diff(&stage.join("build"), &targets)?)?;
            Some((mk, targets, patch))
        }
        None => None,
    };
    let archive = work.join("tree.tar");
    sh(
        &stage,
        &format!(
            "tar cf '{}' tree{}",
            archive.display(),
            if build.is_some() { " build" } else { "" }
        ),
    )?;
    sh(work, "rm -rf stage")?;
    Ok(Prepared { archive, build })
}

/// Runs `script` in `<mount>/w` through a fresh mount with prefetch `n`.
fn on_fresh_mount(
    rt: &tokio::runtime::Runtime,
    cl: &LocalCluster,
    n: u32,
    work: &Path,
    script: &str,
) -> anyhow::Result<Run> {
    let mut cfg = ClientConfig::new(&cl.mds_addr(), &cl.cluster_id, cl.admin()?);
    cfg.prefetch = n;
    cfg.early_answers = true;
    crate::mounted::mounted(rt, cfg, work, |probe, mp| {
        let s0 = probe.stats();
        let w = mp.join("w");
        std::fs::create_dir_all(&w)?;
        let t = Instant::now();
        sh(&w, script)?;
        let seconds = t.elapsed().as_secs_f64();
        let s = probe.stats();
        Ok(Run {
            mandatory: s.mds_mandatory - s0.mds_mandatory,
            non_mandatory: s.mds_non_mandatory - s0.mds_non_mandatory,
            seconds,
        })
    })
}

/// Every workload for one policy with prefetch `n`, on a fresh cluster.
fn workloads(
    rt: &tokio::runtime::Runtime,
    work: &Path,
    policy: PolicyKind,
    n: u32,
    prep: &Prepared,
) -> anyhow::Result<Vec<(String, Run)>> {
    let dir = work.join(format!("{}-{n}", policy.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut opts = FormatOptions::new("prefetchbench", LayoutSpec::default());
    opts.policy = IdPolicy::new(policy, Geometry::default()).map_err(anyhow::Error::msg)?;
    let cl = rt
        .block_on(LocalCluster::start(&dir.join("cluster"), 3, 2 << 30, &opts))
        .map_err(anyhow::Error::msg)?;
    let mut out = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        let untar = format!("tar xf '{}'", prep.archive.display());
        out.push(("untar".into(), on_fresh_mount(rt, &cl, n, &dir, &untar)?));
        if let Some((_, _, patch)) = &prep.build {
            out.push((
                "build".into(),
                on_fresh_mount(rt, &cl, n, &dir, "cd build && make -s -j2")?,
            ));
            let script = format!(
                "cd build && patch -s -p0 < '{}' && make -s -j2",
                patch.display()
            );
            out.push(("patch".into(), on_fresh_mount(rt, &cl, n, &dir, &script)?));
        }
        let search = "find . -type f | xargs grep -l zq_tessera_absent_string_qz";
        out.push(("search".into(), on_fresh_mount(rt, &cl, n, &dir, search)?));
        Ok(())
    })();
    rt.block_on(cl.stop()).map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    Ok(out)
}

/// Runs every policy with prefetch 32 and 0.
pub fn run(p: &PrefetchParams) -> anyhow::Result<Vec<PrefetchRow>> {
    let work = p.dir.join(format!("prefetch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let res = run_in(p, &work);
    let _ = std::fs::remove_dir_all(&work);
    res
}

fn run_in(p: &PrefetchParams, work: &Path) -> anyhow::Result<Vec<PrefetchRow>> {
    let prep = prepare(p, work)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for &policy in &p.policies {
        let with = workloads(&rt, work, policy, 32, &prep)?;
        let without = workloads(&rt, work, policy, 0, &prep)?;
        for ((w, a), (_, b)) in with.into_iter().zip(without) {
            rows.push(PrefetchRow {
                policy: policy.name().into(),
                workload: w,
                with: a,
                without: b,
            });
        }
    }
    Ok(rows)
}

/// Prints the table.
pub fn print(rows: &[PrefetchRow]) {
    println!(
        "prefetch, live: each workload on a fresh mount of a fresh cluster (MDS + 3 OSDs on 127.0.0.1); MDS requests counted by the mount's client"
    );
    println!(
        "{:<15} {:<7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>11} {:>9}",
        "policy",
        "work",
        "mand@32",
        "fetch@32",
        "s@32",
        "mand@0",
        "fetch@0",
        "s@0",
        "eliminated",
        "time 32/0"
    );
    for r in rows {
        println!(
            "{:<15} {:<7} {:>9} {:>9} {:>8.2} {:>9} {:>9} {:>8.2} {:>10.1}% {:>9.3}",
            r.policy,
            r.workload,
            r.with.mandatory,
            r.with.non_mandatory,
            r.with.seconds,
            r.without.mandatory,
            r.without.non_mandatory,
            r.without.seconds,
            100.0 * r.eliminated(),
            r.with.seconds / r.without.seconds
        );
    }
}

/// The figure: per workload and policy, the prefetch-32 run's mandatory
/// and non-mandatory requests as a percentage of the prefetch-0 run's total
/// (Hendricks et al. figure 3).
pub fn chart(rows: &[PrefetchRow], path: &Path) -> anyhow::Result<()> {
    let cats: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {}", r.workload, short(&r.policy)))
        .collect();
    let pct = |r: &PrefetchRow, v: u64| {
        let t = r.without.mandatory + r.without.non_mandatory;
        if t == 0 {
            0.0
        } else {
            100.0 * v as f64 / t as f64
        }
    };
    let stacks = vec![
        (
            "mandatory".to_string(),
            rows.iter().map(|r| pct(r, r.with.mandatory)).collect(),
        ),
        (
            "non-mandatory".to_string(),
            rows.iter().map(|r| pct(r, r.with.non_mandatory)).collect(),
        ),
    ];
    sim::plot::stacked_bars_svg(
        path,
        "MDS requests with prefetch 32, % of prefetch 0",
        "object-id policy and workload",
        "% of requests without prefetch",
        &cats,
        &stacks,
    )
}

fn short(policy: &str) -> &str {
    match policy {
        "create-order" => "co",
        "pseudo-random" => "pr",
        "child-closest" => "cc",
        "cousin-closest" => "cz",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_makefile_and_patch_cover_the_sources() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib/common")).unwrap();
        std::fs::write(d.path().join("lib/common/a.c"), "int a;\nint b;\n").unwrap();
        std::fs::write(d.path().join("lib/common/a.h"), "int a;\n").unwrap();
        std::fs::write(d.path().join("lib/z.c"), "int z;\n").unwrap();
        let mk = makefile(d.path()).unwrap();
        assert!(mk.contains("libbench.a: lib/common/a.o lib/z.o"), "{mk}");
        assert!(mk.contains("-I./lib/common"), "{mk}");
        let t = patch_targets(d.path()).unwrap();
        assert_eq!(t, vec!["lib/common/a.c", "lib/z.c"]);
        let p = diff(d.path(), &t).unwrap();
        assert!(p.contains("@@ -2,1 +2,2 @@\n int b;\n+/* patched"), "{p}");
        let row = PrefetchRow {
            policy: "child-closest".into(),
            workload: "search".into(),
            with: Run {
                mandatory: 0,
                non_mandatory: 50,
                seconds: 1.0,
            },
            without: Run {
                mandatory: 0,
                non_mandatory: 1000,
                seconds: 2.0,
            },
        };
        assert!((row.eliminated() - 0.95).abs() < 1e-9);
    }
}
