//! Running a change at its group's head: the change's stamp first
//! ([`super::stamp`]), the command, a read repair when the head's copy is
//! bad, and the head's whole object to every member when the change
//! failed part way.

use bytes::Bytes;
use proto::chain::Chain;
use proto::msg::{Command, Reply, Request, Response};
use proto::{ErrorCode, WireError};

use super::bounds::changes;
use super::{ChainView, Chains, Unsent, lock, stamp};
use crate::exec::{Ctx, execute_admitted};

/// What running a request at the head came to.
pub(super) enum Ran {
    /// It succeeded: the response, its data, the reply to pass on, and
    /// whether it made the object.
    Done(Response, Bytes, Reply, bool),
    /// It failed: the answer to give as it is.
    Answer(Response, Bytes),
}

impl Chains {
    /// Runs `req` at the head of `group`, the object marked with `stamp`
    /// first when the request changes it (and once made, when it makes it).
    pub(super) async fn run_at_head(
        &self,
        ctx: &Ctx,
        principal: u64,
        (req, payload): (&Request, &Bytes),
        (view, group, chain): (&ChainView, u32, &Chain),
        stamp: u64,
    ) -> Result<Ran, WireError> {
        let marked = match stamp::marked_object(&req.cmd).filter(|_| changes(req)) {
            Some(obj) => stamp::mark(ctx, obj, stamp)?,
            None => false,
        };
        let run = || {
            crate::exec::blocking(req, || {
                execute_admitted(ctx, principal, req, payload.clone())
            })
        };
        let (mut resp, mut out) = run();
        // A bad copy here: repaired from the first other member whose copy
        // reads (the next one's may be bad too), then run again; with no
        // good copy left the checksum error stands.
        if let (Err(e), Some((_, oid))) = (&resp.result, req.cmd.object())
            && e.code == ErrorCode::Checksum
            && self.repaired(ctx, view, (group, &chain.members), oid).await
        {
            // The repaired copy came with the member's stamp: this change
            // is marked again before it runs.
            if marked && let Some(obj) = stamp::marked_object(&req.cmd) {
                stamp::mark(ctx, obj, stamp)?;
            }
            (resp, out) = run();
        }
        match &resp.result {
            Ok(r) => {
                // A create: marked once the object is there (a mark that
                // fails leaves it unmarked, which a fill always copies).
                let created = !marked && changes(req) && stamp::marked_object(&req.cmd).is_some();
                if created
                    && let Some(obj) = stamp::marked_object(&req.cmd)
                    && let Err(e) = stamp::mark(ctx, obj, stamp)
                {
                    tracing::warn!(group, oid = obj.1, error = %e, "a created object left unmarked");
                }
                let r = r.clone();
                Ok(Ran::Done(resp, out, r, created))
            }
            Err(e) => {
                // A failure after part of the change was made (the set list
                // after the command, a full device mid-write): the members
                // get the head's whole object, so none differs from it. A
                // bound passed by an attribute change alone changed nothing.
                let attrs_only = matches!(
                    req.cmd,
                    Command::SetAttributes { .. } | Command::Cas { .. } | Command::FetchAdd { .. }
                );
                if changes(req)
                    && (matches!(
                        e.code,
                        ErrorCode::NoSpace
                            | ErrorCode::Io
                            | ErrorCode::ReadOnly
                            | ErrorCode::Failed
                    ) || (e.code == ErrorCode::Bound && !attrs_only))
                    && let Some((_, oid)) = req.cmd.object()
                {
                    self.resync(ctx, view, group, oid).await?;
                }
                Ok(Ran::Answer(resp, out))
            }
        }
    }

    /// Makes this head's bad copy of `oid` again from the first other
    /// member of `members` whose copy reads; whether it could.
    async fn repaired(
        &self,
        ctx: &Ctx,
        view: &ChainView,
        (group, members): (u32, &[u32]),
        oid: u64,
    ) -> bool {
        let Some(others) = members.get(1..).filter(|o| !o.is_empty()) else {
            return false;
        };
        match self.heal_head(ctx, view, (group, others), oid, false).await {
            Ok(_) => true,
            Err(why) => {
                tracing::error!(
                    group,
                    oid,
                    why,
                    "a bad copy at the head: no member's copy could repair it"
                );
                false
            }
        }
    }

    /// What a head does with a change it made that could not be passed
    /// down (`e`): a member that refused it as malformed gets the head's
    /// whole object (Ok: answered as made); one without room has it rolled
    /// back (ENOSPC); otherwise it is kept until it can go down (a retry,
    /// the next request on the object, or the resender) and answered Busy,
    /// or ENOSPC when a member has no room.
    pub(super) async fn not_passed_down(
        &self,
        ctx: &Ctx,
        (view, group): (&ChainView, u32),
        req: &Request,
        unsent: Unsent,
        e: WireError,
    ) -> Result<(), WireError> {
        if e.code == ErrorCode::BadRequest
            && let Some((_, oid)) = req.cmd.object()
            && self.resync(ctx, view, group, oid).await.is_ok()
        {
            return Ok(());
        }
        // No room on a member: the members after this head have rolled
        // the change back; so does the head, to its successor's copy, if
        // it is still head and that member still follows it (the chain may
        // have gained a joiner meanwhile). The object
        // then serves on, and the change is answered ENOSPC.
        if e.code == ErrorCode::NoSpace
            && let Some((_, oid)) = req.cmd.object()
            && let Some(next) = view.table.chain(group).and_then(|c| c.successor(self.me))
            && self.current().is_some_and(|(v, _)| {
                v.table.chain(group).is_some_and(|c| {
                    c.head() == Some(self.me) && c.successor(self.me) == Some(next)
                })
            })
        {
            match self.roll_back_to(ctx, group, oid, next).await {
                Ok(()) => return Err(e),
                Err(r) => {
                    tracing::warn!(group, oid, error = %r, "a change no room could take could not be rolled back here; kept")
                }
            }
        }
        if let Some(obj) = req.cmd.object() {
            lock(&self.unsent).entry(obj).or_default().push(unsent);
        }
        let code = if e.code == ErrorCode::NoSpace {
            ErrorCode::NoSpace
        } else {
            ErrorCode::Busy
        };
        Err(WireError::new(
            code,
            format!("the change is made but not yet down the chain: {e}"),
        ))
    }
}
