//! The MDS as this OSD's chain authority: the chains, the capabilities
//! and tickets for its successors (asked as principal `osd.N` with the
//! OSD's own key), and the requests to drop a successor that failed or to
//! count one this OSD has filled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use net::auth::{BoxFuture as IdFuture, Identity, IdentitySource};
use net::{ConnError, MdsClient};
use proto::auth::{Credential, Secret, unwrap_session_key};
use proto::mds::{ChainGrant, MdsReply, Op};
use proto::{ErrorCode, WireError};

use crate::chain::{BoxFuture, ChainAuthority, ChainView};

/// Chains from the MDS, and the tickets that came with them.
pub struct MdsChains {
    mds: Arc<MdsClient>,
    own_key: Secret,
    tickets: Mutex<HashMap<u32, Identity>>,
}

impl MdsChains {
    /// Asks the MDS at `mds_addr` as OSD `osd_id` of `cluster_id`, with the
    /// OSD's newest key (`key_version`, `key`).
    pub fn new(
        mds_addr: &str,
        cluster_id: &str,
        osd_id: u32,
        key_version: u32,
        key: Secret,
    ) -> Arc<Self> {
        let identity =
            net::auth::Identity::principal(&proto::chain::member_name(osd_id), key_version, key);
        Arc::new(MdsChains {
            mds: Arc::new(MdsClient::new(mds_addr, cluster_id, identity, 1)),
            own_key: key,
            tickets: Mutex::new(HashMap::new()),
        })
    }

    async fn ask(&self, op: Op) -> Result<ChainView, WireError> {
        let what = op.name();
        match self.mds.call(op).await {
            Ok(MdsReply::Chains(g)) => Ok(self.view(*g)),
            Ok(other) => Err(WireError::new(
                ErrorCode::Io,
                format!("the MDS answered {what} with {other:?}"),
            )),
            Err(e) => Err(WireError::new(
                ErrorCode::Io,
                format!("{what}: the MDS did not answer: {e}"),
            )),
        }
    }

    fn view(&self, g: ChainGrant) -> ChainView {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        for (osd, t, wrapped) in g.tickets {
            match unwrap_session_key(&self.own_key, &wrapped) {
                Ok(session) => {
                    tickets.insert(
                        osd,
                        Identity {
                            credential: Credential::Ticket(t),
                            key: Some(session),
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(osd, error = %e, "a chain ticket from the MDS did not open")
                }
            }
        }
        ChainView {
            table: g.table,
            addrs: g.addrs.into_iter().collect(),
            caps: g
                .caps
                .into_iter()
                .map(|(grp, o, c)| ((grp, o), c))
                .collect(),
        }
    }
}

impl ChainAuthority for MdsChains {
    fn fetch(&self) -> BoxFuture<'_, Result<ChainView, WireError>> {
        Box::pin(self.ask(Op::Chains))
    }

    fn drop_member(
        &self,
        group: u32,
        epoch: u64,
        osd: u32,
        refused: bool,
    ) -> BoxFuture<'_, Result<ChainView, WireError>> {
        Box::pin(self.ask(Op::ChainDrop {
            group,
            epoch,
            osd,
            refused,
        }))
    }

    fn restarted(
        &self,
        store: proto::mds::StoreMark,
    ) -> BoxFuture<'_, Result<ChainView, WireError>> {
        Box::pin(self.ask(Op::ChainRestarted { store }))
    }

    fn filled(
        &self,
        group: u32,
        epoch: u64,
        osd: u32,
    ) -> BoxFuture<'_, Result<ChainView, WireError>> {
        Box::pin(self.ask(Op::ChainFilled { group, epoch, osd }))
    }
}

impl IdentitySource for MdsChains {
    fn identity(&self, osd_id: u32) -> IdFuture<'_, Result<Identity, ConnError>> {
        Box::pin(async move {
            let have = |s: &Self| {
                s.tickets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&osd_id)
                    .cloned()
            };
            if let Some(id) = have(self) {
                return Ok(id);
            }
            // Tickets come with the chains: ask again (this OSD may have
            // become the member before `osd_id` since it last asked).
            let _ = self.ask(Op::Chains).await;
            have(self).ok_or_else(|| ConnError::Connect {
                addr: format!("OSD {osd_id}"),
                why: "the MDS gave no ticket for this chain member".into(),
            })
        })
    }
}
