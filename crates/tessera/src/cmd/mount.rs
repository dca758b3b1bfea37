//! `tessera mount MDS_ADDR MOUNTPOINT`: the FUSE mount. In the background
//! by default (the command returns once the mount is ready, or with the
//! reason it failed); `--foreground` keeps it attached. SIGINT/SIGTERM
//! unmount cleanly after writing out buffered data.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

/// Mount a Tessera file system.
///
/// Example:
///   tessera mount 127.0.0.1:7400 /mnt/tessera
///   tessera mount 127.0.0.1:7400 /mnt/tessera --foreground --metrics 127.0.0.1:9500
/// Unmount with `umount /mnt/tessera` (or Ctrl-C / SIGTERM in the foreground).
#[derive(clap::Args)]
pub struct Args {
    /// MDS address.
    pub mds: String,
    /// Where to mount (an empty directory).
    pub mountpoint: PathBuf,
    /// Stay in the foreground (logs to stderr) instead of detaching.
    #[arg(long)]
    pub foreground: bool,
    /// Mount even if the mount point has entries (they are hidden while
    /// mounted; by default such a mount point is refused).
    #[arg(long)]
    pub nonempty: bool,
    /// Cluster id (default: the key file's).
    #[arg(long)]
    pub cluster: Option<String>,
    /// The principal's key file (`tessera auth add` writes one; default:
    /// $TESSERA_KEY_FILE, else ./tessera-data/client.admin.key, the admin
    /// key `tessera up` writes).
    #[arg(long, env = "TESSERA_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Encrypt every connection's frames (AES-256-GCM).
    #[arg(long)]
    pub encrypt: bool,
    /// Neighbours the MDS prefetches per lookup or open (Hendricks et al.: 32; 0 disables).
    #[arg(long, default_value_t = 32)]
    pub prefetch: u32,
    /// Seconds cached metadata answers without asking the MDS (0 = always ask).
    #[arg(long, default_value_t = 1.0)]
    pub attr_timeout: f64,
    /// Kernel request threads (requests the mount serves at once).
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Make every namespace change (create, unlink, rename…) durable
    /// before it returns (mkdir always is). By default the MDS answers once
    /// the change is visible, this mount keeps it until the MDS's log has it
    /// and replays it should the MDS restart first; fsync, fsyncdir and
    /// unmount wait for durability (docs/CLIENT.md, "Durability").
    #[arg(long)]
    pub sync_namespace: bool,
    /// Never take directory leases: every create, unlink and lookup in a
    /// directory goes to the MDS, even when this mount alone is changing it
    /// (docs/CLIENT.md, "Directory leases"). Leases need early answers, so
    /// --sync-namespace turns them off too.
    #[arg(long)]
    pub no_dir_leases: bool,
    /// Serve the client's Prometheus metrics (cache hits, MDS requests) here.
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the client's counters as JSON to this file when unmounting.
    #[arg(long)]
    pub stats_file: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !(a.attr_timeout >= 0.0 && a.attr_timeout.is_finite()) {
        bail!("--attr-timeout must be a number of seconds ≥ 0");
    }
    tessera_fuse::mount::check_mount_point(&a.mountpoint, a.nonempty)
        .map_err(anyhow::Error::msg)?;
    if a.foreground {
        return serve(a, None);
    }
    // Detach: the child mounts and reports through a pipe; the parent
    // returns when the mount is ready.
    let mut fds = [0i32; 2];
    // SAFETY: pipe() fills two descriptors we then own.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the descriptors came from pipe() above and are owned once here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no threads exist yet in this process (no runtime was built),
    // so fork is safe.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(rd);
            // SAFETY: setsid in the child detaches it from the terminal.
            unsafe { libc::setsid() };
            let code = serve(a, Some(wr)).unwrap_or(1);
            std::process::exit(code);
        }
        _ => {
            drop(wr);
            let mut msg = String::new();
            std::fs::File::from(rd).read_to_string(&mut msg)?;
            match msg.strip_prefix("ok") {
                Some(rest) => {
                    print!("{}", rest.trim_start());
                    Ok(0)
                }
                None if msg.is_empty() => bail!("the mount process exited before mounting"),
                None => bail!("{}", msg.trim()),
            }
        }
    }
}

fn report(ready: &mut Option<OwnedFd>, msg: &str) {
    if let Some(fd) = ready.take() {
        let _ = std::fs::File::from(fd).write_all(msg.as_bytes());
    }
}

fn serve(a: Args, mut ready: Option<OwnedFd>) -> anyhow::Result<i32> {
    let rt = super::runtime()?;
    let handle = rt.handle().clone();
    let r = rt.block_on(async {
        let key_path = a.key_file.clone().unwrap_or_else(|| {
            super::cluster::admin_key(std::path::Path::new(super::cluster::DEFAULT_DATA))
        });
        let key = super::cluster::load_key(&key_path)?;
        let cluster = a.cluster.clone().unwrap_or_else(|| key.cluster_id.clone());
        let mut cfg = client::ClientConfig::new(&a.mds, &cluster, key.identity()?);
        cfg.encrypt = a.encrypt;
        cfg.prefetch = a.prefetch;
        cfg.attr_timeout = Duration::from_secs_f64(a.attr_timeout);
        cfg.early_answers = !a.sync_namespace;
        cfg.dir_leases = !a.no_dir_leases;
        let c = client::Client::connect(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let opts = tessera_fuse::MountOptions {
            threads: a.threads,
            ttl: Duration::from_secs_f64(a.attr_timeout),
            allow_other: true,
            allow_nonempty: a.nonempty,
        };
        let session = tessera_fuse::mount(c.clone(), handle.clone(), &a.mountpoint, &opts)
            .map_err(anyhow::Error::msg)?;
        if let Some(ma) = a.metrics {
            let l = tokio::net::TcpListener::bind(ma)
                .await
                .with_context(|| format!("cannot listen on {ma} for metrics"))?;
            let cl = c.clone();
            tokio::spawn(osd::metrics::serve_text(
                l,
                std::sync::Arc::new(move || cl.stats().prometheus()),
            ));
        }
        let line = format!(
            "mounted {} (cluster {}) on {} as {}\n",
            a.mds,
            cluster,
            a.mountpoint.display(),
            c.principal().spec.name
        );
        if ready.is_some() {
            report(&mut ready, &format!("ok {line}"));
            // Detached: no terminal to write to.
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                use std::os::fd::AsRawFd;
                // SAFETY: dup2 onto our own stdout/stderr.
                unsafe {
                    libc::dup2(null.as_raw_fd(), 1);
                    libc::dup2(null.as_raw_fd(), 2);
                }
            }
        } else {
            print!("{line}");
        }
        // Runs until a signal, or until someone unmounts it (the session ends).
        let sess = std::sync::Arc::new(std::sync::Mutex::new(Some(session)));
        let s2 = sess.clone();
        let ended = async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let done = s2
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_none_or(|s| s.guard.is_finished());
                if done {
                    return;
                }
            }
        };
        tokio::select! {
            _ = super::wait_for_signal() => {}
            _ = ended => {}
        }
        let s = sess.lock().unwrap_or_else(|e| e.into_inner()).take();
        let _ = c.sync_all().await;
        if let Some(s) = s {
            tokio::task::spawn_blocking(move || s.umount_and_join())
                .await
                .ok();
        }
        if let Some(p) = &a.stats_file {
            std::fs::write(p, serde_json::to_string_pretty(&c.stats())?)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok::<i32, anyhow::Error>(0)
    });
    if let Err(e) = &r {
        report(&mut ready, &format!("{e:#}"));
    }
    r
}
