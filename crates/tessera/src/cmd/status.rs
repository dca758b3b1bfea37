//! `tessera status`: the cluster at a glance — one health line first
//! (`HEALTH_OK`, or `HEALTH_WARN` / `HEALTH_ERR` with the reasons), then
//! recovery's progress, map epoch, inodes, MDS requests and one row per
//! OSD (up/down, in/out). Exit status 0 when healthy, 2 otherwise.

use std::time::Duration;

use anyhow::bail;
use net::MdsClient;
use proto::mds::{ClusterStatus, MdsReply, Op};

use super::{human, runtime};

/// Which cluster a command talks to, and whether it prints JSON.
#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub to: super::cluster::Target,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Show the cluster: health, recovery, OSDs up/down and in/out with space.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Redraw every 2 seconds until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// Runs `tessera status`.
pub fn status(a: StatusArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let r = a.cluster.to.resolve()?;
        let c = MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        loop {
            let s = match c.call(Op::Status).await? {
                MdsReply::Status(s) => s,
                r => bail!("unexpected reply {r:?}"),
            };
            if a.cluster.json {
                println!("{}", serde_json::to_string_pretty(&*s)?);
            } else {
                if a.watch {
                    // Clear the screen and go home, then redraw.
                    print!("\x1b[2J\x1b[H");
                }
                print_status(&s);
            }
            if !a.watch {
                return Ok(if s.health().level == "HEALTH_OK" {
                    0
                } else {
                    2
                });
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

/// Prints a replicated MDS group: leader, term, and each member's lag.
fn print_group(g: &proto::status::GroupStatus) {
    println!(
        "MDS group: {} members, leader {}, term {}, log {} (applied {})",
        g.members.iter().filter(|m| m.voter).count(),
        g.leader,
        g.term,
        g.last_log,
        g.applied
    );
    for m in &g.members {
        let role = if m.id == g.leader {
            "leader"
        } else if m.voter {
            "follower"
        } else {
            "joining"
        };
        let heard = match m.heard_ms {
            Some(ms) if ms <= proto::status::MEMBER_DOWN_MS => "up".to_string(),
            Some(ms) => format!("DOWN (last heard {:.1} s ago)", ms as f64 / 1000.0),
            None => "DOWN (not heard since this leader took over)".to_string(),
        };
        let lag = m.matched.map_or("lag unknown".to_string(), |i| {
            format!("lag {} entries", g.last_log.saturating_sub(i))
        });
        println!(
            "  member {:<2} {:<22} {:<8} {heard}, {lag}",
            m.id, m.addr, role
        );
    }
}

/// Prints cluster status: the health line, recovery, map, inodes, MDS
/// request counts, one row per OSD.
pub fn print_status(s: &ClusterStatus) {
    let h = s.health();
    if h.reasons.is_empty() {
        println!("{}", h.level);
    } else {
        println!("{}: {}", h.level, h.reasons.join("; "));
    }
    let r = &s.redundancy;
    // With the namespace on the OSDs, the MDS counts no inodes, stripe
    // objects or namespace requests: the OSDs' own counts stand instead.
    let on_osds = r.groups > 0;
    if on_osds {
        let all: u64 = s.osds.iter().map(|o| o.objects).sum();
        println!(
            "objects: {all} on the OSDs, every copy counted (files and directories: \
             `tessera fsck --namespace`)"
        );
    } else {
        println!(
            "objects: {} stripe objects; {} degraded, {} misplaced, {} unfound, {} inconsistent",
            r.objects, r.degraded, r.misplaced, r.unfound, r.inconsistent
        );
    }
    if r.groups > 0 {
        println!(
            "replica groups (namespace on the OSDs): {} with {} copies each; {} degraded, {} filling a new member, {} unavailable, {} lost every full copy",
            r.groups,
            r.max_replicas,
            r.groups_degraded,
            r.groups_filling,
            r.groups_unavailable,
            r.groups_lost
        );
    }
    for (g, a, b) in &r.cut_links {
        println!(
            "  group {g}: OSD {a} cannot reach OSD {b}, its successor, though both are up: writes to the group fail (check the network between them)"
        );
    }
    if r.objects_left > 0 {
        let eta = match r.bytes_left.checked_div(r.rate_bps) {
            Some(s) => format!("ETA {s}s"),
            None => "ETA unknown".into(),
        };
        println!(
            "recovery: {} objects / {} left at {}/s, {eta}; {} copied since the MDS started",
            r.objects_left,
            human(r.bytes_left),
            human(r.rate_bps),
            human(r.bytes_recovered)
        );
    } else {
        println!(
            "recovery: idle; {} copied since the MDS started",
            human(r.bytes_recovered)
        );
    }
    let inodes = if on_osds {
        "namespace on the OSDs".to_string()
    } else {
        format!("inodes {}", s.inodes)
    };
    println!(
        "cluster {}  map epoch {}  {inodes}  id policy {}",
        s.cluster_id, s.epoch, s.id_policy
    );
    if let Some(g) = &s.mds_group {
        print_group(g);
    }
    let sp = proto::space::usable(&s.osds, r.max_replicas);
    println!(
        "space: raw {} used of {}; at {} copies {} available of {}",
        human(sp.raw_used),
        human(sp.raw_capacity),
        sp.copies,
        human(sp.avail),
        human(sp.capacity)
    );
    if on_osds {
        println!("MDS requests: maps and capabilities only (the namespace is on the OSDs)");
    } else {
        println!(
            "MDS requests: {} mandatory, {} non-mandatory; {} files waiting for object deletion, \
             {} unlinked files kept while open",
            s.mandatory, s.non_mandatory, s.delete_queue, s.orphans
        );
    }
    println!(
        "{:>4}  {:<22} {:<12} {:>8} {:>7} {:>11} {:>11} {:>9}",
        "OSD", "address", "host", "state", "weight", "used", "capacity", "objects"
    );
    for o in &s.osds {
        let state = format!(
            "{},{}",
            if o.up { "up" } else { "DOWN" },
            if o.is_in { "in" } else { "OUT" }
        );
        println!(
            "{:>4}  {:<22} {:<12} {:>8} {:>7.2} {:>11} {:>11} {:>9}",
            o.id,
            o.addr,
            o.host,
            state,
            f64::from(o.weight) / f64::from(proto::placement::WEIGHT_ONE),
            human(o.used),
            human(o.capacity),
            o.objects
        );
    }
}
