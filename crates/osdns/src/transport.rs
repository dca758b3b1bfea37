//! How the namespace reaches the OSDs: the OSD map and a range capability
//! from the cluster's authority (the monitor that holds the OSD keys; it is
//! asked at start and when the capability nears expiry, never per
//! operation), one pipelined connection pool per OSD, and typed helpers for
//! the attribute commands the directory protocols are made of.
//!
//! Every command goes through [`Osds::call`], which counts round trips and
//! is where a test injects a client crash: after `n` commands the client
//! "dies" and sends nothing more.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use net::{Answer, ConnConfig, OsdClient};
use proto::layout::DATA_PARTITION;
use proto::mds::Grant;
use proto::msg::{AttrKey, AttrList, Command, Reply, Request};
use proto::placement::OsdMap;

use crate::error::{Errno, NsError, Result};

/// What the authority hands a namespace client.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The current OSD map.
    pub map: OsdMap,
    /// A capability per OSD over every namespace object.
    pub grant: Grant,
    /// The OSD holding the root directory (`None` before the namespace is made).
    pub root_osd: Option<u32>,
    /// The directory protocol chosen at format ("atomic" or "lock"; empty
    /// = atomic), for the client that makes the root.
    pub dir_protocol: String,
    /// Layout new files take.
    pub layout: proto::layout::LayoutSpec,
    /// The replica chains, when the file system keeps copies: then every
    /// "OSD" a namespace record names is a replica group, reached through
    /// its head, and `grant` holds one capability per group.
    pub chains: Option<proto::chain::ChainTable>,
}

/// A boxed future (the authority is called through a trait object).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where maps and capabilities come from (the MDS acting as monitor, in a
/// deployment; anything that holds the OSD keys, in a test).
pub trait Authority: Send + Sync {
    /// Fresh credentials.
    fn fetch(&self) -> BoxFuture<'_, Result<Credentials>>;
    /// Records the root directory's OSD once the namespace is made; returns
    /// the recorded one (another client may have won).
    fn set_root(&self, osd: u32) -> BoxFuture<'_, Result<u32>>;
    /// Who the client's OSD connections authenticate as.
    fn identity(&self) -> Arc<dyn net::auth::IdentitySource>;
}

/// Renew the capability this long before it expires.
const RENEW_MARGIN_MS: u64 = 30_000;

/// Maps, capabilities and connections of one namespace client.
pub struct Osds {
    cluster_id: String,
    authority: Arc<dyn Authority>,
    creds: RwLock<Arc<Credentials>>,
    maps: Mutex<HashMap<u64, Arc<OsdMap>>>,
    clients: Mutex<HashMap<u32, (String, Arc<OsdClient>)>>,
    connections: usize,
    /// OSD commands sent (round trips).
    pub sent: AtomicU64,
    crash_after: AtomicU64,
    dead: AtomicBool,
    /// Request ids for replica chains: a random start, then one per call.
    next_id: AtomicU64,
    /// When the credentials were last fetched (chain retries fetch at
    /// most every [`REFETCH_EVERY`]).
    fetched: Mutex<std::time::Instant>,
}

/// Credentials whose map is the one placement uses: with replica chains,
/// OSDs marked out still name their groups ([`proto::chain::placement_map`]).
fn with_placement_map(mut c: Credentials) -> Credentials {
    if c.chains.is_some() {
        c.map = proto::chain::placement_map(&c.map);
    }
    c
}

/// Least time between two fetches of the credentials by chain retries.
const REFETCH_EVERY: Duration = Duration::from_millis(200);

use proto::clock::now_ms;

impl Osds {
    /// Connects to the authority and fetches credentials.
    pub async fn new(
        cluster_id: &str,
        authority: Arc<dyn Authority>,
        connections: usize,
    ) -> Result<Osds> {
        let c = with_placement_map(authority.fetch().await?);
        let o = Osds {
            cluster_id: cluster_id.into(),
            authority,
            maps: Mutex::new(HashMap::from([(c.map.epoch, Arc::new(c.map.clone()))])),
            creds: RwLock::new(Arc::new(c)),
            clients: Mutex::new(HashMap::new()),
            connections: connections.max(1),
            sent: AtomicU64::new(0),
            crash_after: AtomicU64::new(u64::MAX),
            dead: AtomicBool::new(false),
            next_id: AtomicU64::new(u64::from_le_bytes(net::auth::random_bytes::<8>()) | 1),
            fetched: Mutex::new(std::time::Instant::now()),
        };
        Ok(o)
    }

    /// The authority (for recording the root).
    pub fn authority(&self) -> &Arc<dyn Authority> {
        &self.authority
    }

    /// Current credentials.
    pub fn creds(&self) -> Arc<Credentials> {
        self.creds.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Current credentials, renewed first when the capability is within
    /// the renewal margin of expiry.
    pub async fn fresh_creds(&self) -> Result<Arc<Credentials>> {
        let c = self.creds();
        if c.grant.expiry_ms < now_ms() + RENEW_MARGIN_MS {
            return self.refresh().await;
        }
        Ok(c)
    }

    /// Fetches new credentials now.
    pub async fn refresh(&self) -> Result<Arc<Credentials>> {
        *self.fetched.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        let c = Arc::new(with_placement_map(self.authority.fetch().await?));
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(c.map.epoch, Arc::new(c.map.clone()));
        *self.creds.write().unwrap_or_else(|e| e.into_inner()) = c.clone();
        Ok(c)
    }

    /// Fetches new credentials unless they were fetched in the last
    /// [`REFETCH_EVERY`] (callers retrying while a chain changes share them).
    pub async fn refresh_soon(&self) -> Result<Arc<Credentials>> {
        let last = *self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= REFETCH_EVERY {
            self.refresh().await
        } else {
            Ok(self.creds())
        }
    }

    /// The current map.
    pub fn map(&self) -> Arc<OsdMap> {
        let c = self.creds();
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&c.map.epoch)
            .cloned()
            .unwrap_or_else(|| Arc::new(c.map.clone()))
    }

    /// The map of `epoch` if this client has seen it.
    pub fn map_of(&self, epoch: u64) -> Option<Arc<OsdMap>> {
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&epoch)
            .cloned()
    }

    /// Injects a crash: the client sends `n` more commands, then every
    /// further command fails as if the client had died.
    pub fn crash_after(&self, n: u64) {
        self.crash_after.store(n, Ordering::SeqCst);
    }

    /// Whether an injected crash happened.
    pub fn crashed(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    async fn client(&self, id: u32) -> Result<Arc<OsdClient>> {
        let addr = self
            .creds()
            .map
            .addr(id)
            .map(str::to_string)
            .ok_or_else(|| NsError::new(Errno::Io, format!("OSD {id} is not in the map")))?;
        let mut c = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((a, cl)) = c.get(&id)
            && *a == addr
        {
            return Ok(cl.clone());
        }
        let mut cfg = ConnConfig::new(&self.cluster_id, id, self.authority.identity());
        cfg.name = "tessera-osdns".into();
        cfg.connections = self.connections;
        cfg.timeout = Duration::from_secs(30);
        let cl = Arc::new(OsdClient::new(&addr, cfg));
        c.insert(id, (addr, cl.clone()));
        Ok(cl)
    }

    /// Sends one command to OSD `osd` with the namespace capability.
    pub async fn call(
        &self,
        osd: u32,
        cmd: Command,
        get: Vec<AttrKey>,
        set: AttrList,
    ) -> Result<Answer> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(NsError::new(Errno::Io, "client crashed (injected)"));
        }
        if self
            .crash_after
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n != u64::MAX).then(|| n.saturating_sub(1))
            })
            .is_ok_and(|before| before == 0)
        {
            self.dead.store(true, Ordering::SeqCst);
            return Err(NsError::new(Errno::Io, "client crashed (injected)"));
        }
        let creds = self.fresh_creds().await?;
        if creds.chains.is_some() {
            return self.call_group(osd, cmd, get, set).await;
        }
        let cap = creds
            .grant
            .cap_for(osd)
            .cloned()
            .ok_or_else(|| NsError::new(Errno::Io, format!("no capability for OSD {osd}")))?;
        let client = self.client(osd).await?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        client
            .call(
                Request {
                    cap: Some(cap),
                    id: 0,
                    cmd,
                    get,
                    set,
                },
                Bytes::new(),
            )
            .await
            .map_err(|e| crate::error::osd(osd, &e))
    }

    /// Sends one command to replica group `group`: to its head, in the
    /// group's partition, with one request id for every retry, retried
    /// with fresh credentials while the chain changes.
    async fn call_group(
        &self,
        group: u32,
        cmd: Command,
        get: Vec<AttrKey>,
        set: AttrList,
    ) -> Result<Answer> {
        let cmd = cmd.in_partition(proto::chain::group_partition(group));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        loop {
            let creds = self.fresh_creds().await?;
            let head = creds
                .chains
                .as_ref()
                .and_then(|t| t.chain(group))
                .and_then(|c| c.head());
            let sent = match (head, creds.grant.cap_for(group)) {
                (Some(h), Some(cap)) => {
                    let client = self.client(h).await?;
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    let req = Request {
                        cap: Some(cap.clone()),
                        id,
                        cmd: cmd.clone(),
                        get: get.clone(),
                        set: set.clone(),
                    };
                    client.call(req, Bytes::new()).await
                }
                _ => Err(net::ConnError::Remote(proto::WireError::new(
                    proto::ErrorCode::NotHead,
                    format!("replica group {group} has no head up"),
                ))),
            };
            match sent {
                Ok(a) => return Ok(a),
                Err(e) if net::chain_retryable(&e) && started.elapsed() < net::CHAIN_RETRY => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = self.refresh_soon().await;
                }
                Err(e) => return Err(crate::error::osd(group, &e)),
            }
        }
    }

    /// Attributes `keys` of object `oid` (absent ones are left out).
    pub async fn get(&self, osd: u32, oid: u64, keys: Vec<AttrKey>) -> Result<AttrList> {
        let pid = DATA_PARTITION;
        Ok(self
            .call(osd, Command::GetAttributes { pid, oid }, keys, Vec::new())
            .await?
            .attrs)
    }

    /// One attribute (empty when absent).
    pub async fn get1(&self, osd: u32, oid: u64, key: AttrKey) -> Result<Vec<u8>> {
        Ok(pick(&self.get(osd, oid, vec![key]).await?, key))
    }

    /// Sets attributes in one commit (empty values remove).
    pub async fn set(&self, osd: u32, oid: u64, set: AttrList) -> Result<()> {
        let pid = DATA_PARTITION;
        self.call(osd, Command::SetAttributes { pid, oid }, Vec::new(), set)
            .await
            .map(|_| ())
    }

    /// Compare-and-swap: (swapped, old value, the `get` attributes read
    /// right after it).
    pub async fn cas(
        &self,
        osd: u32,
        oid: u64,
        key: AttrKey,
        expected: Vec<u8>,
        new: Vec<u8>,
        get: Vec<AttrKey>,
    ) -> Result<(bool, Vec<u8>, AttrList)> {
        self.cas_and_set(osd, oid, (key, expected, new), get, Vec::new())
            .await
    }

    /// [`Osds::cas`] that also sets `set` on the object when (and only
    /// when) it swaps, in the same request.
    pub async fn cas_and_set(
        &self,
        osd: u32,
        oid: u64,
        (key, expected, new): (AttrKey, Vec<u8>, Vec<u8>),
        get: Vec<AttrKey>,
        set: AttrList,
    ) -> Result<(bool, Vec<u8>, AttrList)> {
        let cmd = Command::Cas {
            pid: DATA_PARTITION,
            oid,
            key,
            expected,
            new,
        };
        let a = self.call(osd, cmd, get, set).await?;
        match a.reply {
            Reply::Cas { swapped, old } => Ok((swapped, old, a.attrs)),
            r => Err(NsError::new(Errno::Io, format!("CAS answered {r:?}"))),
        }
    }

    /// Fetch-and-add on a counter attribute; the value before.
    pub async fn fetch_add(&self, osd: u32, oid: u64, key: AttrKey, delta: u64) -> Result<u64> {
        let cmd = Command::FetchAdd {
            pid: DATA_PARTITION,
            oid,
            key,
            delta,
        };
        match self.call(osd, cmd, Vec::new(), Vec::new()).await?.reply {
            Reply::FetchAdd { old } => Ok(old),
            r => Err(NsError::new(Errno::Io, format!("FETCH-ADD answered {r:?}"))),
        }
    }

    /// One page of attributes after `after`: (number, value) and the
    /// continuation.
    pub async fn page(
        &self,
        osd: u32,
        oid: u64,
        page: u32,
        after: Option<u32>,
        max: u32,
    ) -> Result<store_page::AttrPage> {
        let cmd = Command::GetPage {
            pid: DATA_PARTITION,
            oid,
            page,
            after,
            max,
        };
        match self.call(osd, cmd, Vec::new(), Vec::new()).await?.reply {
            Reply::Page { attrs, next } => Ok((attrs, next)),
            r => Err(NsError::new(Errno::Io, format!("GET PAGE answered {r:?}"))),
        }
    }

    /// Every attribute of a page.
    pub async fn page_all(&self, osd: u32, oid: u64, page: u32) -> Result<Vec<(u32, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (v, next) = self.page(osd, oid, page, after, 4096).await?;
            out.extend(v);
            match next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// Creates object `oid` with attributes, in one commit.
    pub async fn create(&self, osd: u32, oid: u64, set: AttrList) -> Result<()> {
        let cmd = Command::Create {
            pid: DATA_PARTITION,
            oid: Some(oid),
            count: 1,
        };
        self.call(osd, cmd, Vec::new(), set).await.map(|_| ())
    }

    /// Removes object `oid` (missing is fine).
    pub async fn remove(&self, osd: u32, oid: u64) -> Result<()> {
        let cmd = Command::Remove {
            pid: DATA_PARTITION,
            oid,
        };
        match self.call(osd, cmd, Vec::new(), Vec::new()).await {
            Err(e) if e.is(crate::error::Errno::NoEnt) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Every object id in the namespace on OSD `osd`, with attributes `keys`.
    pub async fn list(&self, osd: u32, keys: Vec<AttrKey>) -> Result<Vec<(u64, AttrList)>> {
        let mut out = Vec::new();
        let mut after = None;
        let (lo, hi) = (proto::layout::DATA_OID_TAG, u64::MAX);
        loop {
            let cmd = Command::List {
                pid: DATA_PARTITION,
                lo,
                hi,
                after,
                max: 1000,
                attrs: keys.clone(),
            };
            match self.call(osd, cmd, Vec::new(), Vec::new()).await?.reply {
                Reply::Listed { entries, next } => {
                    out.extend(entries);
                    match next {
                        Some(n) => after = Some(n),
                        None => return Ok(out),
                    }
                }
                r => return Err(NsError::new(Errno::Io, format!("LIST answered {r:?}"))),
            }
        }
    }
}

mod store_page {
    /// A page of attributes: (number, value) in order, and the number to
    /// continue after when more remain (what GET PAGE answers).
    pub type AttrPage = (Vec<(u32, Vec<u8>)>, Option<u32>);
}
pub use store_page::AttrPage;

/// The value of `key` in `attrs` (empty when absent).
pub fn pick(attrs: &AttrList, key: AttrKey) -> Vec<u8> {
    attrs
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The MDS as authority: in namespace-on-OSDs mode it holds the OSD keys
/// and the map and hands out capabilities; it answers no metadata
/// operation.
pub struct MdsAuthority {
    mds: Arc<net::MdsClient>,
    tickets: Arc<net::auth::TicketsFromMds>,
}

impl MdsAuthority {
    /// The MDS `mds` connects to as authority; OSD connections use the
    /// tickets it hands out.
    pub fn new(mds: Arc<net::MdsClient>) -> MdsAuthority {
        MdsAuthority {
            tickets: net::auth::TicketsFromMds::new(mds.clone()),
            mds,
        }
    }

    async fn ask(&self, op: proto::mds::Op) -> Result<proto::mds::NamespaceGrant> {
        match self.mds.call(op).await {
            Ok(proto::mds::MdsReply::Namespace(g)) => Ok(*g),
            Ok(r) => Err(NsError::new(Errno::Io, format!("MDS answered {r:?}"))),
            Err(e) => Err(NsError::new(e.code(), format!("MDS: {e}"))),
        }
    }
}

impl Authority for MdsAuthority {
    fn fetch(&self) -> BoxFuture<'_, Result<Credentials>> {
        Box::pin(async move {
            let g = self.ask(proto::mds::Op::NamespaceGrant).await?;
            Ok(Credentials {
                map: g.map,
                grant: g.grant,
                root_osd: g.root_osd,
                dir_protocol: g.dir_protocol,
                layout: g.layout,
                chains: g.chains,
            })
        })
    }

    fn identity(&self) -> Arc<dyn net::auth::IdentitySource> {
        self.tickets.clone()
    }

    fn set_root(&self, osd: u32) -> BoxFuture<'_, Result<u32>> {
        Box::pin(async move {
            self.ask(proto::mds::Op::NamespaceRoot { osd })
                .await?
                .root_osd
                .ok_or_else(|| NsError::new(Errno::Io, "MDS recorded no root"))
        })
    }
}
