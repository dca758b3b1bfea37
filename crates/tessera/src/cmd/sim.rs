//! `tessera sim …`: the simulators that reproduce the seeds' long-run
//! experiments with the real code (see docs/SIMULATORS.md).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sim::alloc::files::{self, Start};
use sim::alloc::{AllocParams, Outcome, RunResult, SimPolicy};

use crate::args;

#[derive(clap::Subcommand)]
pub enum SimCmd {
    /// Allocation aging (EBOFS §6.3): the store's real allocators and
    /// write-placement rules, in memory, under a long-running workload.
    ///
    /// Many write streams advance in small increments at once; new streams
    /// arrive as old ones finish; most objects are small but most bytes are
    /// in large objects; most deletions hit young (temporary) objects; the
    /// device is held at the target utilization. Every policy, spacing and
    /// utilization listed is one run (comma-separated lists make a matrix).
    ///
    /// Writes into --out: <run>.json (log-spaced samples), SVG figures
    /// (extents per object, extent size of multi-extent objects, extent-size
    /// histogram per run, free-space shape), and <run>.checkpoint.json.
    /// Ctrl-C stops at the next checkpoint; --resume continues it (and can
    /// extend a finished run to a larger --ops).
    ///
    /// Example: tessera sim alloc --ops 1e8 --policy extent,region --utilization 0.7,0.8,0.9
    Alloc(AllocArgs),
    /// Trace-driven metadata prefetch (Hendricks et al. §4.2): how many MDS requests
    /// prefetching N neighbours saves, per object-id policy and per client.
    ///
    /// Reads NFS traces in the nfsdump text format of the Harvard traces
    /// (EECS03, DEAS03, CAMPUS; decompress them first, or pipe with `-`) or
    /// Tessera's path format (see docs/SIMULATORS.md). Rebuilds the
    /// namespace the trace touches, numbers it with each policy (the MDS's
    /// own code), then replays every client through the client's own
    /// segmented-LRU cache, with and without prefetch. Malformed lines and
    /// replies without calls are counted and skipped.
    ///
    /// Writes into --out: trace.json, figure4.svg (requests per policy,
    /// mandatory and non-mandatory, as % of no prefetch) and figure5.svg
    /// (per client).
    ///
    /// Example: zcat lair62b.gz > t.txt && tessera sim trace t.txt --prefetch 32
    Trace(TraceArgs),
    /// Run a command under strace and write what an NFS client of the
    /// traced tree would have asked its server, as an nfsdump trace for
    /// `sim trace`: one LOOKUP per path component a process has not looked
    /// up, GETATTR per stat, READDIRPLUS per directory read, CREATE,
    /// REMOVE, RENAME, SETATTR… as the system calls say.
    ///
    /// Example: tessera sim record --root /mnt/t/src -o search.nfs -- sh -c 'find . -type f | xargs grep -l x'
    Record(super::sim_record::RecordArgs),
    /// Convert a strace log recorded as `sim record` records it into an nfsdump trace.
    ConvertStrace(super::sim_record::ConvertArgs),
    /// Write a synthetic trace in the path format (a random tree; clients
    /// walking it depth- and breadth-first, making temporary files).
    TraceGen(TraceGenArgs),
}

/// Flags of `tessera sim trace`.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// Trace files, replayed in the order given (`-` reads standard input).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// nfsdump, path, or auto (from the first record).
    #[arg(long, default_value = "auto")]
    format: String,
    /// Neighbours prefetched per MDS answer.
    #[arg(long, default_value_t = 32)]
    prefetch: usize,
    /// Client cache: demand-segment entries.
    #[arg(long, default_value_t = 2000)]
    demand_entries: usize,
    /// Client cache: prefetch-segment entries.
    #[arg(long, default_value_t = 1000)]
    prefetch_entries: usize,
    /// Cached entries and listings sent ahead answer this many seconds of
    /// trace time (a live mount's attribute timeout is 1); default: until
    /// evicted, as Hendricks et al.'s simulator keeps them.
    #[arg(long)]
    attr_timeout: Option<f64>,
    /// Policies to compare (create-order, pseudo-random, child-closest, cousin-closest).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "create-order,pseudo-random,child-closest,cousin-closest"
    )]
    policy: Vec<String>,
    /// Output directory.
    #[arg(long, default_value = "sim-trace")]
    out: PathBuf,
}

/// Flags of `tessera sim trace-gen`.
#[derive(clap::Args)]
pub struct TraceGenArgs {
    /// Where the trace goes.
    out: PathBuf,
    /// Clients.
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// Directories.
    #[arg(long, default_value_t = 2000)]
    dirs: usize,
    /// Files.
    #[arg(long, default_value_t = 40000)]
    files: usize,
    /// Deepest directory level.
    #[arg(long, default_value_t = 8)]
    max_depth: u32,
    /// Directories one session walks at most.
    #[arg(long, default_value_t = 50)]
    walk: usize,
    /// Chance per visited directory of a temporary file.
    #[arg(long, default_value_t = 0.2)]
    temp_fraction: f64,
    /// Lines to write.
    #[arg(long, default_value = "2e5", value_parser = count)]
    lines: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Flags of `tessera sim alloc`; defaults are the documented workload.
#[derive(clap::Args)]
pub struct AllocArgs {
    /// Operations per run (write increments + deletions); 1e8 takes minutes.
    #[arg(long, default_value = "1e7", value_parser = count)]
    ops: u64,
    /// Allocators to age: extent (EBOFS) and/or region (OBFS).
    #[arg(long, default_value = "extent", value_delimiter = ',')]
    policy: Vec<SimPolicy>,
    /// Target utilizations (fractions), e.g. 0.7,0.8,0.9.
    #[arg(long, default_value = "0.8", value_delimiter = ',')]
    utilization: Vec<f64>,
    /// Extent policy: size buckets every N powers of two (1 = tightest).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    spacing: Vec<u32>,
    /// Output directory.
    #[arg(long, default_value = "sim-alloc")]
    out: PathBuf,
    /// Seed of the workload's random numbers (same seed, same results).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Continue runs from their checkpoints in --out.
    #[arg(long)]
    resume: bool,
    /// Runs at once (each uses one core).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Seconds between checkpoints.
    #[arg(long, default_value_t = 60)]
    checkpoint_secs: u64,
    /// Simulated device size.
    #[arg(long, default_value = "100G", value_parser = args::size)]
    disk: u64,
    /// Write streams in progress at once.
    #[arg(long, default_value_t = 16)]
    streams: usize,
    /// Bytes one write operation appends.
    #[arg(long, default_value = "64K", value_parser = args::size)]
    increment: u64,
    /// Fraction of objects that are small.
    #[arg(long, default_value_t = 0.9)]
    small_fraction: f64,
    /// Smallest small object (sizes are log-uniform in each range).
    #[arg(long, default_value = "4K", value_parser = args::size)]
    small_min: u64,
    /// Largest small object.
    #[arg(long, default_value = "512K", value_parser = args::size)]
    small_max: u64,
    /// Smallest large object.
    #[arg(long, default_value = "1M", value_parser = args::size)]
    large_min: u64,
    /// Largest large object.
    #[arg(long, default_value = "64M", value_parser = args::size)]
    large_max: u64,
    /// Fraction of objects that are temporary (deleted young).
    #[arg(long, default_value_t = 0.6)]
    temp_fraction: f64,
    /// Mean life of a temporary object, in operations after it is written.
    #[arg(long, default_value = "1e5", value_parser = count)]
    temp_life: u64,
    /// Region policy: region size.
    #[arg(long, default_value = "8M", value_parser = args::size)]
    region_size: u64,
    /// Region policy: large-block size.
    #[arg(long, default_value = "512K", value_parser = args::size)]
    large_block: u64,
}

/// Parses a count such as `1000000`, `1e8` or `2.5e6`.
fn count(s: &str) -> Result<u64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a count (examples: 1000000, 1e8)"))?;
    if !(v.is_finite() && (1.0..=1e15).contains(&v)) || v.fract() != 0.0 {
        return Err(format!("'{s}' is not a whole count between 1 and 1e15"));
    }
    Ok(v as u64)
}

/// Runs a `tessera sim` command.
pub fn run(cmd: SimCmd) -> anyhow::Result<i32> {
    match cmd {
        SimCmd::Alloc(a) => alloc(a),
        SimCmd::Trace(a) => trace(a),
        SimCmd::TraceGen(a) => trace_gen(a),
        SimCmd::Record(a) => super::sim_record::record(a),
        SimCmd::ConvertStrace(a) => super::sim_record::convert_cmd(a),
    }
}

fn alloc(a: AllocArgs) -> anyhow::Result<i32> {
    let mut runs = Vec::new();
    for &policy in &a.policy {
        let spacings = if policy == SimPolicy::Extent {
            a.spacing.clone()
        } else {
            vec![1]
        };
        for &spacing in &spacings {
            for &utilization in &a.utilization {
                let p = AllocParams {
                    ops: a.ops,
                    policy,
                    spacing,
                    region_size: a.region_size,
                    large_block: a.large_block,
                    disk: a.disk,
                    utilization,
                    streams: a.streams,
                    increment: a.increment,
                    small_fraction: a.small_fraction,
                    small_min: a.small_min,
                    small_max: a.small_max,
                    large_min: a.large_min,
                    large_max: a.large_max,
                    temp_fraction: a.temp_fraction,
                    temp_life: a.temp_life,
                    seed: a.seed,
                };
                p.validate()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.label()))?;
                if !runs.iter().any(|r: &AllocParams| r.label() == p.label()) {
                    runs.push(p);
                }
            }
        }
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    // Check every run can start before spending time on any.
    let mut starts = Vec::new();
    for p in &runs {
        starts.push(files::start(&a.out, p, a.resume)?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    watch_ctrl_c(stop.clone());
    let bars = MultiProgress::new();
    let queue = std::sync::Mutex::new(starts.into_iter().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::<(RunResult, Outcome)>::new());
    let every = Duration::from_secs(a.checkpoint_secs.max(1));
    let jobs = a.jobs.clamp(1, runs.len().max(1));
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let Some(start) = queue.lock().expect("queue").pop() else {
                            return Ok(());
                        };
                        let r = one_run(&a.out, start, &stop, every, &bars)?;
                        results.lock().expect("results").push(r);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))??;
        }
        Ok(())
    })?;
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(r, _)| runs.iter().position(|p| p.label() == r.label));
    let stopped = results.iter().any(|(_, o)| *o == Outcome::Stopped);
    print_table(&results);
    let finished: Vec<RunResult> = results
        .into_iter()
        .filter(|(_, o)| *o == Outcome::Finished)
        .map(|(r, _)| r)
        .collect();
    if !finished.is_empty() {
        let figs = files::write_figures(&a.out, &finished)?;
        println!(
            "\nresults and {} figures in {}",
            figs.len(),
            a.out.display()
        );
    }
    if stopped {
        println!("stopped: run the same command with --resume to continue");
        return Ok(130);
    }
    Ok(0)
}

fn one_run(
    dir: &Path,
    start: Start,
    stop: &AtomicBool,
    every: Duration,
    bars: &MultiProgress,
) -> anyhow::Result<(RunResult, Outcome)> {
    let mut sim = match start {
        Start::Done(r) => return Ok((r, Outcome::Finished)),
        Start::Fresh(s) | Start::Resumed(s) => s,
    };
    let label = sim.params().label();
    let total = sim.params().ops;
    let first = sim.ops_done();
    let bar = bars.add(ProgressBar::new(total));
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>16} {bar:30} {human_pos}/{human_len} ops  {per_sec}  ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(label.clone());
    bar.set_position(first);
    bar.reset_eta();
    let t = Instant::now();
    let cp = files::checkpoint_path(dir, &label);
    let outcome = sim.run(
        stop,
        every,
        |ops| bar.set_position(ops),
        |s| s.checkpoint().save(&cp),
    )?;
    let secs = t.elapsed().as_secs_f64();
    let rate = (sim.ops_done() - first) as f64 / secs.max(1e-9);
    bar.finish();
    let r = match outcome {
        Outcome::Finished => files::finish(dir, &sim, rate)?,
        Outcome::Stopped => sim.result(rate),
    };
    Ok((r, outcome))
}

fn print_table(results: &[(RunResult, Outcome)]) {
    println!(
        "\n{:<16} {:>12} {:>11} {:>8} {:>9} {:>12} {:>12} {:>10} {:>9}",
        "run",
        "ops",
        "ops/s",
        "util",
        "ext/obj",
        "multi KiB",
        "extent KiB",
        "free ext",
        "free frag"
    );
    for (r, o) in results {
        let Some(s) = r.samples.last() else { continue };
        let ops = if *o == Outcome::Stopped {
            format!("{} (stopped)", r.ops_done)
        } else {
            r.ops_done.to_string()
        };
        println!(
            "{:<16} {:>12} {:>11.0} {:>7.1}% {:>9.3} {:>12.0} {:>12.0} {:>10} {:>9.3}",
            r.label,
            ops,
            r.ops_per_sec,
            s.utilization * 100.0,
            s.extents_per_object,
            s.multi_extent_kib,
            s.extent_kib,
            s.free_extents,
            s.free_fragmentation
        );
    }
}

/// Sets `stop` on Ctrl-C or SIGTERM; a second Ctrl-C exits at once.
fn watch_ctrl_c(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            super::wait_for_signal().await;
            eprintln!("\nstopping at the next checkpoint (Ctrl-C again to quit now)…");
            stop.store(true, Ordering::Relaxed);
            super::wait_for_signal().await;
            std::process::exit(130);
        });
    });
}

fn open_lines(p: &Path) -> anyhow::Result<Box<dyn std::io::BufRead>> {
    if p == Path::new("-") {
        return Ok(Box::new(std::io::BufReader::new(std::io::stdin())));
    }
    let f = std::fs::File::open(p).with_context(|| format!("cannot open trace {}", p.display()))?;
    Ok(Box::new(std::io::BufReader::new(f)))
}

/// nfsdump if the first record's fifth field is a direction (C3, R3…).
fn looks_like_nfsdump(p: &Path) -> anyhow::Result<bool> {
    if p == Path::new("-") {
        anyhow::bail!(
            "--format auto cannot look ahead in standard input: say --format nfsdump or path"
        );
    }
    for line in open_lines(p)?.lines().take(1000) {
        let line = line?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        return Ok(f.len() > 5 && matches!(f[4], "C3" | "R3" | "C2" | "R2"));
    }
    Ok(false)
}

fn trace(a: TraceArgs) -> anyhow::Result<i32> {
    use sim::trace::{nfsdump, pathfmt, replay::ReplayConfig, report};
    let policies = a
        .policy
        .iter()
        .map(|p| mds::ids::PolicyKind::parse(p).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let nfs = match a.format.as_str() {
        "nfsdump" => true,
        "path" => false,
        "auto" => looks_like_nfsdump(&a.traces[0])?,
        other => anyhow::bail!("unknown --format {other:?}: use nfsdump, path or auto"),
    };
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} reading {msg}: {human_pos} lines  {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let t0 = Instant::now();
    let t = if nfs {
        let mut p = nfsdump::Parser::new();
        for f in &a.traces {
            bar.set_message(f.display().to_string());
            for line in open_lines(f)?.lines() {
                p.line(&line.with_context(|| format!("reading {}", f.display()))?);
                bar.inc(1);
            }
        }
        p.finish()
    } else {
        let mut readers = Vec::new();
        for f in &a.traces {
            readers.push(open_lines(f)?);
        }
        let lines = readers
            .into_iter()
            .flat_map(|r| r.lines())
            .inspect(|_| bar.inc(1));
        pathfmt::parse_lines(lines).context("reading the trace")?
    };
    bar.finish_and_clear();
    let st = &t.stats;
    println!(
        "{} lines ({}) in {:.1} s: {} events from {} clients; skipped {} malformed, {} replies without a call, {} calls without a reply, {} failed, {} ignored",
        st.lines,
        if nfs { "nfsdump" } else { "path format" },
        t0.elapsed().as_secs_f64(),
        st.events,
        t.clients.len(),
        st.malformed,
        st.orphan_replies,
        st.unanswered_calls,
        st.failed,
        st.ignored
    );
    for ex in &st.examples {
        println!("  malformed {ex}");
    }
    if t.events.is_empty() {
        anyhow::bail!("the trace holds no metadata operations the simulator can replay");
    }
    let cfg = ReplayConfig {
        prefetch: a.prefetch,
        demand_entries: a.demand_entries,
        prefetch_entries: a.prefetch_entries,
        attr_timeout_ms: a.attr_timeout.map(|s| (s.max(0.0) * 1000.0) as u64),
    };
    let s = report::study(&t, &cfg, &policies).map_err(anyhow::Error::msg)?;
    let ns = &s.namespace;
    println!(
        "namespace: {} nodes ({} directories; {} before the trace, {} created; {} with no known parent)",
        ns.nodes, ns.dirs, ns.preexisting, ns.created, ns.orphans
    );
    println!(
        "without prefetch: {} MDS requests ({} mandatory, {} non-mandatory)\n",
        s.baseline.total(),
        s.baseline.mandatory,
        s.baseline.non_mandatory
    );
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>9} {:>12}",
        "policy", "requests", "mandatory", "non-mand", "% of none", "prefetch hits"
    );
    for p in &s.policies {
        println!(
            "{:<16} {:>10} {:>10} {:>10} {:>8.1}% {:>12}",
            p.policy,
            p.requests.total(),
            p.requests.mandatory,
            p.requests.non_mandatory,
            p.mandatory_percent + p.non_mandatory_percent,
            p.requests.prefetch_hits
        );
    }
    let files = s.write(&a.out)?;
    println!(
        "\nwrote {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(0)
}

fn trace_gen(a: TraceGenArgs) -> anyhow::Result<i32> {
    use sim::trace::generate::{GenParams, generate};
    if !(0.0..=1.0).contains(&a.temp_fraction) {
        anyhow::bail!("--temp-fraction must be in [0, 1], not {}", a.temp_fraction);
    }
    if a.clients == 0 || a.dirs == 0 || a.walk == 0 {
        anyhow::bail!("--clients, --dirs and --walk must be at least 1");
    }
    let p = GenParams {
        clients: a.clients,
        dirs: a.dirs,
        files: a.files,
        max_depth: a.max_depth,
        walk: a.walk,
        temp_fraction: a.temp_fraction,
        lines: a.lines,
        seed: a.seed,
    };
    let f =
        std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let n = generate(&p, &mut w)?;
    std::io::Write::flush(&mut w)?;
    println!("wrote {n} lines to {}", a.out.display());
    Ok(0)
}
