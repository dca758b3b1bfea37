//! A link cut between two members of a replica chain while both still
//! reach the MDS: three OSDs, each in a network namespace of its own (the
//! several-hosts harness), the namespace on the OSDs with three copies,
//! and a blackhole route each way between the root group's head and its
//! successor. Creates in the root wait or fail (the head cannot pass them
//! on, and the MDS does not drop a successor that is up), never
//! acknowledged on fewer copies; the health line names the cut
//! (HEALTH_ERR) within seconds; once the link is mended creates go
//! through, health is OK again, and every acknowledged file reads back
//! with the old head killed (from the member across the cut).
//!
//! Needs root and `ip` (iproute2), as CI has.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::cluster::{Cluster, content, read_file_in, runtime, write_file_in};
use common::hosts::Hosts;
use proto::mds::{MdsReply, Op, ROOT_INO};

/// The root group's chain members, head first.
async fn root_chain(cl: &Cluster) -> Vec<u32> {
    let m = net::MdsClient::new(&cl.mds_addr, common::cluster::CLUSTER, cl.admin(), 1);
    let g = match m.call(Op::NamespaceGrant).await.unwrap() {
        MdsReply::Namespace(g) => *g,
        other => panic!("namespace grant answered {other:?}"),
    };
    let group = g.root_osd.expect("the root is made");
    g.chains.unwrap().chain(group).unwrap().members.clone()
}

#[test]
fn a_cut_between_chain_members_is_named_in_health_and_loses_nothing() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: network namespaces need root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = Hosts::make(3);
    runtime().block_on(async {
        let mut cl =
            Cluster::start_on_hosts(dir.path(), &hosts, (3, 3), "", &["--namespace", "osd"]);
        cl.wait_healthy(60).await;
        let c = Arc::new(cl.client().await);
        for i in 0..4 {
            write_file_in(&c, ROOT_INO, &format!("before-{i}"), &content(i, 20_000))
                .await
                .unwrap();
        }
        let chain = root_chain(&cl).await;
        assert_eq!(chain.len(), 3, "three copies: {chain:?}");
        let (head, next) = (chain[0], chain[1]);
        hosts.cut(head as usize, next as usize, true);
        // The head's idle connections to its successor are closed by
        // keepalive within about 3 s; a forward already under way on one
        // would wait out the 60 s reply timeout first (REDUNDANCY.md).
        tokio::time::sleep(Duration::from_secs(4)).await;
        // Creates in the root: each needs the root's chain.
        let writers: Vec<_> = (0..3u64)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    let name = format!("during-{i}");
                    let r = write_file_in(&c, ROOT_INO, &name, &content(100 + i, 20_000)).await;
                    (name, 100 + i, r.is_ok())
                })
            })
            .collect();
        // Named once a forward fails (a new connect fails at once here)
        // and the MDS has waited out a lease.
        let st = cl
            .wait_for("the cut named in health", 75, |s| {
                s.redundancy.groups_cut > 0
            })
            .await;
        let h = st.health();
        assert_eq!(h.level, "HEALTH_ERR", "{h:?}");
        let named = format!("OSD {head} cannot reach OSD {next}");
        assert!(h.reasons.iter().any(|r| r.contains(&named)), "{h:?}");
        // `status` names the link (and exits non-zero: HEALTH_ERR).
        let out = cl.cli(&["status"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{text}");
        assert!(text.contains(&named), "{text}");
        // Mended: the waiting creates go through and health clears.
        hosts.cut(head as usize, next as usize, false);
        // A create waiting through the cut either goes through now or
        // failed (never acknowledged on fewer copies: checked below).
        let mut acknowledged = Vec::new();
        for w in writers {
            let (name, k, ok) = tokio::time::timeout(Duration::from_secs(60), w)
                .await
                .expect("a create still waits after the link was mended")
                .unwrap();
            if ok {
                acknowledged.push((name, k));
            }
        }
        write_file_in(&c, ROOT_INO, "after", &content(200, 20_000))
            .await
            .unwrap();
        acknowledged.push(("after".into(), 200));
        cl.wait_healthy(60).await;
        // Nobody was dropped for it: the successor kept its place.
        assert_eq!(root_chain(&cl).await, chain, "the root's chain changed");
        // Every acknowledged file is on the member across the cut too:
        // with the head killed, that member leads and answers the reads.
        let files: Vec<(String, u64)> = (0..4u64)
            .map(|i| (format!("before-{i}"), i))
            .chain(acknowledged)
            .collect();
        cl.kill_osd(head);
        cl.wait_for("the old head out of the root's chain", 30, |s| {
            s.osds.iter().any(|o| o.id == head && !o.up)
        })
        .await;
        let fresh = cl.client().await;
        for (name, k) in &files {
            assert_eq!(
                read_file_in(&fresh, ROOT_INO, name).await,
                content(*k, 20_000),
                "{name}, read with OSD {head} (the old head) down"
            );
        }
    });
}
