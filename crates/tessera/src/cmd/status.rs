//! `tessera status`: the cluster at a glance — map epoch, inodes, MDS
//! requests, one row per OSD (exit status 2 while an OSD is down).

use anyhow::bail;
use net::MdsClient;
use proto::mds::{MdsReply, Op};

use super::{human, runtime};

/// Show the cluster: OSDs up/down with space, inodes, request counts.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub to: super::cluster::Target,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tessera status`.
pub fn status(a: StatusArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let (mds_addr, cluster) = a.to.resolve()?;
        let c = MdsClient::new(&mds_addr, &cluster, 1);
        let s = match c.call(Op::Status).await? {
            MdsReply::Status(s) => s,
            r => bail!("unexpected reply {r:?}"),
        };
        if a.json {
            println!("{}", serde_json::to_string_pretty(&*s)?);
            return Ok(0);
        }
        print_status(&s);
        Ok(if s.osds.iter().all(|o| o.up) { 0 } else { 2 })
    })
}

/// Prints cluster status as a table: map, inodes, MDS request counts, one row per OSD.
pub fn print_status(s: &proto::mds::ClusterStatus) {
    println!(
        "cluster {}  map epoch {}  inodes {}  id policy {}",
        s.cluster_id, s.epoch, s.inodes, s.id_policy
    );
    println!(
        "MDS requests: {} mandatory, {} non-mandatory; {} files waiting for object deletion",
        s.mandatory, s.non_mandatory, s.delete_queue
    );
    println!(
        "{:>4}  {:<22} {:>5} {:>7} {:>11} {:>11} {:>9}",
        "OSD", "address", "state", "weight", "used", "capacity", "objects"
    );
    for o in &s.osds {
        println!(
            "{:>4}  {:<22} {:>5} {:>7.2} {:>11} {:>11} {:>9}",
            o.id,
            o.addr,
            if o.up { "up" } else { "DOWN" },
            f64::from(o.weight) / f64::from(proto::placement::WEIGHT_ONE),
            human(o.used),
            human(o.capacity),
            o.objects
        );
    }
}
