//! Running Tessera daemons inside one process on local files: an OSD on a
//! file-backed store that registers with an MDS, an MDS on a data
//! directory, and a whole cluster of them. `tessera up`, the end-to-end
//! tests and the benchmarks are built from these; no daemon crate depends
//! on this one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mds::Mds;
use net::heartbeat::{ReportSource, report_loop};
use net::keys::{KeyError, KeyFile};
use osd::exec::{Ctx, StoreHandle};
use osd::server::{Osd, ServerConfig};
use proto::mds::MdsError;
use store::device::{Device, FileDevice};
use store::{FormatOptions as StoreFormat, OpenOptions, Store, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Why a local daemon or cluster could not be made, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file or directory could not be made or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A store could not be made, opened or closed.
    #[error("{}: {source}", path.display())]
    Store {
        /// The store image.
        path: PathBuf,
        /// What the store said.
        source: StoreError,
    },
    /// An OSD key file is unusable.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The MDS could not be formatted or opened.
    #[error("{}: {source}", path.display())]
    Mds {
        /// The MDS directory.
        path: PathBuf,
        /// What the MDS said.
        source: MdsError,
    },
    /// A listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// An OSD did not show up in the MDS's map in time.
    #[error("OSD {0} did not register within 10 s")]
    NotRegistered(u32),
    /// An operation needs the MDS, which is stopped.
    #[error("the MDS is stopped")]
    MdsStopped,
    /// A daemon task panicked or was cancelled.
    #[error("daemon task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + '_ {
    move |source| LocalError::Io {
        path: path.into(),
        source,
    }
}

fn store_at(path: &Path) -> impl FnOnce(StoreError) -> LocalError + '_ {
    move |source| LocalError::Store {
        path: path.into(),
        source,
    }
}

/// An OSD running in this process.
pub struct LocalOsd {
    /// Its id.
    pub id: u32,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its store.
    pub store: Arc<StoreHandle>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), StoreError>>>,
    reporter: Option<JoinHandle<()>>,
}

/// An OSD dropped without [`LocalOsd::stop`] (a test that fails, a
/// benchmark that returns early) stops at once and writes nothing more
/// under its directory, so the directory can be removed after it.
impl Drop for LocalOsd {
    fn drop(&mut self) {
        if let Some(r) = &self.reporter {
            r.abort();
        }
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Where an OSD's files live under a cluster directory.
pub fn osd_dir(root: &Path, id: u32) -> PathBuf {
    root.join(format!("osd-{id}"))
}

/// Makes (if needed) the store image and key of OSD `id` under `dir`, and
/// copies the key into the MDS's key directory `mds_keys`.
pub fn provision_osd(
    dir: &Path,
    id: u32,
    cluster_id: &str,
    size: u64,
    mds_keys: &Path,
) -> Result<(), LocalError> {
    net::files::create_private_dir(dir).map_err(io_at(dir))?;
    let img = dir.join("store.img");
    if !img.exists() {
        let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&img, size).map_err(io_at(&img))?);
        let label = store::format(dev, &StoreFormat::default()).map_err(store_at(&img))?;
        // Without the mark the first start only costs a refill.
        let _ = osd::chain::mark_new_store(&img, &label.uuid);
    }
    let key = dir.join("key.toml");
    if !key.exists() {
        KeyFile::generate(cluster_id, id)
            .save(&key)
            .map_err(io_at(&key))?;
    }
    net::files::create_private_dir(mds_keys).map_err(io_at(mds_keys))?;
    let text = std::fs::read(&key).map_err(io_at(&key))?;
    let copy = mds_keys.join(format!("osd-{id}.toml"));
    net::files::write_private(&copy, &text).map_err(io_at(&copy))?;
    Ok(())
}

/// An all-rights capability on the data partition of the OSD provisioned in
/// `dir`, valid for `ttl_ms` (what an operator's tool or a test holds).
pub fn operator_cap(dir: &Path, ttl_ms: u64) -> Result<proto::Capability, LocalError> {
    let kf = KeyFile::load(&dir.join("key.toml"))?;
    let (version, key) = kf.newest()?;
    Ok(proto::CapSpec {
        partition: proto::layout::DATA_PARTITION,
        oid_lo: 0,
        oid_hi: u64::MAX,
        rights: proto::rights::ALL,
        expiry_ms: proto::clock::now_ms() + ttl_ms,
        version: u64::MAX,
        holder: proto::auth::MDS_PRINCIPAL,
    }
    .sign(&key, version, kf.osd_id))
}

/// Who an operator's tool connects to the OSD provisioned in `dir` as: the
/// MDS principal, with tickets minted with the OSD's key (the holder of
/// [`operator_cap`]'s capabilities).
pub fn operator_identity(
    dir: &Path,
) -> Result<std::sync::Arc<dyn net::auth::IdentitySource>, LocalError> {
    let kf = KeyFile::load(&dir.join("key.toml"))?;
    Ok(net::auth::MintWithOsdKeys::one(kf.ring()?))
}

/// This machine's host name (the default failure domain of its OSDs).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Where and how an OSD registers: its address for clients, placement
/// weight and failure domain.
#[derive(Debug, Clone)]
pub struct Registration {
    /// Address clients use.
    pub addr: String,
    /// Placement weight (16.16 fixed point).
    pub weight: u32,
    /// Failure domain (host name).
    pub host: String,
}

/// Starts heartbeating OSD `kf.osd_id` (registered as `reg`, space from
/// `store`, load from `metrics`) to the MDS at `mds`, signed with the key
/// file's newest key; every accepted report renews `lease`.
pub fn spawn_reporter(
    mds: String,
    kf: &KeyFile,
    reg: Registration,
    (store, metrics): (Arc<StoreHandle>, Arc<osd::metrics::Metrics>),
    lease: Arc<net::Lease>,
    chains_epoch: Option<watch::Sender<u64>>,
) -> Result<JoinHandle<()>, KeyError> {
    let (version, key) = kf.newest()?;
    Ok(tokio::spawn(report_loop(
        mds,
        ReportSource {
            cluster_id: kf.cluster_id.clone(),
            osd_id: kf.osd_id,
            addr: reg.addr,
            weight: reg.weight,
            host: reg.host,
            key: (version, key),
            store: {
                let store = store.clone();
                Box::new(move || store.mark())
            },
            load: Box::new(move || metrics.load.snapshot()),
            space: Box::new(move || match store.get() {
                Ok(s) => {
                    let f = s.statfs();
                    (f.total_bytes, f.total_bytes - f.free_bytes, f.objects)
                }
                Err(_) => (0, 0, 0),
            }),
            chains_epoch,
        },
        lease,
    )))
}

/// OSD `kf.osd_id`'s part in the replica chains, with the MDS at `mds` as
/// their authority: the chain state (for [`Osd::chained`]) and where the
/// heartbeat publishes the chains' epoch. Spawns the task that keeps the
/// chains current and fills joining members.
pub fn chain_member(
    mds: &str,
    kf: &KeyFile,
) -> Result<(Arc<osd::chain::Chains>, watch::Sender<u64>), KeyError> {
    let (version, key) = kf.newest()?;
    let authority =
        osd::chain_authority::MdsChains::new(mds, &kf.cluster_id, kf.osd_id, version, key);
    let chains = osd::chain::Chains::new(kf.osd_id, &kf.cluster_id, authority.clone(), authority);
    let (tx, rx) = watch::channel(0);
    tokio::spawn(chains.clone().run(rx));
    Ok((chains, tx))
}

impl LocalOsd {
    /// Opens the OSD in `dir` (see [`provision_osd`]), serves on `listen`
    /// and, given an MDS address, registers and heartbeats.
    pub async fn start(
        dir: &Path,
        listen: &str,
        mds: Option<String>,
    ) -> Result<LocalOsd, LocalError> {
        let kf = KeyFile::load(&dir.join("key.toml"))?;
        let img = dir.join("store.img");
        let dev: Arc<dyn Device> = Arc::new(FileDevice::open(&img).map_err(io_at(&img))?);
        let s = Store::open(dev, &OpenOptions::default()).map_err(store_at(&img))?;
        let handle = Arc::new(StoreHandle::new(img, s));
        let mut ctx = Ctx::new(handle.clone(), Some(kf.ring()?), kf.osd_id);
        let lease = Arc::new(net::Lease::default());
        if mds.is_some() {
            ctx.lease = Some(lease.clone());
        }
        let (listener, addr) = bind(listen).await?;
        let member = match &mds {
            Some(m) => Some(chain_member(m, &kf)?),
            None => None,
        };
        let cfg = ServerConfig::new(&kf.cluster_id, kf.osd_id);
        let (osd, chains_epoch) = match member {
            Some((chains, tx)) => (Osd::chained(ctx, cfg, chains), Some(tx)),
            None => (Osd::new(ctx, cfg), None),
        };
        let (stop, rx) = watch::channel(false);
        let metrics = osd.metrics.clone();
        let task = tokio::spawn(osd.serve(listener, rx));
        let reporter = match mds {
            Some(m) => Some(spawn_reporter(
                m,
                &kf,
                Registration {
                    addr: addr.to_string(),
                    weight: proto::placement::WEIGHT_ONE,
                    host: host_name(),
                },
                (handle.clone(), metrics),
                lease,
                chains_epoch,
            )?),
            None => None,
        };
        Ok(LocalOsd {
            id: kf.osd_id,
            addr,
            store: handle,
            stop,
            task: Some(task),
            reporter,
        })
    }

    /// Stops cleanly: drains requests and closes the store.
    pub async fn stop(mut self) -> Result<(), LocalError> {
        if let Some(r) = &self.reporter {
            r.abort();
        }
        let _ = self.stop.send(true);
        let path = self.store.path().to_path_buf();
        match self.task.take() {
            Some(t) => t.await?.map_err(store_at(&path)),
            None => Ok(()),
        }
    }
}

/// An MDS running in this process.
pub struct LocalMds {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The admin principal's identity (its key file, written at format).
    pub admin: net::auth::Identity,
    /// The service.
    pub mds: Arc<Mds>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    worker: JoinHandle<()>,
    recovery: JoinHandle<()>,
}

impl LocalMds {
    /// Opens the MDS on a formatted `dir` and serves on `listen`.
    pub async fn start(dir: &Path, listen: &str) -> Result<LocalMds, LocalError> {
        let d = dir.to_path_buf();
        let mds = tokio::task::spawn_blocking(move || Mds::open(&d))
            .await?
            .map_err(|source| LocalError::Mds {
                path: dir.into(),
                source,
            })?;
        let admin = admin_identity(dir)?;
        let (listener, addr) = bind(listen).await?;
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(mds::server::serve(mds.clone(), listener, rx));
        let worker = tokio::spawn(mds.clone().delete_worker());
        let recovery = tokio::spawn(mds.clone().recovery_worker());
        Ok(LocalMds {
            addr,
            admin,
            mds,
            stop,
            task,
            worker,
            recovery,
        })
    }

    /// Stops cleanly: drains requests and checkpoints the KV.
    pub async fn stop(self) {
        self.worker.abort();
        self.recovery.abort();
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The identity of `client.admin` of the MDS formatted in `mds_dir`.
pub fn admin_identity(mds_dir: &Path) -> Result<net::auth::Identity, LocalError> {
    let p = mds::principals::admin_key_path(mds_dir);
    let k = net::auth::ClientKey::load(&p)?;
    Ok(k.identity()?)
}

/// Waits until the MDS's map has OSD `o` at its current address (10 s at most).
pub async fn wait_registered(mds: &LocalMds, o: &LocalOsd) -> Result<(), LocalError> {
    let want = o.addr.to_string();
    for _ in 0..400 {
        if let Ok(map) = mds.mds.current_map()
            && map.addr(o.id) == Some(want.as_str())
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    Err(LocalError::NotRegistered(o.id))
}

/// A whole cluster in this process: an MDS and `n` OSDs on file-backed
/// stores under one directory, over real sockets on 127.0.0.1 (what the
/// client tests and benchmarks run against).
pub struct LocalCluster {
    /// Where everything lives (`mds/`, `osd-N/`).
    pub root: PathBuf,
    /// Cluster id.
    pub cluster_id: String,
    /// The MDS.
    pub mds: Option<LocalMds>,
    /// The OSDs, by index (`None` while stopped); OSD ids are the indexes.
    pub osds: Vec<Option<LocalOsd>>,
}

impl LocalCluster {
    /// Formats and starts a cluster of `n` OSDs of `osd_size` bytes under `root`.
    pub async fn start(
        root: &Path,
        n: u32,
        osd_size: u64,
        opts: &mds::FormatOptions,
    ) -> Result<LocalCluster, LocalError> {
        let mds_dir = root.join("mds");
        mds::service::format(&mds_dir, opts).map_err(|source| LocalError::Mds {
            path: mds_dir.clone(),
            source,
        })?;
        for i in 0..n {
            provision_osd(
                &osd_dir(root, i),
                i,
                &opts.cluster_id,
                osd_size,
                &mds_dir.join("keys"),
            )?;
        }
        let m = LocalMds::start(&mds_dir, "127.0.0.1:0").await?;
        let mut c = LocalCluster {
            root: root.into(),
            cluster_id: opts.cluster_id.clone(),
            mds: Some(m),
            osds: Vec::new(),
        };
        for i in 0..n {
            c.osds.push(None);
            c.start_osd(i).await?;
        }
        Ok(c)
    }

    /// The admin principal's identity.
    pub fn admin(&self) -> Result<net::auth::Identity, LocalError> {
        admin_identity(&self.root.join("mds"))
    }

    /// An MDS client as `client.admin` with `connections` connections.
    pub fn mds_client(&self, connections: usize) -> Result<net::MdsClient, LocalError> {
        Ok(net::MdsClient::new(
            &self.mds_addr(),
            &self.cluster_id,
            self.admin()?,
            connections,
        ))
    }

    /// The MDS's address.
    pub fn mds_addr(&self) -> String {
        self.mds
            .as_ref()
            .map(|m| m.addr.to_string())
            .unwrap_or_default()
    }

    /// Starts (or restarts) OSD `i` and waits until the MDS's map has its
    /// current address.
    pub async fn start_osd(&mut self, i: u32) -> Result<(), LocalError> {
        let mds = self.mds.as_ref().ok_or(LocalError::MdsStopped)?;
        let o = LocalOsd::start(
            &osd_dir(&self.root, i),
            "127.0.0.1:0",
            Some(mds.addr.to_string()),
        )
        .await?;
        wait_registered(mds, &o).await?;
        self.osds[i as usize] = Some(o);
        Ok(())
    }

    /// Provisions a new OSD of `size` bytes (the next id), starts it and
    /// waits until the MDS has it in its map; returns its id.
    pub async fn add_osd(&mut self, size: u64) -> Result<u32, LocalError> {
        let id = self.osds.len() as u32;
        let keys = self.root.join("mds").join("keys");
        provision_osd(&osd_dir(&self.root, id), id, &self.cluster_id, size, &keys)?;
        self.osds.push(None);
        self.start_osd(id).await?;
        Ok(id)
    }

    /// Stops OSD `i` cleanly.
    pub async fn stop_osd(&mut self, i: u32) -> Result<(), LocalError> {
        match self.osds[i as usize].take() {
            Some(o) => o.stop().await,
            None => Ok(()),
        }
    }

    /// Stops everything cleanly.
    pub async fn stop(mut self) -> Result<(), LocalError> {
        for i in 0..self.osds.len() as u32 {
            self.stop_osd(i).await?;
        }
        if let Some(m) = self.mds.take() {
            m.stop().await;
        }
        Ok(())
    }
}

/// Binds a listening socket on `listen` and returns it with its address.
async fn bind(listen: &str) -> Result<(tokio::net::TcpListener, SocketAddr), LocalError> {
    let lerr = |source| LocalError::Listen {
        addr: listen.into(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(lerr)?;
    let addr = listener.local_addr().map_err(lerr)?;
    Ok((listener, addr))
}
