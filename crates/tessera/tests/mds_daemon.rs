//! The MDS as a real process: 16 clients storm it with creates, renames,
//! links, unlinks, mkdirs and rmdirs; the namespace is checked; the storm
//! resumes and the MDS is killed with SIGKILL mid-storm and restarted;
//! every acknowledged change must be there, nothing half-done, and once the
//! delete queue drains no OSD holds an object of a file that is gone.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use local::{LocalOsd, operator_cap, osd_dir, provision_osd};
use net::MdsClient;
use net::{ConnConfig, OsdClient};
use proto::layout::DATA_PARTITION;
use proto::mds::{MdsReply, Op, ROOT_INO};
use rand::{Rng, SeedableRng};

const BIN: &str = env!("CARGO_BIN_EXE_tessera");
const CLUSTER: &str = "storm";

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn wait_ready(c: &MdsClient, osds: usize) {
    for _ in 0..400 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().filter(|o| o.up).count() >= osds
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("MDS not ready");
}

/// An operation, the names it touches, and how the model changes if it succeeds.
type Planned = (
    Op,
    Vec<String>,
    Box<dyn FnOnce(&mut Model, &MdsReply) + Send>,
);

/// What one client believes exists (only acknowledged changes), by path.
#[derive(Default)]
struct Model {
    files: HashSet<(u64, String)>,
    dirs: HashSet<(u64, String)>,
    /// Names whose last operation's outcome is unknown (the MDS died).
    uncertain: HashSet<String>,
}

async fn storm_client(
    k: usize,
    first_n: u32,
    mds: MdsClient,
    dirs: Arc<Vec<u64>>,
    model: Arc<Mutex<Model>>,
    osds: Arc<HashMap<u32, String>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let c = Arc::new(mds);
    let tickets = net::auth::TicketsFromMds::new(c.clone());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(k as u64);
    // Names are unique across phases too: a rename onto an existing link of
    // the same file is a POSIX no-op the model does not track.
    let mut n = first_n;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let d = dirs[rng.random_range(0..dirs.len())];
        let pick = |m: &Model, rng: &mut rand::rngs::SmallRng| -> Option<(u64, String)> {
            let v: Vec<_> = m.files.iter().cloned().collect();
            (!v.is_empty()).then(|| v[rng.random_range(0..v.len())].clone())
        };
        let choice = rng.random_range(0..100);
        let (op, name_touched, on_ok): Planned = if choice < 40 {
            let name = format!("c{k}-f{n}");
            let nm = name.clone();
            (
                Op::Create {
                    parent: d,
                    name: name.clone(),
                    mode: 0o644,
                    exclusive: true,
                },
                vec![name],
                Box::new(move |m: &mut Model, _| {
                    m.files.insert((d, nm));
                }),
            )
        } else if choice < 60 {
            let Some((p, name)) = pick(&model.lock().unwrap(), &mut rng) else {
                continue;
            };
            let new = format!("c{k}-r{n}");
            let nn = new.clone();
            let old = name.clone();
            (
                Op::Rename {
                    parent: p,
                    name,
                    new_parent: d,
                    new_name: new.clone(),
                    noreplace: false,
                },
                vec![old.clone(), new],
                Box::new(move |m: &mut Model, _| {
                    m.files.remove(&(p, old));
                    m.files.insert((d, nn));
                }),
            )
        } else if choice < 80 {
            let Some((p, name)) = pick(&model.lock().unwrap(), &mut rng) else {
                continue;
            };
            let nm = name.clone();
            (
                Op::Unlink {
                    parent: p,
                    name: name.clone(),
                },
                vec![name],
                Box::new(move |m: &mut Model, _| {
                    m.files.remove(&(p, nm));
                }),
            )
        } else if choice < 88 {
            let Some((p, name)) = pick(&model.lock().unwrap(), &mut rng) else {
                continue;
            };
            let ln = format!("c{k}-l{n}");
            let ino = {
                match c
                    .call(Op::Lookup {
                        parent: p,
                        name: name.clone(),
                    })
                    .await
                {
                    Ok(MdsReply::Found(f)) => f.entry.attr.ino,
                    _ => continue,
                }
            };
            let l2 = ln.clone();
            (
                Op::Link {
                    ino,
                    parent: d,
                    name: ln.clone(),
                },
                vec![ln],
                Box::new(move |m: &mut Model, _| {
                    m.files.insert((d, l2));
                }),
            )
        } else if choice < 94 {
            let name = format!("c{k}-d{n}");
            let nm = name.clone();
            (
                Op::Mkdir {
                    parent: d,
                    name: name.clone(),
                    mode: 0o755,
                },
                vec![name],
                Box::new(move |m: &mut Model, _| {
                    m.dirs.insert((d, nm));
                }),
            )
        } else {
            let v: Vec<_> = model.lock().unwrap().dirs.iter().cloned().collect();
            if v.is_empty() {
                continue;
            }
            let (p, name) = v[rng.random_range(0..v.len())].clone();
            let nm = name.clone();
            (
                Op::Rmdir {
                    parent: p,
                    name: name.clone(),
                },
                vec![name],
                Box::new(move |m: &mut Model, _| {
                    m.dirs.remove(&(p, nm));
                }),
            )
        };
        let is_create = matches!(op, Op::Create { .. });
        match c.call(op).await {
            Ok(r) => {
                on_ok(&mut model.lock().unwrap(), &r);
                // Give every created file one data object, written with its capability.
                if is_create && let MdsReply::Found(f) = &r {
                    let l = f.entry.layout.as_ref().unwrap();
                    let map = match c
                        .call(Op::GetMap {
                            epoch: Some(l.map_epoch),
                        })
                        .await
                    {
                        Ok(MdsReply::Map(m)) => m,
                        _ => continue,
                    };
                    let o = map.place(l.objsets[0], 1)[0];
                    let oc =
                        OsdClient::new(&osds[&o], ConnConfig::new(CLUSTER, o, tickets.clone()));
                    oc.run(
                        f.grants[0].cap_for(o),
                        proto::Command::CreateAndWrite {
                            pid: DATA_PARTITION,
                            oid: l.objsets[0],
                        },
                        Bytes::from_static(b"data"),
                    )
                    .await
                    .unwrap();
                }
            }
            Err(net::CallError::Mds(_)) => {}
            Err(net::CallError::Transport(_)) => {
                // Outcome unknown: forget the name, wait for the MDS to return.
                {
                    let mut m = model.lock().unwrap();
                    for t in &name_touched {
                        m.uncertain.insert(t.clone());
                        m.files.retain(|(_, x)| x != t);
                        m.dirs.retain(|(_, x)| x != t);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Walks the namespace: (parent, name) of every entry, and the data object ids of files.
async fn walk(c: &MdsClient) -> (HashSet<(u64, String)>, HashSet<u64>) {
    let mut names = HashSet::new();
    let mut oids = HashSet::new();
    let mut stack = vec![ROOT_INO];
    while let Some(d) = stack.pop() {
        for e in c.readdir_all(d, false).await.unwrap() {
            names.insert((d, e.name.clone()));
            match e.kind {
                proto::mds::FileKind::Dir => stack.push(e.ino),
                _ => {
                    if let MdsReply::Found(f) = c
                        .call(Op::Lookup {
                            parent: d,
                            name: e.name.clone(),
                        })
                        .await
                        .unwrap()
                        && let Some(l) = &f.entry.layout
                    {
                        oids.extend(l.objsets.iter().copied());
                    }
                }
            }
        }
    }
    (names, oids)
}

fn fsck(data: &Path) {
    let out = Command::new(BIN)
        .args(["mds", "fsck", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "mds fsck failed:\n{text}");
    assert!(text.contains("clean"), "{text}");
}

async fn check(c: &MdsClient, models: &[Arc<Mutex<Model>>], all_osd_objects: &[u64]) {
    let (names, oids) = walk(c).await;
    for (k, m) in models.iter().enumerate() {
        let m = m.lock().unwrap();
        for f in m.files.iter().chain(m.dirs.iter()) {
            assert!(
                names.contains(f),
                "client {k}: acknowledged {f:?} is missing"
            );
        }
        let prefix = format!("c{k}-");
        for (p, n) in names.iter().filter(|(_, n)| n.starts_with(&prefix)) {
            let known = m.files.contains(&(*p, n.clone()))
                || m.dirs.contains(&(*p, n.clone()))
                || m.uncertain.contains(n);
            assert!(
                known,
                "client {k}: {n:?} in {p:#x} exists but was never acknowledged"
            );
        }
    }
    for o in all_osd_objects {
        assert!(oids.contains(o), "orphan object {o:#x} on an OSD");
    }
}

async fn osd_objects(osds: &[LocalOsd], root: &Path) -> Vec<u64> {
    let mut out = Vec::new();
    for o in osds {
        let dir = osd_dir(root, o.id);
        let c = OsdClient::new(
            &o.addr.to_string(),
            ConnConfig::new(CLUSTER, o.id, local::operator_identity(&dir).unwrap()),
        );
        let cap = operator_cap(&dir, 60_000).unwrap();
        out.extend(
            c.list_all(Some(&cap), DATA_PARTITION, 0, u64::MAX)
                .await
                .unwrap(),
        );
    }
    out
}

/// Waits until every unlinked file was reaped (its sessions went silent
/// and the MDS's hold expiry passed) and the delete queue is empty.
async fn drain(c: &MdsClient) {
    for _ in 0..1500 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.delete_queue == 0
            && s.orphans == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("orphans and the delete queue did not drain in 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_of_16_clients_then_kill_9_mid_storm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("mds");
    let st = Command::new(BIN)
        .args([
            "mds",
            "format",
            "--data",
            data.to_str().unwrap(),
            "--cluster",
            CLUSTER,
            "--log-size",
            "4M",
        ])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    for i in 0..2 {
        provision_osd(
            &osd_dir(dir.path(), i),
            i,
            CLUSTER,
            256 << 20,
            &data.join("keys"),
        )
        .unwrap();
    }
    let addr = free_port();
    let mut child = common::serve_mds(&data, &addr);
    let mut osds = Vec::new();
    for i in 0..2 {
        osds.push(
            LocalOsd::start(&osd_dir(dir.path(), i), "127.0.0.1:0", Some(addr.clone()))
                .await
                .unwrap(),
        );
    }
    let osd_addrs: Arc<HashMap<u32, String>> =
        Arc::new(osds.iter().map(|o| (o.id, o.addr.to_string())).collect());
    let admin = local::admin_identity(&data).unwrap();
    let c = MdsClient::new(&addr, CLUSTER, admin.clone(), 1);
    wait_ready(&c, 2).await;
    let mut dirs = Vec::new();
    for i in 0..4 {
        let MdsReply::Found(f) = c
            .call(Op::Mkdir {
                parent: ROOT_INO,
                name: format!("d{i}"),
                mode: 0o755,
            })
            .await
            .unwrap()
        else {
            panic!()
        };
        dirs.push(f.entry.attr.ino);
    }
    let dirs = Arc::new(dirs);
    let models: Vec<_> = (0..16)
        .map(|_| Arc::new(Mutex::new(Model::default())))
        .collect();
    // Phase 1: a storm, then a check.
    for phase in 0..2 {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks: Vec<_> = (0..16)
            .map(|k| {
                tokio::spawn(storm_client(
                    k,
                    phase * 1_000_000,
                    MdsClient::new(&addr, CLUSTER, admin.clone(), 1),
                    dirs.clone(),
                    models[k].clone(),
                    osd_addrs.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if phase == 1 {
            // Phase 2: SIGKILL mid-storm, restart while clients keep trying.
            child.kill().unwrap();
            child.wait().unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            child = common::serve_mds(&data, &addr);
            wait_ready(&c, 2).await;
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        drain(&c).await;
        let objs = osd_objects(&osds, dir.path()).await;
        check(&c, &models, &objs).await;
        let made: usize = models.iter().map(|m| m.lock().unwrap().files.len()).sum();
        assert!(
            made > 50,
            "phase {phase}: the storm did work ({made} files live)"
        );
    }
    // Clean stop, offline fsck.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    fsck(&data);
    for o in osds {
        o.stop().await.unwrap();
    }
}

#[test]
fn cli_refuses_bad_arguments_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("mds");
    let run = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.code(), err)
    };
    let format = |extra: &[&str]| {
        let mut a = vec![
            "mds",
            "format",
            "--data",
            data.to_str().unwrap(),
            "--cluster",
            "c",
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    let (code, err) = format(&["--policy", "bogus"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("unknown id policy") && err.contains("child-closest"),
        "{err}"
    );
    let (code, err) = format(&["--stripe-unit", "1000"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("stripe unit 1000"), "{err}");
    assert_eq!(format(&[]).0, Some(0));
    let (code, err) = format(&[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("refusing to format over it"), "{err}");
    let (code, err) = run(&["status", "--mds", &free_port(), "--cluster", "c"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("pass --key-file"), "{err}");
    let key = dir.path().join("mds").join("client.admin.key");
    let (code, err) = run(&[
        "status",
        "--mds",
        &free_port(),
        "--cluster",
        "c",
        "--key-file",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("MDS unreachable"), "{err}");
}

/// The documented commands, as separate processes: format, serve with
/// metrics, an OSD registering with a weight, status, layout set/get, fsck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mds_osd_status_layout_and_metrics_as_processes() {
    let dir = tempfile::tempdir().unwrap();
    let p = |x: &str| dir.path().join(x).to_str().unwrap().to_string();
    let ok = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(&[
        "mds",
        "format",
        "--data",
        &p("mds"),
        "--cluster",
        "cli",
        "--stripe-unit",
        "64K",
        // One OSD: one copy, so the status can be HEALTH_OK.
        "--replicas",
        "1",
    ]);
    ok(&["mkfs", &p("osd0.img"), "--size", "64M"]);
    ok(&[
        "keygen",
        "--out",
        &p("osd0.key"),
        "--cluster",
        "cli",
        "--osd-id",
        "0",
    ]);
    std::fs::copy(p("osd0.key"), dir.path().join("mds/keys/osd-0.toml")).unwrap();
    let (mds_addr, metrics, osd_addr) = (free_port(), free_port(), free_port());
    let mut mds = Command::new(BIN)
        .args([
            "mds",
            "serve",
            "--data",
            &p("mds"),
            "--listen",
            &mds_addr,
            "--metrics",
            &metrics,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut osd = Command::new(BIN)
        .args([
            "osd",
            "--store",
            &p("osd0.img"),
            "--listen",
            &osd_addr,
            "--key-file",
            &p("osd0.key"),
            "--mds",
            &mds_addr,
            "--weight",
            "2.5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let key = p("mds/client.admin.key");
    let c = MdsClient::new(
        &mds_addr,
        "cli",
        local::admin_identity(&dir.path().join("mds")).unwrap(),
        1,
    );
    wait_ready(&c, 1).await;
    let status = ok(&[
        "status",
        "--mds",
        &mds_addr,
        "--cluster",
        "cli",
        "--key-file",
        &key,
    ]);
    assert!(
        status.starts_with("HEALTH_OK")
            && status.contains(&osd_addr)
            && status.contains(" up,in ")
            && status.contains("2.50"),
        "{status}"
    );
    c.call(Op::Mkdir {
        parent: ROOT_INO,
        name: "wide".into(),
        mode: 0o755,
    })
    .await
    .unwrap();
    let set = ok(&[
        "layout",
        "set",
        "/wide",
        "--stripe-unit",
        "1M",
        "--mds",
        &mds_addr,
        "--cluster",
        "cli",
        "--key-file",
        &key,
    ]);
    assert!(
        set.contains("stripe unit 1048576 B, stripe count 1"),
        "{set}"
    );
    let got = ok(&[
        "layout",
        "get",
        "/",
        "--mds",
        &mds_addr,
        "--cluster",
        "cli",
        "--key-file",
        &key,
    ]);
    assert!(got.contains("stripe unit 65536 B"), "{got}");
    let MdsReply::Found(f) = c
        .call(Op::Create {
            parent: f_ino(&c, "/wide").await,
            name: "x".into(),
            mode: 0o644,
            exclusive: true,
        })
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        f.entry.layout.unwrap().spec.stripe_unit,
        1 << 20,
        "new files inherit the directory's layout"
    );
    // /metrics counts requests by class
    let mut s = tokio::net::TcpStream::connect(&metrics).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(
        body.contains("tessera_mds_mandatory_requests_total"),
        "{body}"
    );
    assert!(body.contains("op=\"mkdir\",class=\"mandatory\""), "{body}");
    for child in [&mut osd, &mut mds] {
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(child.wait().unwrap().success());
    }
    let fsck = ok(&["mds", "fsck", "--data", &p("mds")]);
    assert!(fsck.contains("clean"), "{fsck}");
}

async fn f_ino(c: &MdsClient, path: &str) -> u64 {
    c.resolve(path).await.unwrap().attr.ino
}
