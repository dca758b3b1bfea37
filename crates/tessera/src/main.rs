//! `tessera`: one binary for every part of Tessera. Each subcommand lives in
//! its own module under `cmd/`; this file only parses the command line and
//! sets up logging.

mod args;
mod cmd;

use clap::{Parser, Subcommand};

/// Tessera: an object-based distributed storage system.
///
/// Files are striped into objects on object storage devices (OSDs); each OSD
/// runs Tessera's own object store straight on a raw device or a file. Start
/// with `tessera up` (a whole cluster on this machine), then see `tessera <command> --help`.
#[derive(Parser)]
#[command(name = "tessera", version, about, long_about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format a device or file as an object store.
    Mkfs(cmd::mkfs::Args),
    /// Check a store's every invariant; exit 0 only when clean.
    Fsck(cmd::fsck::Args),
    /// Operate on objects straight on a store (no daemon needed).
    #[command(subcommand)]
    Store(cmd::store_ops::StoreCmd),
    /// Make a store in a file, write, read back, verify and print figures.
    Demo(cmd::demo::Args),
    /// Run an object storage device daemon on a store; `osd out|in ID`
    /// for operators.
    Osd(cmd::osd::Args),
    /// Make an OSD key file.
    Keygen(cmd::osd::KeygenArgs),
    /// The metadata server: format a file system, serve it, check it.
    #[command(subcommand)]
    Mds(cmd::mds::MdsCmd),
    /// Show the cluster: health first, recovery, OSDs up/down and in/out, space.
    Status(cmd::status::StatusArgs),
    /// Compare every copy of the objects under a path and repair those that differ.
    Scrub(cmd::redundancy::ScrubArgs),
    /// Manage principals: who may mount, confined where, with which rights.
    #[command(subcommand)]
    Auth(cmd::auth::AuthCmd),
    /// Show or set file and directory layouts (stripe unit, count, object size, replicas).
    #[command(subcommand)]
    Layout(cmd::layout::LayoutCmd),
    /// Start a whole local cluster (MDS + OSDs), optionally mounted.
    Up(cmd::up::Args),
    /// Mount a Tessera file system with FUSE.
    Mount(cmd::mount::Args),
    /// Copy a local file into Tessera.
    Put(cmd::files::PutArgs),
    /// Copy a file out of Tessera.
    Get(cmd::files::GetArgs),
    /// List a directory in Tessera.
    Ls(cmd::files::LsArgs),
    /// Remove a file (or a directory with -r) in Tessera.
    Rm(cmd::files::RmArgs),
    /// Make a directory in Tessera.
    Mkdir(cmd::files::MkdirArgs),
    /// Show a path's attributes and layout.
    Stat(cmd::files::StatArgs),
    /// Benchmarks, each against its baselines in the same run.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCmd),
    /// Simulators that reproduce the seeds' long-run experiments with the real code.
    #[command(subcommand)]
    Sim(cmd::sim::SimCmd),
    /// Hunt for lost writes: a local cluster, a checked workload, seeded crashes.
    Thrash(cmd::thrash::Args),
}

fn main() {
    let cli = Cli::parse();
    // The crash test provokes device errors on purpose: keep them quiet
    // unless TESSERA_LOG asks for them.
    let default = match &cli.command {
        Command::Store(cmd::store_ops::StoreCmd::Crashtest { .. }) => "off",
        Command::Osd(_)
        | Command::Up(_)
        | Command::Mount(_)
        // openraft logs every failed attempt to reach a member (ten a
        // second while one is down) and every vote it ignores; the group
        // logs a member going and coming back itself.
        | Command::Mds(cmd::mds::MdsCmd::Serve { .. }) => "info,openraft=error,openraft::replication=off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TESSERA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A short-lived command whose output is piped (`tessera status | head`)
    // ends quietly when the reader goes away, as other tools do; daemons
    // keep Rust's default (a peer closing a socket is an error, not a kill).
    let daemon = matches!(
        &cli.command,
        Command::Osd(_)
            | Command::Up(_)
            | Command::Mount(_)
            | Command::Mds(cmd::mds::MdsCmd::Serve { .. })
    );
    if !daemon {
        // SAFETY: restoring the default disposition of SIGPIPE before any
        // thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    } else {
        raise_open_files_limit();
    }
    let result = match cli.command {
        Command::Mkfs(a) => cmd::mkfs::run(a),
        Command::Fsck(a) => cmd::fsck::run(a),
        Command::Store(c) => cmd::store_ops::run(c),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Sim(c) => cmd::sim::run(c),
        Command::Thrash(a) => cmd::thrash::run(a),
        Command::Osd(a) => cmd::osd::run(a),
        Command::Keygen(a) => cmd::osd::keygen(a),
        Command::Mds(c) => cmd::mds::run(c),
        Command::Status(a) => cmd::status::status(a),
        Command::Scrub(a) => cmd::redundancy::scrub(a),
        Command::Layout(c) => cmd::layout::layout(c),
        Command::Auth(c) => cmd::auth::auth(c),
        Command::Up(a) => cmd::up::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Put(a) => cmd::files::put(a),
        Command::Get(a) => cmd::files::get(a),
        Command::Ls(a) => cmd::files::ls(a),
        Command::Rm(a) => cmd::files::rm(a),
        Command::Mkdir(a) => cmd::files::mkdir(a),
        Command::Stat(a) => cmd::files::stat(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("tessera: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// A daemon serves thousands of connections (`max_connections`, 4,096 by
/// default): its soft limit of open files goes up to the hard one.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `lim`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::warn!("could not raise the open files limit");
            }
        }
    }
}
