//! A replicated MDS group across hosts: each member in a network
//! namespace of its own, joined by a bridge to this test's (the several-
//! hosts harness). The leader is cut off from everyone: the minority (the
//! old leader) stops answering, and a client on its side gets an error —
//! never a success for a change the group did not commit — while the
//! majority elects a new leader and a client there goes on. When the link
//! comes back the old leader rejoins as a follower, every change the
//! clients were answered is there, and the cut-off client's is not.
//!
//! Needs root and `ip` (iproute2), as CI has.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use common::hosts::Hosts;
use net::MdsClient;
use proto::mds::{MdsReply, Op, ROOT_INO};

const CLUSTER: &str = "hosts";

/// The members' processes, killed at the end (their logs printed if the
/// test failed).
struct Members {
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl Members {
    fn start(&mut self, hosts: &Hosts, k: usize) {
        let log = std::fs::File::create(self.dir.join(format!("member-{k}.log"))).unwrap();
        let child = hosts
            .on(k)
            .args(["mds", "serve", "--no-http", "--data"])
            .arg(self.dir.join(format!("member-{k}")))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children[k - 1] = Some(child);
    }

    fn stop_all(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            let mut c = c;
            // SAFETY: kill(2) on a child we own.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            for k in 1..=self.children.len() {
                let text = std::fs::read_to_string(self.dir.join(format!("member-{k}.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("--- member {k}");
                for l in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("{}", l.chars().take(300).collect::<String>());
                }
            }
        }
    }
}

async fn mkdir(c: &MdsClient, name: &str) {
    let r = c
        .call(Op::Mkdir {
            parent: ROOT_INO,
            name: name.into(),
            mode: 0o755,
        })
        .await
        .unwrap();
    assert!(matches!(r, MdsReply::Found(_)), "{r:?}");
}

async fn exists(c: &MdsClient, name: &str) -> bool {
    match c
        .call(Op::Lookup {
            parent: ROOT_INO,
            name: name.into(),
        })
        .await
    {
        Ok(MdsReply::Found(_)) => true,
        Err(net::CallError::Mds(e)) if e.errno == proto::mds::Errno::NoEnt => false,
        other => panic!("lookup {name}: {other:?}"),
    }
}

async fn group(c: &MdsClient) -> proto::status::GroupStatus {
    match c.call(Op::Status).await.unwrap() {
        MdsReply::Status(s) => s.mds_group.clone().unwrap(),
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_leader_cut_off_from_the_others_stops_answering_and_loses_nothing() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: network namespaces need root (as the FUSE tests do)");
        return;
    }
    let hosts = Hosts::make(3);
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["mds", "format", "--data"])
        .arg(tmp.path())
        .args(["--cluster", CLUSTER, "--members", &hosts.list()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut members = Members {
        dir: tmp.path().into(),
        children: vec![None, None, None],
    };
    for k in 1..=3 {
        members.start(&hosts, k);
    }
    let key_path = tmp.path().join("member-1").join("client.admin.key");
    let key = net::auth::ClientKey::load(&key_path).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = MdsClient::new(&hosts.list(), CLUSTER, key.identity().unwrap(), 1);
        let mut names = Vec::new();
        for i in 0..20 {
            names.push(format!("before-{i}"));
            mkdir(&c, names.last().unwrap()).await;
        }
        let old = group(&c).await.leader as usize;
        hosts.link(old, false);
        let cut_at = Instant::now();
        // A client on the old leader's side of the cut.
        let mut minority = hosts
            .on(old)
            .args(["mkdir", "/on-the-minority", "--mds", &hosts.list()])
            .args(["--cluster", CLUSTER, "--key-file"])
            .arg(&key_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The majority elects and serves this side's client. Its
        // connection to the old leader dies without a reset: the request
        // sent on it fails once the kernel gives up on it (3 s), and the
        // next goes to the new leader.
        let mut failed = 0;
        loop {
            let r = c
                .call(Op::Mkdir {
                    parent: ROOT_INO,
                    name: "during-0".into(),
                    mode: 0o755,
                })
                .await;
            match r {
                Ok(MdsReply::Found(_)) => break,
                // Ran before its connection was found dead.
                Err(net::CallError::Mds(e)) if e.errno == proto::mds::Errno::Exist => break,
                Err(net::CallError::Mds(e)) => panic!("{e}"),
                other => {
                    eprintln!("during the failover: {other:?}");
                    failed += 1;
                    assert!(failed <= 3, "{other:?}");
                }
            }
        }
        let served = cut_at.elapsed();
        eprintln!("the majority served {served:?} after the cut ({failed} failed)");
        assert!(served < Duration::from_secs(15), "{served:?}");
        names.push("during-0".into());
        for i in 1..10 {
            names.push(format!("during-{i}"));
            mkdir(&c, names.last().unwrap()).await;
        }
        let new = group(&c).await.leader as usize;
        assert_ne!(new, old, "a new leader on the majority's side");
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(s) = minority.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the minority's client never ended"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let out = minority.wait_with_output().unwrap();
        assert!(
            !status.success(),
            "a client cut off with the old leader was answered: {out:?}"
        );
        eprintln!(
            "the minority's client: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        // The link comes back: the old leader follows, nothing is lost.
        hosts.link(old, true);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let g = group(&c).await;
            let caught_up = g
                .members
                .iter()
                .all(|m| m.heard_ms.is_some_and(|ms| ms < 1000) && m.matched == Some(g.last_log));
            if caught_up {
                break;
            }
            assert!(Instant::now() < deadline, "{g:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let fresh = MdsClient::new(&hosts.list(), CLUSTER, key.identity().unwrap(), 1);
        for n in &names {
            assert!(exists(&fresh, n).await, "{n} was answered and is gone");
        }
        assert!(
            !exists(&fresh, "on-the-minority").await,
            "the cut-off leader's change was not committed, yet it is there"
        );
    });
    members.stop_all();
    for k in 1..=3 {
        common::mds_fsck_clean(&tmp.path().join(format!("member-{k}")));
    }
}
