//! What the tests that mount Tessera share: the binary (speaking as the
//! test's cluster admin), `tessera up --mount` as a guard that stops it,
//! separate daemon processes, foreground mounts.
#![allow(dead_code, reason = "each test file uses its own part of the harness")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub mod browser;
pub mod cluster;
pub mod hosts;

pub const BIN: &str = env!("CARGO_BIN_EXE_tessera");

pub fn can_mount() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: FUSE mounts need root and /dev/fuse");
        return false;
    }
    true
}

pub fn free_port() -> String {
    // The kernel may hand the same free port out twice in a row: never
    // give one out twice in a process.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&a.port()) {
            given.push(a.port());
            return a.to_string();
        }
    }
}

/// `tessera mds fsck --data DIR` on a stopped MDS or group member:
/// asserts it is clean and answers its report.
pub fn mds_fsck_clean(dir: &Path) -> String {
    let out = Command::new(BIN)
        .args(["mds", "fsck", "--data"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("clean"),
        "{}: {out:?}",
        dir.display()
    );
    text
}

/// `cp -a FROM TO` (a member's directory copied as a backup would be).
pub fn cp_a(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

std::thread_local! {
    /// The admin key of the cluster this test (thread) formatted.
    pub static KEY: std::cell::RefCell<Option<std::path::PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// The binary, speaking as this test's cluster admin once it has one.
pub fn bin() -> Command {
    let mut c = Command::new(BIN);
    if let Some(k) = KEY.with(|k| k.borrow().clone()) {
        c.env("TESSERA_KEY_FILE", k);
    }
    c
}

pub fn ok(args: &[&str]) -> String {
    let o = bin().args(args).output().unwrap();
    assert!(
        o.status.success(),
        "tessera {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits for a line containing `what` on a child's stdout (60 s).
pub fn wait_line(child: &mut Child, what: &str) -> String {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let what = what.to_string();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            seen.push_str(&l);
            seen.push('\n');
            if l.contains(&what) {
                let _ = tx.send(Ok(seen.clone()));
            }
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(s)) => s,
        Ok(Err(s)) => panic!("process ended before printing the line; output:\n{s}"),
        Err(_) => panic!("timed out waiting for the line"),
    }
}

/// A `tessera up` process with its mount; stops cleanly on drop.
pub struct Up {
    child: Option<Child>,
    /// The data directory.
    pub data: PathBuf,
    /// The mount point.
    pub mp: PathBuf,
}

impl Up {
    pub fn start(dir: &Path, extra: &[&str]) -> Up {
        let data = dir.join("data");
        // `tessera up` writes its admin key here; later commands of this
        // test speak with it.
        KEY.with(|k| *k.borrow_mut() = Some(data.join("client.admin.key")));
        let mp = dir.join("mnt");
        std::fs::create_dir_all(&mp).unwrap();
        let port = free_port();
        let mut args = vec![
            "up",
            "--data",
            data.to_str().unwrap(),
            "--osds",
            "3",
            "--size",
            "512M",
            "--listen",
            &port,
            "--mount",
            mp.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        // Tests run side by side: no dashboard on the default port unless
        // a test asks for an address.
        if !extra.iter().any(|a| *a == "--metrics" || *a == "--http") {
            args.push("--no-http");
        }
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_line(&mut child, "mounted on");
        Up {
            child: Some(child),
            data,
            mp,
        }
    }

    /// The MDS address `tessera up` recorded in cluster.toml.
    pub fn mds_addr(&self) -> String {
        let cf = std::fs::read_to_string(self.data.join("cluster.toml")).unwrap();
        cf.lines()
            .find_map(|l| l.strip_prefix("mds = "))
            .unwrap()
            .trim_matches('"')
            .to_string()
    }

    pub fn target(&self) -> Vec<String> {
        vec!["--data".into(), self.data.to_str().unwrap().into()]
    }

    /// SIGINT, expect a clean exit, then check the namespace offline.
    pub fn stop(mut self) {
        let mut c = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        assert!(c.wait().unwrap().success(), "tessera up exits 0 on Ctrl-C");
        let fsck = ok(&[
            "mds",
            "fsck",
            "--data",
            self.data.join("mds").to_str().unwrap(),
        ]);
        assert!(fsck.contains("clean"), "{fsck}");
        assert!(!is_mounted(&self.mp), "unmounted");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
            let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
        }
    }
}

pub fn is_mounted(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let c = p.canonicalize().unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(c.to_str().unwrap()))
}

/// `tessera mds serve` on data directory `data`, listening on `addr`
/// (also how a test restarts a killed MDS at the same address).
pub fn serve_mds(data: &Path, addr: &str) -> Child {
    bin()
        .args([
            "mds",
            "serve",
            "--data",
            data.to_str().unwrap(),
            "--listen",
            addr,
            "--no-http",
        ])
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("TESSERA_TEST_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap()
}

/// Runs `tessera mount ADDR MP --foreground ...` and waits until mounted.
pub fn mount_fg(mds: &str, cluster: &str, mp: &Path, extra: &[&str]) -> Child {
    std::fs::create_dir_all(mp).unwrap();
    let mut args = vec![
        "mount",
        mds,
        mp.to_str().unwrap(),
        "--foreground",
        "--cluster",
        cluster,
    ];
    args.extend_from_slice(extra);
    // TESSERA_TEST_LOGS=1 shows the mount's log (debugging a failure).
    let logs = std::env::var_os("TESSERA_TEST_LOGS").is_some();
    let mut c = bin()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(if logs {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap();
    wait_line(&mut c, "mounted");
    c
}

pub fn sigint_wait(c: &mut Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    assert!(c.wait().unwrap().success());
}

/// Stops the daemons `daemons` started with SIGTERM and asserts each
/// exits cleanly (OSDs first, then the MDS).
pub fn stop_daemons(osds: Vec<Child>, mds: Child) {
    for mut c in osds.into_iter().chain([mds]) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        assert!(c.wait().unwrap().success());
    }
}

/// Separate daemons of `cluster` (formatted with `format_extra`) and two
/// foreground mounts of it; runs `body(mount_a, mount_b, test_dir,
/// mds_addr)`, then unmounts and stops everything, asserting clean exits.
/// A panic in `body` kills the daemons and detaches the mounts. Skipped
/// (with a message) where FUSE cannot be mounted.
pub fn with_two_mounts(
    cluster: &str,
    format_extra: &[&str],
    body: impl FnOnce(&Path, &Path, &Path, &str),
) {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mds, osds, _, mds_addr) = daemons(d, cluster, format_extra);
    let (mpa, mpb) = (d.join("mnta"), d.join("mntb"));
    let mut ma = mount_fg(&mds_addr, cluster, &mpa, &[]);
    let mut mb = mount_fg(&mds_addr, cluster, &mpb, &[]);
    let _guard = PanicGuard::new(osds.iter().chain([&mds, &ma, &mb]), &[&mpa, &mpb]);
    body(&mpa, &mpb, d, &mds_addr);
    sigint_wait(&mut mb);
    sigint_wait(&mut ma);
    stop_daemons(osds, mds);
}

pub fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

pub fn start_osd(dir: &Path, i: u32, addr: &str, mds: &str) -> Child {
    bin()
        .args([
            "osd",
            "--store",
            dir.join(format!("osd{i}.img")).to_str().unwrap(),
            "--key-file",
            dir.join(format!("osd{i}.key")).to_str().unwrap(),
            "--listen",
            addr,
            "--mds",
            mds,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub fn wait_osds_up(mds: &str, cluster: &str, n: usize) {
    assert!(osds_up(mds, cluster, n), "OSDs did not come up");
}

/// Whether `n` OSDs are up within 60 s — by the clock, not by tries:
/// under a loaded test run each `status` process takes a while to start.
fn osds_up(mds: &str, cluster: &str, n: usize) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let o = bin()
            .args(["status", "--mds", mds, "--cluster", cluster, "--json"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout);
        if s.matches("\"up\": true").count() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Separate daemon processes: `tessera mds format` (with `format_extra`)
/// and `mds serve`, and three OSDs made with `mkfs` and `keygen`, all up.
/// Returns (MDS, OSDs, OSD addresses, MDS address).
pub fn daemons(
    d: &Path,
    cluster: &str,
    format_extra: &[&str],
) -> (Child, Vec<Child>, Vec<String>, String) {
    let p = |x: &str| d.join(x).to_str().unwrap().to_string();
    let data = p("mds");
    let mut args = vec![
        "mds",
        "format",
        "--data",
        data.as_str(),
        "--cluster",
        cluster,
    ];
    args.extend_from_slice(format_extra);
    ok(&args);
    KEY.with(|k| *k.borrow_mut() = Some(d.join("mds").join("client.admin.key")));
    let mds_addr = free_port();
    let mds = serve_mds(&d.join("mds"), &mds_addr);
    let mut osds = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..3u32 {
        ok(&["mkfs", &p(&format!("osd{i}.img")), "--size", "256M"]);
        let id = i.to_string();
        ok(&[
            "keygen",
            "--out",
            &p(&format!("osd{i}.key")),
            "--cluster",
            cluster,
            "--osd-id",
            &id,
        ]);
        std::fs::copy(
            p(&format!("osd{i}.key")),
            d.join(format!("mds/keys/osd-{i}.toml")),
        )
        .unwrap();
        let a = free_port();
        osds.push(start_osd(d, i, &a, &mds_addr));
        addrs.push(a);
    }
    if !osds_up(&mds_addr, cluster, 3) {
        // Nothing left running behind the failure.
        let mut mds = mds;
        for c in osds.iter_mut().chain(std::iter::once(&mut mds)) {
            let _ = c.kill();
            let _ = c.wait();
        }
        panic!("OSDs did not come up");
    }
    (mds, osds, addrs, mds_addr)
}

/// When a test panics, kills the daemons and mounts it started (by pid)
/// and detaches its mount points, so a failure leaves no process, mount
/// or directory behind; a passing test stops them itself and checks how.
pub struct PanicGuard {
    pids: Vec<u32>,
    mounts: Vec<PathBuf>,
}

impl PanicGuard {
    pub fn new<'a>(children: impl IntoIterator<Item = &'a Child>, mounts: &[&Path]) -> PanicGuard {
        PanicGuard {
            pids: children.into_iter().map(|c| c.id()).collect(),
            mounts: mounts.iter().map(|m| m.to_path_buf()).collect(),
        }
    }
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
        for &p in &self.pids {
            // SAFETY: signalling a process this test started.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
    }
}
