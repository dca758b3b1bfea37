//! `bench replication` with replica chains (namespace on the OSDs): the
//! copy count is the file system's, so one cluster per replica count; the
//! loss is the head of a file's group (reads go to heads, so they wait for
//! its lease to run out); recovery's and rebalance's bytes are what the
//! OSDs' stores gained, as they report it (fills go OSD to OSD).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::{LayoutSpec, data_oid};
use proto::mds::{ClusterStatus, Creds, NamespaceMode, ROOT_INO};

use super::on_mds::quick_mds_config;
use super::{Moved, ReplParams, ReplReport, mark_out, read_file, settle, write_file};

/// Healthy, every chain whole and none filling.
fn settled(s: &ClusterStatus) -> bool {
    s.health().level == "HEALTH_OK"
        && s.redundancy.groups_degraded == 0
        && s.redundancy.groups_filling == 0
}

/// Bytes in use on the OSDs `which` selects, as last reported.
fn used(s: &ClusterStatus, which: impl Fn(u32) -> bool) -> u64 {
    s.osds.iter().filter(|o| which(o.id)).map(|o| o.used).sum()
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
    let per = (64u64 << 20).min(p.recover);
    for k in 0..p.recover.div_ceil(per) {
        write_file(&c, ROOT_INO, &format!("data{k}"), per).await?;
    }
    let (healthy, _) = read_file(&ccfg, ROOT_INO, "big").await?;
    let victim = head_of(&c, "big").await?;
    // Recovery is watched from the loss on, while the degraded read runs
    // (the chain drops the OSD once its lease runs out, and fills a joiner).
    let others = move |s: &ClusterStatus| used(s, |o| o != victim);
    let before = others(&c.status().await?);
    let lost = Instant::now();
    let watch = settle(&c, (before, others), settled, Duration::ZERO, true);
    let lose = async {
        cl.stop_osd(victim).await.map_err(anyhow::Error::msg)?;
        let read = read_file(&ccfg, ROOT_INO, "big").await?;
        mark_out(&cl, victim).await?;
        anyhow::Ok(read)
    };
    let (watched, read) = tokio::join!(watch, lose);
    let (degraded, failover) = read?;
    let recovery = watched?.moved(lost);
    let rebalance = rebalance(&mut cl, &c, osd_size).await?;
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

/// Adds an OSD and waits until the chains placement now puts partly on it
/// have filled it (nothing moves when placement keeps every group where
/// it was: whole groups move, not objects).
async fn rebalance(cl: &mut LocalCluster, c: &Client, size: u64) -> anyhow::Result<Moved> {
    let added = Instant::now();
    let new = cl.add_osd(size).await.map_err(anyhow::Error::msg)?;
    let on_new = move |s: &ClusterStatus| used(s, |o| o == new);
    // Its own used bytes once it first reported (a new store's own
    // bookkeeping), counted from there.
    let start = loop {
        let s = c.status().await?;
        if s.osds.iter().any(|o| o.id == new && o.capacity > 0) {
            break on_new(&s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let quiet = Duration::from_secs(3);
    Ok(settle(c, (start, on_new), settled, quiet, false)
        .await?
        .moved(added))
}
