//! The group's peer protocol: raft's messages between members, on a
//! listener of their own (`peer` in `mds.toml`'s `[group]`), over the same
//! framing and mutual handshake as every Tessera connection. A member
//! authenticates as principal `mds.<id>` with the group's key (`group.key`
//! in every member's data directory), and frames are always encrypted:
//! snapshots carry principals' keys. Requests carry the message in the
//! payload (postcard); replies carry `Result<reply, error>` in the header.
//!
//! Opcodes: [`RAFT_APPEND`] (AppendEntries), [`RAFT_VOTE`] (RequestVote),
//! [`RAFT_SNAP_CHUNK`] (a piece of a snapshot image at an offset) and
//! [`RAFT_SNAP_END`] (the snapshot's meta and the leader's vote: the
//! receiver installs the image it assembled) and [`RAFT_PROGRESS`] (what
//! the leader last saw the asking member hold).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use net::auth::Identity;
use net::connection::{ConnConfig, ConnError, Connection};
use net::serve::{Admitted, Service};
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{Raft, ServerState, Snapshot, SnapshotMeta, Vote};
use proto::auth::{Credential, Secret};
use proto::msg::{Hello, Welcome};
use proto::{ErrorCode, Frame, PROTOCOL_VERSION, WireError};
use serde::{Deserialize, Serialize};

use crate::raft::{Member, SnapshotFile, Tc};

/// The id a peer connection's handshake names (the MDS's own is
/// `proto::mds::MDS_ID`; the peer listener answers only this one).
pub const PEER_ID: u32 = u32::MAX - 1;
/// AppendEntries.
pub const RAFT_APPEND: u16 = 0x200;
/// RequestVote.
pub const RAFT_VOTE: u16 = 0x201;
/// A piece of a snapshot image.
pub const RAFT_SNAP_CHUNK: u16 = 0x202;
/// The end of a snapshot: install it.
pub const RAFT_SNAP_END: u16 = 0x203;
/// What the leader last saw the asking member hold (a restarting member
/// asks: `super::reverted`).
pub const RAFT_PROGRESS: u16 = 0x204;
/// Largest snapshot piece sent (and payload accepted).
pub const SNAP_CHUNK: usize = 8 << 20;
/// Largest payload the peer listener accepts (an AppendEntries of 64
/// batches, each at most a few MiB, fits).
pub const MAX_PEER_PAYLOAD: u32 = 256 << 20;

/// What a leader saw a member hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The leader's term.
    pub term: u64,
    /// The highest log index the member acknowledged to it.
    pub index: u64,
}

/// What this member, if it leads, saw member `id` hold.
pub fn progress_of(raft: &Raft<Tc>, id: u64) -> Option<Seen> {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return None;
    }
    let index = crate::raft::matched(&m, id)?;
    Some(Seen {
        term: m.current_term,
        index,
    })
}

/// The principal member `id` authenticates as.
pub fn principal(id: u64) -> String {
    format!("mds.{id}")
}

/// Where a snapshot piece goes.
#[derive(Debug, Serialize, Deserialize)]
struct ChunkAt {
    snapshot_id: String,
    offset: u64,
}

/// The end of a snapshot.
#[derive(Debug, Serialize, Deserialize)]
struct SnapEnd {
    vote: Vote<u64>,
    meta: SnapshotMeta<u64, Member>,
    len: u64,
}

/// The peer listener's service: hands raft's messages to the member.
pub struct PeerFront {
    /// The member's raft.
    pub raft: Raft<Tc>,
    /// The cluster.
    pub cluster_id: String,
    /// The group's key.
    pub key: Secret,
    /// Where incoming snapshot images are assembled.
    pub dir: PathBuf,
    /// One snapshot arrives at a time: the id of the one arriving.
    pub receiving: tokio::sync::Mutex<Option<String>>,
}

impl PeerFront {
    /// Whether member `id` (holding the group key) may ask for votes.
    /// Any holder of the group key may connect and send entries: a
    /// member that missed a change of members must still hear a leader it
    /// does not know of yet (raft's terms judge what it sends). Only a
    /// vote changes anything by itself, so once raft knows the group, a
    /// member it does not list (one removed, still campaigning) has its
    /// vote requests refused and cannot disturb the group.
    fn may_vote(&self, id: u64) -> bool {
        let m = self.raft.metrics();
        let known = m.borrow();
        let group = known.membership_config.membership();
        group.nodes().next().is_none() || group.get_node(&id).is_some()
    }
}

fn reply<T: Serialize>(r: &Result<T, String>) -> (Bytes, Bytes) {
    (Bytes::from(proto::msg::encode(r)), Bytes::new())
}

impl PeerFront {
    fn incoming(&self) -> PathBuf {
        self.dir.join("snapshot.incoming")
    }

    async fn chunk(&self, f: &Frame) -> Result<(), String> {
        let at: ChunkAt = postcard::from_bytes(&f.header).map_err(|e| e.to_string())?;
        let mut arriving = self.receiving.lock().await;
        // Pieces of one snapshot only: the first names it; a piece of
        // another (a late one of an abandoned send) is refused.
        if at.offset == 0 {
            *arriving = Some(at.snapshot_id.clone());
        } else if arriving.as_deref() != Some(at.snapshot_id.as_str()) {
            return Err(format!(
                "a piece of snapshot {} while another arrives",
                at.snapshot_id
            ));
        }
        let path = self.incoming();
        let data = f.payload.clone();
        tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(at.offset == 0)
                .open(&path)?;
            // Pieces come in order: one that does not continue the image
            // (a gap, or an offset far past its end) is refused.
            let len = file.metadata()?.len();
            if at.offset != len {
                return Err(std::io::Error::other(format!(
                    "piece at {} of an image of {len} bytes",
                    at.offset
                )));
            }
            file.write_all_at(&data, at.offset)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("snapshot piece of {}: {e}", at.snapshot_id))
    }

    async fn end(&self, f: &Frame) -> Result<SnapshotResponse<u64>, String> {
        let end: SnapEnd = postcard::from_bytes(&f.header).map_err(|e| e.to_string())?;
        let mut arriving = self.receiving.lock().await;
        if arriving.take().as_deref() != Some(end.meta.snapshot_id.as_str()) {
            return Err(format!(
                "the end of snapshot {}, not the one arriving",
                end.meta.snapshot_id
            ));
        }
        let path = self.incoming();
        let len = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
        if len != end.len {
            return Err(format!("snapshot image of {len} bytes, {} sent", end.len));
        }
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| e.to_string())?;
        // Checked whole before raft sees it: a bad image refused here is a
        // failed send, one refused while installing would stop raft.
        let p = path.clone();
        let inside = tokio::task::spawn_blocking(move || crate::kv::image::verify_image(&p))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let inside: SnapshotMeta<u64, Member> =
            postcard::from_bytes(&inside).map_err(|e| e.to_string())?;
        if inside.last_log_id != end.meta.last_log_id {
            return Err(format!(
                "the image holds {:?}, the snapshot says {:?}",
                inside.last_log_id, end.meta.last_log_id
            ));
        }
        let snapshot = Snapshot {
            meta: end.meta,
            snapshot: Box::new(SnapshotFile { path }),
        };
        self.raft
            .install_full_snapshot(end.vote, snapshot)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Service for PeerFront {
    type Request = ();
    type Peer = u64;

    fn authenticate(&self, h: &Hello) -> Result<(Option<Secret>, u64), WireError> {
        let refuse = |why: String| Err(WireError::new(ErrorCode::Handshake, why));
        if h.version != PROTOCOL_VERSION {
            return refuse(format!("protocol version {} not supported", h.version));
        }
        if h.cluster_id != self.cluster_id || h.osd_id != PEER_ID {
            return refuse("this is an MDS group's peer listener".into());
        }
        let member = match &h.credential {
            Credential::Key { principal, .. } => principal
                .strip_prefix("mds.")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|id| *id != u64::MAX),
            _ => None,
        };
        match member {
            Some(id) => Ok((Some(self.key), id)),
            // A key nobody holds: the refusal is a wrong key's.
            None => Ok((Some(net::keys::random_key()), u64::MAX)),
        }
    }

    fn requires_encryption(&self) -> bool {
        true
    }

    fn welcome(&self) -> Welcome {
        Welcome::Ok {
            version: PROTOCOL_VERSION,
            cluster_id: self.cluster_id.clone(),
            osd_id: PEER_ID,
            max_payload: MAX_PEER_PAYLOAD,
            max_in_flight: 16,
            peers: Vec::new(),
        }
    }

    fn admit(&self, _peer: &u64, _f: &Frame) -> Result<Admitted<()>, WireError> {
        Ok(Admitted {
            request: (),
            reply_bytes: 0,
            quick: false,
        })
    }

    async fn handle(self: Arc<Self>, peer: Arc<u64>, _: (), f: Frame) -> (Bytes, Bytes) {
        match f.opcode {
            RAFT_APPEND => {
                let r = match postcard::from_bytes::<AppendEntriesRequest<Tc>>(&f.payload) {
                    Ok(req) => Ok(self.raft.append_entries(req).await),
                    Err(e) => Err(format!("append: {e}")),
                };
                reply(&r)
            }
            RAFT_VOTE if !self.may_vote(*peer) => reply::<()>(&Err(format!(
                "member {} is not in this group: its vote requests are refused",
                *peer
            ))),
            RAFT_VOTE => {
                let r = match postcard::from_bytes::<VoteRequest<u64>>(&f.payload) {
                    Ok(req) => Ok(self.raft.vote(req).await),
                    Err(e) => Err(format!("vote: {e}")),
                };
                reply(&r)
            }
            RAFT_SNAP_CHUNK => reply(&self.chunk(&f).await),
            RAFT_SNAP_END => reply(&self.end(&f).await),
            RAFT_PROGRESS => reply(&Ok(progress_of(&self.raft, *peer))),
            op => reply::<()>(&Err(format!("opcode {op:#x} is not a peer request"))),
        }
    }

    fn error_header(&self, err: WireError) -> Bytes {
        Bytes::from(proto::msg::encode(&Err::<(), String>(err.message)))
    }
}

/// The member's side of raft's network: one link per other member.
#[derive(Clone)]
pub struct PeerNet {
    /// This member.
    pub me: u64,
    /// The cluster.
    pub cluster_id: String,
    /// The group's key.
    pub key: Secret,
    /// When each member last answered this one.
    pub heard: Heard,
    /// The members this one cannot reach (logged once, not per attempt).
    pub down: Down,
}

/// When each member last answered (shared by the links and the status).
pub type Heard = Arc<std::sync::Mutex<BTreeMap<u64, std::time::Instant>>>;

/// A connection to one member, remade when it breaks.
pub struct PeerLink {
    target: u64,
    addr: String,
    cfg: ConnConfig,
    conn: Option<Arc<Connection>>,
    heard: Heard,
    /// The members that could not be reached, shared by every link (openraft
    /// makes a link per vote round) ([`PeerLink::note_down`]).
    down: Down,
}

/// For each member that could not be reached: since when, and when that
/// was last logged.
pub type Down = Arc<std::sync::Mutex<BTreeMap<u64, (Instant, Instant)>>>;

/// How often a member that stays unreachable is logged again.
const DOWN_LOGGED_EVERY: Duration = Duration::from_secs(60);
/// A member that timed out and has not answered for this long is logged
/// as unreachable.
const SILENT_AFTER: Duration = Duration::from_secs(2);

impl RaftNetworkFactory<Tc> for PeerNet {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &Member) -> PeerLink {
        let identity = Identity::principal(&principal(self.me), 1, self.key);
        let mut cfg = ConnConfig::new(&self.cluster_id, PEER_ID, Arc::new(identity));
        cfg.dead_peer_after = Some(net::connection::DEAD_PEER_AFTER);
        cfg.name = format!("mds.{}", self.me);
        cfg.encrypt = true;
        cfg.connections = 1;
        PeerLink {
            target,
            addr: node.addr.clone(),
            cfg,
            conn: None,
            heard: self.heard.clone(),
            down: self.down.clone(),
        }
    }
}

type Rpc<T> = Result<T, RPCError<u64, Member, RaftError<u64>>>;

impl PeerLink {
    /// Logs a member that cannot be reached: when it stops answering, then
    /// once a minute (openraft's own lines for every attempt, ten a
    /// second, are not logged by default).
    fn note_down(&mut self, e: &ConnError) {
        let now = Instant::now();
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        match down.get(&self.target).copied() {
            None => {
                tracing::warn!(member = self.target, addr = %self.addr, error = %e, "cannot reach a member");
                down.insert(self.target, (now, now));
            }
            Some((since, said)) if said.elapsed() >= DOWN_LOGGED_EVERY => {
                tracing::warn!(
                    member = self.target,
                    addr = %self.addr,
                    for_s = since.elapsed().as_secs(),
                    error = %e,
                    "still cannot reach a member"
                );
                down.insert(self.target, (since, now));
            }
            Some(_) => {}
        }
    }

    /// The member answered: logs its return if it had been unreachable.
    fn note_up(&mut self) {
        let was = self
            .down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.target);
        if let Some((since, _)) = was {
            tracing::info!(
                member = self.target,
                after_ms = since.elapsed().as_millis() as u64,
                "a member answers again"
            );
        }
    }

    async fn call(
        &mut self,
        opcode: u16,
        header: &impl Serialize,
        payload: Bytes,
        ttl: Duration,
    ) -> Result<Frame, ConnError> {
        let conn = match self.conn.as_ref().filter(|c| c.is_alive()) {
            Some(c) => c.clone(),
            None => {
                // The connection's own reply timeout is generous; each call
                // is bounded by its `ttl` here.
                let mut cfg = self.cfg.clone();
                cfg.timeout = Duration::from_secs(10);
                let c = Arc::new(
                    tokio::time::timeout(ttl, Connection::connect(&self.addr, &cfg))
                        .await
                        .map_err(|_| ConnError::Timeout(ttl))??,
                );
                self.conn = Some(c.clone());
                c
            }
        };
        match tokio::time::timeout(ttl, conn.call_raw(opcode, header, payload)).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(ttl)),
        }
    }

    fn decode<T: for<'a> Deserialize<'a>>(
        &self,
        f: &Frame,
    ) -> Result<Result<T, String>, ConnError> {
        proto::msg::decode::<Result<T, String>>(&f.header)
            .map_err(|e| ConnError::Protocol(e.to_string()))
    }

    async fn rpc<T: for<'a> Deserialize<'a>>(
        &mut self,
        opcode: u16,
        body: &impl Serialize,
        ttl: Duration,
    ) -> Rpc<T> {
        let payload = postcard::to_allocvec(body)
            .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        let f = match self.call(opcode, &(), Bytes::from(payload), ttl).await {
            Ok(f) => f,
            // A member that cannot be reached: openraft backs off.
            Err(e @ ConnError::Connect { .. }) => {
                self.conn = None;
                self.note_down(&e);
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
            // A slow answer is not a dead member: no back-off (which would
            // pause heartbeats to it), and the connection stays; one
            // silent for a while (a host gone, a partition) is logged.
            Err(e @ ConnError::Timeout(_)) => {
                let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
                let silent = heard
                    .get(&self.target)
                    .is_none_or(|t| t.elapsed() > SILENT_AFTER);
                drop(heard);
                if silent {
                    self.note_down(&e);
                }
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Err(e) => {
                self.conn = None;
                self.note_down(&e);
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        self.note_up();
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.target, std::time::Instant::now());
        match self.decode::<Result<T, RaftError<u64>>>(&f) {
            Ok(Ok(Ok(r))) => Ok(r),
            Ok(Ok(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(Err(why)) => Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other(why),
            ))),
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl PeerLink {
    /// Asks the member what, if it leads, it last saw this one hold.
    pub async fn progress(&mut self, ttl: Duration) -> Result<Option<Seen>, String> {
        let f = self
            .call(RAFT_PROGRESS, &(), Bytes::new(), ttl)
            .await
            .map_err(|e| e.to_string())?;
        self.decode::<Option<Seen>>(&f).map_err(|e| e.to_string())?
    }
}

impl RaftNetwork<Tc> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Tc>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<u64>> {
        self.rpc(RAFT_APPEND, &rpc, option.hard_ttl()).await
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, option: RPCOption) -> Rpc<VoteResponse<u64>> {
        self.rpc(RAFT_VOTE, &rpc, option.hard_ttl()).await
    }

    /// A member that could not be reached is tried again every heartbeat
    /// (openraft waits 500 ms by default): a restarted member then hears
    /// its leader before its own election timer (400 ms at least) runs
    /// out, rather than stand as a candidate whose vote — in a term the
    /// leader already holds, from a higher id — would depose it.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<Tc>,
        cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<Tc, Fatal<u64>>> {
        let send = self.send_snapshot(vote, snapshot);
        tokio::select! {
            r = send => r,
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }
}

impl PeerLink {
    async fn send_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<Tc>,
    ) -> Result<SnapshotResponse<u64>, StreamingError<Tc, Fatal<u64>>> {
        let unreachable = |e: &dyn std::fmt::Display| {
            StreamingError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
        };
        let ttl = Duration::from_secs(120);
        // A connection of its own: a large piece, or the install at the
        // end, may take longer than the raft messages' connection allows.
        let mut cfg = self.cfg.clone();
        cfg.timeout = ttl;
        let conn = Connection::connect(&self.addr, &cfg)
            .await
            .map_err(|e| unreachable(&e))?;
        use std::os::unix::fs::FileExt;
        // Opened once: a newer image renamed over it meanwhile does not
        // change what is sent.
        let file = std::fs::File::open(&snapshot.snapshot.path).map_err(|e| unreachable(&e))?;
        let len = file.metadata().map_err(|e| unreachable(&e))?.len() as usize;
        // A newer image may have been renamed over the path since openraft
        // read the meta: send only the image the meta describes.
        let meta = crate::kv::image::image_meta(&snapshot.snapshot.path)
            .ok()
            .and_then(|m| postcard::from_bytes::<SnapshotMeta<u64, Member>>(&m).ok());
        if meta.as_ref().map(|m| &m.snapshot_id) != Some(&snapshot.meta.snapshot_id) {
            return Err(unreachable(&"the snapshot was replaced while being sent"));
        }
        let id = snapshot.meta.snapshot_id.clone();
        let mut offset = 0usize;
        loop {
            let end = (offset + SNAP_CHUNK).min(len);
            let at = ChunkAt {
                snapshot_id: id.clone(),
                offset: offset as u64,
            };
            let mut buf = vec![0u8; end - offset];
            file.read_exact_at(&mut buf, offset as u64)
                .map_err(|e| unreachable(&e))?;
            let piece = Bytes::from(buf);
            let f = conn
                .call_raw(RAFT_SNAP_CHUNK, &at, piece)
                .await
                .map_err(|e| unreachable(&e))?;
            self.decode::<()>(&f)
                .map_err(|e| unreachable(&e))?
                .map_err(|e| unreachable(&e))?;
            offset = end;
            if offset >= len {
                break;
            }
        }
        let end = SnapEnd {
            vote,
            meta: snapshot.meta,
            len: len as u64,
        };
        let f = conn
            .call_raw(RAFT_SNAP_END, &end, Bytes::new())
            .await
            .map_err(|e| unreachable(&e))?;
        self.decode::<SnapshotResponse<u64>>(&f)
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))
    }
}

/// The members `mds.toml` names, as raft's membership.
pub fn membership(members: &[crate::config::GroupMember]) -> BTreeMap<u64, Member> {
    members
        .iter()
        .map(|m| {
            (
                m.id,
                Member {
                    addr: m.peer.clone(),
                    client: m.addr.clone(),
                },
            )
        })
        .collect()
}
