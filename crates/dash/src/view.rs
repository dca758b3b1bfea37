//! What the dashboard's page is sent: the cluster's state as JSON, built
//! from the same status `tessera status` prints, plus the MDS, its
//! clients and (for an admin) the principals.

use serde_json::{Value, json};

use crate::sessions::Viewer;

/// Facts about the MDS serving the dashboard that are not in its status.
#[derive(Debug, Clone, Default)]
pub struct MdsFacts {
    /// Where it serves clients.
    pub addr: String,
    /// Where the dashboard is.
    pub http: String,
}

/// What the page is sent when the MDS cannot read its own state.
pub fn unreadable(e: &proto::mds::MdsError) -> Value {
    json!({
        "health": {"level": "HEALTH_ERR", "reasons": [format!("the MDS cannot read its state: {e}")]},
        "error": e.to_string(),
    })
}

/// The client rows `viewer` may see: every principal's for an admin;
/// for anyone else its own row and the others only as totals (a tenant
/// does not learn the names of the others).
fn clients(mds: &mds::Mds, viewer: &Viewer) -> Value {
    let rows = mds.clients();
    if viewer.admin {
        return json!({"rows": rows, "others": null});
    }
    let (mine, others): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|r| r.principal == viewer.principal);
    json!({
        "rows": mine,
        "others": {
            "principals": others.len(),
            "connections": others.iter().map(|r| r.connections).sum::<usize>(),
        },
    })
}

/// The whole state for `viewer`, from the MDS's `status`.
pub fn state(
    mds: &mds::Mds,
    status: &proto::mds::ClusterStatus,
    facts: &MdsFacts,
    viewer: &Viewer,
) -> Value {
    let h = status.health();
    let r = &status.redundancy;
    let space = proto::space::usable(&status.osds, r.max_replicas);
    let eta_s = r.bytes_left.checked_div(r.rate_bps);
    let principals = if viewer.admin {
        let mut list = mds.principals.list();
        list.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        Value::Array(
            list.into_iter()
                .map(|p| {
                    json!({
                        "name": p.spec.name,
                        "path": p.spec.path,
                        "access": match p.spec.access {
                            proto::mds::Access::ReadOnly => "ro",
                            proto::mds::Access::ReadWrite => "rw",
                        },
                        "uids": p.spec.uids.to_string(),
                        "admin": p.spec.admin,
                        "key_version": p.key_version,
                        "created_ms": p.created_ms,
                    })
                })
                .collect(),
        )
    } else {
        Value::Null
    };
    json!({
        "now_ms": proto::clock::now_ms(),
        "me": {"principal": viewer.principal, "admin": viewer.admin},
        "health": {"level": h.level, "reasons": h.reasons},
        "cluster": {
            "id": status.cluster_id,
            "epoch": status.epoch,
            "inodes": status.inodes,
            "id_policy": status.id_policy,
            "namespace": match mds.namespace {
                proto::mds::NamespaceMode::Mds => "mds",
                proto::mds::NamespaceMode::Osd => "osd",
            },
        },
        "mds": {
            "members": [{
                "addr": facts.addr,
                "role": "leader",
                "up": true,
                "lag": 0,
            }],
            "replicated": false,
            "uptime_s": mds.uptime().as_secs(),
            "dashboard": facts.http,
            "mandatory": status.mandatory,
            "non_mandatory": status.non_mandatory,
            "delete_queue": status.delete_queue,
            "orphans": status.orphans,
            "early_pending": mds.early_pending(),
            "replay_wait": status.replay_wait.map(|(n, ms)| json!({"sessions": n, "ms_left": ms})),
        },
        "space": {
            "raw_capacity": space.raw_capacity,
            "raw_used": space.raw_used,
            "copies": space.copies,
            "capacity": space.capacity,
            "avail": space.avail,
        },
        "osds": status.osds,
        "redundancy": status.redundancy,
        "recovery": {
            "objects_left": r.objects_left,
            "bytes_left": r.bytes_left,
            "rate_bps": r.rate_bps,
            "eta_s": eta_s,
            "bytes_recovered": r.bytes_recovered,
        },
        "clients": clients(mds, viewer),
        "principals": principals,
    })
}
