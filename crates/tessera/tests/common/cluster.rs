//! Separate daemons for the redundancy tests: an MDS process and OSD
//! processes (each on its own "host") under one directory, the CLI as the
//! cluster admin, status polling, and a foreground mount.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client::{Client, ClientConfig};
use proto::mds::{ClusterStatus, MdsReply, Op};

use super::{BIN, free_port};

/// The cluster id the tests format.
pub const CLUSTER: &str = "redundancy";

/// An MDS process and OSD processes 1..=n under one directory.
pub struct Cluster {
    pub dir: PathBuf,
    pub mds_addr: String,
    pub mds: Option<Child>,
    /// The MDS's dashboard and /metrics.
    pub http_addr: String,
    pub osd_addrs: Vec<String>,
    /// Each OSD's /metrics.
    pub osd_metrics: Vec<String>,
    pub osds: Vec<Option<Child>>,
    /// The network namespace each OSD runs in (empty: this one's).
    pub osd_netns: Vec<String>,
}

impl Cluster {
    /// The admin key file `mds format` wrote.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("mds").join("client.admin.key")
    }

    /// The admin's identity.
    pub fn admin(&self) -> net::auth::Identity {
        net::auth::ClientKey::load(&self.key_file())
            .unwrap()
            .identity()
            .unwrap()
    }

    /// Formats (root default `replicas`) and starts `n` OSDs. `settings`
    /// are extra lines for mds.toml.
    pub fn start(dir: &Path, n: u32, replicas: u8, settings: &str) -> Cluster {
        Self::start_formatted(dir, n, replicas, settings, &[])
    }

    /// [`Cluster::start`] with more `mds format` arguments.
    pub fn start_formatted(
        dir: &Path,
        n: u32,
        replicas: u8,
        settings: &str,
        format: &[&str],
    ) -> Cluster {
        Self::start_sized(dir, (n, 512 << 20), replicas, settings, format)
    }

    /// [`Cluster::start_formatted`] with `n` OSDs of `store_bytes` each.
    pub fn start_sized(
        dir: &Path,
        (n, store_bytes): (u32, u64),
        replicas: u8,
        settings: &str,
        format: &[&str],
    ) -> Cluster {
        Self::start_placed(dir, (n, store_bytes), replicas, (settings, format), None)
    }

    /// [`Cluster::start_formatted`] with OSD K on host K of `hosts` (its
    /// own network namespace, 10.78.x.K) and the MDS on this side of
    /// their bridge: links between OSDs can then be cut
    /// ([`super::hosts::Hosts::cut`]).
    pub fn start_on_hosts(
        dir: &Path,
        hosts: &super::hosts::Hosts,
        (n, replicas): (u32, u8),
        settings: &str,
        format: &[&str],
    ) -> Cluster {
        Self::start_placed(
            dir,
            (n, 512 << 20),
            replicas,
            (settings, format),
            Some(hosts),
        )
    }

    fn start_placed(
        dir: &Path,
        (n, store_bytes): (u32, u64),
        replicas: u8,
        (settings, format): (&str, &[&str]),
        hosts: Option<&super::hosts::Hosts>,
    ) -> Cluster {
        let mds_dir = dir.join("mds");
        let out = Command::new(BIN)
            .args(["mds", "format", "--data"])
            .arg(&mds_dir)
            .args(["--cluster", CLUSTER, "--replicas", &replicas.to_string()])
            .args(format)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        // Fast heartbeats so the test's failures are noticed in seconds.
        let cfg = mds_dir.join("mds.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        let mut keep: Vec<String> = text
            .lines()
            .filter(|l| {
                !["heartbeat_ms", "down_after_ms", "recovery_interval_ms"]
                    .iter()
                    .chain(
                        settings
                            .lines()
                            .filter_map(|s| s.split('=').next())
                            .map(str::trim)
                            .collect::<Vec<_>>()
                            .iter(),
                    )
                    .any(|k| l.starts_with(&format!("{k} ")))
            })
            .map(String::from)
            .collect();
        for (k, v) in [
            ("heartbeat_ms", "300"),
            ("down_after_ms", "1500"),
            ("recovery_interval_ms", "300"),
        ] {
            if !settings.lines().any(|l| l.trim_start().starts_with(k)) {
                keep.push(format!("{k} = {v}"));
            }
        }
        keep.extend(settings.lines().map(String::from));
        std::fs::write(&cfg, keep.join("\n")).unwrap();
        let port_of = |a: String| a.rsplit(':').next().unwrap_or_default().to_string();
        let mut c = Cluster {
            dir: dir.into(),
            mds_addr: match hosts {
                Some(h) => format!("{}:{}", h.here(), port_of(free_port())),
                None => free_port(),
            },
            mds: None,
            http_addr: free_port(),
            osd_addrs: Vec::new(),
            osd_metrics: Vec::new(),
            osds: Vec::new(),
            osd_netns: Vec::new(),
        };
        c.start_mds();
        for id in 1..=n {
            local::provision_osd(
                &c.osd_dir(id),
                id,
                CLUSTER,
                store_bytes,
                &mds_dir.join("keys"),
            )
            .unwrap();
            match hosts {
                Some(h) => {
                    c.osd_addrs.push(format!("{}:7500", h.addr(id as u8)));
                    c.osd_metrics.push(format!("{}:7501", h.addr(id as u8)));
                    c.osd_netns.push(h.ns(id as usize));
                }
                None => {
                    c.osd_addrs.push(free_port());
                    c.osd_metrics.push(free_port());
                }
            }
            c.osds.push(None);
            c.start_osd(id);
        }
        c
    }

    /// Provisions and starts one more OSD (the next id).
    pub fn add_osd(&mut self) -> u32 {
        let id = self.osds.len() as u32 + 1;
        local::provision_osd(
            &self.osd_dir(id),
            id,
            CLUSTER,
            512 << 20,
            &self.dir.join("mds").join("keys"),
        )
        .unwrap();
        self.osd_addrs.push(free_port());
        self.osd_metrics.push(free_port());
        self.osds.push(None);
        self.start_osd(id);
        id
    }

    pub fn osd_dir(&self, id: u32) -> PathBuf {
        self.dir.join(format!("osd-{id}"))
    }

    pub fn start_mds(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("mds.log"))
            .unwrap();
        self.mds = Some(
            Command::new(BIN)
                .args(["mds", "serve", "--data"])
                .arg(self.dir.join("mds"))
                .args(["--listen", &self.mds_addr, "--http", &self.http_addr])
                .env("TESSERA_LOG", "info")
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap(),
        );
    }

    pub fn kill_mds(&mut self) {
        if let Some(mut m) = self.mds.take() {
            m.kill().unwrap();
            m.wait().unwrap();
        }
    }

    pub fn start_osd(&mut self, id: u32) {
        let d = self.osd_dir(id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("osd.log"))
            .unwrap();
        // An OSD given a clock of its own runs with libfaketime preloaded
        // (see `set_osd_clock`; not the `faketime` wrapper, which forks, so
        // a kill would miss the OSD); monotonic time stays the machine's.
        // In a namespace of its own: `ip netns exec` execs the OSD, so
        // the child is the OSD itself (a kill reaches it).
        let mut cmd = match self.osd_netns.get(id as usize - 1) {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        if let Ok(spec) = std::fs::read_to_string(d.join("clock")) {
            cmd.env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", spec.trim())
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let child = cmd
            .arg("osd")
            .arg("--store")
            .arg(d.join("store.img"))
            .arg("--key-file")
            .arg(d.join("key.toml"))
            .args(["--listen", &self.osd_addrs[id as usize - 1]])
            .args(["--mds", &self.mds_addr, "--host", &format!("host{id}")])
            .args(["--metrics", &self.osd_metrics[id as usize - 1]])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.osds[id as usize - 1] = Some(child);
    }

    /// Runs OSD `id`, from its next start, with its wall clock moved as
    /// faketime's `spec` says ("-1h": an hour behind everyone else's).
    pub fn set_osd_clock(&self, id: u32, spec: &str) {
        std::fs::write(self.osd_dir(id).join("clock"), spec).unwrap();
    }

    /// SIGTERM: the OSD flushes its store and exits.
    pub fn stop_osd(&mut self, id: u32) {
        if let Some(mut c) = self.osds[id as usize - 1].take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            assert!(c.wait().unwrap().success(), "OSD {id} did not stop cleanly");
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill_osd(&mut self, id: u32) {
        if let Some(mut c) = self.osds[id as usize - 1].take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .args(["--mds", &self.mds_addr, "--cluster", CLUSTER])
            .arg("--key-file")
            .arg(self.key_file())
            .output()
            .unwrap()
    }

    /// Runs a CLI command; asserts it succeeds and returns its stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// Runs a CLI command and returns its stdout, whatever its exit status.
    pub fn cli_text(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.cli(args).stdout).into_owned()
    }

    pub async fn client(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut cfg = ClientConfig::new(&self.mds_addr, CLUSTER, self.admin());
            cfg.attr_timeout = Duration::ZERO;
            match Client::connect(cfg).await {
                Ok(c) => return c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot connect: {e}"),
            }
        }
    }

    pub async fn status(&self) -> Option<ClusterStatus> {
        let m = net::MdsClient::new(&self.mds_addr, CLUSTER, self.admin(), 1);
        match m.call(Op::Status).await {
            Ok(MdsReply::Status(s)) => Some(*s),
            _ => None,
        }
    }

    /// Waits until `ok(status)` holds (`secs` at most).
    pub async fn wait_for(
        &self,
        what: &str,
        secs: u64,
        ok: impl Fn(&ClusterStatus) -> bool,
    ) -> ClusterStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(s) = self.status().await {
                if ok(&s) {
                    return s;
                }
                last = Some(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "timed out waiting for {what}; last status: {:?}\nMDS log tail:\n{}",
            last.map(|s| (s.health(), s.redundancy)),
            tail(&self.dir.join("mds.log"))
        );
    }

    /// Waits for HEALTH_OK with every OSD this test started in the map.
    pub async fn wait_healthy(&self, secs: u64) -> ClusterStatus {
        let n = self.osds.len();
        self.wait_for("HEALTH_OK", secs, |s| {
            s.health().level == "HEALTH_OK" && s.redundancy.checked && s.osds.len() == n
        })
        .await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.osds.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(m) = self.mds.as_mut() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

pub fn tail(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Mounts the cluster with `tessera mount --foreground`; unmounted on drop.
pub struct MountGuard {
    pub mp: PathBuf,
    child: Child,
}

impl MountGuard {
    pub fn new(cl: &Cluster, mp: &Path) -> MountGuard {
        use std::io::BufRead;
        std::fs::create_dir_all(mp).unwrap();
        let mut child = Command::new(BIN)
            .args(["mount", &cl.mds_addr])
            .arg(mp)
            .args(["--foreground", "--cluster", CLUSTER])
            .arg("--key-file")
            .arg(cl.key_file())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut r = std::io::BufReader::new(out);
        while r.read_line(&mut line).unwrap() > 0 {
            if line.contains("mounted") {
                break;
            }
            line.clear();
        }
        assert!(line.contains("mounted"), "mount did not come up: {line}");
        MountGuard {
            mp: mp.into(),
            child,
        }
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Root's credentials.
pub fn root() -> proto::mds::Creds {
    proto::mds::Creds {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    }
}

/// Deterministic content of file `k`.
pub fn content(k: u64, len: usize) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(k);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// A two-thread runtime for a test's clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes a whole file in directory `dir` and closes it (an acknowledged
/// write: fsync, then release).
pub async fn write_file_in(c: &Client, dir: u64, name: &str, data: &[u8]) -> client::Result<()> {
    let (_, fh) = c.create(&root(), dir, name, 0o644, false).await?;
    let mut at = 0;
    while at < data.len() {
        let n = (data.len() - at).min(1 << 20);
        c.write(fh, at as u64, &data[at..at + n]).await?;
        at += n;
    }
    c.fsync(fh).await?;
    c.release(fh).await
}

/// Reads a whole file of directory `dir`.
pub async fn read_file_in(c: &Client, dir: u64, name: &str) -> Vec<u8> {
    let e = c.lookup(&root(), dir, name).await.unwrap();
    let fh = c.open(&root(), e.attr.ino, false).await.unwrap();
    let mut out = Vec::new();
    loop {
        let b = c.read(fh, out.len() as u64, 1 << 20).await.unwrap();
        if b.is_empty() {
            break;
        }
        out.extend_from_slice(&b);
    }
    c.release(fh).await.unwrap();
    out
}

/// Copies a store image keeping its holes (the images are sparse).
pub fn copy_image(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Flips a bit in the middle of every place `needle` is found in a store
/// image (its OSD stopped); whether it was found.
pub fn flip_in_image(path: &Path, needle: &[u8]) -> bool {
    let mut img = std::fs::read(path).unwrap();
    let mut found = false;
    let mut from = 0;
    while let Some(at) = img[from..].windows(needle.len()).position(|w| w == needle) {
        let at = from + at;
        img[at + needle.len() / 2] ^= 0x40;
        found = true;
        from = at + needle.len();
    }
    std::fs::write(path, img).unwrap();
    found
}

/// Where Debian's faketime package puts the library it preloads.
fn libfaketime() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("faketime").join("libfaketime.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime (the Debian package faketime; .ci/run installs it)")
}
