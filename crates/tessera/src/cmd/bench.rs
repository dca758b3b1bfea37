//! `tessera bench …`: benchmark suites, each against its baselines in the
//! same run on the same device.

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// The OBFS object benchmark: the store vs ext4 and XFS (one file per
    /// object in a flat directory, fsync per object) vs fio on the raw device.
    ///
    /// Makes a loop device (direct I/O) over a file in --dir, runs fio's
    /// ceilings, then for each target ages the device to 60 % with random
    /// creates and deletes and times create-write, cold read, rewrite and
    /// delete of the mix (80 % 512 KiB, 20 % 1 KiB–512 KiB) with 1 and 16
    /// workers, plus durable 4 KiB creates. Prints every figure and the
    /// ratios; writes JSON and an SVG chart into --dir. Needs root.
    Store {
        /// About two minutes on a 2 GiB device (default is 8 GiB and longer).
        #[arg(long)]
        quick: bool,
        /// Print the report as JSON on stdout instead of tables.
        #[arg(long)]
        json: bool,
        /// Where the loop device's backing file and the outputs go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Directory operations with the namespace on the OSDs (Ali et al.): the
    /// atomic protocol (one compare-and-swap per insert or remove) and the
    /// lock-based one, against the MDS namespace, in one run.
    ///
    /// Starts three clusters of two OSDs on 127.0.0.1 and measures the
    /// median and p99 latency of create, mkdir, unlink, rmdir, lookup and
    /// readdir as one directory fills to 1k, 10k and 100k entries (1M
    /// without --quick), and their throughput with 1, 4 and 16 clients in
    /// one shared directory; counts OSD commands per insert. Prints tables
    /// and the targets (atomic insert = 1 command, atomic ≥ 2× lock with
    /// 16 clients, flat latency, lookup within 1.2× of the MDS); writes
    /// dirops.json and one latency and one throughput SVG per operation
    /// into --dir.
    Dirops {
        /// 1k/10k/100k entries, 200 samples per point (a few minutes).
        #[arg(long)]
        quick: bool,
        /// Print the report as JSON on stdout instead of tables.
        #[arg(long)]
        json: bool,
        /// Where the clusters (removed afterwards) and the outputs go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// A replicated MDS group's cost: empty-file creates from 1 and 16
    /// tasks against a single MDS and a group of three members (in this
    /// process), every change durable and with early answers, side by
    /// side; prints group ÷ single (target ≥ 0.7).
    Group {
        /// 500 creates per task (default 2,000; ×4 with one task).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the MDSs and the OSDs go (removed afterwards).
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Metadata: create, stat, readdir, unlink from 1, 4 and 16 tasks,
    /// Tessera's MDS against a local directory on the same disk.
    Meta {
        /// Fewer operations (well under a minute).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the MDS, the OSD and the local directory go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
        /// Instead: fill one directory with this many entries (e.g. 1000000)
        /// and show paginated readdir, lookup latency against a small
        /// directory, and the MDS's memory per cached inode.
        #[arg(long)]
        big_dir: Option<u64>,
    },
    /// The whole file system: a sequential file written with fsync and read
    /// cold, 4 KiB random reads at depth 1, and empty-file creates from one
    /// process — through the FUSE mount, through the client library, and on
    /// local ext4 (loop device over a file on the same disk), in one run.
    /// Prints the figures and the ratios to ext4. Needs root.
    Fs {
        /// 1 GiB file, 3,000 random reads, 2,000 creates (default: 4 GiB, 20,000, 10,000).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the cluster, the ext4 image and the mount point go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Small files through the FUSE mount: empty-file creates and unlinks
    /// by 1, 4 and 16 worker threads, in one shared directory and in one
    /// directory per worker, with local ext4 (loop device over a file on
    /// the same disk) in the same run. Prints both and the ratio. Needs root.
    Small {
        /// 2,000 files per point (default 10,000).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the cluster, the ext4 image and the mount point go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Real programs' metadata work: `tar x` of a 400-directory tree of
    /// 10,000 small files, `git clone` of a repository of it and `rm -rf`,
    /// on local ext4 (loop device over a file on the same disk), through
    /// `bindfs` over that ext4 (a FUSE pass-through: the floor any FUSE
    /// file system starts from; skipped when not installed) and through a
    /// Tessera mount, in one run; every result checked (`tar -d`, `git
    /// fsck`). Prints seconds and the ratios. Needs root.
    Programs {
        /// 40 directories × 25 files (default 400 × 25).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the cluster, the ext4 image and the mount points go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Replication under both policies (copies in layouts with the
    /// namespace in the MDS, replica chains with it on the OSDs): write
    /// MB/s with 1, 2 and 3 copies (one disk: the ideal for R copies is
    /// 1/R), cold read healthy and with an OSD holding a copy stopped,
    /// recovery of that OSD's loss (1 GiB of two-copy data on four OSDs;
    /// the OSD marked out after the read) — its time to HEALTH_OK and its
    /// rate, as the other OSDs' stores gain the bytes —
    /// and the rebalance onto a fifth OSD added, against fio's sequential
    /// write of the same disk, in one run. Needs root (a loop device for fio).
    Replication {
        /// 256 MiB per write test (default 1 GiB); the recovery is 1 GiB either way.
        #[arg(long)]
        quick: bool,
        /// Which policy: mds (copies in layouts), osd (replica chains) or both.
        #[arg(long, default_value = "both", value_parser = ["mds", "osd", "both"])]
        namespace: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the cluster and the loop device's file go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// Server-driven metadata prefetching, live (Hendricks et al. figure
    /// 3): untar a real source tree, build C sources with make and cc,
    /// patch three files and rebuild, and search the tree with find and
    /// grep — each on a fresh mount — with prefetch 32 and 0, for each
    /// object-id policy. Prints MDS requests (mandatory and fetches) and
    /// wall time; writes the figure as SVG. Needs root (FUSE).
    Prefetch {
        /// The child-closest policy only (default: all four).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the clusters and the archive go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
        /// A real source tree to untar and search (default: the `crates/`
        /// directory of the checkout this binary was built from; a larger
        /// tree of your own gives steadier figures).
        #[arg(long)]
        tree: Option<PathBuf>,
        /// C sources to build and patch (any directory holding .c files,
        /// e.g. an unpacked zlib or zstd); without it the build and patch
        /// workloads are not run.
        #[arg(long)]
        build_src: Option<PathBuf>,
        /// Where the figure goes.
        #[arg(long, default_value = "prefetch-figure3.svg")]
        chart: PathBuf,
    },
    /// Does `sim trace` agree with the live mount? Runs one workload
    /// through a real FUSE mount under strace with prefetch 32 and 0 (a
    /// fresh cluster each), converts the recorded run to an nfsdump trace
    /// and replays it in the simulator; prints the share of non-mandatory
    /// MDS requests prefetching eliminated, live and simulated. Needs
    /// root (FUSE) and strace.
    ///
    /// Example: tessera bench agreement --workload compile --tree T, where T
    /// is a copy of /usr/lib/python3.11 without its __pycache__ directories
    /// (`find T -name __pycache__ -prune -exec rm -rf {} +`): a tree already
    /// compiled gives compileall nothing to do.
    Agreement {
        /// search (`find | xargs grep`) or compile (`python3 -m compileall`).
        #[arg(long, default_value = "search")]
        workload: String,
        /// The tree to copy into the mount and run over.
        #[arg(long)]
        tree: PathBuf,
        /// Keep the converted nfsdump trace here.
        #[arg(long)]
        keep_trace: Option<PathBuf>,
        /// Mount without directory leases (the paper's clients have none;
        /// a mount takes them by default).
        #[arg(long)]
        no_dir_leases: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the clusters and traces go.
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
    /// The OSD over loopback TCP against the same store in-process: 512 KiB
    /// writes and reads and 4 KiB create-and-writes at queue depth 1 and 16,
    /// in one run. Prints both and the ratio.
    Osd {
        /// Fewer operations (about half a minute).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Where the store file goes (written in full first).
        #[arg(long, default_value = "./tessera-data/bench")]
        dir: PathBuf,
    },
}

pub fn run(c: BenchCmd) -> anyhow::Result<i32> {
    match c {
        BenchCmd::Fs { quick, json, dir } => {
            let p = if quick {
                bench::fs_bench::FsParams {
                    file: 1 << 30,
                    random_reads: 3000,
                    creates: 2000,
                    appends: 8192,
                    log_appends: 2000,
                }
            } else {
                bench::fs_bench::FsParams {
                    file: 4 << 30,
                    random_reads: 20_000,
                    creates: 10_000,
                    appends: 65_536,
                    log_appends: 8_000,
                }
            };
            emit(json, &bench::fs_bench::run(&dir, p)?, |r| {
                bench::fs_bench::print(r, p)
            })
        }
        BenchCmd::Small { quick, json, dir } => {
            let files = if quick { 2_000 } else { 10_000 };
            emit(json, &bench::small_bench::run(&dir, files)?, |r| {
                bench::small_bench::print(r, files)
            })
        }
        BenchCmd::Programs { quick, json, dir } => programs(quick, json, &dir),
        c @ (BenchCmd::Meta { .. } | BenchCmd::Group { .. }) => metadata(c),
        BenchCmd::Dirops { quick, json, dir } => {
            let cfg = if quick {
                bench::dirops::Config::quick(dir)
            } else {
                bench::dirops::Config::full(dir)
            };
            emit(json, &bench::dirops::run(&cfg)?, bench::dirops::print)
        }
        BenchCmd::Replication {
            quick,
            namespace,
            json,
            dir,
        } => {
            use bench::replication::Policies;
            let p = bench::replication::ReplParams {
                write: if quick { 256 << 20 } else { 1 << 30 },
                recover: 1 << 30,
                fio_secs: 5,
                policies: match namespace.as_str() {
                    "mds" => Policies::Mds,
                    "osd" => Policies::Osd,
                    _ => Policies::Both,
                },
            };
            emit(json, &bench::replication::run(&dir, p)?, |r| {
                bench::replication::print(r, p)
            })
        }
        BenchCmd::Prefetch {
            quick,
            json,
            dir,
            tree,
            build_src,
            chart,
        } => {
            let tree = match tree {
                Some(t) => t,
                None => {
                    // This repository's own sources (no build output).
                    let t = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
                    anyhow::ensure!(
                        t.join("tessera").is_dir(),
                        "no --tree given and the checkout this binary was built from ({}) \
                         is gone: name a real source tree with --tree",
                        t.display()
                    );
                    t
                }
            };
            let policies = if quick {
                vec![mds::ids::PolicyKind::ChildClosest]
            } else {
                mds::ids::PolicyKind::ALL.to_vec()
            };
            let p = bench::prefetch_bench::PrefetchParams {
                tree,
                build_src,
                policies,
                dir,
            };
            let rows = bench::prefetch_bench::run(&p)?;
            bench::prefetch_bench::chart(&rows, &chart)?;
            let code = emit(json, &rows, |r| bench::prefetch_bench::print(r))?;
            if !json {
                println!("figure: {}", chart.display());
            }
            Ok(code)
        }
        BenchCmd::Agreement {
            workload,
            tree,
            keep_trace,
            no_dir_leases,
            json,
            dir,
        } => agreement(&workload, tree, keep_trace, !no_dir_leases, json, dir),
        BenchCmd::Osd { quick, json, dir } => emit(
            json,
            &bench::osd_bench::run(&dir, if quick { 400 } else { 2000 })?,
            |r| bench::osd_bench::print(r),
        ),
        BenchCmd::Store { quick, json, dir } => {
            let cfg = if quick {
                bench::store_bench::Config::quick(dir.clone())
            } else {
                bench::store_bench::Config::full(dir.clone())
            };
            let report = bench::store_bench::run(&cfg)?;
            let json_text = serde_json::to_string_pretty(&report)?;
            let json_path = dir.join("store-bench.json");
            std::fs::write(&json_path, &json_text)
                .with_context(|| format!("cannot write {}", json_path.display()))?;
            let bars: Vec<(String, f64)> = report
                .ratios
                .iter()
                .map(|r| {
                    (
                        r.what.split(" (").next().unwrap_or(&r.what).to_string(),
                        r.ratio,
                    )
                })
                .collect();
            let svg = dir.join("store-bench.svg");
            bench::plot::ratios_svg(&svg, "Tessera store vs best of ext4/XFS and fio", &bars)?;
            if json {
                println!("{json_text}");
            } else {
                bench::store_bench::print(&report);
                println!("\nwrote {} and {}", json_path.display(), svg.display());
            }
            Ok(0)
        }
    }
}

/// Prints results as JSON or with the suite's table printer.
fn emit<R: serde::Serialize + ?Sized>(
    json: bool,
    r: &R,
    table: impl Fn(&R),
) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        table(r);
    }
    Ok(0)
}

/// `tessera bench agreement`.
fn agreement(
    workload: &str,
    tree: PathBuf,
    keep_trace: Option<PathBuf>,
    dir_leases: bool,
    json: bool,
    dir: PathBuf,
) -> anyhow::Result<i32> {
    let p = bench::agreement::AgreementParams {
        tree,
        workload: bench::agreement::Workload::parse(workload).map_err(anyhow::Error::msg)?,
        dir,
        keep_trace,
        dir_leases,
    };
    emit(json, &bench::agreement::run(&p)?, |a| {
        bench::agreement::print(a)
    })
}

/// `bench meta` and `bench group`: the metadata server's own figures.
/// `bench programs`: the full tree or the quick one.
fn programs(quick: bool, json: bool, dir: &std::path::Path) -> anyhow::Result<i32> {
    let t = bench::programs_bench::Tree {
        dirs: if quick { 40 } else { 400 },
        files: 25,
        seed: 7,
    };
    emit(json, &bench::programs_bench::run_bench(dir, t)?, |r| {
        bench::programs_bench::print(r, t)
    })
}

fn metadata(c: BenchCmd) -> anyhow::Result<i32> {
    match c {
        BenchCmd::Meta {
            json,
            dir,
            big_dir: Some(n),
            ..
        } => emit(json, &bench::meta_bench::big_dir(&dir, n)?, |r| {
            bench::meta_bench::print_big(r)
        }),
        BenchCmd::Meta {
            quick, json, dir, ..
        } => emit(
            json,
            &bench::meta_bench::run(&dir, if quick { 1000 } else { 10_000 })?,
            |r| bench::meta_bench::print(r),
        ),
        BenchCmd::Group { quick, json, dir } => emit(
            json,
            &bench::group_bench::run(&dir, if quick { 500 } else { 2000 })?,
            |r| bench::group_bench::print(r),
        ),
        _ => unreachable!("metadata is given bench meta or bench group"),
    }
}
