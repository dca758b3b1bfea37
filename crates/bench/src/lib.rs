//! Benchmark suites. Each runs Tessera and its baselines side by side in one
//! run on the same device and reports ratios, because this machine's disk
//! speed drifts between runs while ratios in one run hold.
//!
//! - [`store_bench`]: the OBFS object mix on the store vs ext4/XFS flat
//!   directories vs fio's ceilings on the raw device.

pub mod agreement;
pub mod dirops;
pub mod fio;
pub mod fs_bench;
pub mod group_bench;
pub mod loopdev;
pub mod meta_bench;
pub mod mix;
pub mod mounted;
pub mod osd_bench;
pub mod plot;
pub mod prefetch_bench;
pub mod programs_bench;
pub mod replication;
pub mod small_bench;
pub mod stats;
pub mod store_bench;
pub mod target;

/// Runs `f` in a fresh scratch directory `<dir>/<name>-<pid>`, removed
/// afterwards whatever `f` answered; `f`'s answer.
pub fn in_scratch<T>(
    dir: &std::path::Path,
    name: &str,
    f: impl FnOnce(&std::path::Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let work = dir.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| {
        anyhow::anyhow!("cannot make the scratch directory {}: {e}", work.display())
    })?;
    let res = f(&work);
    let _ = std::fs::remove_dir_all(&work);
    res
}
