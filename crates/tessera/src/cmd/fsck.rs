//! `tessera fsck`: check every invariant of a store.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};

/// Check a store: label, commit slots, checkpoint and journal checksums,
/// every onode, no block owned twice, free space = complement of used space,
/// index = onodes, and every data block's checksum. Writes nothing.
///
/// Exit status: 0 clean, 1 problems found (each printed), 2 not checkable.
#[derive(clap::Args)]
pub struct Args {
    /// Block device or file holding the store.
    path: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let dev = super::open_device(&a.path)?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("verifying data {bar:40} {pos}/{len} blocks ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = match store::fsck::fsck(dev, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }) {
        Ok(r) => r,
        Err(e) => {
            bar.finish_and_clear();
            eprintln!("{}: cannot be checked: {e}", a.path.display());
            return Ok(2);
        }
    };
    bar.finish_and_clear();
    println!(
        "{}: {} partitions, {} objects, {} blocks used, {} free, {} data blocks verified, {} journal batches replayed{}",
        a.path.display(),
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
