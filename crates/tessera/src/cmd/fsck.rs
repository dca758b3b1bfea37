//! `tessera fsck`: check every invariant of a store, or (`--namespace`) the
//! namespace a file system keeps on its OSDs.

use std::path::PathBuf;

/// Check a store: label, commit slots, checkpoint and journal checksums,
/// every onode, no block owned twice, free space = complement of used space,
/// index = onodes, and every data block's checksum. Writes nothing.
///
/// With --namespace instead: check the namespace a file system formatted
/// with `--namespace osd` keeps on its OSDs (the cluster of --data, or
/// --mds): finish or undo interrupted renames, find entries naming missing
/// objects, orphan objects, leftover locks and marks, wrong link counts;
/// --repair fixes them. Run it while no client changes the namespace, or
/// keep --grace longer than any operation.
///
/// Exit status: 0 clean, 1 problems found (each printed), 2 not checkable.
///
/// Examples:
///   tessera fsck /dev/loop0
///   tessera fsck --namespace --data tessera-data --repair
#[derive(clap::Args)]
pub struct Args {
    /// Block device or file holding the store.
    path: Option<PathBuf>,
    /// Check the namespace on the OSDs of a running cluster instead.
    #[arg(long)]
    namespace: bool,
    /// With --namespace: repair what is found.
    #[arg(long, requires = "namespace")]
    repair: bool,
    /// With --namespace: objects younger than this many seconds are never orphans.
    #[arg(long, default_value_t = 60.0, requires = "namespace")]
    grace: f64,
    #[command(flatten)]
    target: super::cluster::Target,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let path = match (&a.path, a.namespace) {
        (Some(_), true) => anyhow::bail!("give a store path or --namespace, not both"),
        (None, false) => {
            anyhow::bail!("give the store to check (a device or file), or --namespace")
        }
        (None, true) => return namespace(&a),
        (Some(p), false) => p.clone(),
    };
    let dev = super::open_device(&path)?;
    let bar = super::progress_bar(0, "verifying data {bar:40} {pos}/{len} blocks ({eta})");
    let report = match store::fsck::fsck(dev, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }) {
        Ok(r) => r,
        Err(e) => {
            bar.finish_and_clear();
            eprintln!("{}: cannot be checked: {e}", path.display());
            return Ok(2);
        }
    };
    bar.finish_and_clear();
    println!(
        "{}: {} partitions, {} objects, {} blocks used, {} free, {} data blocks verified, {} journal batches replayed{}",
        path.display(),
        report.partitions,
        report.objects,
        report.used_blocks,
        report.free_blocks,
        report.verified_blocks,
        report.replayed_batches,
        if report.dropped_batch {
            " (last batch was an interrupted commit, dropped)"
        } else {
            ""
        }
    );
    if report.is_clean() {
        println!("clean");
        Ok(0)
    } else {
        for p in &report.problems {
            println!("PROBLEM: {p}");
        }
        println!("{} problems", report.problems.len());
        Ok(1)
    }
}

fn namespace(a: &Args) -> anyhow::Result<i32> {
    if !(a.grace >= 0.0 && a.grace.is_finite()) {
        anyhow::bail!("--grace must be a number of seconds ≥ 0");
    }
    let r = a.target.resolve()?;
    let mds = r.mds.clone();
    let rt = super::runtime()?;
    rt.block_on(async {
        let fs = super::namespace_client(&r).await?;
        let r = match osdns::fsck::fsck(&fs, a.repair, (a.grace * 1000.0) as u64).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("namespace on the OSDs of {mds}: cannot be checked: {e}");
                return Ok(2);
            }
        };
        for l in r.lines() {
            println!("{l}");
        }
        Ok(match (r.clean(), a.repair) {
            (true, _) => 0,
            (false, true) => {
                println!("repaired");
                0
            }
            (false, false) => {
                println!("run again with --repair to fix");
                1
            }
        })
    })
}
