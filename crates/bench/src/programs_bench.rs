//! `tessera bench programs`: everyday metadata work by real programs —
//! `tar x` of a source-like tree, `git clone` of a repository of it, and
//! `rm -rf` of the tree — on local ext4 (a loop device over a file on the
//! same disk), through a FUSE pass-through of that ext4 (`bindfs`, when
//! installed: what any FUSE file system pays before it does anything of
//! its own), and through a Tessera mount (MDS + 3 OSDs on 127.0.0.1, three
//! copies, the mount's defaults), in one run. Every result is checked:
//! `tar -d` finds no difference after the extraction (contents, modes,
//! owners, mtimes) and `git fsck` and `git status` are clean after the
//! clone. Times are wall-clock seconds of the program; ext4's are
//! page-cache work, as Tessera's early answers are (neither syncs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use client::ClientConfig;
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::LayoutSpec;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::loopdev::{LoopDev, Mount, run};

/// The tree the programs work on.
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// Directories (each directly under the top).
    pub dirs: usize,
    /// Files per directory.
    pub files: usize,
    /// Seed of the file sizes (200–6,000 bytes) and contents.
    pub seed: u64,
}

/// One workload on every side, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramsRow {
    /// "untar", "git clone" or "rm -rf".
    pub workload: String,
    /// Local ext4.
    pub ext4: f64,
    /// `bindfs` over the same ext4 (`None`: bindfs is not installed).
    pub fuse_floor: Option<f64>,
    /// Through the Tessera mount.
    pub tessera: f64,
}

/// Writes the tree under `top` (`top/dNNN/fNN.c`).
fn make_tree(top: &Path, t: Tree) -> anyhow::Result<()> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(t.seed);
    for d in 0..t.dirs {
        let dir = top.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..t.files {
            let mut body = vec![0u8; rng.random_range(200..=6000)];
            rng.fill(&mut body[..]);
            std::fs::write(dir.join(format!("f{f:02}.c")), body)?;
        }
    }
    Ok(())
}

/// The inputs, made once on the host file system under `stage`: the
/// archive and a repository of the same tree.
struct Inputs {
    tar: PathBuf,
    repo: PathBuf,
}

fn inputs(stage: &Path, t: Tree) -> anyhow::Result<Inputs> {
    let src = stage.join("src");
    make_tree(&src, t)?;
    let tar = stage.join("tree.tar");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    run("tar", &["cf", &s(&tar), "-C", &s(stage), "src"])?;
    let repo_s = s(&src);
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let mut all = vec![
            "-C",
            &repo_s,
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@tessera",
        ];
        all.extend_from_slice(args);
        run("git", &all)
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "tree"])?;
    Ok(Inputs { tar, repo: src })
}

/// Runs `cmd args` and its wall time; fails with its stderr.
fn timed(cmd: &str, args: &[&str]) -> anyhow::Result<f64> {
    let t = Instant::now();
    run(cmd, args)?;
    Ok(t.elapsed().as_secs_f64())
}

/// The three workloads in `root` (a directory on the side measured):
/// (untar, git clone, rm -rf) seconds, each result checked — all that
/// `tar -d` compares, or when not `strict` all but mtimes (bindfs loses
/// some: the kernel's cached attributes of a file it just wrote win over
/// the times tar sets after the close).
fn workloads(root: &Path, inp: &Inputs, strict: bool) -> anyhow::Result<[f64; 3]> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let x = root.join("x");
    std::fs::create_dir_all(&x)?;
    let untar = timed("tar", &["xf", &s(&inp.tar), "-C", &s(&x)])?;
    // Contents, sizes, modes, owners and mtimes as archived.
    let diff = Command::new("tar")
        .args(["df", &s(&inp.tar), "-C", &s(&x)])
        .output()?;
    let found: Vec<String> = String::from_utf8_lossy(&diff.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&diff.stderr).lines())
        .filter(|l| strict || !l.ends_with("Mod time differs"))
        .map(str::to_owned)
        .collect();
    if !diff.status.success() && !found.is_empty() {
        bail!(
            "tar -d after the extraction into {} finds differences: {}",
            x.display(),
            found[..found.len().min(5)].join("; ")
        );
    }
    let g = root.join("clone");
    let clone = timed(
        "git",
        &["clone", "-q", "--no-hardlinks", &s(&inp.repo), &s(&g)],
    )?;
    run("git", &["-C", &s(&g), "fsck", "--no-progress"])?;
    let status = run("git", &["-C", &s(&g), "status", "--porcelain"])?;
    if !status.trim().is_empty() {
        bail!("git status after the clone into {}: {status}", g.display());
    }
    let rm = timed("rm", &["-rf", &s(&x)])?;
    if x.exists() {
        bail!("rm -rf left {}", x.display());
    }
    std::fs::remove_dir_all(&g)?;
    Ok([untar, clone, rm])
}

/// Runs every side under `dir` on tree `t`.
pub fn run_bench(dir: &Path, t: Tree) -> anyhow::Result<Vec<ProgramsRow>> {
    crate::in_scratch(dir, "programs-bench", |work| run_in(work, t))
}

/// Whether `bindfs` can be run here.
fn have_bindfs() -> bool {
    Command::new("bindfs")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `bindfs` of `src` on `mp`, unmounted on drop.
struct Bindfs(PathBuf);

impl Bindfs {
    fn mount(src: &Path, mp: &Path) -> anyhow::Result<Bindfs> {
        std::fs::create_dir_all(src)?;
        std::fs::create_dir_all(mp)?;
        run(
            "bindfs",
            &[
                "--multithreaded",
                src.to_str().context("path")?,
                mp.to_str().context("path")?,
            ],
        )?;
        Ok(Bindfs(mp.into()))
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn run_in(work: &Path, t: Tree) -> anyhow::Result<Vec<ProgramsRow>> {
    let inp = inputs(&work.join("stage"), t)?;
    let ld = LoopDev::create(&work.join("ext4.img"), 1 << 30)?;
    let ext4 = Mount::make("ext4", ld.dev(), &work.join("ext4"))?;
    let local = workloads(&ext4.dir.join("plain"), &inp, true)?;
    let floor = if have_bindfs() {
        let b = Bindfs::mount(&ext4.dir.join("under-bindfs"), &work.join("bindfs"))?;
        let r = workloads(&b.0, &inp, false);
        drop(b);
        Some(r?)
    } else {
        None
    };
    drop(ext4);
    drop(ld);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let opts = FormatOptions::new(
        "programsbench",
        LayoutSpec {
            replicas: 3,
            ..LayoutSpec::default()
        },
    );
    let cl = rt
        .block_on(LocalCluster::start(
            &work.join("cluster"),
            3,
            512 << 20,
            &opts,
        ))
        .map_err(anyhow::Error::msg)?;
    let mut cfg = ClientConfig::new(&cl.mds_addr(), "programsbench", cl.admin()?);
    // A mount's defaults (`tessera mount`).
    cfg.early_answers = true;
    let ours = crate::mounted::through_mount(&rt, cl, cfg, work, |mp| workloads(mp, &inp, true))?;
    let names = ["untar", "git clone", "rm -rf"];
    Ok((0..3)
        .map(|i| ProgramsRow {
            workload: names[i].into(),
            ext4: local[i],
            fuse_floor: floor.map(|f| f[i]),
            tessera: ours[i],
        })
        .collect())
}

/// Prints the table with the ratios.
pub fn print(rows: &[ProgramsRow], t: Tree) {
    println!(
        "real programs: a tree of {} directories × {} files (200–6,000 bytes each); Tessera = MDS + 3 OSDs on 127.0.0.1, 3 copies, through the FUSE mount",
        t.dirs, t.files
    );
    println!(
        "{:<10} {:>9} {:>10} {:>10} {:>13} {:>15} {:>16}",
        "workload",
        "ext4 s",
        "bindfs s",
        "tessera s",
        "tessera/ext4",
        "bindfs/ext4",
        "tessera/bindfs"
    );
    let opt = |v: Option<f64>, w: usize, p: usize| {
        v.map_or_else(|| format!("{:>w$}", "-"), |v| format!("{v:>w$.p$}"))
    };
    for r in rows {
        println!(
            "{:<10} {:>9.3} {} {:>10.3} {:>13.1} {} {}",
            r.workload,
            r.ext4,
            opt(r.fuse_floor, 10, 3),
            r.tessera,
            r.tessera / r.ext4,
            opt(r.fuse_floor.map(|f| f / r.ext4), 15, 1),
            opt(r.fuse_floor.map(|f| r.tessera / f), 16, 1),
        );
    }
    if rows.iter().all(|r| r.fuse_floor.is_none()) {
        println!("bindfs is not installed: no FUSE pass-through baseline (apt install bindfs)");
    }
    println!(
        "note: bindfs passes every call to ext4 through FUSE and keeps nothing of its own: bindfs/ext4 is what the kernel's FUSE round trips alone cost these programs. Each result was checked (tar -d; git fsck and git status); bindfs's extraction is checked for all but mtimes, some of which it loses."
    );
}
