//! `tessera sim record` and `tessera sim convert-strace`: a real program's
//! run as an nfsdump trace for `tessera sim trace` (see docs/SIMULATORS.md).

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sim::trace::strace::{ConvertStats, convert_log, strace_command};

/// Flags of `tessera sim record`.
#[derive(clap::Args)]
pub struct RecordArgs {
    /// The traced file system: calls on paths below it become NFS
    /// requests; everything else is left out. Default: the current directory.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Where the nfsdump trace goes.
    #[arg(long, short)]
    out: PathBuf,
    /// Keep strace's own output here too.
    #[arg(long)]
    keep_strace: Option<PathBuf>,
    /// The command to run (after `--`), in the current directory.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

/// Flags of `tessera sim convert-strace`.
#[derive(clap::Args)]
pub struct ConvertArgs {
    /// Output of `strace -f -q -ttt -y -v -s 65535 -e trace=…` (see `tessera sim record`).
    strace: PathBuf,
    /// The traced file system (absolute).
    #[arg(long)]
    root: PathBuf,
    /// The directory the traced command started in. Default: --root.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Where the nfsdump trace goes.
    #[arg(long, short)]
    out: PathBuf,
}

/// Absolute, with symlinks resolved where the path exists (strace prints
/// descriptors' real paths).
fn abs(p: &Path) -> anyhow::Result<String> {
    let p = match p.canonicalize() {
        Ok(c) => c,
        Err(_) => std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))?,
    };
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// Converts the strace log at `input` into the nfsdump trace at `out`.
pub fn convert(input: &Path, root: &str, cwd: &str, out: &Path) -> anyhow::Result<ConvertStats> {
    let f = std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let w = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let (mut w, stats) = convert_log(std::io::BufReader::new(f), root, cwd, BufWriter::new(w))
        .with_context(|| format!("converting {}", input.display()))?;
    std::io::Write::flush(&mut w)?;
    Ok(stats)
}

fn report(s: &ConvertStats, out: &Path) {
    println!(
        "{} strace lines, {} system calls: {} NFS requests written to {} ({} calls outside the root left out)",
        s.lines,
        s.calls,
        s.requests,
        out.display(),
        s.outside
    );
}

/// `tessera sim record`.
pub fn record(a: RecordArgs) -> anyhow::Result<i32> {
    let cwd = abs(&std::env::current_dir()?)?;
    let root = match &a.root {
        Some(r) => abs(r)?,
        None => cwd.clone(),
    };
    let log = match &a.keep_strace {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join(format!("tessera-strace-{}.txt", std::process::id())),
    };
    let command: Vec<&str> = a.command.iter().map(String::as_str).collect();
    let status = strace_command(&log, &command)
        .status()
        .context("running strace (is the strace package installed?)")?;
    let stats = convert(&log, &root, &cwd, &a.out);
    if a.keep_strace.is_none() {
        let _ = std::fs::remove_file(&log);
    }
    report(&stats?, &a.out);
    if !status.success() {
        println!("note: the command exited with {status}");
    }
    Ok(0)
}

/// `tessera sim convert-strace`.
pub fn convert_cmd(a: ConvertArgs) -> anyhow::Result<i32> {
    let root = abs(&a.root)?;
    let cwd = match &a.cwd {
        Some(c) => abs(c)?,
        None => root.clone(),
    };
    let stats = convert(&a.strace, &root, &cwd, &a.out)?;
    report(&stats, &a.out);
    Ok(0)
}
