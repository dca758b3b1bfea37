//! A replicated MDS group of three `tessera mds serve` processes on
//! 127.0.0.1: clients that know every member's address find the leader;
//! the leader is killed (SIGKILL) in the middle of a create / rename /
//! unlink storm from two clients, one taking early answers and one not;
//! a new leader serves within seconds; every change a client was answered
//! is there afterwards, through the same clients and a fresh one; the
//! killed member rejoins, and a second failover and a restart of every
//! member lose nothing either.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{BIN, free_port};
use net::MdsClient;
use proto::mds::{MdsReply, Op, ROOT_INO};

const CLUSTER: &str = "group";

struct Group {
    dir: PathBuf,
    addrs: Vec<String>,
    /// Each member's dashboard and `/metrics` address (served while it
    /// leads).
    https: Vec<String>,
    members: Vec<Option<Child>>,
    osds: Vec<Child>,
}

impl Group {
    fn format(dir: &Path) -> Group {
        let addrs: Vec<String> = (0..3).map(|_| free_port()).collect();
        let peers: Vec<String> = (0..3).map(|_| free_port()).collect();
        let out = Command::new(BIN)
            .args(["mds", "format", "--data"])
            .arg(dir)
            .args(["--cluster", CLUSTER, "--members", &addrs.join(",")])
            .args(["--peers", &peers.join(",")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("--mds {}", addrs.join(","))),
            "{text}"
        );
        let mut g = Group {
            dir: dir.into(),
            addrs,
            https: (0..3).map(|_| free_port()).collect(),
            members: vec![None, None, None],
            osds: Vec::new(),
        };
        for id in 1..=3 {
            g.start(id);
        }
        for osd in 1..=3u32 {
            let d = dir.join(format!("osd-{osd}"));
            for m in 1..=3 {
                local::provision_osd(&d, osd, CLUSTER, 64 << 20, &g.member_dir(m).join("keys"))
                    .unwrap();
            }
            let child = g.osd(osd);
            g.osds.push(child);
        }
        g
    }

    /// Starts OSD `osd` (provisioned under `osd-<osd>`).
    fn osd(&self, osd: u32) -> Child {
        let d = self.dir.join(format!("osd-{osd}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("osd.log"))
            .unwrap();
        Command::new(BIN)
            .arg("osd")
            .arg("--store")
            .arg(d.join("store.img"))
            .arg("--key-file")
            .arg(d.join("key.toml"))
            .args(["--listen", &free_port(), "--mds", &self.list()])
            .args(["--host", &format!("host{osd}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn member_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("member-{id}"))
    }

    fn start(&mut self, id: u64) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("member-{id}.log")))
            .unwrap();
        let child = Command::new(BIN)
            .args([
                "mds",
                "serve",
                "--http",
                &self.https[id as usize - 1],
                "--data",
            ])
            .arg(self.member_dir(id))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.members[id as usize - 1] = Some(child);
    }

    fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.members[id as usize - 1].take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// The member whose client address accepts connections.
    fn leader(&self) -> u64 {
        for _ in 0..400 {
            for (i, a) in self.addrs.iter().enumerate() {
                if self.members[i].is_some() && std::net::TcpStream::connect(a).is_ok() {
                    return i as u64 + 1;
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("no member leads");
    }

    fn list(&self) -> String {
        self.addrs.join(",")
    }

    /// `/metrics` of member `id`'s HTTP port (`None`: it serves none).
    fn metrics(&self, id: u64) -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.https[id as usize - 1]).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    }

    /// Waits until the leader `l` serves `/metrics` naming itself leader;
    /// the followers serve none.
    fn leader_alone_serves_metrics(&self, l: u64) {
        let want = format!("tessera_mds_group_leader {l}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match self.metrics(l) {
                Some(m) if m.contains(&want) && m.contains("tessera_mds_group_term") => break,
                other => assert!(
                    std::time::Instant::now() < deadline,
                    "leader {l}'s /metrics: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for f in (1..=3).filter(|&f| f != l && self.members[f as usize - 1].is_some()) {
            assert!(self.metrics(f).is_none(), "follower {f} serves /metrics");
        }
    }

    /// The admin key (in every member's directory: the first still there).
    fn admin_key(&self) -> PathBuf {
        (1..=self.addrs.len() as u64)
            .map(|id| self.member_dir(id).join("client.admin.key"))
            .find(|p| p.exists())
            .unwrap()
    }

    fn client(&self) -> MdsClient {
        let key = net::auth::ClientKey::load(&self.admin_key()).unwrap();
        MdsClient::new(&self.list(), CLUSTER, key.identity().unwrap(), 1)
    }

    /// SIGTERM to every member, the leader first (it drains while the
    /// others can still take its last batches).
    fn stop_all(&mut self) {
        let running = self.members.iter().filter(|m| m.is_some()).count();
        if running > 1 {
            let l = self.leader();
            if let Some(mut c) = self.members[l as usize - 1].take() {
                // SAFETY: kill(2) on a child we own.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let _ = c.wait();
            }
        }
        for c in self.members.iter_mut().filter_map(Option::take) {
            let mut c = c;
            // SAFETY: kill(2) on a child we own.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // What the members said, for the failure report.
            for id in 1..=self.addrs.len() {
                let log = self.dir.join(format!("member-{id}.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("--- member {id}, last lines of {}", log.display());
                for l in &lines[lines.len().saturating_sub(25)..] {
                    eprintln!("{}", l.chars().take(300).collect::<String>());
                }
            }
        }
        for c in &mut self.osds {
            let _ = c.kill();
            let _ = c.wait();
        }
        for c in self.members.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a client was answered, by name in its directory: Some(true) it
/// exists, Some(false) it does not, None unknown (a call whose answer was
/// lost).
type Model = HashMap<String, Option<bool>>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn mkdir(c: &MdsClient, name: &str) -> u64 {
    match c
        .call(Op::Mkdir {
            parent: ROOT_INO,
            name: name.into(),
            mode: 0o755,
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f.entry.attr.ino,
        other => panic!("{other:?}"),
    }
}

/// Makes `n` directories `<prefix>-<i>` at the root, noting their names.
async fn mkdirs(c: &MdsClient, names: &mut Vec<String>, prefix: &str, n: usize) {
    for i in 0..n {
        names.push(format!("{prefix}-{i}"));
        mkdir(c, names.last().unwrap()).await;
    }
}

/// Whether `tessera status` shows three members up and caught up.
fn all_caught_up(status: &str) -> bool {
    status.matches("up, lag 0 entries").count() == 3
}

async fn wait_osds(c: &MdsClient, n: usize) {
    for _ in 0..600 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().filter(|o| o.up).count() >= n
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{n} OSDs not up");
}

/// Creates, renames and unlinks in `dir` until `stop`, recording what it
/// was answered.
async fn storm(c: Arc<MdsClient>, dir: u64, stop: Arc<AtomicBool>, model: Arc<Mutex<Model>>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let (op, names, outcome): (Op, Vec<String>, Vec<bool>) = if n.is_multiple_of(5) {
            let (from, to) = (format!("f{}", n - 1), format!("r{}", n - 1));
            if model.lock().unwrap().get(&from) != Some(&Some(true)) {
                continue;
            }
            let op = Op::Rename {
                parent: dir,
                name: from.clone(),
                new_parent: dir,
                new_name: to.clone(),
                noreplace: false,
            };
            (op, vec![from, to], vec![false, true])
        } else if n.is_multiple_of(7) {
            let name = format!("f{}", n - 2);
            if model.lock().unwrap().get(&name) != Some(&Some(true)) {
                continue;
            }
            let op = Op::Unlink {
                parent: dir,
                name: name.clone(),
            };
            (op, vec![name], vec![false])
        } else {
            let name = format!("f{n}");
            let op = Op::Create {
                parent: dir,
                name: name.clone(),
                mode: 0o644,
                exclusive: true,
            };
            (op, vec![name], vec![true])
        };
        let r = c.call(op).await;
        let mut m = model.lock().unwrap();
        for (name, exists) in names.into_iter().zip(outcome) {
            match &r {
                Ok(_) => m.insert(name, Some(exists)),
                // Refused: nothing changed.
                Err(net::CallError::Mds(_)) => None,
                // The answer was lost: it may or may not have happened.
                Err(net::CallError::Transport(_)) => m.insert(name, None),
            };
        }
    }
}

/// Every name the model knows for sure is as it says.
async fn check(c: &MdsClient, dir: u64, model: &Model, who: &str) -> usize {
    let mut checked = 0;
    for (name, state) in model {
        let Some(exists) = state else { continue };
        let r = c
            .call(Op::Lookup {
                parent: dir,
                name: name.clone(),
            })
            .await;
        let found = match r {
            Ok(MdsReply::Found(_)) => true,
            Err(net::CallError::Mds(e)) if e.errno == proto::mds::Errno::NoEnt => false,
            other => panic!("{who}: lookup {name}: {other:?}"),
        };
        assert_eq!(
            found, *exists,
            "{who}: {name} was answered {exists}, is {found}"
        );
        checked += 1;
    }
    checked
}

fn status_text(g: &Group) -> String {
    let out = Command::new(BIN)
        .args([
            "status",
            "--mds",
            &g.list(),
            "--cluster",
            CLUSTER,
            "--key-file",
        ])
        .arg(g.admin_key())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `tessera ARGS` and returns (success, stdout, stderr).
fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until `tessera status` says `want` (or panics with the last).
async fn wait_status(g: &Group, want: impl Fn(&str) -> bool, what: &str) -> String {
    let mut last = String::new();
    for _ in 0..300 {
        last = status_text(g);
        if want(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: {last}");
}

/// Kills the leader while two clients storm; returns how long the group
/// took to serve again.
async fn failover_mid_storm(
    g: &mut Group,
    clients: &[Arc<MdsClient>; 2],
    dirs: [u64; 2],
    models: &[Arc<Mutex<Model>>; 2],
) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(storm(
                clients[i].clone(),
                dirs[i],
                stop.clone(),
                models[i].clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let leader = g.leader();
    g.kill(leader);
    let killed = Instant::now();
    // A probe of its own: the first request served after the kill.
    let probe = g.client();
    loop {
        if probe.call(Op::Status).await.is_ok() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no leader 30 s after the kill"
        );
    }
    let took = killed.elapsed();
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    g.start(leader);
    took
}

#[test]
fn the_leader_killed_mid_storm_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    // TESSERA_GROUP_TEST_DIR keeps the members' directories and logs.
    let at = std::env::var_os("TESSERA_GROUP_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("group"));
    let _ = std::fs::remove_dir_all(&at);
    let mut g = Group::format(&at);
    let rt = runtime();
    rt.block_on(async {
        let early = Arc::new(g.client());
        early.set_early(true);
        let durable = Arc::new(g.client());
        let clients = [early.clone(), durable.clone()];
        // The early client stays reachable for a new leader's replay wait,
        // as a mount does.
        let keep = {
            let e = early.clone();
            tokio::spawn(async move {
                loop {
                    e.keep_replayable().await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            })
        };
        wait_osds(&durable, 3).await;
        let dirs = [
            mkdir(&durable, "early").await,
            mkdir(&durable, "durable").await,
        ];
        let models = [
            Arc::new(Mutex::new(Model::new())),
            Arc::new(Mutex::new(Model::new())),
        ];
        let mut took = Vec::new();
        for _ in 0..2 {
            took.push(failover_mid_storm(&mut g, &clients, dirs, &models).await);
        }
        eprintln!("failover: first request served {took:?} after the leader was killed");
        for t in &took {
            assert!(
                *t < Duration::from_secs(10),
                "failover took {t:?} (goal: 5 s)"
            );
        }
        // Through the same clients and a fresh one.
        let fresh = g.client();
        let mut checked = 0;
        for i in 0..2 {
            let m = models[i].lock().unwrap().clone();
            checked += check(&clients[i], dirs[i], &m, "same client").await;
            check(&fresh, dirs[i], &m, "fresh client").await;
        }
        eprintln!("{checked} names checked");
        assert!(
            checked > 100,
            "the storms did work ({checked} names checked)"
        );
        // The leader (a new one by now) serves the dashboard's /metrics
        // with the group's gauges; the followers serve none.
        g.leader_alone_serves_metrics(g.leader());
        // The status names the members; one down is a warning.
        let st = status_text(&g);
        assert!(st.contains("MDS group: 3 members"), "{st}");
        let down = (1..=3).find(|i| *i != g.leader()).unwrap();
        let leader_log = at.join(format!("member-{}.log", g.leader()));
        let logged_before = std::fs::metadata(&leader_log).map_or(0, |m| m.len() as usize);
        g.kill(down);
        let mut warned = String::new();
        for _ in 0..100 {
            warned = status_text(&g);
            if warned.contains(&format!("MDS member {down}")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            warned.starts_with("HEALTH_WARN") && warned.contains(&format!("MDS member {down}")),
            "{warned}"
        );
        // The leader says once that it cannot reach the member, not at
        // every attempt (openraft's lines, ten a second, are not logged).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let log = std::fs::read_to_string(&leader_log).unwrap();
        let log = log.get(logged_before..).unwrap_or_default();
        let said = log
            .lines()
            .filter(|l| {
                l.contains("cannot reach a member") && l.contains(&format!("member={down}"))
            })
            .count();
        assert_eq!(said, 1, "said once that member {down} is down:\n{log}");
        assert!(
            !log.contains("openraft::replication"),
            "no line per attempt to reach it:\n{log}"
        );
        g.start(down);
        // Every member killed at once and restarted: still all there (the
        // early client stays reachable: the new leader waits for its
        // recorded session to come back).
        early.sync().await.unwrap();
        // Past the session idle time: no recorded session to wait for.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for id in 1..=3 {
            g.kill(id);
        }
        for id in 1..=3 {
            g.start(id);
        }
        let fresh = g.client();
        for i in 0..2 {
            let m = models[i].lock().unwrap().clone();
            check(&fresh, dirs[i], &m, "after a restart of every member").await;
        }
        keep.abort();
    });
    // A clean stop, then every member's KV checks clean offline.
    g.stop_all();
    for id in 1..=3 {
        common::mds_fsck_clean(&g.member_dir(id));
    }
}

/// A member's host is lost (process killed, directory deleted): the
/// operator removes it and makes a new member from a surviving member's
/// directory; the new one installs the leader's snapshot, votes once
/// caught up, and the group (now holding it) survives the loss of its
/// leader with every name there. What the commands refuse on the way.
#[test]
fn a_lost_member_is_replaced_by_a_new_one_and_the_group_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Group::format(tmp.path());
    let rt = runtime();
    let lost = rt.block_on(async {
        let c = g.client();
        let mut names: Vec<String> = Vec::new();
        mkdirs(&c, &mut names, "before", 40).await;
        let leader = g.leader();
        let lost = (1..=3).find(|i| *i != leader).unwrap();
        g.kill(lost);
        std::fs::remove_dir_all(g.member_dir(lost)).unwrap();
        let key = g.admin_key();
        let key = key.to_str().unwrap();
        let list = g.list();
        let remove = |id: u64| {
            tessera(&[
                "mds",
                "remove",
                "--id",
                &id.to_string(),
                "--mds",
                &list,
                "--cluster",
                CLUSTER,
                "--key-file",
                key,
            ])
        };
        // Removing a live member while another is down would leave the
        // change without a majority of the new voters: refused, and the
        // group serves on.
        let live = (1..=3).find(|i| *i != leader && *i != lost).unwrap();
        wait_status(
            &g,
            |s| s.contains(&format!("MDS member {lost} (")) && s.contains("down"),
            "the lost member down",
        )
        .await;
        let (ok, _, err) = remove(live);
        assert!(!ok && err.contains("needs a majority"), "{err}");
        mkdir(&c, "after-a-refused-removal").await;
        names.push("after-a-refused-removal".into());
        let (ok, out, err) = remove(lost);
        assert!(
            ok && out.contains(&format!("member {lost} removed")),
            "{out}{err}"
        );
        let (ok, _, err) = remove(lost);
        assert!(!ok && err.contains("not in the group"), "{err}");
        let st = wait_status(&g, |s| s.contains("MDS group: 2 members"), "two voters").await;
        assert!(!st.contains(&format!("member {lost} ")), "{st}");
        // The new member, made from the leader's directory.
        let from = g.member_dir(leader);
        let new = g.member_dir(4);
        let (addr4, peer4) = (free_port(), free_port());
        let join = |id: &str, addr: &str, peer: &str| {
            tessera(&[
                "mds",
                "join",
                "--from",
                from.to_str().unwrap(),
                "--data",
                new.to_str().unwrap(),
                "--id",
                id,
                "--addr",
                addr,
                "--peer",
                peer,
            ])
        };
        // Refused: an id some member had, an address in use, no port.
        let taken = g.addrs[leader as usize - 1].clone();
        for (id, addr, says) in [
            (lost.to_string(), addr4.as_str(), "ids are never reused"),
            ("4".into(), taken.as_str(), "already has that id or address"),
            ("4".into(), "127.0.0.1", "not host:port"),
            ("0".into(), addr4.as_str(), "reserved"),
            ("4".into(), peer4.as_str(), "must differ"),
        ] {
            let (ok, out, err) = join(&id, addr, &peer4);
            assert!(!ok && err.contains(says), "join {id} {addr}: {out}{err}");
            assert!(!new.exists(), "join {id} {addr} left {}", new.display());
        }
        let (ok, out, err) = join("4", &addr4, &peer4);
        assert!(
            ok && out.contains("added to the group as a learner"),
            "{out}{err}"
        );
        // The list printed is the group's own: the new member in, the
        // removed one out.
        let listed = out.lines().find(|l| l.contains("--mds")).unwrap();
        assert!(listed.contains(&addr4), "{out}");
        assert!(!listed.contains(&g.addrs[lost as usize - 1]), "{out}");
        let st = wait_status(&g, |s| s.contains("joining"), "member 4 joining").await;
        assert!(
            st.starts_with("HEALTH_WARN") && st.contains("MDS member 4"),
            "{st}"
        );
        // Adding it again is refused by the leader.
        let again = tessera(&[
            "mds",
            "join",
            "--from",
            from.to_str().unwrap(),
            "--data",
            tmp.path().join("again").to_str().unwrap(),
            "--id",
            "4",
            "--addr",
            &free_port(),
        ]);
        assert!(
            !again.0 && again.2.contains("already in the group"),
            "{again:?}"
        );
        assert!(!tmp.path().join("again").exists());
        // The leader that added it (and purged its log for it) is gone
        // before member 4 starts: the next one, whose log reaches back to
        // the start, must send member 4 a snapshot too, not entries.
        // (Two voters now: it comes back once the other has begun to
        // stand. The one restarted often wins again, when its log ends
        // with an entry the other had not yet taken: a few tries, and the
        // run says whether this case was reached.)
        let adder = g.leader();
        for _ in 0..6 {
            g.kill(adder);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            g.start(adder);
            if g.leader() != adder {
                break;
            }
        }
        eprintln!(
            "the leader changed between the join and the new member's start: {}",
            g.leader() != adder
        );
        g.addrs.push(addr4);
        g.https.push(free_port());
        g.members.push(None);
        g.start(4);
        let st = wait_status(
            &g,
            |s| s.contains("MDS group: 3 members") && !s.contains("joining"),
            "member 4 voting",
        )
        .await;
        assert!(st.contains("member 4 "), "{st}");
        assert!(
            !g.member_dir(4).join("awaiting-snapshot").exists(),
            "member 4 installed the snapshot"
        );
        mkdirs(&c, &mut names, "after", 40).await;
        // A client given only the members the group was formatted with
        // learns member 4 from the leader's welcome.
        let original: Vec<String> = (1..=3)
            .filter(|id| *id != lost)
            .map(|id| g.addrs[id as usize - 1].clone())
            .collect();
        let admin = net::auth::ClientKey::load(&g.admin_key()).unwrap();
        let old_list = MdsClient::new(&original.join(","), CLUSTER, admin.identity().unwrap(), 1);
        mkdir(&old_list, "learned").await;
        names.push("learned".into());
        // Leaders are killed (and restarted) until member 4 leads: the
        // group then holds the survivor and member 4, and the old-list
        // client reaches member 4.
        for _ in 0..20 {
            let l = g.leader();
            if l == 4 {
                break;
            }
            g.kill(l);
            for _ in 0..400 {
                if (1..=4).any(|id| {
                    id != l
                        && g.members[id as usize - 1].is_some()
                        && std::net::TcpStream::connect(&g.addrs[id as usize - 1]).is_ok()
                }) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            g.start(l);
        }
        assert_eq!(g.leader(), 4, "member 4 never led");
        let model: Model = names.iter().map(|n| (n.clone(), Some(true))).collect();
        let checked = check(&old_list, ROOT_INO, &model, "with member 4 leading").await;
        assert_eq!(checked, 82);
        mkdir(&old_list, "after-failover").await;
        wait_status(&g, all_caught_up, "every member caught up").await;
        lost
    });
    g.stop_all();
    // A member's KV is its last durable point (its raft log holds what
    // came after), so only its consistency is checked here; every name was
    // checked through the group above.
    for id in (1..=4).filter(|id| *id != lost) {
        common::mds_fsck_clean(&g.member_dir(id));
    }
}

/// A member restarted on an old copy of its directory (a backup taken
/// before it acknowledged more) refuses to start, saying why and how to
/// replace it, and the group serves on with everything.
#[test]
fn a_member_restarted_on_an_old_copy_of_its_data_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Group::format(tmp.path());
    let rt = runtime();
    rt.block_on(async {
        let c = g.client();
        let mut names: Vec<String> = Vec::new();
        mkdirs(&c, &mut names, "a", 20).await;
        let f = (1..=3).find(|i| *i != g.leader()).unwrap();
        wait_status(&g, all_caught_up, "caught up").await;
        g.kill(f);
        let backup = tmp.path().join("backup");
        common::cp_a(&g.member_dir(f), &backup);
        g.start(f);
        mkdirs(&c, &mut names, "b", 20).await;
        wait_status(&g, all_caught_up, "caught up after b").await;
        g.kill(f);
        std::fs::remove_dir_all(g.member_dir(f)).unwrap();
        common::cp_a(&backup, &g.member_dir(f));
        let mut child = Command::new(BIN)
            .args(["mds", "serve", "--no-http", "--data"])
            .arg(g.member_dir(f))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("member {f} on its old copy started");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            !status.success()
                && err.contains("older than what it acknowledged")
                && err.contains(&format!("tessera mds remove --id {f}")),
            "{status:?}: {err}"
        );
        // The group serves on, with everything.
        mkdir(&c, "after").await;
        names.push("after".into());
        let model: Model = names.iter().map(|n| (n.clone(), Some(true))).collect();
        assert_eq!(
            check(&g.client(), ROOT_INO, &model, "after the refusal").await,
            41
        );
    });
}

/// An OSD killed together with the leader: the new leader counts every
/// OSD's lease from its takeover, marks the dead one down once (the two
/// live ones never flap), and takes it back when it returns.
#[test]
fn an_osd_killed_with_the_leader_is_marked_down_once_by_the_new_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Group::format(tmp.path());
    let rt = runtime();
    rt.block_on(async {
        let c = g.client();
        wait_osds(&c, 3).await;
        let leader = g.leader();
        let mut dead = g.osds.remove(0);
        g.kill(leader);
        dead.kill().unwrap();
        dead.wait().unwrap();
        let t0 = Instant::now();
        // Sample the map as the new leader sees it until OSD 1 is down,
        // then a while longer.
        let mut transitions = 0;
        let mut was_up = true;
        let mut down_at = None;
        while t0.elapsed() < Duration::from_secs(25) {
            let Ok(MdsReply::Status(s)) = c.call(Op::Status).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            for o in &s.osds {
                if o.id == 1 {
                    if was_up && !o.up {
                        transitions += 1;
                        down_at.get_or_insert(t0.elapsed());
                    }
                    assert!(!o.up || was_up, "OSD 1 came back up while dead: {o:?}");
                    was_up = o.up;
                } else {
                    assert!(o.up, "a live OSD marked down at {:?}: {o:?}", t0.elapsed());
                }
            }
            if down_at.is_some_and(|d| t0.elapsed() > d + Duration::from_secs(5)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let down_at = down_at.expect("the dead OSD was never marked down");
        eprintln!("OSD 1 marked down {down_at:?} after the leader and it were killed");
        assert_eq!(transitions, 1);
        // It returns: up again, under the new leader.
        g.osds.insert(0, g.osd(1));
        wait_osds(&c, 3).await;
        g.start(leader);
        wait_status(&g, all_caught_up, "every member caught up").await;
    });
}

/// A leader stopped, its directory copied, restarted (it does not resume
/// leading by itself: it stands in an election like any member), more
/// names answered, then stopped again and put back on the copy: it
/// cannot lead with its older log, its log is repaired from the others,
/// and with either other member down the group still has every name.
#[test]
fn a_leader_put_back_on_an_old_copy_never_leads_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Group::format(tmp.path());
    let rt = runtime();
    rt.block_on(async {
        let c = g.client();
        let mut names: Vec<String> = Vec::new();
        mkdirs(&c, &mut names, "base", 10).await;
        let l = g.leader();
        g.kill(l);
        let backup = tmp.path().join("backup");
        common::cp_a(&g.member_dir(l), &backup);
        g.start(l);
        mkdirs(&c, &mut names, "acked", 20).await;
        wait_status(&g, all_caught_up, "caught up").await;
        // It leads again (by an election) when it is stopped and put back.
        for _ in 0..20 {
            let now = g.leader();
            if now == l {
                break;
            }
            g.kill(now);
            g.start(now);
            wait_status(&g, all_caught_up, "caught up").await;
        }
        assert_eq!(g.leader(), l, "member {l} never led again");
        g.kill(l);
        std::fs::remove_dir_all(g.member_dir(l)).unwrap();
        common::cp_a(&backup, &g.member_dir(l));
        g.start(l);
        let model: Model = names.iter().map(|n| (n.clone(), Some(true))).collect();
        assert_eq!(check(&c, ROOT_INO, &model, "after the restore").await, 30);
        wait_status(&g, all_caught_up, "the restored member repaired").await;
        // Each other member down in turn: the restored one and the last
        // form the majority, and whoever leads has every name.
        for other in (1..=3).filter(|m| *m != l) {
            g.kill(other);
            let fresh = g.client();
            let who = format!("with member {other} down");
            assert_eq!(check(&fresh, ROOT_INO, &model, &who).await, 30);
            mkdir(&fresh, &format!("with-{other}-down")).await;
            g.start(other);
            wait_status(&g, all_caught_up, "caught up again").await;
        }
    });
}

/// What `mds format --members` refuses, and a member's directory copied
/// to start as another member (its vote would come along).
#[test]
fn bad_group_arguments_and_a_copied_member_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let format = |members: &str, extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["mds", "format", "--data"])
            .arg(tmp.path().join("g"))
            .args(["--cluster", CLUSTER, "--members", members])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (members, extra, says) in [
        ("127.0.0.1:7000,127.0.0.1:7000", &[][..], "given twice"),
        (
            "127.0.0.1:0,127.0.0.1:7001",
            &[][..],
            "port must be 1 to 65535",
        ),
        ("127.0.0.1", &[][..], "not host:port"),
        (
            "127.0.0.1:65500,127.0.0.1:65501",
            &[][..],
            "no room for a peer port",
        ),
        (
            "127.0.0.1:7000,127.0.0.1:7001",
            &["--peers", "127.0.0.1:7100"][..],
            "--peers lists 1 addresses for 2 members",
        ),
    ] {
        let (ok, err) = format(members, extra);
        assert!(!ok && err.contains(says), "{members} {extra:?}: {err}");
        assert!(
            !tmp.path().join("g").join("member-1").exists(),
            "{members}: left a member behind"
        );
    }
    let many: Vec<String> = (0..10).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect();
    let (ok, err) = format(&many.join(","), &[]);
    assert!(!ok && err.contains("1 to 9"), "{err}");
    // A good one, then member 1's directory copied to stand in for member 2.
    let (ok, err) = format("127.0.0.1:7300,localhost:7301,127.0.0.1:7302", &[]);
    assert!(ok, "{err}");
    let g = tmp.path().join("g");
    let copy = tmp.path().join("copy");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(g.join("member-1"))
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    let cfg = std::fs::read_to_string(copy.join("mds.toml")).unwrap();
    std::fs::write(
        copy.join("mds.toml"),
        cfg.replacen("id = 1\n", "id = 2\n", 1),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["mds", "serve", "--no-http", "--data"])
        .arg(&copy)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot be copied"),
        "{err}"
    );
}

/// `tessera up --mds 3`: the README's one command for a group. It comes
/// up, `status` shows the group, the supervisor brings a killed member
/// back, and Ctrl-C's SIGTERM stops everything cleanly; a second run
/// brings the same group back.
#[test]
fn up_with_a_group_of_three_comes_up_restarts_a_killed_member_and_stops_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // Three consecutive free ports, and their peers 100 above.
    let base = loop {
        let p: u16 = free_port().rsplit_once(':').unwrap().1.parse().unwrap();
        if p < 60_000
            && (0..3).all(|i| {
                std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()
                    && std::net::TcpListener::bind(("127.0.0.1", p + i + 100)).is_ok()
            })
        {
            break p;
        }
    };
    let up = |data: &Path| {
        Command::new(BIN)
            .args([
                "up",
                "--mds",
                "3",
                "--osds",
                "2",
                "--size",
                "64M",
                "--no-http",
            ])
            .args(["--listen", &format!("127.0.0.1:{base}"), "--data"])
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = up(&data);
    let out = common::wait_line(&mut child, "stop with Ctrl-C");
    assert!(out.contains("MDS group of 3 members"), "{out}");
    let status = || {
        let o = Command::new(BIN)
            .args(["status", "--data"])
            .arg(&data)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let st = status();
    assert!(st.contains("MDS group: 3 members"), "{st}");
    // Kill the leader's process: another leads, and the supervisor
    // restarts the killed one.
    let leader = (0..3)
        .find(|i| std::net::TcpStream::connect(("127.0.0.1", base + i)).is_ok())
        .unwrap();
    let me = format!("{}/mds/member-{}", data.display(), leader + 1);
    let pid = pid_of(&me).unwrap_or_else(|| panic!("no process serves {me}"));
    // SAFETY: kill(2) of the member process this test's `up` started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let mut healthy = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(200));
        healthy = status();
        if healthy.contains("MDS group: 3 members") && !healthy.contains("DOWN") {
            break;
        }
    }
    assert!(
        !healthy.contains("DOWN") && healthy.contains("MDS group"),
        "{healthy}"
    );
    // SIGTERM, as Ctrl-C: a clean stop.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    // Again: the same group.
    let mut child = up(&data);
    common::wait_line(&mut child, "stop with Ctrl-C");
    assert!(status().contains("MDS group: 3 members"));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// The process whose command line ends with `path` (a member's `mds
/// serve --data PATH`), found in /proc.
fn pid_of(path: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        if args.last() == Some(&path.as_bytes()) && args.iter().any(|a| *a == b"serve") {
            return Some(pid);
        }
    }
    None
}
