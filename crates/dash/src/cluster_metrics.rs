//! The cluster as Prometheus gauges, appended to the MDS's `/metrics`:
//! what `status` says (health, OSDs up, down, in and out, space, each
//! OSD's state and space), so one scrape of the MDS is enough for a
//! Grafana overview (`deploy/grafana/tessera.json`). `/metrics` needs no
//! login, so nothing here names a host or a principal: OSDs by id only.

use std::fmt::Write;

use proto::mds::ClusterStatus;

/// The gauges for status `s`, in the Prometheus text format; with no
/// status (the MDS could not read its state), `tessera_cluster_status_ok`
/// 0 and health 2, so an alert on health fires.
pub fn render(s: Option<&ClusterStatus>) -> String {
    let mut o = String::new();
    gauge(
        &mut o,
        "tessera_cluster_status_ok",
        "Whether the MDS could read the cluster's state (the gauges below need it).",
    );
    let _ = writeln!(o, "tessera_cluster_status_ok {}", u8::from(s.is_some()));
    gauge(
        &mut o,
        "tessera_cluster_health",
        "Health: 0 HEALTH_OK, 1 HEALTH_WARN, 2 HEALTH_ERR (reasons in `tessera status`).",
    );
    let Some(s) = s else {
        let _ = writeln!(o, "tessera_cluster_health 2");
        return o;
    };
    let level = match s.health().level {
        "HEALTH_OK" => 0,
        "HEALTH_WARN" => 1,
        _ => 2,
    };
    let _ = writeln!(o, "tessera_cluster_health {level}");
    gauge(
        &mut o,
        "tessera_cluster_osds",
        "OSDs in the map by state (up or down; in or out).",
    );
    let up = s.osds.iter().filter(|x| x.up).count();
    let is_in = s.osds.iter().filter(|x| x.is_in).count();
    for (state, n) in [
        ("up", up),
        ("down", s.osds.len() - up),
        ("in", is_in),
        ("out", s.osds.len() - is_in),
    ] {
        let _ = writeln!(o, "tessera_cluster_osds{{state=\"{state}\"}} {n}");
    }
    let sp = proto::space::usable(&s.osds, s.redundancy.max_replicas);
    gauge(
        &mut o,
        "tessera_cluster_space_bytes",
        "Space: raw capacity and use (every copy counted), and file data still writable at the replica count.",
    );
    for (kind, v) in [
        ("raw_capacity", sp.raw_capacity),
        ("raw_used", sp.raw_used),
        ("writable", sp.avail),
    ] {
        let _ = writeln!(o, "tessera_cluster_space_bytes{{kind=\"{kind}\"}} {v}");
    }
    gauge(
        &mut o,
        "tessera_cluster_osd_up",
        "Whether each OSD heartbeats (1) or not (0).",
    );
    for x in &s.osds {
        let _ = writeln!(
            o,
            "tessera_cluster_osd_up{{osd=\"{}\"}} {}",
            x.id,
            u8::from(x.up)
        );
    }
    gauge(
        &mut o,
        "tessera_cluster_osd_used_bytes",
        "Bytes used on each OSD (as its last heartbeat said).",
    );
    for x in &s.osds {
        let _ = writeln!(
            o,
            "tessera_cluster_osd_used_bytes{{osd=\"{}\"}} {}",
            x.id, x.used
        );
    }
    gauge(
        &mut o,
        "tessera_cluster_osd_capacity_bytes",
        "Capacity of each OSD (as its last heartbeat said).",
    );
    for x in &s.osds {
        let _ = writeln!(
            o,
            "tessera_cluster_osd_capacity_bytes{{osd=\"{}\"}} {}",
            x.id, x.capacity
        );
    }
    if let Some(g) = &s.mds_group {
        group_gauges(&mut o, g);
    }
    o
}

/// A replicated MDS group's gauges (from its leader).
fn group_gauges(o: &mut String, g: &proto::status::GroupStatus) {
    gauge(o, "tessera_mds_group_term", "The MDS group's raft term.");
    let _ = writeln!(o, "tessera_mds_group_term {}", g.term);
    gauge(
        o,
        "tessera_mds_group_leader",
        "The member that leads the MDS group.",
    );
    let _ = writeln!(o, "tessera_mds_group_leader {}", g.leader);
    gauge(
        o,
        "tessera_mds_group_member_up",
        "Whether each MDS group member answered the leader recently (1) or not (0).",
    );
    for m in &g.members {
        let up = m
            .heard_ms
            .is_some_and(|ms| ms <= proto::status::MEMBER_DOWN_MS);
        let _ = writeln!(
            o,
            "tessera_mds_group_member_up{{member=\"{}\"}} {}",
            m.id,
            u8::from(up)
        );
    }
    gauge(
        o,
        "tessera_mds_group_member_lag_entries",
        "Log entries each MDS group member is behind the leader (absent: unknown).",
    );
    for m in &g.members {
        if let Some(i) = m.matched {
            let _ = writeln!(
                o,
                "tessera_mds_group_member_lag_entries{{member=\"{}\"}} {}",
                m.id,
                g.last_log.saturating_sub(i)
            );
        }
    }
}

fn gauge(o: &mut String, name: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_stay_out_of_the_exposition() {
        let s = ClusterStatus {
            cluster_id: "c".into(),
            epoch: 1,
            osds: vec![proto::mds::OsdStatus {
                id: 7,
                addr: String::new(),
                weight: 0,
                up: false,
                is_in: true,
                host: "evil\"} 1\nfake_metric 9".into(),
                last_seen_ms: None,
                capacity: 10,
                used: 4,
                objects: 0,
                rates: Default::default(),
            }],
            inodes: 1,
            id_policy: String::new(),
            mandatory: 0,
            non_mandatory: 0,
            delete_queue: 0,
            orphans: 0,
            redundancy: Default::default(),
            replay_wait: None,
            mds_group: None,
        };
        let text = render(Some(&s));
        assert!(
            text.contains("tessera_cluster_osds{state=\"down\"} 1"),
            "{text}"
        );
        assert!(text.contains("tessera_cluster_health 1"), "{text}");
        assert!(
            !text.contains("evil") && !text.contains("fake_metric"),
            "{text}"
        );
        assert!(
            text.contains("tessera_cluster_osd_up{osd=\"7\"} 0"),
            "{text}"
        );
    }
}
