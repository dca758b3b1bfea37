//! `tessera mds format|serve|fsck`, `tessera status` and `tessera layout`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use local::LocalMds;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use net::MdsClient;
use proto::layout::LayoutSpec;
use proto::mds::{MdsReply, Op};

/// The metadata server.
#[derive(clap::Subcommand)]
pub enum MdsCmd {
    /// Make an empty file system in a data directory.
    ///
    /// The object-id policy is fixed here: child-closest (default) and
    /// cousin-closest flatten the namespace into ids so related files get
    /// numerically close ids (what prefetching exploits); create-order and
    /// pseudo-random are there for comparison. Put each OSD's key file in
    /// DIR/keys/osd-<id>.toml before the OSD registers.
    ///
    /// With --namespace osd the directories live on the OSDs (Ali et al.)
    /// and this MDS only hands out maps and capabilities; the first client
    /// to connect once OSDs have registered (a mount, `tessera fsck
    /// --namespace`) makes the root directory with --dir-protocol.
    ///
    /// Example: tessera mds format --data /var/lib/tessera/mds --cluster prod
    Format {
        /// Data directory (created).
        #[arg(long)]
        data: PathBuf,
        /// Cluster id (OSD key files must name it).
        #[arg(long)]
        cluster: String,
        /// Object-id policy: child-closest, cousin-closest, create-order, pseudo-random.
        #[arg(long, default_value = "child-closest")]
        policy: String,
        /// Root directory's stripe unit (e.g. 512K).
        #[arg(long, default_value = "512K", value_parser = crate::args::size)]
        stripe_unit: u64,
        /// Root directory's stripe count (capped at the OSDs when a file is made).
        #[arg(long, default_value_t = 1)]
        stripe_count: u32,
        /// Size of the metadata write-ahead log.
        #[arg(long, default_value = "64M", value_parser = crate::args::size)]
        log_size: u64,
        /// Where the namespace lives: mds, or osd (each directory an OSD
        /// object, no MDS in the metadata path).
        #[arg(long, default_value = "mds")]
        namespace: String,
        /// With --namespace osd: how directory entries are inserted and
        /// removed, atomic (one compare-and-swap) or lock.
        #[arg(long, default_value = "atomic")]
        dir_protocol: String,
    },
    /// Serve a formatted data directory (stops cleanly on SIGTERM / Ctrl-C).
    ///
    /// Example: tessera mds serve --data /var/lib/tessera/mds --listen 0.0.0.0:7400 --metrics 127.0.0.1:9400
    Serve {
        /// Data directory made by `tessera mds format`.
        #[arg(long)]
        data: PathBuf,
        /// Address for clients and OSDs.
        #[arg(long, default_value = "127.0.0.1:7400")]
        listen: String,
        /// Address for the Prometheus `/metrics` endpoint.
        #[arg(long)]
        metrics: Option<SocketAddr>,
    },
    /// Check the namespace offline (the MDS must not be running).
    Fsck {
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
    },
}

/// Show the cluster: OSDs up/down with space, inodes, request counts.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub to: super::cluster::Target,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Show or set a file's layout or a directory's default layout.
#[derive(clap::Subcommand)]
pub enum LayoutCmd {
    /// Print the layout of PATH.
    Get {
        /// Path in the file system (absolute).
        path: String,
        #[command(flatten)]
        to: StatusArgs,
    },
    /// Set PATH's layout (directories: the default for new files and
    /// subdirectories; files: only while empty).
    Set {
        /// Path in the file system (absolute).
        path: String,
        /// Stripe unit (multiple of 4K).
        #[arg(long, value_parser = crate::args::size)]
        stripe_unit: Option<u64>,
        /// Stripe count.
        #[arg(long)]
        stripe_count: Option<u32>,
        /// Largest object (0 = unbounded).
        #[arg(long, value_parser = crate::args::size)]
        object_size: Option<u64>,
        #[command(flatten)]
        to: StatusArgs,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn run(c: MdsCmd) -> anyhow::Result<i32> {
    match c {
        MdsCmd::Format {
            data,
            cluster,
            policy,
            stripe_unit,
            stripe_count,
            log_size,
            namespace,
            dir_protocol,
        } => {
            let kind = PolicyKind::parse(&policy).map_err(anyhow::Error::msg)?;
            let namespace =
                proto::mds::NamespaceMode::parse(&namespace).map_err(anyhow::Error::msg)?;
            osdns::Protocol::parse(&dir_protocol).map_err(anyhow::Error::msg)?;
            let opts = FormatOptions {
                cluster_id: cluster.clone(),
                policy: IdPolicy::new(kind, Geometry::default()).map_err(anyhow::Error::msg)?,
                layout: LayoutSpec {
                    stripe_unit: u32::try_from(stripe_unit).context("stripe unit too large")?,
                    stripe_count,
                    object_size: 0,
                },
                wal_bytes: log_size,
                namespace,
                dir_protocol: dir_protocol.clone(),
            };
            mds::service::format(&data, &opts)?;
            println!(
                "formatted {} for cluster {cluster} (id policy {policy}); put OSD keys in {}",
                data.display(),
                data.join("keys").display()
            );
            if namespace == proto::mds::NamespaceMode::Osd {
                println!(
                    "namespace on the OSDs ({dir_protocol} protocol): the first client to \
                     connect after OSDs register makes the root directory"
                );
            }
            Ok(0)
        }
        MdsCmd::Serve {
            data,
            listen,
            metrics,
        } => runtime()?.block_on(async move {
            let m = LocalMds::start(&data, &listen)
                .await
                .map_err(anyhow::Error::msg)?;
            if let Some(ma) = metrics {
                let l = tokio::net::TcpListener::bind(ma)
                    .await
                    .with_context(|| format!("cannot listen on {ma} for metrics"))?;
                let svc = m.mds.clone();
                tokio::spawn(osd::metrics::serve_text(
                    l,
                    std::sync::Arc::new(move || svc.metrics.render(&svc.kv.stats)),
                ));
            }
            println!(
                "MDS of cluster {} serving {} on {}",
                m.mds.sb.cluster_id,
                data.display(),
                m.addr
            );
            super::wait_for_signal().await;
            m.stop().await;
            println!("MDS stopped cleanly");
            Ok(0)
        }),
        MdsCmd::Fsck { data } => {
            let kv = mds::kv::Kv::open(&mds::kv::KvPaths::new(&data), 64 << 20)?;
            let r = mds::fsck::check(&kv.read()?)?;
            kv.close();
            println!(
                "{} inodes, {} entries, {} files waiting for object deletion",
                r.inodes, r.entries, r.delete_queue
            );
            for p in &r.problems {
                println!("problem: {p}");
            }
            if r.problems.is_empty() {
                println!("clean");
                Ok(0)
            } else {
                Ok(1)
            }
        }
    }
}

use super::human;

pub fn status(a: StatusArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let (mds_addr, cluster) = a.to.resolve()?;
        let c = MdsClient::new(&mds_addr, &cluster, 1);
        let s = match c.call(Op::Status).await? {
            MdsReply::Status(s) => s,
            r => bail!("unexpected reply {r:?}"),
        };
        if a.json {
            println!("{}", serde_json::to_string_pretty(&*s)?);
            return Ok(0);
        }
        print_status(&s);
        Ok(if s.osds.iter().all(|o| o.up) { 0 } else { 2 })
    })
}

pub fn layout(c: LayoutCmd) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let (path, to, set) = match c {
            LayoutCmd::Get { path, to } => (path, to, None),
            LayoutCmd::Set {
                path,
                stripe_unit,
                stripe_count,
                object_size,
                to,
            } => (path, to, Some((stripe_unit, stripe_count, object_size))),
        };
        let (mds_addr, cluster) = to.to.resolve()?;
        let cl = MdsClient::new(&mds_addr, &cluster, 1);
        let e = cl.resolve(&path).await?;
        let ino = e.attr.ino;
        let current = match cl.call(Op::GetLayout { ino }).await? {
            MdsReply::Layout { spec, .. } => spec,
            r => bail!("unexpected reply {r:?}"),
        };
        let reply = match set {
            None => cl.call(Op::GetLayout { ino }).await?,
            Some((su, sc, os)) => {
                let spec = LayoutSpec {
                    stripe_unit: match su {
                        Some(v) => u32::try_from(v).context("stripe unit too large")?,
                        None => current.stripe_unit,
                    },
                    stripe_count: sc.unwrap_or(current.stripe_count),
                    object_size: os.unwrap_or(current.object_size),
                };
                cl.call(Op::SetLayout { ino, spec }).await?
            }
        };
        match reply {
            MdsReply::Layout { spec, layout } => {
                println!(
                    "{path}: stripe unit {} B, stripe count {}, object size {}",
                    spec.stripe_unit,
                    spec.stripe_count,
                    if spec.object_size == 0 {
                        "unbounded".to_string()
                    } else {
                        format!("{} B", spec.object_size)
                    }
                );
                if let Some(l) = layout {
                    println!(
                        "  placed with OSD map epoch {}, object sets {:x?}",
                        l.map_epoch, l.objsets
                    );
                }
                Ok(0)
            }
            r => bail!("unexpected reply {r:?}"),
        }
    })
}

/// Prints cluster status as a table: map, inodes, MDS request counts, one row per OSD.
pub fn print_status(s: &proto::mds::ClusterStatus) {
    println!(
        "cluster {}  map epoch {}  inodes {}  id policy {}",
        s.cluster_id, s.epoch, s.inodes, s.id_policy
    );
    println!(
        "MDS requests: {} mandatory, {} non-mandatory; {} files waiting for object deletion",
        s.mandatory, s.non_mandatory, s.delete_queue
    );
    println!(
        "{:>4}  {:<22} {:>5} {:>7} {:>11} {:>11} {:>9}",
        "OSD", "address", "state", "weight", "used", "capacity", "objects"
    );
    for o in &s.osds {
        println!(
            "{:>4}  {:<22} {:>5} {:>7.2} {:>11} {:>11} {:>9}",
            o.id,
            o.addr,
            if o.up { "up" } else { "DOWN" },
            f64::from(o.weight) / f64::from(proto::placement::WEIGHT_ONE),
            human(o.used),
            human(o.capacity),
            o.objects
        );
    }
}
