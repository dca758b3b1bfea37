//! `tessera mkfs`: format a block device or a file as an object store.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use store::device::{Device, FileDevice};
use store::{FormatOptions, Policy};

use crate::args;

/// Format a block device or a file as a Tessera object store.
///
/// On a regular file that does not exist (or is smaller than --size) the
/// file is created and its space preallocated. Refuses a device holding a
/// file system or another store unless --force.
///
/// Example: tessera mkfs /dev/nvme1n1 --policy region
///          tessera mkfs ./osd0.img --size 8G
#[derive(clap::Args)]
pub struct Args {
    /// Block device or file to format.
    path: PathBuf,
    /// Size to create a file with (ignored for block devices).
    #[arg(long, value_parser = args::size)]
    size: Option<u64>,
    /// Allocation policy: extent (EBOFS closest good fit) or region (OBFS
    /// regions of small and large blocks).
    #[arg(long, default_value = "extent")]
    policy: Policy,
    /// Large block size: large objects (region policy) get one whole large block each.
    #[arg(long, value_parser = args::size, default_value = "512K")]
    large_block: u64,
    /// Journal size (default: 1/16 of the device, 4M to 256M).
    #[arg(long, value_parser = args::size)]
    journal: Option<u64>,
    /// Overwrite a device that holds a file system or store.
    #[arg(long)]
    force: bool,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let dev: Arc<dyn Device> = match (a.path.exists(), a.size) {
        (true, None) => super::open_device(&a.path)?,
        (true, Some(size)) => {
            let meta = std::fs::metadata(&a.path)?;
            if meta.is_file() && meta.len() < size {
                Arc::new(FileDevice::create(&a.path, size)?)
            } else {
                super::open_device(&a.path)?
            }
        }
        (false, Some(size)) => Arc::new(
            FileDevice::create(&a.path, size)
                .with_context(|| format!("cannot create {}", a.path.display()))?,
        ),
        (false, None) => bail!(
            "{} does not exist; pass --size to create a file",
            a.path.display()
        ),
    };
    if a.large_block > u64::from(u32::MAX) {
        bail!("--large-block is too large");
    }
    let opts = FormatOptions {
        policy: a.policy,
        large_block: a.large_block as u32,
        journal_len: a.journal,
        force: a.force,
        ..FormatOptions::default()
    };
    let label = store::format(dev.clone(), &opts)?;
    // A new store holds nothing its OSD could have failed to pass down
    // (without the mark, its first start only costs a refill).
    if let Err(e) = osd::chain::mark_new_store(&a.path, &label.uuid) {
        eprintln!(
            "note: cannot mark {} as a new store ({e}): its OSD's first start will ask the MDS",
            a.path.display()
        );
    }
    println!(
        "formatted {}: {} data, {} journal, policy {}, large block {}, store id {}",
        a.path.display(),
        super::human(label.data_len),
        super::human(label.journal_len),
        label.policy.name(),
        super::human(u64::from(label.large_block)),
        label
            .uuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    Ok(0)
}
