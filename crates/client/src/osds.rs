//! The client's view of the OSDs: OSD maps by epoch (a file is placed with
//! the map of its layout's epoch), the newest map for addresses, and one
//! pipelined connection pool per OSD. Placement is computed here, on the
//! client, with the same function the MDS uses (`proto::placement`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use net::MdsClient;
use net::{ConnConfig, OsdClient};
use proto::layout::Layout;
use proto::mds::{MdsReply, Op};
use proto::placement::OsdMap;

use crate::error::{Errno, FsError, Result};

/// Maps and connections. Invariant: a map stored for an epoch is the MDS's
/// map of that epoch (maps never change once an epoch is issued).
pub struct OsdSet {
    cluster_id: String,
    connections: usize,
    identity: Arc<dyn net::auth::IdentitySource>,
    encrypt: bool,
    maps: Mutex<HashMap<u64, Arc<OsdMap>>>,
    newest: Mutex<Arc<OsdMap>>,
    clients: Mutex<HashMap<u32, (String, Arc<OsdClient>)>>,
    /// With replica chains (a namespace on the OSDs with copies): every
    /// OSD id is a replica group, reached through its head, with the
    /// namespace client's credentials.
    groups: std::sync::OnceLock<Arc<osdns::transport::Osds>>,
}

impl OsdSet {
    /// An empty set for `cluster_id`, `connections` per OSD, each
    /// authenticated as `identity` gives (encrypted when `encrypt`).
    pub fn new(
        cluster_id: &str,
        connections: usize,
        identity: Arc<dyn net::auth::IdentitySource>,
        encrypt: bool,
    ) -> OsdSet {
        OsdSet {
            cluster_id: cluster_id.into(),
            connections: connections.max(1),
            identity,
            encrypt,
            maps: Mutex::new(HashMap::new()),
            newest: Mutex::new(Arc::new(OsdMap::default())),
            clients: Mutex::new(HashMap::new()),
            groups: std::sync::OnceLock::new(),
        }
    }

    /// Routes every OSD id as a replica group through `ns`'s chains.
    pub fn use_groups(&self, ns: Arc<osdns::transport::Osds>) {
        let _ = self.groups.set(ns);
    }

    /// Whether OSD ids are replica groups here.
    pub fn grouped(&self) -> bool {
        self.groups.get().is_some()
    }

    /// The pool to group `g`'s head and a capability for it there, from
    /// the namespace client's credentials (fetched again first when
    /// `refetch`).
    pub async fn group_route(
        &self,
        g: u32,
        refetch: bool,
    ) -> Result<(Arc<OsdClient>, proto::Capability)> {
        let Some(ns) = self.groups.get() else {
            return Err(FsError::new(Errno::Io, "not a replica-group client"));
        };
        let creds = if refetch {
            ns.refresh_soon().await
        } else {
            ns.fresh_creds().await
        }
        .map_err(|e| FsError::new(e.errno, e.message))?;
        let head = creds
            .chains
            .as_ref()
            .and_then(|t| t.chain(g))
            .and_then(|c| c.head())
            .ok_or_else(|| FsError::new(Errno::Io, format!("replica group {g} has no head")))?;
        let cap = creds
            .grant
            .cap_for(g)
            .cloned()
            .ok_or_else(|| FsError::new(Errno::Io, format!("no capability for group {g}")))?;
        let addr = creds
            .map
            .addr(head)
            .map(str::to_string)
            .ok_or_else(|| FsError::new(Errno::Io, format!("OSD {head} is not in the map")))?;
        let key = format!("{addr}#{head}");
        let mut c = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((a, cl)) = c.get(&g)
            && *a == key
        {
            return Ok((cl.clone(), cap));
        }
        let mut cfg = ConnConfig::new(&self.cluster_id, head, ns.authority().identity());
        cfg.encrypt = self.encrypt;
        cfg.name = "tessera-client".into();
        cfg.connections = self.connections;
        let cl = Arc::new(OsdClient::in_partition(
            &addr,
            cfg,
            proto::chain::group_partition(g),
        ));
        c.insert(g, (key, cl.clone()));
        Ok((cl, cap))
    }

    /// Asks the MDS for a map (current, or of `epoch`) and caches it.
    async fn fetch(&self, mds: &MdsClient, epoch: Option<u64>) -> Result<Arc<OsdMap>> {
        let m = match mds
            .call(Op::GetMap { epoch })
            .await
            .map_err(crate::error::from_call)?
        {
            // With replica groups an OSD that is out still names its group.
            MdsReply::Map(m) if self.grouped() => Arc::new(proto::chain::placement_map(&m)),
            MdsReply::Map(m) => Arc::new(m),
            other => {
                return Err(FsError::new(
                    Errno::Io,
                    format!("GetMap answered {other:?}"),
                ));
            }
        };
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(m.epoch, m.clone());
        Ok(m)
    }

    /// Fetches the current map from the MDS (a non-mandatory request).
    pub async fn refresh(&self, mds: &MdsClient) -> Result<Arc<OsdMap>> {
        let m = self.fetch(mds, None).await?;
        let mut n = self.newest.lock().unwrap_or_else(|e| e.into_inner());
        if m.epoch >= n.epoch {
            *n = m.clone();
        }
        Ok(m)
    }

    /// The map of `epoch`, fetched once and then cached.
    pub async fn map(&self, mds: &MdsClient, epoch: u64) -> Result<Arc<OsdMap>> {
        if let Some(m) = self
            .maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&epoch)
        {
            return Ok(m.clone());
        }
        self.fetch(mds, Some(epoch)).await
    }

    /// The fresh copies of each stripe of object set `objset` of `layout`
    /// (the OSDs the MDS recorded, or for a layout without records the one
    /// OSD its map epoch places it on), and the object id they share.
    pub async fn place(
        &self,
        mds: &MdsClient,
        layout: &Layout,
        objset: u64,
    ) -> Result<(u64, Vec<Vec<u32>>)> {
        let oid = *layout.objsets.get(objset as usize).ok_or_else(|| {
            FsError::new(
                Errno::Io,
                format!("object set {objset} is not allocated yet"),
            )
        })?;
        if let Some(h) = layout.homes.get(objset as usize) {
            if h.stripes.len() != layout.spec.stripe_count as usize {
                return Err(FsError::new(
                    Errno::Io,
                    format!(
                        "object set {objset} records copies of {} stripes, the layout has {}",
                        h.stripes.len(),
                        layout.spec.stripe_count
                    ),
                ));
            }
            return Ok((oid, h.stripes.iter().map(|c| c.fresh.clone()).collect()));
        }
        let map = self.map(mds, layout.map_epoch).await?;
        let osds = map.place(oid, layout.spec.stripe_count);
        if osds.len() < layout.spec.stripe_count as usize {
            return Err(FsError::new(
                Errno::Io,
                format!(
                    "map epoch {} places only {} of {} stripes",
                    layout.map_epoch,
                    osds.len(),
                    layout.spec.stripe_count
                ),
            ));
        }
        Ok((oid, osds.into_iter().map(|o| vec![o]).collect()))
    }

    /// After a transport failure on OSD `id`: fetches the newest map and
    /// says whether the OSD's address changed (an OSD restarted elsewhere),
    /// in which case a retry goes to the new address.
    pub async fn moved(&self, mds: &MdsClient, id: u32) -> bool {
        let old = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .map(|(a, _)| a.clone());
        match self.refresh(mds).await {
            Ok(m) => m.addr(id).is_some_and(|a| Some(a) != old.as_deref()),
            Err(_) => false,
        }
    }

    /// The connection pool to OSD `id`, at its newest known address (with
    /// replica groups: to group `id`'s head).
    pub async fn client(&self, mds: &MdsClient, id: u32) -> Result<Arc<OsdClient>> {
        if self.grouped() {
            return Ok(self.group_route(id, false).await?.0);
        }
        let addr = {
            let n = self.newest.lock().unwrap_or_else(|e| e.into_inner());
            n.addr(id).map(str::to_string)
        };
        let addr = match addr {
            Some(a) => a,
            None => self
                .refresh(mds)
                .await?
                .addr(id)
                .map(str::to_string)
                .ok_or_else(|| FsError::new(Errno::Io, format!("OSD {id} is not in the map")))?,
        };
        let mut c = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((a, cl)) = c.get(&id)
            && *a == addr
        {
            return Ok(cl.clone());
        }
        let mut cfg = ConnConfig::new(&self.cluster_id, id, self.identity.clone());
        cfg.encrypt = self.encrypt;
        cfg.name = "tessera-client".into();
        cfg.connections = self.connections;
        let cl = Arc::new(OsdClient::new(&addr, cfg));
        c.insert(id, (addr, cl.clone()));
        Ok(cl)
    }
}
