//! The metadata service: answers [`MdsRequest`]s from the namespace (read
//! from snapshots, written through the KV's group commit), issues
//! capabilities, prefetches neighbours, keeps the OSD map, and acts on the
//! OSDs itself for revocation, truncation and deletion. By role:
//!
//! - this file: the service's state, opening it, formatting a directory;
//! - [`dispatch`]: which named function answers each request;
//! - [`requests`]: one function per namespace request;
//! - [`grants`]: capabilities and server-driven prefetch;
//! - [`osd_actions`]: what the MDS does on the OSDs itself (revocation,
//!   truncation, the delete queue and its worker);
//! - [`cluster_map`]: OSD reports, the map, status, statfs, and the grants
//!   of the namespace kept on the OSDs;
//! - [`redundancy`]: stale copies and their fencing, recovery, OSD out/in,
//!   scrub;
//! - [`holds`]: the files client sessions hold open, and the unlinked
//!   inodes (orphans) they keep alive;
//! - [`leases`]: directory leases (changes a client makes on its own and
//!   sends after);
//! - [`locks`]: byte-range locks between clients;
//! - [`replay`]: early answers, and redoing what clients replay after a
//!   crash.

mod auth;
mod chain_plan;
mod chains;
mod cluster_map;
mod cuts;
mod dispatch;
mod grants;
mod holds;
mod lease_record;
mod leases;
mod locks;
mod osd_actions;
mod overview;
mod redundancy;
mod replay;
mod requests;
mod restarts;
mod search;
mod set_aside;
mod truncating;

pub use auth::Caller;
pub use overview::ClientRow;
pub use redundancy::RecoveryState;
pub use replay::EARLY_SESSIONS_PER_PRINCIPAL;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use net::keys::{KeyError, KeyFile};
use net::{ConnError, OsdClient};
use proto::mds::{Errno, MdsError, NamespaceMode};
use proto::placement::OsdMap;
use proto::{KeyRing, rights};

use crate::cluster::LiveMap;
use crate::config::{FormatOptions, MdsConfig};
use crate::kv::{Kv, KvPaths, T, View};
use crate::metrics::MdsMetrics;
use crate::ns;
use crate::records::{RECORDS_VERSION, Records, Superblock};

/// Rights a reader gets on a file's objects.
pub const READ_RIGHTS: u32 = rights::READ | rights::GET_ATTR;
/// Rights a writer gets on a file's objects.
pub const WRITE_RIGHTS: u32 = rights::WRITE | rights::APPEND | rights::CREATE | rights::SET_ATTR;

/// One stripe object: (OSD, object id, object set, stripe index).
pub type ObjectAt = (u32, u64, u64, u32);

/// Files in an MDS data directory.
pub struct MdsPaths {
    /// The directory.
    pub dir: PathBuf,
}

impl MdsPaths {
    /// Settings file.
    pub fn config(&self) -> PathBuf {
        self.dir.join("mds.toml")
    }
    /// OSD key files (`osd-<id>.toml`).
    pub fn keys(&self) -> PathBuf {
        self.dir.join("keys")
    }
    /// KV files.
    pub fn kv(&self) -> KvPaths {
        KvPaths::new(&self.dir)
    }
}

/// Formats an empty file system in `dir`.
pub fn format(dir: &Path, opts: &FormatOptions) -> Result<(), MdsError> {
    opts.layout
        .validate()
        .map_err(|m| MdsError::new(Errno::Inval, m.to_string()))?;
    // With the namespace on the OSDs, copies are kept by replica chains
    // (every object of a group, directories and file data alike), so
    // files' layouts ask for one copy each.
    let chains = (opts.namespace == NamespaceMode::Osd && opts.layout.replicas > 1).then(|| {
        proto::chain::ChainTable {
            epoch: 0,
            replicas: opts.layout.replicas,
            catch_up_margin_ms: 0,
            fill_mib_per_sec: 0,
            chains: Vec::new(),
        }
    });
    let mut layout = opts.layout;
    if chains.is_some() {
        layout.replicas = 1;
        layout.min_replicas = 0;
    }
    opts.policy
        .geo
        .validate()
        .map_err(|m| MdsError::new(Errno::Inval, m.to_string()))?;
    net::files::create_private_dir(&dir.join("keys"))
        .map_err(|e| MdsError::new(Errno::Io, format!("{}: {e}", dir.display())))?;
    let paths = MdsPaths { dir: dir.into() };
    crate::kv::create(&paths.kv(), opts.wal_bytes)?;
    let kv = Kv::open(&paths.kv(), 16 << 20)?;
    crate::principals::format_admin(&kv, dir, &opts.cluster_id)?;
    let sb = Superblock {
        version: RECORDS_VERSION,
        cluster_id: opts.cluster_id.clone(),
        policy: opts.policy,
        created_ms: proto::clock::now_ms(),
    };
    let namespace = opts.namespace;
    let dir_protocol = opts.dir_protocol.clone();
    kv.write_blocking(move |tx| {
        tx.put_superblock(&sb)?;
        tx.put_namespace(&crate::records::NamespaceRecord {
            mode: namespace,
            root_osd: None,
            dir_protocol,
            layout,
        })?;
        ns::format_root(tx, &sb.policy, layout, proto::clock::now_ns())?;
        if let Some(t) = &chains {
            tx.put_chains(t)?;
        }
        tx.put_map(&OsdMap::default())
    })?;
    kv.close();
    if !paths.config().exists() {
        let text = toml::to_string_pretty(&MdsConfig::default())
            .map_err(|e| MdsError::new(Errno::Io, e.to_string()))?;
        net::files::write_private(&paths.config(), text.as_bytes())
            .map_err(|e| MdsError::new(Errno::Io, format!("{}: {e}", paths.config().display())))?;
    }
    Ok(())
}

/// Loads every `osd-<id>.toml` key file in `dir`.
pub fn load_keys(dir: &Path, cluster_id: &str) -> Result<HashMap<u32, KeyRing>, KeyError> {
    let mut out = HashMap::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(source) => {
            return Err(KeyError::Io {
                path: dir.into(),
                source,
            });
        }
    };
    for ent in rd.flatten() {
        let p = ent.path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let kf = KeyFile::load(&p)?;
        if kf.cluster_id != cluster_id {
            return Err(KeyError::OtherCluster {
                path: p,
                found: kf.cluster_id,
                expected: cluster_id.into(),
            });
        }
        out.insert(kf.osd_id, kf.ring()?);
    }
    Ok(out)
}

/// Where the `meta` table keeps the instance of the MDS's last start.
const INSTANCE_KEY: &[u8] = b"instance";
/// Where the key that seals early answers is kept (made at first start).
const SEAL_KEY: &[u8] = b"replay_seal_key";

/// Most delete jobs the worker takes from the queue per pass.
pub const DELETE_BATCH: usize = 10_000;

/// Orphans reaped in one log record.
pub const REAP_CHUNK: usize = 512;

/// Files whose objects the delete worker removes at once (one REMOVE
/// OBJECTS per OSD), and takes off the queue in one log record.
pub const DELETE_CHUNK: usize = 512;

/// The sequence number a delete-queue key holds (8 bytes, big-endian).
fn queue_seq(k: &[u8]) -> Result<u64, MdsError> {
    <[u8; 8]>::try_from(k).map(u64::from_be_bytes).map_err(|_| {
        crate::kv::io_err(
            "delete queue",
            format!("key of {} bytes, expected 8: {k:02x?}", k.len()),
        )
    })
}

/// The running metadata service.
pub struct Mds {
    /// The KV.
    pub kv: Arc<Kv>,
    /// Fixed facts.
    pub sb: Superblock,
    /// Settings.
    pub cfg: MdsConfig,
    keys: Mutex<HashMap<u32, KeyRing>>,
    /// When the key directory was last read again for an unknown OSD
    /// key (ms since the epoch): at most once per [`KEY_RELOAD_MS`].
    keys_reloaded: std::sync::atomic::AtomicU64,
    keys_dir: PathBuf,
    live: Mutex<LiveMap>,
    /// Held by a chain pass from its view of which OSDs are alive to the
    /// change it stores, and by a report from making its OSD live to its
    /// answer: a report comes either before the pass (which then sees the
    /// OSD alive) or after its change (and the answer names the new
    /// epoch), so a head replaced as lapsed never gets a lease under the
    /// table that still names it head.
    chain_gate: tokio::sync::Mutex<()>,
    osds: Mutex<HashMap<u32, (String, Arc<OsdClient>)>>,
    /// Counters for `/metrics`.
    pub metrics: Arc<MdsMetrics>,
    /// Wakes the delete-queue worker.
    pub delete_wake: tokio::sync::Notify,
    /// When the delete worker wakes next by itself (ms since the epoch):
    /// a new orphan due later need not wake it.
    delete_due_ms: std::sync::atomic::AtomicU64,
    /// Recovery's state (stale copies, counts, files being copied).
    recovery: Mutex<RecoveryState>,
    /// Files being shrunk: their length is not answered meanwhile.
    truncating: truncating::Truncating,
    /// OSDs on a new or older store whose copies are being set aside.
    setting_aside: Mutex<std::collections::HashSet<u32>>,
    /// Wakes the recovery worker.
    pub recovery_wake: tokio::sync::Notify,
    /// When this MDS started: an OSD it has not heard from yet may hold a
    /// lease from the previous MDS until `down_after_ms` after this.
    started: std::time::Instant,
    /// How long after `started` an OSD may still hold a lease granted
    /// before it (the longest recorded: `lease_record`).
    lease_grace: Duration,
    /// The lease length recorded for the next start (ms).
    lease_recorded_ms: std::sync::atomic::AtomicU64,
    /// Links between chain members reported cut while both are up.
    cuts: cuts::Cuts,
    /// Where the namespace lives (fixed at format time).
    pub namespace: proto::mds::NamespaceMode,
    /// Who may connect, with which key, to do what.
    pub principals: crate::principals::Principals,
    /// Files client sessions hold open.
    holds: Mutex<holds::Holds>,
    /// This start's instance (random): early answers name it, so a client
    /// can tell a restarted MDS from a reconnect.
    pub instance: u64,
    /// The previous start's instance (kept in the KV): the only one whose
    /// early answers a replay to this start can settle.
    prev_instance: u64,
    /// The key early answers are sealed with (kept in the log, so a
    /// restarted MDS checks the seals its predecessor gave).
    seal_key: [u8; 32],
    /// Replays waited for after a crash (`None` once served).
    replays: Mutex<Option<replay::Recovering>>,
    /// Per principal, its sessions recently answered early (record key →
    /// last answer): bounded, see [`replay::EARLY_SESSIONS_PER_PRINCIPAL`].
    early_sessions: Mutex<HashMap<u64, HashMap<u64, std::time::Instant>>>,
    /// True while replays are waited for: other requests wait.
    replaying: tokio::sync::watch::Sender<bool>,
    /// When the replays were served (ms since the epoch; 0: none waited
    /// for): orphans' grace counts from then too.
    serving_since_ms: std::sync::atomic::AtomicU64,
    /// Directory leases and the requests under way in each directory.
    leases: Mutex<leases::Leases>,
    /// Byte-range locks between clients.
    locks: Mutex<locks::Locks>,
    /// Client connections held now, per principal id (the server loop
    /// counts them; the dashboard shows them).
    pub connections: net::serve::PrincipalCounts,
    /// The newest transno answered early (what is pending is the part
    /// past the KV's durable transno).
    last_early: std::sync::atomic::AtomicU64,
    /// A group leader's view of its group, for the status (set once it
    /// leads: see `crate::group`).
    pub group_status: std::sync::OnceLock<GroupStatusFn>,
    /// A group leader's way to add and remove members (set once it leads).
    pub group_admin: std::sync::OnceLock<GroupAdminFn>,
}

/// How a group leader tells the status about its group.
pub type GroupStatusFn = Box<dyn Fn() -> proto::status::GroupStatus + Send + Sync>;

/// A change to who is in a replicated MDS group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupChange {
    /// Add member `id` as a learner; it votes once it has caught up.
    Add {
        /// Its id.
        id: u64,
        /// Its client address.
        addr: String,
        /// Its peer address.
        peer: String,
    },
    /// Remove member `id`.
    Remove {
        /// Its id.
        id: u64,
    },
}

/// How a group leader carries out a [`GroupChange`].
pub type GroupAdminFn = Box<
    dyn Fn(GroupChange) -> std::pin::Pin<Box<dyn Future<Output = Result<(), MdsError>> + Send>>
        + Send
        + Sync,
>;

use proto::mds::err;

fn osd_err(osd: u32, e: ConnError) -> MdsError {
    err(Errno::Io, format!("OSD {osd}: {e}"))
}

impl Mds {
    /// Opens the service on a formatted data directory.
    pub fn open(dir: &Path) -> Result<Arc<Mds>, MdsError> {
        let paths = MdsPaths { dir: dir.into() };
        let cfg = MdsConfig::load(&paths.config()).map_err(|m| err(Errno::Inval, m.to_string()))?;
        let kv = Arc::new(Kv::open_with(&paths.kv(), Mds::kv_options(&cfg))?);
        Mds::open_on(dir, cfg, kv)
    }

    /// How the KV of an MDS configured by `cfg` is opened.
    pub fn kv_options(cfg: &MdsConfig) -> crate::kv::KvOptions {
        crate::kv::KvOptions {
            cache_bytes: cfg.cache_mib << 20,
            flush_delay: Duration::from_millis(cfg.wal_flush_delay_ms),
            // Waited for, and redone: a second crash meanwhile must
            // still know them.
            recovered_hold: Duration::from_millis(cfg.replay_window_ms.saturating_mul(2))
                .max(Duration::from_secs(120)),
        }
    }

    /// The MDS of data directory `dir` on an open KV (a group member's
    /// KV once it leads: see `crate::group`).
    pub fn open_on(dir: &Path, cfg: MdsConfig, kv: Arc<Kv>) -> Result<Arc<Mds>, MdsError> {
        let paths = MdsPaths { dir: dir.into() };
        let recovering = replay::Recovering::after_open(&kv, cfg.replay_window_ms);
        let instance = u64::from_le_bytes(net::auth::random_bytes()).max(1);
        let prev_instance = kv
            .read()?
            .get(T::Meta, INSTANCE_KEY)?
            .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
            .map_or(0, u64::from_le_bytes);
        kv.write_blocking(move |tx| tx.put(T::Meta, INSTANCE_KEY, &instance.to_le_bytes()))?;
        let seal_key = match kv.read()?.get(T::Meta, SEAL_KEY)? {
            Some(v) => <[u8; 32]>::try_from(&v[..])
                .map_err(|_| err(Errno::Io, "the replay seal key record is damaged"))?,
            None => {
                let k: [u8; 32] = net::auth::random_bytes();
                kv.write_blocking(move |tx| tx.put(T::Meta, SEAL_KEY, &k))?;
                k
            }
        };
        let sb = kv.read()?.superblock()?;
        if sb.version != RECORDS_VERSION {
            return Err(err(
                Errno::Inval,
                format!(
                    "metadata format version {} (this build reads {RECORDS_VERSION})",
                    sb.version
                ),
            ));
        }
        let keys = load_keys(&paths.keys(), &sb.cluster_id)
            .map_err(|m| err(Errno::Inval, m.to_string()))?;
        let namespace = kv.read()?.namespace()?.mode;
        let lease = lease_record::open(&kv, cfg.down_after_ms)?;
        let principals = crate::principals::Principals::load(&kv)?;
        let mds = Arc::new(Mds {
            principals,
            namespace,
            kv,
            sb,
            cfg,
            keys: Mutex::new(keys),
            keys_reloaded: std::sync::atomic::AtomicU64::new(0),
            keys_dir: paths.keys(),
            live: Mutex::new(LiveMap::default()),
            osds: Mutex::new(HashMap::new()),
            metrics: Arc::new(MdsMetrics::new()),
            delete_wake: tokio::sync::Notify::new(),
            delete_due_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
            recovery: Mutex::new(RecoveryState::default()),
            truncating: truncating::Truncating::default(),
            setting_aside: Mutex::default(),
            recovery_wake: tokio::sync::Notify::new(),
            started: std::time::Instant::now(),
            lease_grace: lease.grace,
            cuts: cuts::Cuts::default(),
            lease_recorded_ms: std::sync::atomic::AtomicU64::new(lease.recorded_ms),
            holds: Mutex::new(holds::Holds::default()),
            instance,
            prev_instance,
            seal_key,
            replaying: tokio::sync::watch::Sender::new(recovering.is_some()),
            replays: Mutex::new(recovering),
            early_sessions: Mutex::default(),
            serving_since_ms: std::sync::atomic::AtomicU64::new(0),
            leases: Mutex::new(leases::Leases::default()),
            chain_gate: tokio::sync::Mutex::new(()),
            locks: Mutex::new(locks::Locks::default()),
            connections: Default::default(),
            last_early: Default::default(),
            group_status: std::sync::OnceLock::new(),
            group_admin: std::sync::OnceLock::new(),
        });
        mds.index_stale_copies()?;
        Ok(mds)
    }

    /// Whether OSD `osd`'s lease has certainly run out: its last accepted
    /// report (or this MDS's start, if none since) is older than a lease,
    /// and so is this MDS's start than the longest lease an MDS before it
    /// may have granted (`lease_record`).
    pub(super) fn lease_lapsed(&self, osd: u32) -> bool {
        if self.earlier_leases_may_run() {
            return false;
        }
        let lease = Duration::from_millis(self.cfg.down_after_ms);
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.osds
            .get(&osd)
            .map_or(self.started, |l| l.seen)
            .elapsed()
            >= lease
    }

    /// The current OSD map.
    pub fn current_map(&self) -> Result<OsdMap, MdsError> {
        let snap = self.kv.read()?;
        let st = snap.state()?;
        Ok(snap.map(st.map_epoch)?.unwrap_or_default())
    }
}
