//! `tessera osd`: run an object storage device daemon on a store, and
//! `tessera keygen`: make its key file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use net::keys::KeyFile;
use osd::exec::{Ctx, StoreHandle};
use osd::server::{Osd, ServerConfig};
use store::{OpenOptions, Store};

/// Serve a store over the network as an OSD.
///
/// Every request must carry a capability signed with one of the key file's
/// secrets (shared only with the MDS). The daemon stops cleanly on SIGTERM
/// or Ctrl-C: it stops accepting, finishes requests in flight, flushes the
/// store and exits 0.
///
/// `tessera osd out ID` and `tessera osd in ID` mark an OSD out of (or
/// back into) placement; see their --help.
///
/// Example: tessera keygen --out osd0.key --cluster demo --osd-id 0
///          tessera osd --store osd0.img --listen 0.0.0.0:7000 --key-file osd0.key --metrics 127.0.0.1:9100 --rack rack1 --host node4
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    /// Operator actions (instead of running a daemon).
    #[command(subcommand)]
    action: Option<super::redundancy::OsdAction>,
    /// The store (block device or file made by `tessera mkfs`).
    #[arg(long, required = true)]
    store: Option<PathBuf>,
    /// Address to serve the protocol on.
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: SocketAddr,
    /// Key file (TOML: cluster_id, osd_id, one or two keys); see `tessera keygen`.
    #[arg(long, required = true)]
    key_file: Option<PathBuf>,
    /// Address for the Prometheus `/metrics` endpoint.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Accept requests without capabilities. Only for experiments on a
    /// trusted network: anyone who can connect can read and destroy data.
    #[arg(long)]
    insecure: bool,
    /// Requests processed at once per connection.
    #[arg(long, default_value_t = 64)]
    max_in_flight: u32,
    /// Authenticated connections served at once (a mount holds two to
    /// each OSD it uses); when full, the principal holding the most gives
    /// its idlest one up to a principal holding fewer.
    #[arg(long, default_value_t = net::serve::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    max_connections: usize,
    /// Seconds a connection may sit idle before it is closed.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
    /// MDS to register with and heartbeat to (its keys directory must hold
    /// this OSD's key file as osd-<id>.toml).
    #[arg(long)]
    mds: Option<String>,
    /// Address clients should use, if not the listen address (e.g. behind NAT).
    #[arg(long)]
    advertise: Option<String>,
    /// Placement weight relative to other OSDs (e.g. its capacity in TiB);
    /// 0 takes no new data. Changing it changes where new files go.
    #[arg(long, default_value_t = 1.0)]
    weight: f64,
    /// User attributes this OSD's store may hold in all, in MiB as they
    /// encode (they all live in memory, so this bounds what anyone with
    /// write rights can make it hold; a directory on the OSDs keeps its
    /// entries as attributes). Past it, changes that add attributes fail
    /// with ENOSPC; replacing with no larger values and removing still
    /// go through.
    #[arg(long, default_value_t = store::DEFAULT_MAX_ATTR_BYTES >> 20, value_parser = clap::value_parser!(u64).range(16..=1 << 24))]
    max_attr_mib: u64,
    /// Failure domain: copies of one object go to OSDs of distinct hosts
    /// when the cluster has enough. Default: this machine's host name.
    #[arg(long)]
    host: Option<String>,
    /// The rack (or room, or power domain) the host is in: copies go to
    /// distinct racks first, then distinct hosts. Reported as RACK/HOST.
    /// Default: none (each host is a rack of its own).
    #[arg(long)]
    rack: Option<String>,
}

/// Make an OSD key file with a fresh random secret (key version 1).
#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write it (created with mode 0600).
    #[arg(long)]
    out: PathBuf,
    /// Cluster id the OSD belongs to.
    #[arg(long)]
    cluster: String,
    /// The OSD's id.
    #[arg(long)]
    osd_id: u32,
    /// Overwrite an existing file.
    #[arg(long)]
    force: bool,
}

pub fn keygen(a: KeygenArgs) -> anyhow::Result<i32> {
    if a.out.exists() && !a.force {
        bail!(
            "{} exists; pass --force to replace it (clients holding capabilities signed with the old key will be refused)",
            a.out.display()
        );
    }
    KeyFile::generate(&a.cluster, a.osd_id)
        .save(&a.out)
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    println!(
        "wrote {} (cluster {}, OSD {}, key version 1)",
        a.out.display(),
        a.cluster,
        a.osd_id
    );
    Ok(0)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if let Some(action) = a.action {
        return super::redundancy::osd_action(action);
    }
    let (Some(store_path), Some(key_file)) = (a.store.clone(), a.key_file.clone()) else {
        bail!("--store and --key-file are required to run an OSD");
    };
    let kf = KeyFile::load(&key_file).map_err(anyhow::Error::msg)?;
    let dev = super::open_device(&store_path)?;
    let opts = OpenOptions {
        max_attr_bytes: a.max_attr_mib << 20,
        ..OpenOptions::default()
    };
    let store = Store::open(dev, &opts)
        .with_context(|| format!("cannot open the store on {}", store_path.display()))?;
    let keys = if a.insecure {
        tracing::warn!(
            "INSECURE MODE: capabilities are not checked; anyone who can connect can read, change and format this OSD"
        );
        eprintln!("warning: --insecure: capabilities are not checked");
        None
    } else {
        Some(kf.ring().map_err(anyhow::Error::msg)?)
    };
    let handle = Arc::new(StoreHandle::new(store_path.clone(), store));
    let mut ctx = Ctx::new(handle.clone(), keys, kf.osd_id);
    // A cluster member serves clients only under a current MDS lease.
    let lease = Arc::new(net::Lease::default());
    if a.mds.is_some() {
        ctx.lease = Some(lease.clone());
    }
    let mut cfg = ServerConfig::new(&kf.cluster_id, kf.osd_id);
    cfg.serve.max_in_flight = a.max_in_flight.max(1);
    cfg.serve.idle_timeout = std::time::Duration::from_secs(a.idle_timeout.max(1));
    cfg.serve.max_connections = a.max_connections;
    cfg.serve.max_connections_per_principal = a.max_connections;
    let rt = super::runtime()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("cannot listen on {}", a.listen))?;
        // A cluster member takes part in the replica chains (used when the
        // file system keeps copies of a namespace on the OSDs).
        let (osd, chains_epoch) = match &a.mds {
            Some(m) => {
                let (chains, tx) = local::chain_member(m, &kf).map_err(anyhow::Error::msg)?;
                (Osd::chained(ctx, cfg, chains), Some(tx))
            }
            None => (Osd::new(ctx, cfg), None),
        };
        if let Some(m) = a.metrics {
            let ml = tokio::net::TcpListener::bind(m).await.with_context(|| format!("cannot listen on {m} for metrics"))?;
            tokio::spawn(osd::metrics::serve(ml, osd.metrics.clone(), handle.clone()));
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            let _ = tx.send(true);
        });
        if let Some(m) = a.mds.clone() {
            let addr = match &a.advertise {
                Some(x) => x.clone(),
                None => listener.local_addr()?.to_string(),
            };
            if !(a.weight.is_finite() && (0.0..=65535.0).contains(&a.weight)) {
                bail!("--weight {}: must be between 0 and 65535", a.weight);
            }
            let weight = (a.weight * f64::from(proto::placement::WEIGHT_ONE)).round() as u32;
            let host = failure_domain(a.rack.as_deref(), a.host.clone())?;
            let reg = local::Registration { addr, weight, host };
            local::spawn_reporter(
                m,
                &kf,
                reg,
                (handle.clone(), osd.metrics.clone()),
                lease,
                chains_epoch,
            )
                .map_err(anyhow::Error::msg)?;
        }
        tracing::info!(listen = %a.listen, osd = kf.osd_id, cluster = %kf.cluster_id, "OSD serving");
        println!("OSD {} of cluster {} serving {} on {}", kf.osd_id, kf.cluster_id, store_path.display(), listener.local_addr()?);
        osd.serve(listener, rx).await?;
        println!("OSD stopped cleanly");
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}

/// The failure domain an OSD reports: `RACK/HOST` with `--rack`, else the
/// host (this machine's name when `--host` is not given).
fn failure_domain(rack: Option<&str>, host: Option<String>) -> anyhow::Result<String> {
    let host = host.unwrap_or_else(local::host_name);
    let domain = match rack {
        Some(r) => {
            if r.is_empty() || r.contains('/') || host.contains('/') {
                bail!("--rack {r:?} --host {host:?}: neither may be empty or hold a '/'");
            }
            format!("{r}/{host}")
        }
        None => host,
    };
    if domain.is_empty() || domain.len() > 255 {
        bail!("--host (with --rack): must be 1 to 255 bytes");
    }
    Ok(domain)
}

#[cfg(test)]
mod tests {
    use super::failure_domain;

    #[test]
    fn a_rack_is_reported_before_its_host_and_bad_names_are_refused() {
        assert_eq!(
            failure_domain(Some("r1"), Some("n4".into())).unwrap(),
            "r1/n4"
        );
        assert_eq!(failure_domain(None, Some("n4".into())).unwrap(), "n4");
        for (rack, host) in [("", "n4"), ("r/1", "n4"), ("r1", "a/b")] {
            let e = failure_domain(Some(rack), Some(host.into())).unwrap_err();
            assert!(e.to_string().contains("may be empty or hold a '/'"), "{e}");
        }
        assert!(failure_domain(Some("r"), Some("h".repeat(300))).is_err());
    }
}
