//! `bench replication` with replica chains (namespace on the OSDs): the
//! copy count is the file system's, so one cluster per replica count; the
//! loss is the head of a file's group (reads go to heads, so they wait for
//! its lease to run out); recovery's and rebalance's bytes are what the
//! OSDs' stores gained, as they report it (fills go OSD to OSD).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::{LayoutSpec, data_oid};
use proto::mds::{ClusterStatus, Creds, NamespaceMode, ROOT_INO};

use super::on_mds::quick_mds_config;
use super::{
    ReplParams, ReplReport, lose, read_file, rebalance, settle, write_file, write_recovered_data,
};

/// Healthy, every chain whole and none filling.
fn settled(s: &ClusterStatus) -> bool {
    s.health().level == "HEALTH_OK"
        && s.redundancy.groups_degraded == 0
        && s.redundancy.groups_filling == 0
}

/// A cluster of four OSDs keeping `replicas` copies with the namespace
/// on the OSDs, and a client of it.
async fn cluster(
    work: &Path,
    replicas: u8,
    osd_size: u64,
) -> anyhow::Result<(LocalCluster, ClientConfig, Client)> {
    quick_mds_config(&work.join("mds"))?;
    let mut opts = FormatOptions::new(
        "replbench",
        LayoutSpec {
            replicas,
            ..LayoutSpec::default()
        },
    );
    opts.namespace = NamespaceMode::Osd;
    let cl = LocalCluster::start(work, 4, osd_size, &opts)
        .await
        .context("cannot start the cluster")?;
    let ccfg = ClientConfig::new(&cl.mds_addr(), "replbench", cl.admin()?);
    let c = Client::connect(ccfg.clone()).await?;
    // The chains are made from the OSDs' first reports.
    settle(&c, (0, |_| 0), settled, Duration::ZERO, false).await?;
    Ok((cl, ccfg, c))
}

/// The whole measurement under `work` (fio's figures are added by the caller).
pub(super) async fn measure(work: &Path, p: ReplParams) -> anyhow::Result<ReplReport> {
    // Room for half of the most copies one cluster holds on each OSD
    // (whole groups move, so three OSDs can hold four groups unevenly).
    let osd_size = (p.write * 3).max((p.write + p.recover) * 2) / 2 + (512 << 20);
    // Writes at 1 and 3 copies, each on its own cluster, then 2, whose
    // cluster goes on to the loss.
    let mut w = [0f64; 3];
    for r in [1u8, 3] {
        let dir = work.join(format!("r{r}"));
        let (cl, _, c) = cluster(&dir, r, osd_size).await?;
        w[r as usize - 1] = write_file(&c, ROOT_INO, "big", p.write).await?;
        drop(c);
        cl.stop().await.map_err(anyhow::Error::msg)?;
        std::fs::remove_dir_all(&dir)?;
    }
    let (mut cl, ccfg, c) = cluster(&work.join("r2"), 2, osd_size).await?;
    w[1] = write_file(&c, ROOT_INO, "big", p.write).await?;
    write_recovered_data(&c, ROOT_INO, p.recover).await?;
    let (healthy, _) = read_file(&ccfg, ROOT_INO, "big").await?;
    let victim = head_of(&c, "big").await?;
    // The chain drops the OSD once its lease runs out, and fills a joiner.
    let read = (&ccfg, ROOT_INO, "big");
    let (degraded, failover, recovery) = lose(&mut cl, &c, read, victim, settled).await?;
    // Whole groups move, or none: nothing may arrive.
    let rebalance = rebalance(&mut cl, &c, osd_size, settled, false).await?;
    cl.stop().await.map_err(anyhow::Error::msg)?;
    Ok(super::report(
        "osd",
        w,
        (healthy, degraded, failover),
        recovery,
        rebalance,
    ))
}

/// The OSD heading the group that holds `name` (in the root): its data
/// object's group under the current map, which a new cluster's chains
/// are headed by the OSD of the same id.
async fn head_of(c: &Client, name: &str) -> anyhow::Result<u32> {
    let ent = c.lookup(&Creds::root(), ROOT_INO, name).await?;
    let inner = c.inner();
    let map = inner.osds.refresh(&inner.mds).await?;
    map.place(data_oid(ent.attr.ino), 1)
        .first()
        .copied()
        .context("no OSD takes placements")
}
