//! Who is asking, and what they may ask: the handshake's key lookup
//! (principals and OSDs), the gate every request passes (read-only
//! principals, subtrees, uid mapping, admin-only and OSD-only requests),
//! tickets for the OSDs, and the principal-management requests.

use std::sync::Arc;

use net::keys::random_key;
use proto::auth::{Credential, Secret, wrap_session_key};
use proto::mds::{
    Access, Creds, Errno, FileKind, MdsError, MdsReply, MdsRequest, NamespaceMode, Op,
    PrincipalSpec, ROOT_INO,
};
use proto::msg::Hello;
use proto::{ErrorCode, WireError};

use super::Mds;
use crate::principals::{self, PrincipalRecord};
use crate::records::Records;

tokio::task_local! {
    /// The principal the request being answered comes from: the holder
    /// every capability signed while answering it names. Outside a
    /// request (the MDS's own work) capabilities name the MDS.
    pub(super) static HOLDER: u64;
}

tokio::task_local! {
    /// The session of the request being answered (0: none).
    static SESSION: u64;
}

tokio::task_local! {
    /// Whose files the principal of the request being answered may act
    /// as the owner of.
    pub(super) static OWNS: Owns;
}

/// Whose files a principal may act as the owner of — and so could make
/// writable with a chmod of its own: beside the mode, what a hold for
/// writing re-announced to a restarted MDS is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owns {
    /// Anyone's: a trusted principal claims any uid.
    Any,
    /// Anyone's but root's: root squashed, any other uid as claimed.
    NotRoot,
    /// Only this uid's: every claim maps to it.
    Only(u32),
    /// Nobody's: a read-only principal changes nothing.
    Nothing,
}

impl Owns {
    /// What `spec` may act as.
    pub(super) fn of(spec: &proto::mds::PrincipalSpec) -> Owns {
        use proto::mds::{Access, UidMap};
        match (spec.access, spec.uids) {
            (Access::ReadOnly, _) => Owns::Nothing,
            (_, UidMap::Trusted) => Owns::Any,
            (_, UidMap::SquashRoot) => Owns::NotRoot,
            (_, UidMap::Fixed { uid, .. }) => Owns::Only(uid),
        }
    }

    /// Whether a file owned by `uid` is among them.
    pub(super) fn owns(self, uid: u32) -> bool {
        match self {
            Owns::Any => true,
            Owns::NotRoot => uid != 0,
            Owns::Only(u) => u == uid,
            Owns::Nothing => false,
        }
    }

    /// The request being answered's; nobody's outside a principal's
    /// request (so a path that forgot to set it grants nothing).
    pub(super) fn current() -> Owns {
        OWNS.try_with(|o| *o).unwrap_or(Owns::Nothing)
    }
}

/// The key the request being answered's session is known by (its leases'
/// holder; 0 outside a request or without a session).
pub(super) fn caller_key() -> u64 {
    match SESSION.try_with(|s| *s) {
        Ok(s) if s != 0 => session_key(holder(), s),
        _ => 0,
    }
}

/// The holder for capabilities signed now.
pub(super) fn holder() -> u64 {
    HOLDER
        .try_with(|h| *h)
        .unwrap_or(proto::auth::MDS_PRINCIPAL)
}

/// What the KV records a session as: a one-way digest of its principal
/// and its id, so no principal can stand in for another's session in a
/// recovery — finding a session id of its own that lands on a victim's
/// record is a preimage search on SHA-256 (an XOR of the two, as before,
/// could be solved for directly).
pub(super) fn session_key(principal: u64, session: u64) -> u64 {
    const DOMAIN: &[u8; 32] = b"tessera: replay session record..";
    let mut msg = [0u8; 16];
    msg[..8].copy_from_slice(&principal.to_le_bytes());
    msg[8..].copy_from_slice(&session.to_le_bytes());
    let d = proto::cap::mac(DOMAIN, &msg);
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    u64::from_le_bytes(k).max(1)
}

/// Who a connection to the MDS speaks for.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A client principal (checked again at every request: a removed or
    /// rotated principal's connections stop at once).
    Client {
        /// Name.
        name: String,
        /// Id.
        id: u64,
        /// Key version it proved.
        key_version: u32,
    },
    /// An OSD, with its own key.
    Osd(u32),
}

fn denied(e: Errno, m: impl Into<String>) -> MdsError {
    MdsError::new(e, m)
}

/// Inodes a request names (each must be inside a restricted principal's
/// subtree, and reachable by a path walk: see `search`).
pub(super) fn inodes_named(op: &Op) -> Vec<u64> {
    match op {
        Op::Lookup { parent, .. }
        | Op::Create { parent, .. }
        | Op::Mkdir { parent, .. }
        | Op::Symlink { parent, .. }
        | Op::Mknod { parent, .. }
        | Op::Unlink { parent, .. }
        | Op::Rmdir { parent, .. } => vec![*parent],
        Op::DirLease { dir } | Op::DirOps { dir, .. } | Op::DirRelease { dir } => vec![*dir],
        Op::Link { ino, parent, .. } => vec![*ino, *parent],
        Op::Rename {
            parent, new_parent, ..
        } => vec![*parent, *new_parent],
        Op::GetAttr { ino }
        | Op::Stat { ino }
        | Op::ReaddirPrefetch { ino, .. }
        | Op::Open { ino, .. }
        | Op::Readlink { ino }
        | Op::Readdir { ino, .. }
        | Op::SetAttr { ino, .. }
        | Op::GetXattr { ino, .. }
        | Op::ListXattr { ino }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::CommitSize { ino, .. }
        | Op::ExtendLayout { ino, .. }
        | Op::GetLayout { ino }
        | Op::SetLayout { ino, .. }
        | Op::MarkStale { ino, .. }
        | Op::Lock { ino, .. }
        | Op::TestLock { ino, .. }
        | Op::Scrub { ino, .. } => vec![*ino],
        // A HOLDING or LOCKS HELD report is judged file by file
        // (confinement included) by the holds or locks table, which drops
        // what the caller may not hold rather than refusing the report.
        _ => Vec::new(),
    }
}

/// Inode numbers a HOLDING report names.
fn held_inodes(op: &Op) -> Vec<u64> {
    match op {
        Op::Holding { held } => held.iter().map(|h| h.0).collect(),
        Op::LocksHeld { locks } => locks.iter().map(|l| l.0).collect(),
        _ => Vec::new(),
    }
}

/// Inode numbers a REPLAY names for the inodes its changes made.
fn replayed_inodes(op: &Op) -> Vec<u64> {
    match op {
        Op::Replay { ops, .. } => ops.iter().filter_map(|o| o.ino).collect(),
        _ => Vec::new(),
    }
}

/// Whether only an admin principal may ask `op` (principals, OSDs in or
/// out, lost groups, scrubs).
fn admin_only(op: &Op) -> bool {
    matches!(
        op,
        Op::AuthAdd(_)
            | Op::AuthList
            | Op::AuthRemove { .. }
            | Op::AuthRotate { .. }
            | Op::SetOsdOut { .. }
            | Op::AdoptGroup { .. }
            | Op::GroupAdd { .. }
            | Op::GroupRemove { .. }
            | Op::Scrub { .. }
    )
}

/// Whether a read-only principal must be refused `op`.
fn changes_something(op: &Op) -> bool {
    op.mandatory()
        || matches!(
            op,
            Op::Open { write: true, .. } | Op::NamespaceRoot { .. } | Op::MarkStale { .. }
        )
}

/// Whether `spec` may manage principals and OSDs (see
/// [`crate::principals::full_admin`]).
pub(crate) fn full_admin(spec: &PrincipalSpec) -> bool {
    crate::principals::full_admin(spec)
}

impl Mds {
    /// The key the peer of `h` must prove, and who it then is.
    pub fn authenticate(&self, h: &Hello) -> Result<(Option<Secret>, Caller), WireError> {
        let refuse = |why: String| Err(WireError::new(ErrorCode::Handshake, why));
        let cluster = &self.sb.cluster_id;
        if h.version != proto::PROTOCOL_VERSION {
            return refuse(format!("protocol version {} not supported", h.version));
        }
        if &h.cluster_id != cluster {
            // The real cluster id is not echoed: a stranger learns nothing.
            return refuse(format!(
                "this MDS does not serve cluster {:?}",
                h.cluster_id
            ));
        }
        if h.osd_id != proto::mds::MDS_ID {
            return refuse(format!("this is the MDS, not OSD {}", h.osd_id));
        }
        let unauthenticated = |why: String| Err(WireError::new(ErrorCode::Unauthenticated, why));
        let Credential::Key {
            principal,
            key_version,
        } = &h.credential
        else {
            return unauthenticated(
                "the MDS needs a principal's key: pass --key-file (the admin makes one with \
                 `tessera auth add`)"
                    .into(),
            );
        };
        // An unknown name or key version gets a challenge under a key
        // nobody holds: its refusal is the wrong key's, so a stranger
        // cannot tell which principals and versions exist. Why is logged.
        let decoy = |why: String| {
            tracing::warn!(principal = %principal, key_version, %why, "handshake for an unknown key");
            Ok((
                Some(random_key()),
                Caller::Client {
                    name: principal.clone(),
                    id: u64::MAX,
                    key_version: *key_version,
                },
            ))
        };
        if let Some(n) = principal.strip_prefix("osd.") {
            let Ok(id) = n.parse::<u32>() else {
                return decoy("not an OSD number".into());
            };
            let ring = self.osd_ring(id, Some(*key_version));
            return match ring.as_ref().and_then(|r| r.key(*key_version)) {
                Some(k) => Ok((Some(*k), Caller::Osd(id))),
                None => decoy(format!(
                    "no key version {key_version} for OSD {id} in {}",
                    self.keys_dir.display()
                )),
            };
        }
        let Some(p) = self.principals.get(principal) else {
            return decoy("no such principal".into());
        };
        if p.info.key_version != *key_version {
            return decoy(format!(
                "key version {key_version} was rotated (current: {})",
                p.info.key_version
            ));
        }
        Ok((
            Some(p.secret),
            Caller::Client {
                name: principal.clone(),
                id: p.info.id,
                key_version: *key_version,
            },
        ))
    }

    /// The principal a client caller still is (removed or rotated: refused).
    fn current(
        &self,
        name: &str,
        id: u64,
        key_version: u32,
    ) -> Result<Arc<PrincipalRecord>, MdsError> {
        match self.principals.get(name) {
            Some(p) if p.info.id == id && p.info.key_version == key_version => Ok(p),
            Some(_) => Err(denied(
                Errno::Access,
                format!("the key of {name} was rotated: reconnect with its new key file"),
            )),
            None => Err(denied(
                Errno::Access,
                format!("principal {name} was removed"),
            )),
        }
    }

    /// Whether `ino` is `root` or below it (following each inode's parent).
    pub(super) fn within(&self, ino: u64, root: u64) -> Result<bool, MdsError> {
        if root == ROOT_INO || ino == root {
            return Ok(true);
        }
        let snap = self.kv.read()?;
        let mut at = ino;
        for _ in 0..4096 {
            if at == root {
                return Ok(true);
            }
            if at == ROOT_INO {
                return Ok(false);
            }
            let Some(i) = snap.inode(at)? else {
                return Ok(false);
            };
            if i.parent == at {
                return Ok(false);
            }
            at = i.parent;
        }
        Ok(false)
    }

    /// Answers one request from `caller`: checks what the caller may ask,
    /// maps its claimed uid, and signs every capability for it. After a
    /// crash, a client's requests other than its replay wait until the
    /// replays are served.
    pub async fn serve_request(
        self: &Arc<Self>,
        caller: &Caller,
        req: MdsRequest,
    ) -> Result<MdsReply, MdsError> {
        // What neither reads nor changes the namespace need not wait
        // (an operator's `tessera status` shows the wait).
        let unhindered = matches!(
            req.op,
            Op::Replay { .. } | Op::Status | Op::GetMap { .. } | Op::Whoami | Op::Ticket { .. }
        );
        if matches!(caller, Caller::Client { .. }) && !unhindered {
            self.replays_served().await;
        }
        self.serve_checked(caller, req).await
    }

    /// [`Mds::serve_request`] without the wait for replays.
    pub(super) async fn serve_checked(
        self: &Arc<Self>,
        caller: &Caller,
        mut req: MdsRequest,
    ) -> Result<MdsReply, MdsError> {
        let (name, id, key_version) = match caller {
            Caller::Osd(osd) => {
                return match &req.op {
                    Op::Report(r) if r.osd_id == *osd => self.handle(req).await,
                    Op::Report(r) => Err(denied(
                        Errno::Access,
                        format!("OSD {osd} may not report for OSD {}", r.osd_id),
                    )),
                    Op::GetMap { .. } | Op::Status => self.handle(req).await,
                    Op::Chains => self.chain_grant(*osd),
                    Op::ChainRestarted { store } => self.chain_restarted(*osd, *store).await,
                    Op::ChainDrop {
                        group,
                        epoch,
                        osd: next,
                        refused,
                    } => self.chain_drop(*osd, *group, *epoch, *next, *refused).await,
                    Op::ChainFilled {
                        group,
                        epoch,
                        osd: next,
                    } => self.chain_filled(*osd, *group, *epoch, *next).await,
                    op => Err(denied(
                        Errno::Access,
                        format!("{}: an OSD's key allows only reports and maps", op.name()),
                    )),
                };
            }
            Caller::Client {
                name,
                id,
                key_version,
            } => (name, *id, *key_version),
        };
        let p = self.current(name, id, key_version)?;
        let spec = &p.info.spec;
        if matches!(req.op, Op::Report(_)) {
            return Err(denied(Errno::Access, "only OSDs report"));
        }
        if admin_only(&req.op) && !spec.admin {
            return Err(denied(
                Errno::Perm,
                format!(
                    "{}: only an admin principal may ask this; {name} is not one",
                    req.op.name()
                ),
            ));
        }
        if admin_only(&req.op) && !full_admin(spec) {
            // An admin may mint any principal: confined, read-only or
            // mapped, it could otherwise mint itself out of its bounds.
            return Err(denied(
                Errno::Perm,
                format!(
                    "{}: {name} is an admin confined to {}, {:?} or with mapped uids; \
                     only an unconfined, read-write, trusted admin may ask this",
                    req.op.name(),
                    spec.path,
                    spec.access
                ),
            ));
        }
        // The inodes a request names: checked once here for the id space,
        // the subtree and (in `search`) the path above them.
        let named = inodes_named(&req.op);
        if let Some(ino) = named
            .iter()
            .copied()
            .chain(replayed_inodes(&req.op))
            .chain(held_inodes(&req.op))
            .find(|&i| !proto::layout::is_inode_number(i))
        {
            return Err(denied(
                Errno::Inval,
                format!(
                    "{}: {ino:#x} is not an inode number (outside the id space)",
                    req.op.name()
                ),
            ));
        }
        if spec.access == Access::ReadOnly && changes_something(&req.op) {
            return Err(denied(
                Errno::RoFs,
                format!("{}: {name} has read-only access", req.op.name()),
            ));
        }
        let root = p.info.root_ino;
        if root != ROOT_INO {
            if self.namespace == NamespaceMode::Osd
                && matches!(
                    req.op,
                    Op::NamespaceGrant
                        | Op::NamespaceRoot { .. }
                        | Op::Lock { .. }
                        | Op::TestLock { .. }
                        | Op::LocksHeld { .. }
                )
            {
                return Err(denied(
                    Errno::Access,
                    format!(
                        "{name} is confined to {}; a namespace on the OSDs cannot confine it",
                        spec.path
                    ),
                ));
            }
            for &ino in &named {
                if !self.within(ino, root)? {
                    return Err(denied(
                        Errno::Access,
                        format!(
                            "inode {ino:#x} is outside {}, where {name} is confined",
                            spec.path
                        ),
                    ));
                }
            }
            // Prefetch hands out the numerically closest inodes, which may
            // lie outside the subtree: a confined principal gets none.
            req.prefetch = 0;
            if let Op::Resolve { path } = &req.op {
                req.op = Op::Resolve {
                    path: format!("{}/{}", spec.path.trim_end_matches('/'), path),
                };
            }
        }
        if matches!(req.op, Op::DirLease { .. })
            && (spec.uids != proto::mds::UidMap::Trusted || spec.access == Access::ReadOnly)
        {
            // The holder makes files' attributes itself, from the uids it
            // claims: only a principal whose claims stand may.
            return Err(denied(
                Errno::Perm,
                format!("{name} is read-only or its uids are mapped: it gets no directory leases"),
            ));
        }
        // What an early answer's seal covers: the request as the client
        // sent it, and keeps to replay.
        let kept = (req.early && req.op.may_answer_early())
            .then(|| (req.creds.clone(), req.op.clone(), req.session));
        req.creds = spec.uids.apply(req.creds);
        let op = std::mem::replace(&mut req.op, Op::Statfs);
        let reply = match op {
            Op::Whoami => Ok(MdsReply::Principal(Box::new(p.info.clone()))),
            Op::Ticket { osd } => self.ticket(&p, osd),
            Op::AuthAdd(spec) => self.auth_add(&p, spec).await,
            Op::AuthList => Ok(MdsReply::Principals(self.principals.list())),
            Op::AuthRemove { name } => self.auth_remove(&name).await,
            Op::AuthRotate { name } => self.auth_rotate(&p, &name).await,
            Op::Replay { instance, ops } => {
                let key = session_key(id, req.session);
                self.replay(caller, (key, req.session), instance, ops).await
            }
            Op::NamespaceGrant => {
                let full =
                    spec.access == Access::ReadWrite && spec.uids == proto::mds::UidMap::Trusted;
                HOLDER.sync_scope(id, || self.namespace_grant_for(full))
            }
            op => {
                req.op = op;
                let session = req.session;
                let top = super::search::TOP.scope(root, async {
                    self.check_search(&req, &named)?;
                    self.handle(req).await
                });
                let top = OWNS.scope(Owns::of(spec), top);
                HOLDER.scope(id, SESSION.scope(session, top)).await
            }
        };
        self.finish(id, root, kept, reply)
    }

    /// An answer as principal `id` (confined to `root`) gets it: an early
    /// one sealed for the request `kept` (credentials, operation, session
    /// as sent), a resolved path starting at its own root.
    fn finish(
        &self,
        id: u64,
        root: u64,
        kept: Option<(proto::mds::Creds, Op, u64)>,
        reply: Result<MdsReply, MdsError>,
    ) -> Result<MdsReply, MdsError> {
        match (reply, kept) {
            (Ok(MdsReply::Early(mut e)), Some((creds, op, session))) => {
                let key = session_key(id, session);
                e.seal = self.seal(
                    (key, e.instance),
                    e.transno,
                    &creds,
                    &op,
                    e.reply.named_ino(),
                );
                Ok(MdsReply::Early(e))
            }
            (Ok(MdsReply::Path(v)), _) if root != ROOT_INO => Ok(MdsReply::Path(
                v.into_iter().skip_while(|e| e.attr.ino != root).collect(),
            )),
            (r, _) => r,
        }
    }

    /// A ticket for OSD `osd` for principal `p`, its session key wrapped
    /// with `p`'s key.
    fn ticket(&self, p: &PrincipalRecord, osd: u32) -> Result<MdsReply, MdsError> {
        let ring = self
            .osd_ring(osd, None)
            .ok_or_else(|| denied(Errno::NoEnt, format!("no OSD {osd} (no key for it)")))?;
        let (identity, expires_ms) =
            net::auth::mint_ticket(&ring, osd, p.info.id, &p.info.spec.name)
                .ok_or_else(|| denied(Errno::Io, format!("empty key ring for OSD {osd}")))?;
        let (Credential::Ticket(ticket), Some(session)) = (identity.credential, identity.key)
        else {
            return Err(denied(Errno::Io, "minting a ticket gave no ticket"));
        };
        Ok(MdsReply::Ticket {
            ticket,
            wrapped_key: wrap_session_key(&p.secret, &session, net::auth::random_bytes()),
            expires_ms,
        })
    }

    async fn auth_add(
        &self,
        caller: &PrincipalRecord,
        spec: PrincipalSpec,
    ) -> Result<MdsReply, MdsError> {
        principals::check_name(&spec.name)?;
        if spec.admin && !full_admin(&spec) {
            return Err(denied(
                Errno::Inval,
                format!(
                    "{}: an admin principal has the whole tree, read-write, with trusted uids \
                     (asked: path {}, access {:?})",
                    spec.name, spec.path, spec.access
                ),
            ));
        }
        if self.principals.get(&spec.name).is_some() {
            return Err(denied(
                Errno::Exist,
                format!("{} exists (rotate its key, or remove it first)", spec.name),
            ));
        }
        if !spec.path.starts_with('/') {
            return Err(denied(
                Errno::Inval,
                format!("path {:?} must be absolute", spec.path),
            ));
        }
        // The subtree is the directory the path names now (it follows a rename).
        let root = match self.resolve(&Creds::root(), &spec.path)? {
            MdsReply::Path(v) => v.last().map(|e| (e.attr.ino, e.attr.kind)),
            _ => None,
        };
        let Some((root_ino, FileKind::Dir)) = root else {
            return Err(denied(
                Errno::NotDir,
                format!("{} is not a directory", spec.path),
            ));
        };
        let mut spec = spec;
        spec.path = if spec.path.len() > 1 {
            spec.path.trim_end_matches('/').to_string()
        } else {
            spec.path
        };
        let secret = random_key();
        let rec = self
            .kv
            .write(move |tx| {
                let id = principals::next_id(tx)?;
                let rec = principals::new_record(id, spec, root_ino, secret);
                principals::put(tx, &rec)?;
                Ok(rec)
            })
            .await?;
        tracing::info!(principal = %rec.info.spec.name, id = rec.info.id, path = %rec.info.spec.path, "principal added");
        let info = Box::new(rec.info.clone());
        let wrapped_key = wrap_session_key(&caller.secret, &rec.secret, net::auth::random_bytes());
        self.principals.set(&rec.info.spec.name.clone(), Some(rec));
        Ok(MdsReply::PrincipalKey { info, wrapped_key })
    }

    async fn auth_remove(&self, name: &str) -> Result<MdsReply, MdsError> {
        if name == principals::ADMIN {
            return Err(denied(
                Errno::Perm,
                "client.admin cannot be removed (rotate its key instead)",
            ));
        }
        if self.principals.get(name).is_none() {
            return Err(denied(Errno::NoEnt, format!("no principal {name}")));
        }
        let n = name.to_string();
        self.kv.write(move |tx| principals::del(tx, &n)).await?;
        self.principals.set(name, None);
        tracing::info!(principal = %name, "principal removed");
        Ok(MdsReply::Done)
    }

    async fn auth_rotate(
        &self,
        caller: &PrincipalRecord,
        name: &str,
    ) -> Result<MdsReply, MdsError> {
        if name == principals::ADMIN && caller.info.spec.name != principals::ADMIN {
            return Err(denied(
                Errno::Perm,
                format!(
                    "only client.admin rotates client.admin's key, not {}",
                    caller.info.spec.name
                ),
            ));
        }
        let Some(old) = self.principals.get(name) else {
            return Err(denied(Errno::NoEnt, format!("no principal {name}")));
        };
        let mut rec = (*old).clone();
        rec.secret = random_key();
        rec.info.key_version += 1;
        let stored = rec.clone();
        self.kv
            .write(move |tx| principals::put(tx, &stored))
            .await?;
        tracing::info!(principal = %name, key_version = rec.info.key_version, "principal key rotated");
        // The caller may be rotating its own key: wrap with the key it proved.
        let wrapped_key = wrap_session_key(&caller.secret, &rec.secret, net::auth::random_bytes());
        let info = Box::new(rec.info.clone());
        self.principals.set(name, Some(rec));
        Ok(MdsReply::PrincipalKey { info, wrapped_key })
    }
}
