//! `bench replication` with copies recorded in layouts (namespace in the
//! MDS): one cluster, a directory per replica count; the loss is the OSD
//! of a file's preferred copy; recovery's bytes are the MDS's own count.

use std::path::Path;

use anyhow::Context;
use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::{FormatOptions, MdsConfig};
use proto::layout::LayoutSpec;
use proto::mds::{ClusterStatus, Creds, ROOT_INO};

use super::{ReplParams, ReplReport, lose, read_file, rebalance, write_file, write_recovered_data};

/// Settings before format (format keeps an existing mds.toml): quick
/// failure detection, no recovery throttle, frequent passes.
pub(super) fn quick_mds_config(mds_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(mds_dir)?;
    let cfg = MdsConfig {
        heartbeat_ms: 300,
        down_after_ms: 1500,
        recovery_interval_ms: 200,
        recovery_mib_per_sec: 0,
        ..MdsConfig::default()
    };
    std::fs::write(mds_dir.join("mds.toml"), toml::to_string_pretty(&cfg)?)?;
    Ok(())
}

/// Healthy, every recovery and backfill copy made.
fn settled(s: &ClusterStatus) -> bool {
    s.health().level == "HEALTH_OK"
        && s.redundancy.checked
        && s.redundancy.objects_left == 0
        && s.redundancy.misplaced == 0
}

/// The whole measurement under `work` (fio's figures are added by the caller).
pub(super) async fn measure(work: &Path, p: ReplParams) -> anyhow::Result<ReplReport> {
    quick_mds_config(&work.join("mds"))?;
    let opts = FormatOptions::new("replbench", LayoutSpec::default());
    // Room for half of every copy written on each OSD: objects are whole
    // files here (one stripe), so after a loss three OSDs can hold the
    // data unevenly, and none may reach the 85 % warning.
    let osd_size = (p.write * 7 + p.recover * 2) / 2 + (512 << 20);
    let mut cl = LocalCluster::start(work, 4, osd_size, &opts)
        .await
        .context("cannot start the cluster")?;
    let ccfg = ClientConfig::new(&cl.mds_addr(), "replbench", cl.admin()?);
    let c = Client::connect(ccfg.clone()).await?;
    let mut dirs = [0u64; 3];
    for r in 1..=3u8 {
        let d = c
            .mkdir(&Creds::root(), ROOT_INO, &format!("r{r}"), 0o755)
            .await?;
        let spec = LayoutSpec {
            replicas: r,
            ..LayoutSpec::default()
        };
        c.set_layout(&Creds::root(), d.attr.ino, spec).await?;
        dirs[r as usize - 1] = d.attr.ino;
    }
    // Writes: 1, 2, 3 copies (and 1 again, to see drift).
    let mut w = [0f64; 3];
    for (i, &d) in dirs.iter().enumerate() {
        w[i] = write_file(&c, d, "big", p.write).await?;
    }
    let w1b = write_file(&c, dirs[0], "big2", p.write).await?;
    w[0] = (w[0] + w1b) / 2.0;
    // The data whose loss is recovered: two copies, many files.
    write_recovered_data(&c, dirs[1], p.recover).await?;
    // Only two- and three-copy data from here on: a lost single copy
    // would leave its file unfound, and the cluster never healthy.
    for name in ["big", "big2"] {
        c.unlink(&Creds::root(), dirs[0], name).await?;
    }
    // Reads of a two-copy file, healthy then with its preferred copy's OSD stopped.
    let (healthy, _) = read_file(&ccfg, dirs[1], "big").await?;
    let victim = preferred_copy(&c, dirs[1], "big").await?;
    let read = (&ccfg, dirs[1], "big");
    let (degraded, failover, recovery) = lose(&mut cl, &c, read, victim, settled).await?;
    let rebalance = rebalance(&mut cl, &c, osd_size, settled, true).await?;
    cl.stop().await.map_err(anyhow::Error::msg)?;
    Ok(super::report(
        "mds",
        w,
        (healthy, degraded, failover),
        recovery,
        rebalance,
    ))
}

/// The OSD holding the first recorded copy of `dir/name`'s first stripe.
async fn preferred_copy(c: &Client, dir: u64, name: &str) -> anyhow::Result<u32> {
    let ent = c.lookup(&Creds::root(), dir, name).await?;
    let layout = c
        .layout(&Creds::root(), ent.attr.ino)
        .await?
        .context("no layout")?;
    layout
        .homes
        .first()
        .and_then(|h| h.stripes.first())
        .and_then(|s| s.fresh.first())
        .copied()
        .context("no recorded copy")
}
