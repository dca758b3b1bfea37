//! `tessera up`: a whole cluster in one command — an MDS and N OSDs on
//! 127.0.0.1 with file-backed stores under one data directory, keys made
//! and installed, optionally mounted. Running it again brings the same
//! cluster back with its data.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use local::{LocalMds, LocalOsd, osd_dir, provision_osd, wait_registered};
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;

use super::cluster::{ClusterFile, DEFAULT_DATA};

/// Start (or restart) a local cluster: MDS + OSDs, optionally mounted.
///
/// Everything lives under --data: `cluster.toml` (what other commands read
/// to find the cluster), `mds/` (namespace database, log, OSD keys) and
/// `osd-N/` (store image and key). Ctrl-C or SIGTERM stops it cleanly.
///
/// Example:
///   tessera up --osds 3 --size 4G --mount /mnt/tessera
#[derive(clap::Args)]
pub struct Args {
    /// Data directory (created on first run).
    #[arg(long, default_value = DEFAULT_DATA)]
    pub data: PathBuf,
    /// Number of OSDs (first run; later runs may raise it).
    #[arg(long, default_value_t = 3)]
    pub osds: u32,
    /// Size of each OSD's store file (first run).
    #[arg(long, default_value = "4G", value_parser = crate::args::size)]
    pub size: u64,
    /// MDS address (first run; recorded in cluster.toml).
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: String,
    /// Cluster id (first run).
    #[arg(long, default_value = "tessera")]
    pub cluster: String,
    /// Object-id policy (first run): child-closest, cousin-closest, create-order, pseudo-random.
    #[arg(long, default_value = "child-closest")]
    pub policy: String,
    /// Stripe count of the root directory (first run; default: the number of OSDs, at most 4).
    #[arg(long)]
    pub stripe_count: Option<u32>,
    /// Copies of every object (first run; 1 to 5; default: the number of
    /// OSDs, at most 3). Writes need all up copies, and at least
    /// replicas - 1 of them.
    #[arg(long)]
    pub replicas: Option<u8>,
    /// Stripe unit of the root directory (first run).
    #[arg(long, default_value = "512K", value_parser = crate::args::size)]
    pub stripe_unit: u64,
    /// Also mount the file system here.
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// The web dashboard and Prometheus `/metrics` (the MDS's, and the
    /// mount's client's).
    #[command(flatten)]
    pub http: super::dashboard::HttpArgs,
    /// Prefetch depth of the mount's client (0 disables).
    #[arg(long, default_value_t = 32)]
    pub prefetch: u32,
    /// The mount makes every namespace change durable before it returns
    /// (as `tessera mount --sync-namespace`).
    #[arg(long)]
    pub sync_namespace: bool,
    /// Never take directory leases: every create, unlink and lookup in a
    /// directory goes to the MDS, even when this mount alone is changing it
    /// (docs/CLIENT.md, "Directory leases"). Leases need early answers, so
    /// --sync-namespace turns them off too.
    #[arg(long)]
    pub no_dir_leases: bool,
    /// Where the namespace lives (first run): mds, or osd (Ali et al.: each
    /// directory an OSD object, no MDS in the metadata path).
    #[arg(long, default_value = "mds")]
    pub namespace: String,
    /// With --namespace osd (first run): how directory entries are inserted
    /// and removed: atomic (one compare-and-swap) or lock.
    #[arg(long, default_value = "atomic")]
    pub dir_protocol: String,
    /// Members of a replicated MDS group (first run; 1 = a single MDS).
    /// With 3 (or 5) the MDSs run as separate processes on --listen's
    /// port and the next ones (raft peers on those plus 100), and the
    /// file system survives the loss of any one (two) of them
    /// (`docs/HA.md`).
    #[arg(long = "mds", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    pub mds_members: u8,
}

/// The smallest OSD store `up` makes (a journal of 4 MiB and 16 large
/// blocks fit with room to spare).
const MIN_STORE: u64 = 64 << 20;

/// The arguments `up` can judge before it touches anything: the namespace
/// mode and directory protocol they name.
fn check_args(a: &Args) -> anyhow::Result<(proto::mds::NamespaceMode, osdns::Protocol)> {
    let ns_mode = proto::mds::NamespaceMode::parse(&a.namespace).map_err(anyhow::Error::msg)?;
    let protocol = osdns::Protocol::parse(&a.dir_protocol).map_err(anyhow::Error::msg)?;
    if a.osds == 0 {
        bail!("--osds must be at least 1");
    }
    if a.size < MIN_STORE {
        bail!(
            "--size {} is too small: an OSD's store holds its journal and at least 16 large \
             blocks of data; use at least {}",
            super::human(a.size),
            super::human(MIN_STORE)
        );
    }
    PolicyKind::parse(&a.policy).map_err(anyhow::Error::msg)?;
    Ok((ns_mode, protocol))
}

/// What `up` formats with on a first run, and the stripe count and copies
/// it chose.
pub fn format_options(
    a: &Args,
    ns_mode: proto::mds::NamespaceMode,
    protocol: osdns::Protocol,
) -> anyhow::Result<(FormatOptions, u32, u8)> {
    let kind = PolicyKind::parse(&a.policy).map_err(anyhow::Error::msg)?;
    let sc = a.stripe_count.unwrap_or(a.osds.min(4));
    let default_r = a.osds.min(3) as u8;
    let replicas = a.replicas.unwrap_or(default_r);
    let opts = FormatOptions {
        cluster_id: a.cluster.clone(),
        policy: IdPolicy::new(kind, Geometry::default()).map_err(anyhow::Error::msg)?,
        layout: LayoutSpec {
            stripe_unit: u32::try_from(a.stripe_unit).context("stripe unit too large")?,
            stripe_count: sc,
            object_size: 0,
            replicas,
            min_replicas: 0,
        },
        wal_bytes: 64 << 20,
        namespace: ns_mode,
        dir_protocol: protocol.name().into(),
    };
    Ok((opts, sc, replicas))
}

/// Refuses to make store files of `size` for OSDs `1..=osds` that have
/// none yet in `data` when the file system under `data` has less room
/// than they may fill: they are sparse and would fill the host's disk
/// as data arrives, each store believing it had space.
fn check_free_space(data: &Path, osds: u32, size: u64) -> anyhow::Result<()> {
    let new = (1..=osds)
        .filter(|&id| !osd_dir(data, id).join("store.img").exists())
        .count() as u64;
    if new == 0 {
        return Ok(());
    }
    // The nearest directory that exists (`data` may not yet).
    let Some(at) = data
        .ancestors()
        .find(|p| p.is_dir() || p.as_os_str().is_empty())
    else {
        return Ok(());
    };
    let at = if at.as_os_str().is_empty() {
        Path::new(".")
    } else {
        at
    };
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .context("the data directory's path has a NUL byte")?;
    // SAFETY: a zeroed statvfs is a valid value for statvfs() to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(()); // cannot tell: the stores' own ENOSPC will say
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    let need = new.saturating_mul(size);
    if need > free {
        bail!(
            "{new} new OSD stores of {} each need {} but {} has only {} free: choose a smaller \
             --size (or fewer --osds)",
            super::human(size),
            super::human(need),
            at.display(),
            super::human(free),
        );
    }
    Ok(())
}

/// Runs `tessera up`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    // The arguments, then the HTTP port: a bad argument is reported as
    // such, and a taken port stops `up` before it has made or started
    // anything.
    let (ns_mode, protocol) = check_args(&a)?;
    check_free_space(&a.data, a.osds, a.size)?;
    if a.mds_members > 1 || super::up_group::is_group(&a.data) {
        return super::up_group::run(&super::up_group::GroupUp {
            data: a.data.clone(),
            listen: a.listen.clone(),
            cluster: a.cluster.clone(),
            osds: a.osds,
            size: a.size,
            members: a.mds_members,
            mount: a.mount.clone(),
            prefetch: a.prefetch,
            early_answers: !a.sync_namespace,
            dir_leases: !a.no_dir_leases,
            http_given: a.http.http.is_some(),
            namespace: ns_mode,
            format: format_options(&a, ns_mode, protocol)?,
        });
    }
    let rt = super::runtime()?;
    let http_listener = rt.block_on(super::dashboard::listen(&a.http))?;
    net::files::create_private_dir(&a.data)
        .with_context(|| format!("cannot create {}", a.data.display()))?;
    let mds_dir = a.data.join("mds");
    let cf = match ClusterFile::load(&a.data)? {
        Some(mut cf) => {
            if a.osds > cf.osds {
                cf.osds = a.osds;
                cf.save(&a.data)?;
            }
            cf
        }
        None => {
            let (opts, sc, replicas) = format_options(&a, ns_mode, protocol)?;
            mds::service::format(&mds_dir, &opts)?;
            let cf = ClusterFile {
                cluster_id: a.cluster.clone(),
                mds: a.listen.clone(),
                osds: a.osds,
                osd_size: a.size,
            };
            cf.save(&a.data)?;
            println!(
                "made cluster {} in {} ({} OSDs of {}, id policy {}, stripe count {sc}, {replicas} replicas)",
                cf.cluster_id,
                a.data.display(),
                cf.osds,
                super::human(cf.osd_size),
                a.policy
            );
            cf
        }
    };
    for id in 1..=cf.osds {
        provision_osd(
            &osd_dir(&a.data, id),
            id,
            &cf.cluster_id,
            cf.osd_size,
            &mds_dir.join("keys"),
        )
        .map_err(anyhow::Error::msg)?;
    }
    let handle = rt.handle().clone();
    rt.block_on(async move {
        let m = LocalMds::start(&mds_dir, &cf.mds)
            .await
            .map_err(|e| anyhow::anyhow!("MDS: {e}"))?;
        // The admin's key, with the MDS address, where this cluster's
        // other commands look for it.
        let key_path = super::cluster::admin_key(&a.data);
        let mut admin = super::cluster::load_key(&mds::principals::admin_key_path(&mds_dir))?;
        admin.mds = Some(m.addr.to_string());
        admin
            .save(&key_path)
            .with_context(|| format!("cannot write {}", key_path.display()))?;
        let resolved = super::cluster::Resolved {
            mds: m.addr.to_string(),
            cluster: cf.cluster_id.clone(),
            identity: m.admin.clone(),
        };
        let mut osds = Vec::new();
        for id in 1..=cf.osds {
            let o = LocalOsd::start(
                &osd_dir(&a.data, id),
                "127.0.0.1:0",
                Some(m.addr.to_string()),
            )
            .await
            .map_err(|e| anyhow::anyhow!("OSD {id}: {e}"))?;
            osds.push(o);
        }
        for o in &osds {
            wait_registered(&m, o).await.map_err(anyhow::Error::msg)?;
        }
        if m.mds.namespace == proto::mds::NamespaceMode::Osd {
            let fs = super::namespace_client(&resolved).await?;
            let root = fs
                .open_or_make_root()
                .await
                .map_err(|e| anyhow::anyhow!("making the root directory on the OSDs: {e}"))?;
            println!(
                "namespace on the OSDs: root directory on OSD {}, {} protocol",
                root.osd,
                root.header.protocol.name()
            );
            println!(
                "check it with:  tessera fsck --namespace --data {}",
                a.data.display()
            );
        }
        println!("cluster {} is up", cf.cluster_id);
        println!("  MDS  {}", m.addr);
        for o in &osds {
            println!("  OSD {} {}", o.id, o.addr);
        }
        if let Ok(s) = m.mds.status() {
            super::status::print_status(&s);
        }
        let mut client = None;
        let mut session = None;
        if let Some(mp) = a.mount.as_ref() {
            let mut cfg =
                client::ClientConfig::new(&m.addr.to_string(), &cf.cluster_id, m.admin.clone());
            cfg.prefetch = a.prefetch;
            cfg.early_answers = !a.sync_namespace;
            cfg.dir_leases = !a.no_dir_leases;
            let c = client::Client::connect(cfg)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let s = tessera_fuse::mount(
                c.clone(),
                handle.clone(),
                mp,
                &tessera_fuse::MountOptions::default(),
            )
            .map_err(anyhow::Error::msg)?;
            println!("  mounted on {}", mp.display());
            client = Some(c);
            session = Some(s);
        } else {
            println!(
                "mount it with:  tessera mount {} /mnt/tessera --cluster {} --key-file {}",
                m.addr,
                cf.cluster_id,
                key_path.display()
            );
        }
        let extra: Option<dash::ExtraMetrics> = client.clone().map(|c| {
            std::sync::Arc::new(move || c.stats().prometheus()) as dash::ExtraMetrics
        });
        let http = match http_listener {
            Some(l) => Some(super::dashboard::start(&a.http, l, m.mds.clone(), &m.addr.to_string(), extra)?),
            None => None,
        };
        if let Some(h) = http {
            println!(
                "  dashboard on http://{h}/ (log in with {}, or a token from `tessera auth token --data {}`)",
                key_path.display(),
                a.data.display()
            );
            println!("  metrics on http://{h}/metrics");
        }
        println!("status: tessera status --data {}", a.data.display());
        println!("stop with Ctrl-C");
        super::up_group::until_signal_then_stop(session, client.as_ref(), osds).await;
        m.stop().await;
        println!("cluster stopped cleanly");
        Ok(0)
    })
}
