//! The thrasher's cluster: an MDS process and OSD processes of this very
//! binary under one directory, each killable with SIGKILL, with stores
//! that can be replaced, copied aside and put back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use proto::mds::{ClusterStatus, MdsReply, Op};

/// The cluster id the thrasher formats.
pub const CLUSTER: &str = "thrash";
/// Bytes of each OSD's store (a sparse file).
const STORE_BYTES: u64 = 512 << 20;

/// An MDS process and OSD processes `1..=n`.
pub struct Cluster {
    /// Where everything lives.
    pub dir: PathBuf,
    /// The MDS's address.
    pub mds_addr: String,
    mds: Option<Child>,
    osd_addrs: Vec<String>,
    osds: Vec<Option<Child>>,
    exe: PathBuf,
}

fn free_port() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.to_string())
}

/// A daemon of the thrasher's: killed with the thrasher, however the
/// thrasher ends (`PR_SET_PDEATHSIG`), so none outlives a killed run.
fn daemon(exe: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(exe);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec here.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    c
}

/// libfaketime (Debian's faketime package), if installed.
fn libfaketime() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("faketime").join("libfaketime.so.1"))
        .find(|p| p.exists())
}

fn log_file(p: &Path) -> anyhow::Result<Stdio> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)?;
    Ok(Stdio::from(f))
}

impl Cluster {
    /// Formats a file system in `dir` (which must not exist yet) keeping
    /// `replicas` copies, with the namespace on the OSDs when `on_osds`,
    /// and starts the MDS and `n` OSDs. Heartbeats are fast (300 ms, a
    /// lease of 1.5 s) so that failures are noticed in seconds.
    pub fn start(dir: &Path, n: u32, replicas: u8, on_osds: bool) -> anyhow::Result<Cluster> {
        if dir.exists() {
            bail!("{} exists: the thrasher starts from nothing", dir.display());
        }
        std::fs::create_dir_all(dir)?;
        let exe = std::env::current_exe()?;
        let mds_dir = dir.join("mds");
        let mut format = Command::new(&exe);
        format.args(["mds", "format", "--data"]).arg(&mds_dir);
        format.args(["--cluster", CLUSTER, "--replicas", &replicas.to_string()]);
        if on_osds {
            format.args(["--namespace", "osd"]);
        }
        let out = format.output()?;
        if !out.status.success() {
            bail!("mds format: {}", String::from_utf8_lossy(&out.stderr));
        }
        let cfg = mds_dir.join("mds.toml");
        let fast = ["heartbeat_ms", "down_after_ms", "recovery_interval_ms"];
        let mut text: Vec<String> = std::fs::read_to_string(&cfg)?
            .lines()
            .filter(|l| !fast.iter().any(|k| l.starts_with(&format!("{k} "))))
            .map(String::from)
            .collect();
        text.extend(
            [
                "heartbeat_ms = 300",
                "down_after_ms = 1500",
                "recovery_interval_ms = 300",
            ]
            .map(String::from),
        );
        std::fs::write(&cfg, text.join("\n"))?;
        let mut c = Cluster {
            dir: dir.into(),
            mds_addr: free_port()?,
            mds: None,
            osd_addrs: Vec::new(),
            osds: Vec::new(),
            exe,
        };
        c.start_mds()?;
        for id in 1..=n {
            c.provision(id)?;
            c.osd_addrs.push(free_port()?);
            c.osds.push(None);
            c.start_osd(id)?;
        }
        Ok(c)
    }

    /// How many OSDs there are.
    pub fn osd_count(&self) -> u32 {
        self.osds.len() as u32
    }

    /// The admin's identity.
    pub fn admin(&self) -> anyhow::Result<net::auth::Identity> {
        let key = self.dir.join("mds").join("client.admin.key");
        Ok(net::auth::ClientKey::load(&key)?.identity()?)
    }

    fn osd_dir(&self, id: u32) -> PathBuf {
        self.dir.join(format!("osd-{id}"))
    }

    /// OSD `id`'s store image.
    pub fn image(&self, id: u32) -> PathBuf {
        self.osd_dir(id).join("store.img")
    }

    /// A new store (and, the first time, a key) for OSD `id`.
    fn provision(&self, id: u32) -> anyhow::Result<()> {
        let keys = self.dir.join("mds").join("keys");
        local::provision_osd(&self.osd_dir(id), id, CLUSTER, STORE_BYTES, &keys)
            .with_context(|| format!("provisioning OSD {id}"))
    }

    /// Starts the MDS (logging to `mds.log`).
    pub fn start_mds(&mut self) -> anyhow::Result<()> {
        let child = daemon(&self.exe)
            .args(["mds", "serve", "--data"])
            .arg(self.dir.join("mds"))
            .args(["--listen", &self.mds_addr, "--no-http"])
            .env("TESSERA_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir.join("mds.log"))?)
            .spawn()?;
        self.mds = Some(child);
        Ok(())
    }

    /// SIGKILL to the MDS.
    pub fn kill_mds(&mut self) {
        if let Some(mut m) = self.mds.take() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }

    /// Starts OSD `id` on its store (logging to its `osd.log`).
    pub fn start_osd(&mut self, id: u32) -> anyhow::Result<()> {
        let d = self.osd_dir(id);
        let mut cmd = daemon(&self.exe);
        // Each OSD's wall clock can be stepped while it runs (a clock
        // step fault): libfaketime, preloaded, reads its offset from the
        // OSD's `clock` file every second. Monotonic time is left alone.
        if let Some(lib) = libfaketime() {
            let clock = d.join("clock");
            if !clock.exists() {
                std::fs::write(&clock, "+0")?;
            }
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", &clock)
                .env("FAKETIME_CACHE_DURATION", "1")
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
            .stdout(Stdio::null())
            .stderr(log_file(&d.join("osd.log"))?)
            .spawn()?;
        self.osds[id as usize - 1] = Some(child);
        Ok(())
    }

    /// Steps OSD `id`'s wall clock to `secs` seconds off the machine's
    /// (within a second, while it runs); false when libfaketime is not
    /// installed, so its clock cannot be moved.
    pub fn step_clock(&self, id: u32, secs: i64) -> anyhow::Result<bool> {
        if libfaketime().is_none() {
            return Ok(false);
        }
        std::fs::write(self.osd_dir(id).join("clock"), format!("{secs:+}"))?;
        Ok(true)
    }

    /// SIGKILL to OSD `id`, as a crash.
    pub fn kill_osd(&mut self, id: u32) {
        if let Some(mut c) = self.osds[id as usize - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM to OSD `id`: it drains and flushes its store.
    pub fn stop_osd(&mut self, id: u32) -> anyhow::Result<()> {
        if let Some(mut c) = self.osds[id as usize - 1].take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let st = c.wait()?;
            if !st.success() {
                bail!("OSD {id} did not stop cleanly: {st}");
            }
        }
        Ok(())
    }

    /// Replaces OSD `id`'s store by a new, empty one (it must be down).
    pub fn replace_store(&self, id: u32) -> anyhow::Result<()> {
        std::fs::remove_file(self.image(id))?;
        self.provision(id)
    }

    /// Copies OSD `id`'s store image (it must be down) to `to`, or back
    /// from it, keeping holes.
    pub fn copy_image(from: &Path, to: &Path) -> anyhow::Result<()> {
        let out = Command::new("cp")
            .arg("--sparse=always")
            .arg(from)
            .arg(to)
            .output()?;
        if !out.status.success() {
            bail!("cp: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// The cluster's status, if the MDS answers.
    pub async fn status(&self) -> Option<ClusterStatus> {
        let m = net::MdsClient::new(&self.mds_addr, CLUSTER, self.admin().ok()?, 1);
        match m.call(Op::Status).await {
            Ok(MdsReply::Status(s)) => Some(*s),
            _ => None,
        }
    }

    /// Waits (at most `limit`) for HEALTH_OK with every OSD up; how long
    /// it took, or the last health seen.
    pub async fn wait_healthy(&self, limit: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let mut last = String::from("the MDS never answered");
        while started.elapsed() < limit {
            if let Some(s) = self.status().await {
                let h = s.health();
                let all_up = s.osds.len() == self.osds.len() && s.osds.iter().all(|o| o.up);
                if h.level == "HEALTH_OK" && s.redundancy.checked && all_up {
                    return Ok(started.elapsed());
                }
                let up = s.osds.iter().filter(|o| o.up).count();
                last = format!(
                    "{} {}{}{}",
                    h.level,
                    h.reasons.join("; "),
                    if s.redundancy.checked {
                        ""
                    } else {
                        "; redundancy not checked yet"
                    },
                    if all_up {
                        String::new()
                    } else {
                        format!("; {up} of {} OSDs up", self.osds.len())
                    }
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(last)
    }

    /// Stops every OSD cleanly and the MDS, then checks every store with
    /// `tessera fsck`; the stores that are not clean.
    pub fn stop_and_fsck(&mut self) -> anyhow::Result<Vec<String>> {
        for id in 1..=self.osd_count() {
            self.stop_osd(id)?;
        }
        self.kill_mds();
        let mut bad = Vec::new();
        for id in 1..=self.osd_count() {
            let out = Command::new(&self.exe)
                .arg("fsck")
                .arg(self.image(id))
                .output()?;
            if !out.status.success() {
                bad.push(format!(
                    "OSD {id}: {}",
                    String::from_utf8_lossy(&out.stdout).trim()
                ));
            }
        }
        Ok(bad)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.osds.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill_mds();
    }
}
