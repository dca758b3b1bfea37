//! A benchmark's run through a real FUSE mount: a client of a running
//! cluster mounted at `<work>/mnt`, the measure run on it, then unmounted
//! and the cluster stopped (whatever the measure answered).

use std::path::Path;

use client::{Client, ClientConfig};
use local::LocalCluster;

/// Mounts a client made from `cfg` on `<work>/mnt`, runs `measure` on the
/// mount point, unmounts, stops `cluster`; the measure's answer.
pub fn through_mount<T>(
    rt: &tokio::runtime::Runtime,
    cluster: LocalCluster,
    cfg: ClientConfig,
    work: &Path,
    measure: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let out = mounted(rt, cfg, work, |_, mp| measure(mp));
    rt.block_on(cluster.stop()).map_err(anyhow::Error::msg)?;
    out
}

/// Mounts a client made from `cfg` on `<work>/mnt`, runs `measure` with
/// the client (for its counters) and the mount point, unmounts; the
/// measure's answer.
pub fn mounted<T>(
    rt: &tokio::runtime::Runtime,
    cfg: ClientConfig,
    work: &Path,
    measure: impl FnOnce(&Client, &Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let client = rt.block_on(Client::connect(cfg))?;
    let probe = client.clone();
    let mp = work.join("mnt");
    std::fs::create_dir_all(&mp)?;
    let session = tessera_fuse::mount(
        client,
        rt.handle().clone(),
        &mp,
        &tessera_fuse::MountOptions::default(),
    )
    .map_err(anyhow::Error::msg)?;
    let out = measure(&probe, &mp);
    let _ = session.umount_and_join();
    out
}
