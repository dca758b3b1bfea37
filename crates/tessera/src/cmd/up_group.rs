//! `tessera up --mds 3`: the local cluster with a replicated MDS group.
//! The members are separate `tessera mds serve` processes (each restarts
//! itself when it stops leading, so none can share this process), under
//! `DATA/mds/member-<id>`; the OSDs and the mount run here and know every
//! member's address. Running `up` again on the same directory brings the
//! same group back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use local::{LocalOsd, osd_dir, provision_osd};
use net::MdsClient;
use proto::mds::{MdsReply, Op};

use super::cluster::ClusterFile;

/// What `tessera up` passes on for a group (its arguments, judged).
pub struct GroupUp {
    /// The data directory.
    pub data: PathBuf,
    /// The first member's client address (the others follow it).
    pub listen: String,
    /// Cluster id (first run).
    pub cluster: String,
    /// OSDs (first run).
    pub osds: u32,
    /// Each OSD's store size (first run).
    pub size: u64,
    /// Members (first run).
    pub members: u8,
    /// Where to mount, if at all.
    pub mount: Option<PathBuf>,
    /// The mount's prefetch depth.
    pub prefetch: u32,
    /// The mount takes early answers.
    pub early_answers: bool,
    /// The mount takes directory leases.
    pub dir_leases: bool,
    /// `--http` was given.
    pub http_given: bool,
    /// Where the namespace lives.
    pub namespace: proto::mds::NamespaceMode,
    /// What a first run formats with, its stripe count and copies.
    pub format: (mds::FormatOptions, u32, u8),
}

/// Whether `data` holds a group made by `up --mds N`.
pub fn is_group(data: &Path) -> bool {
    member_dir(data, 1).exists()
}

fn member_dir(data: &Path, id: u64) -> PathBuf {
    data.join("mds").join(format!("member-{id}"))
}

/// The members' ids, from the directories there.
fn member_ids(data: &Path) -> Vec<u64> {
    (1..=9).filter(|i| member_dir(data, *i).exists()).collect()
}

/// Formats the group on a first run.
fn make_group(a: &GroupUp) -> anyhow::Result<ClusterFile> {
    let (opts, sc, replicas) = a.format.clone();
    let base: std::net::SocketAddr = a
        .listen
        .parse()
        .with_context(|| format!("--listen {:?} is not host:port", a.listen))?;
    let n = u16::from(a.members);
    if base.port() == 0 || base.port().checked_add(n - 1 + 100).is_none() {
        bail!(
            "--listen {}: with --mds {n} the members listen on this port and the next {}, \
             their peers 100 above: give a fixed port below {}",
            a.listen,
            n - 1,
            u16::MAX - n - 100
        );
    }
    let addrs: Vec<String> = (0..n)
        .map(|i| std::net::SocketAddr::new(base.ip(), base.port() + i).to_string())
        .collect();
    let members = super::mds_group::parse_members(&addrs.join(","), None)?;
    let root = a.data.join("mds");
    let formatted = root.join(".format");
    mds::service::format(&formatted, &opts)?;
    super::mds_group::make_members(&formatted, &root, &members, 64 << 20)?;
    let cf = ClusterFile {
        cluster_id: a.cluster.clone(),
        mds: addrs.join(","),
        osds: a.osds,
        osd_size: a.size,
    };
    cf.save(&a.data)?;
    println!(
        "made cluster {} in {} ({} OSDs of {}, stripe count {sc}, {replicas} replicas, an MDS group of {})",
        cf.cluster_id,
        a.data.display(),
        cf.osds,
        super::human(cf.osd_size),
        members.len()
    );
    Ok(cf)
}

/// Starts member `id` as its own process; it gets SIGTERM if `up` dies.
fn start_member(data: &Path, id: u64) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let dir = member_dir(data, id);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("mds.log"))
        .with_context(|| format!("cannot open {}", dir.join("mds.log").display()))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    // Its own process group: a Ctrl-C at the terminal reaches `up`, which
    // stops the members last, after the mount is synced.
    // No dashboard from the members: `up` serves none with a group yet.
    cmd.args(["mds", "serve", "--no-http", "--data"])
        .arg(&dir)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: prctl in the child before exec touches no shared state.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("cannot start MDS member {id}"))
}

/// Runs `up` with a group.
pub fn run(a: &GroupUp) -> anyhow::Result<i32> {
    if a.namespace == proto::mds::NamespaceMode::Osd {
        bail!(
            "--mds with --namespace osd is not supported yet (the OSD-namespace mode keeps no namespace in the MDS)"
        );
    }
    if a.http_given {
        bail!("the dashboard is not served with --mds > 1 yet; use `tessera status --watch`");
    }
    net::files::create_private_dir(&a.data)
        .with_context(|| format!("cannot create {}", a.data.display()))?;
    let cf = match ClusterFile::load(&a.data)? {
        Some(cf) if is_group(&a.data) => cf,
        Some(_) => bail!(
            "{} holds a single-MDS cluster: --mds applies to a first run only",
            a.data.display()
        ),
        None => make_group(a)?,
    };
    let ids = member_ids(&a.data);
    for id in 1..=cf.osds {
        for m in &ids {
            provision_osd(
                &osd_dir(&a.data, id),
                id,
                &cf.cluster_id,
                cf.osd_size,
                &member_dir(&a.data, *m).join("keys"),
            )
            .map_err(anyhow::Error::msg)?;
        }
    }
    let mut started = Vec::new();
    for id in &ids {
        started.push((*id, start_member(&a.data, *id)?));
    }
    let members = std::sync::Arc::new(std::sync::Mutex::new(started));
    let stopping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let supervisor = supervise(&a.data, members.clone(), stopping.clone());
    let rt = super::runtime()?;
    let handle = rt.handle().clone();
    let result = rt.block_on(serve(a, &cf, &ids, handle));
    stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = supervisor.join();
    // The leader first, while the others can still take its last
    // batches; then the followers.
    let mut m = members.lock().unwrap_or_else(|e| e.into_inner());
    let leads = |id: u64| {
        let addr = cf.mds.split(',').nth(id as usize - 1).unwrap_or("");
        addr.parse::<std::net::SocketAddr>().is_ok_and(|sa| {
            std::net::TcpStream::connect_timeout(&sa, Duration::from_millis(200)).is_ok()
        })
    };
    m.sort_by_key(|(id, _)| !leads(*id));
    for (id, c) in m.iter_mut() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        match c.wait() {
            Ok(s) if s.success() => {}
            other => eprintln!("MDS member {id}: {other:?}"),
        }
    }
    drop(m);
    if result.is_ok() {
        println!("cluster stopped cleanly");
    }
    result
}

/// Restarts a member whose process ended (as systemd's `Restart=always`
/// would), until `stopping`.
fn supervise(
    data: &Path,
    members: std::sync::Arc<std::sync::Mutex<Vec<(u64, Child)>>>,
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let data = data.to_path_buf();
    std::thread::spawn(move || {
        while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(500));
            let mut m = members.lock().unwrap_or_else(|e| e.into_inner());
            for (id, c) in m.iter_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    eprintln!("MDS member {id} ended ({status}); restarting it");
                    match start_member(&data, *id) {
                        Ok(n) => *c = n,
                        Err(e) => eprintln!("MDS member {id}: {e}"),
                    }
                }
            }
        }
    })
}

async fn serve(
    a: &GroupUp,
    cf: &ClusterFile,
    ids: &[u64],
    handle: tokio::runtime::Handle,
) -> anyhow::Result<i32> {
    let key = super::cluster::load_key(&mds::principals::admin_key_path(&member_dir(&a.data, 1)))?;
    let mut admin_file = key.clone();
    admin_file.mds = Some(cf.mds.clone());
    let key_path = super::cluster::admin_key(&a.data);
    admin_file
        .save(&key_path)
        .with_context(|| format!("cannot write {}", key_path.display()))?;
    let admin = key.identity()?;
    let c = MdsClient::new(&cf.mds, &cf.cluster_id, admin.clone(), 1);
    let mut osds = Vec::new();
    for id in 1..=cf.osds {
        let o = LocalOsd::start(&osd_dir(&a.data, id), "127.0.0.1:0", Some(cf.mds.clone()))
            .await
            .map_err(|e| anyhow::anyhow!("OSD {id}: {e}"))?;
        osds.push(o);
    }
    let mut status = None;
    for _ in 0..600 {
        if let Ok(MdsReply::Status(s)) = c.call(Op::Status).await
            && s.osds.iter().filter(|o| o.up).count() >= osds.len()
        {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.context("the OSDs did not register with the MDS group within 30 s")?;
    println!("cluster {} is up", cf.cluster_id);
    println!("  MDS group of {} members: {}", ids.len(), cf.mds);
    for o in &osds {
        println!("  OSD {} {}", o.id, o.addr);
    }
    super::status::print_status(&status);
    let mut session = None;
    let mut client = None;
    if let Some(mp) = a.mount.as_ref() {
        let mut cfg = client::ClientConfig::new(&cf.mds, &cf.cluster_id, admin.clone());
        cfg.prefetch = a.prefetch;
        cfg.early_answers = a.early_answers;
        cfg.dir_leases = a.dir_leases;
        let cl = client::Client::connect(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let s = tessera_fuse::mount(
            cl.clone(),
            handle,
            mp,
            &tessera_fuse::MountOptions::default(),
        )
        .map_err(anyhow::Error::msg)?;
        println!("  mounted on {}", mp.display());
        session = Some(s);
        client = Some(cl);
    } else {
        println!(
            "mount it with:  tessera mount {} /mnt/tessera --cluster {} --key-file {}",
            cf.mds,
            cf.cluster_id,
            key_path.display()
        );
    }
    println!("status: tessera status --data {}", a.data.display());
    println!("stop with Ctrl-C");
    until_signal_then_stop(session, client.as_ref(), osds).await;
    Ok(0)
}

/// Waits for Ctrl-C or SIGTERM, then unmounts, syncs the mount's client
/// and stops the OSDs (what `up` does before it stops its MDS).
pub async fn until_signal_then_stop(
    session: Option<tessera_fuse::BackgroundSession>,
    client: Option<&client::Client>,
    osds: Vec<LocalOsd>,
) {
    super::wait_for_signal().await;
    println!("stopping");
    if let Some(s) = session {
        let r = tokio::task::spawn_blocking(move || s.umount_and_join()).await;
        if let Ok(Err(e)) = r {
            eprintln!("unmount: {e}");
        }
    }
    if let Some(cl) = client {
        let _ = cl.sync_all().await;
    }
    for o in osds {
        let id = o.id;
        if let Err(e) = o.stop().await {
            eprintln!("OSD {id}: {e}");
        }
    }
}
