//! Which function answers each request. The MDS in OSD-namespace mode
//! answers only the cluster requests; everything else names a function of
//! [`super::requests`] or [`super::cluster_map`].

use std::sync::Arc;

use proto::mds::{Errno, MdsError, MdsReply, MdsRequest, NamespaceMode, Op, OpClass};

use super::{GroupChange, Mds, err};

impl Mds {
    /// Answers one request.
    pub async fn handle(self: &Arc<Self>, req: MdsRequest) -> Result<MdsReply, MdsError> {
        let early = self.early_for(&req);
        let c = req.creds;
        let pf = req.prefetch;
        let session = req.session;
        let cluster_op = req.op.class() == OpClass::Cluster
            || matches!(
                req.op,
                Op::Lock { .. } | Op::TestLock { .. } | Op::LocksHeld { .. }
            );
        if self.namespace == NamespaceMode::Osd && !cluster_op {
            return Err(err(
                Errno::Inval,
                format!(
                    "{}: this file system keeps its namespace on the OSDs (formatted with \
                     --namespace osd); the MDS only hands out maps and capabilities",
                    req.op.name()
                ),
            ));
        }
        let key = if session == 0 {
            0
        } else {
            super::auth::session_key(super::auth::holder(), session)
        };
        let _active = self.lease_clear(key, &req.op).await;
        if let Op::GetAttr { ino }
        | Op::Stat { ino }
        | Op::Open { ino, .. }
        | Op::GetLayout { ino } = req.op
        {
            // A file being shrunk: its length once the shrink records it.
            self.truncating.wait(ino).await;
        }
        match req.op {
            Op::DirLease { dir } => self.dir_lease(&c, dir, key).await,
            Op::DirOps { dir, ops } => self.dir_ops(c, dir, ops, (key, session), early).await,
            Op::DirRelease { dir } => self.dir_release(dir, key).await,
            Op::NamespaceGrant => self.namespace_grant_for(true),
            Op::NamespaceRoot { osd } => self.namespace_root(osd).await,
            Op::Lookup { parent, name } => self.lookup(&c, parent, &name, pf),
            Op::GetAttr { ino } => self.getattr(ino),
            Op::Stat { ino } => self.stat(&c, ino, pf),
            Op::Open { ino, write } => {
                if write {
                    self.outside_recovery(ino, || self.open_file(&c, ino, write, session, pf))
                        .await
                } else {
                    self.open_file(&c, ino, write, session, pf)
                }
            }
            Op::Holding { held } => self.holding(&c, session, held),
            Op::Lock { ino, lock } => self.lock_range(&c, session, ino, lock),
            Op::TestLock { ino, lock } => self.test_lock(&c, session, ino, lock),
            Op::LocksHeld { locks } => self.locks_held(&c, session, locks),
            Op::Mknod {
                parent,
                name,
                kind,
                mode,
                rdev,
            } => self.mknod(c, parent, name, (kind, mode, rdev), early).await,
            Op::Create {
                parent,
                name,
                mode,
                exclusive,
            } => {
                self.create(c, parent, name, (mode, exclusive), session, early)
                    .await
            }
            Op::Mkdir { parent, name, mode } => self.mkdir(c, parent, name, mode).await,
            Op::Symlink {
                parent,
                name,
                target,
            } => self.symlink(c, parent, name, target, early).await,
            Op::Link { ino, parent, name } => self.link(c, ino, parent, name, early).await,
            Op::Unlink { parent, name } => self.unlink(c, parent, name, early).await,
            Op::Rmdir { parent, name } => self.rmdir(c, parent, name, early).await,
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                noreplace,
            } => {
                self.rename(c, (parent, name), (new_parent, new_name), noreplace, early)
                    .await
            }
            Op::Readlink { ino } => self.readlink(ino),
            Op::Readdir {
                ino,
                after,
                max,
                plus,
            } => self.readdir(&c, ino, after.as_deref(), max, plus),
            Op::ReaddirPrefetch { ino, after, max } => {
                self.readdir_prefetch(&c, ino, (after.as_deref(), max), (pf, key))
            }
            Op::Statfs => self.statfs(),
            Op::SetAttr { ino, set } => self.setattr(c, ino, set, (session, early)).await,
            Op::GetXattr { ino, name } => self.getxattr(&c, ino, &name),
            Op::ListXattr { ino } => self.listxattr(ino),
            Op::SetXattr {
                ino,
                name,
                value,
                mode,
            } => self.setxattr(c, ino, name, value, mode).await,
            Op::RemoveXattr { ino, name } => self.removexattr(c, ino, name).await,
            Op::CommitSize { ino, size, mtime } => {
                self.commit_size(c, ino, (size, mtime), (session, early))
                    .await
            }
            Op::ExtendLayout { ino, objset } => self.extend_layout(c, ino, objset, session).await,
            Op::GetLayout { ino } => self.get_layout(ino),
            Op::SetLayout { ino, spec } => self.set_layout(c, ino, spec).await,
            Op::GetMap { epoch } => self.get_map(epoch),
            Op::Report(r) => self.report(r).await,
            Op::Status => Ok(MdsReply::Status(Box::new(self.status()?))),
            Op::Resolve { path } => self.resolve(&c, &path),
            Op::MarkStale {
                ino,
                objset,
                stripe,
                osd,
            } => {
                self.mark_stale(&c, session, ino, (objset, stripe, osd))
                    .await
            }
            Op::SetOsdOut { osd, out, force } => self.set_osd_out(&c, osd, out, force).await,
            Op::AdoptGroup { group, osd } => self.adopt_group(&c, group, osd).await,
            Op::GroupAdd { id, addr, peer } => {
                self.change_group(&c, GroupChange::Add { id, addr, peer })
                    .await
            }
            Op::GroupRemove { id } => self.change_group(&c, GroupChange::Remove { id }).await,
            Op::Scrub { ino, deep } => self.scrub_op(&c, ino, deep).await,
            Op::Sync => self.sync_op().await,
            op @ (Op::Chains
            | Op::ChainDrop { .. }
            | Op::ChainFilled { .. }
            | Op::ChainRestarted { .. }) => Err(err(
                Errno::Access,
                format!("{}: only an OSD (with its own key) asks this", op.name()),
            )),
            op @ (Op::Ticket { .. }
            | Op::Replay { .. }
            | Op::Whoami
            | Op::AuthAdd(_)
            | Op::AuthList
            | Op::AuthRemove { .. }
            | Op::AuthRotate { .. }) => Err(err(
                Errno::Inval,
                format!("{}: needs an authenticated caller", op.name()),
            )),
        }
    }

    /// Adds or removes a member of this MDS's group (root only; only a
    /// group's leader can).
    async fn change_group(
        &self,
        c: &proto::mds::Creds,
        change: GroupChange,
    ) -> Result<MdsReply, MdsError> {
        if c.uid != 0 {
            return Err(err(Errno::Perm, "only root may change the MDS group"));
        }
        let Some(admin) = self.group_admin.get() else {
            return Err(err(
                Errno::Inval,
                "this MDS is not a replicated group's member: it has no members to change",
            ));
        };
        admin(change).await.map(|()| MdsReply::Done)
    }
}
