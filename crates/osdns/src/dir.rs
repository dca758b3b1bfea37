//! Directory entries on the hash and list pages of a directory object, and
//! the two protocols that change them (Ali et al. §V-B, §VI).
//!
//! Atomic protocol. Insert is one CAS of the name's hash slot from empty to
//! the entry; the old value returned on failure tells "name exists" (same
//! name) from "collision" (another name). Remove is one CAS from the exact
//! entry to empty. Everything else — a collision, a chained entry — takes
//! the bucket's lock (a lease on the bucket-lock page), marks the head (so
//! fast paths, which compare against unmarked values, fail and wait) and
//! edits the chain with single-attribute writes, each of which switches
//! what is reachable in one step: a new entry is written to a free list
//! slot before the head links it, and an entry is unlinked before its slot
//! is cleared. A crash leaves at worst an unreachable list slot, a mark or
//! a lock, which fsck clears and leases let other clients take over.
//!
//! Lock protocol. Take the directory lock (a lease by CAS), look the name
//! up, write, release: four round trips, serialising every change.
//!
//! Both check the directory's "dying" mark after inserting (piggybacked on
//! the inserting command), which is how an rmdir racing with a create is
//! decided: see `OsdFs::rmdir`.

use std::time::Duration;

use proto::clock::now_ns;
use proto::layout::data_oid;
use proto::msg::AttrKey;

use crate::error::{Errno, NsError, Result};
use crate::format::*;
use crate::fs::{DirRef, OsdFs};
use crate::transport::pick;

/// Result of an insert: done, or the entry already holding the name.
pub type Insert = std::result::Result<(), Dirent>;

/// Where an entry was found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pos {
    Head,
    List(u32),
}

/// Why a chain walk stopped early.
enum Walk {
    /// A list slot on the chain was empty (slot number): a lockless walk
    /// raced a remove and should start again.
    Torn(u32),
    /// A request failed, or the chain is damaged.
    Failed(NsError),
}

impl From<NsError> for Walk {
    fn from(e: NsError) -> Self {
        Walk::Failed(e)
    }
}

impl Walk {
    /// The error to report (a torn walk that never settled is reported as
    /// damage, naming the slot).
    fn into_error(self, d: &DirRef) -> NsError {
        match self {
            Walk::Failed(e) => e,
            Walk::Torn(n) => crate::error::corrupt(format!(
                "directory {}: chain points at empty list slot {n}",
                d.ino
            )),
        }
    }
}

/// A locked chain: the head as last written and how to write it.
struct Chain {
    h: u32,
    /// Current bytes of the head (marked in the atomic protocol).
    raw: Vec<u8>,
    head: Slot,
    atomic: bool,
}

/// The set list that records a directory's entries changed now.
fn stamp() -> proto::msg::AttrList {
    vec![(DIR_CHANGED, now_ns().to_le_bytes().to_vec())]
}

impl OsdFs {
    pub(crate) fn lease(&self) -> Lease {
        Lease {
            version: FORMAT_VERSION,
            owner: self.owner,
            expiry_ms: proto::clock::now_ms() + self.lease.as_millis() as u64,
        }
    }

    /// Takes the lease at `key` (waiting, or taking over an expired one);
    /// returns its bytes (to release with) and the `get` attributes read
    /// right after taking it.
    pub(crate) async fn acquire(
        &self,
        osd: u32,
        oid: u64,
        key: AttrKey,
        get: Vec<AttrKey>,
    ) -> Result<(Vec<u8>, proto::msg::AttrList)> {
        let mut wait = Duration::from_micros(50);
        loop {
            let mine = self.lease().encode();
            let (ok, old, attrs) = self
                .osds
                .cas(osd, oid, key, Vec::new(), mine.clone(), get.clone())
                .await?;
            if ok {
                return Ok((mine, attrs));
            }
            if let Ok(l) = Lease::decode(&old)
                && l.expiry_ms < proto::clock::now_ms()
            {
                let (ok, _, attrs) = self
                    .osds
                    .cas(osd, oid, key, old, mine.clone(), get.clone())
                    .await?;
                if ok {
                    tracing::info!(oid, ?key, "took over an expired lease");
                    return Ok((mine, attrs));
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(5));
        }
    }

    /// Releases a lease taken with [`OsdFs::acquire`] (a lease someone took
    /// over is left alone).
    pub(crate) async fn release(
        &self,
        osd: u32,
        oid: u64,
        key: AttrKey,
        held: Vec<u8>,
    ) -> Result<()> {
        self.release_stamped(osd, oid, key, held, false).await
    }

    /// [`OsdFs::release`] of a directory's lock that also records, when
    /// `changed`, that its entries changed now (its mtime and ctime) — in
    /// the same request, applied only if the release swaps.
    async fn release_stamped(
        &self,
        osd: u32,
        oid: u64,
        key: AttrKey,
        held: Vec<u8>,
        changed: bool,
    ) -> Result<()> {
        let set = if changed { stamp() } else { Vec::new() };
        self.osds
            .cas_and_set(osd, oid, (key, held, Vec::new()), Vec::new(), set)
            .await
            .map(|_| ())
    }

    /// Finds `name` in `d`: the entry, or `None`. No locks (as Ali et al.
    /// argues for lookups): a chain walk that meets a list slot a
    /// concurrent remove just freed starts again from the head, so an entry
    /// present for the whole lookup is always found.
    pub async fn find(&self, d: &DirRef, name: &str) -> Result<Option<Dirent>> {
        let h = d.header.hash.slot(name);
        let mut torn = 0u32;
        loop {
            let raw = self.osds.get1(d.osd, data_oid(d.ino), hash_key(h)).await?;
            if raw.is_empty() {
                return Ok(None);
            }
            let head = Slot::decode(&raw)?;
            match self.walk(d, &head, name, false).await {
                Ok(found) => return Ok(found.map(|(_, s, _)| s.ent)),
                Err(Walk::Torn(n)) if torn < 64 => {
                    torn += 1;
                    tracing::debug!(dir = d.ino, slot = n, "chain changed under a lookup; again");
                    tokio::time::sleep(Duration::from_micros(50 << torn.min(6))).await;
                }
                Err(e) => return Err(e.into_error(d)),
            }
        }
    }

    /// Follows the chain from `head` looking for `name`: (position, slot,
    /// position of its predecessor's slot when in the list). `locked` says
    /// the caller holds the chain's lock, so a freed slot on the chain is
    /// damage rather than a concurrent remove.
    async fn walk(
        &self,
        d: &DirRef,
        head: &Slot,
        name: &str,
        locked: bool,
    ) -> std::result::Result<Option<(Pos, Slot, Option<(u32, Slot)>)>, Walk> {
        if head.ent.name == name {
            return Ok(Some((Pos::Head, head.clone(), None)));
        }
        let mut prev: Option<(u32, Slot)> = None;
        let mut n = head.next;
        let mut hops = 0u32;
        while n != 0 {
            let raw = self.osds.get1(d.osd, data_oid(d.ino), list_key(n)).await?;
            if raw.is_empty() {
                return Err(if locked {
                    Walk::Failed(crate::error::corrupt(format!(
                        "directory {}: chain points at empty list slot {n}",
                        d.ino
                    )))
                } else {
                    Walk::Torn(n)
                });
            }
            let s = Slot::decode(&raw)?;
            if s.ent.name == name {
                return Ok(Some((Pos::List(n), s, prev)));
            }
            hops += 1;
            if hops > 1 << 20 {
                return Err(Walk::Failed(crate::error::corrupt(format!(
                    "directory {}: chain loops",
                    d.ino
                ))));
            }
            let next = s.next;
            prev = Some((n, s));
            n = next;
        }
        Ok(None)
    }

    /// Inserts `ent` into `d` with the directory's protocol (and records
    /// the change time of `d`).
    pub async fn insert(&self, d: &DirRef, ent: &Dirent) -> Result<Insert> {
        loop {
            let r = match d.header.protocol {
                Protocol::Atomic => self.insert_atomic(d, ent).await?,
                Protocol::Lock => self.insert_locked(d, ent).await?,
            };
            match r {
                Some(r) => return Ok(r),
                // The directory was being removed and is back: try again.
                None => continue,
            }
        }
    }

    /// After an entry went in: if the directory is being removed, waits for
    /// the outcome. `Ok(())` = keep it; ENOENT = the directory is gone.
    async fn settle_dying(&self, d: &DirRef, attrs: &proto::msg::AttrList) -> Result<()> {
        if pick(attrs, DIR_DYING).is_empty() {
            return Ok(());
        }
        if self.wait_dying(d).await? {
            Ok(())
        } else {
            Err(NsError::new(
                Errno::NoEnt,
                format!("directory {} was removed", d.ino),
            ))
        }
    }

    /// Waits while `d` is marked dying: true when it lives on (the rmdir
    /// found it not empty, or its owner died and the mark expired), false
    /// when it is gone.
    pub(crate) async fn wait_dying(&self, d: &DirRef) -> Result<bool> {
        let oid = data_oid(d.ino);
        loop {
            let v = match self.osds.get1(d.osd, oid, DIR_DYING).await {
                Err(e) if e.is(crate::error::Errno::NoEnt) => return Ok(false),
                r => r?,
            };
            if v.is_empty() {
                return Ok(true);
            }
            if let Ok(l) = Lease::decode(&v)
                && l.expiry_ms < proto::clock::now_ms()
            {
                let (ok, ..) = self
                    .osds
                    .cas(d.osd, oid, DIR_DYING, v, Vec::new(), Vec::new())
                    .await?;
                if ok {
                    return Ok(true);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Atomic protocol: one CAS when the slot is free; `None` = retry.
    async fn insert_atomic(&self, d: &DirRef, ent: &Dirent) -> Result<Option<Insert>> {
        let oid = data_oid(d.ino);
        let h = d.header.hash.slot(&ent.name);
        let new = Slot::new(ent.clone()).encode();
        let (ok, old, attrs) = self
            .osds
            .cas_and_set(
                d.osd,
                oid,
                (hash_key(h), Vec::new(), new),
                vec![DIR_DYING],
                stamp(),
            )
            .await?;
        if ok {
            self.settle_dying(d, &attrs).await?;
            return Ok(Some(Ok(())));
        }
        let s = Slot::decode(&old)?;
        if s.ent.name == ent.name {
            return Ok(Some(Err(s.ent)));
        }
        // Collision: the chain path under the bucket lock.
        let key = bucket_lock_key(h);
        let (held, _) = self.acquire(d.osd, oid, key, Vec::new()).await?;
        let r = self.chain_insert(d, h, ent, true).await;
        let changed = matches!(r, Ok(Ok(())));
        self.release_stamped(d.osd, oid, key, held, changed).await?;
        r.map(Some)
    }

    /// Lock protocol: lock, look up, insert, unlock; `None` = retry.
    async fn insert_locked(&self, d: &DirRef, ent: &Dirent) -> Result<Option<Insert>> {
        let oid = data_oid(d.ino);
        let (held, attrs) = self.acquire(d.osd, oid, DIR_LOCK, vec![DIR_DYING]).await?;
        if !pick(&attrs, DIR_DYING).is_empty() {
            self.release(d.osd, oid, DIR_LOCK, held).await?;
            return if self.wait_dying(d).await? {
                Ok(None)
            } else {
                Err(NsError::new(
                    Errno::NoEnt,
                    format!("directory {} was removed", d.ino),
                ))
            };
        }
        let h = d.header.hash.slot(&ent.name);
        let r = self.chain_insert(d, h, ent, false).await;
        let changed = matches!(r, Ok(Ok(())));
        self.release_stamped(d.osd, oid, DIR_LOCK, held, changed)
            .await?;
        r.map(Some)
    }

    /// Reads (and in the atomic protocol marks) the head of chain `h`;
    /// `None` when the slot is empty.
    async fn open_chain(&self, d: &DirRef, h: u32, atomic: bool) -> Result<Option<Chain>> {
        let oid = data_oid(d.ino);
        loop {
            let raw = self.osds.get1(d.osd, oid, hash_key(h)).await?;
            if raw.is_empty() {
                return Ok(None);
            }
            let mut head = Slot::decode(&raw)?;
            if !atomic || head.mark {
                // Lock protocol: the directory lock is enough. A marked head
                // under our bucket lock was left by a dead owner: ours now.
                return Ok(Some(Chain {
                    h,
                    raw,
                    head,
                    atomic,
                }));
            }
            head.mark = true;
            let marked = head.encode();
            let (ok, ..) = self
                .osds
                .cas(d.osd, oid, hash_key(h), raw, marked.clone(), Vec::new())
                .await?;
            if ok {
                return Ok(Some(Chain {
                    h,
                    raw: marked,
                    head,
                    atomic,
                }));
            }
            // A fast-path remove changed the head: read again.
        }
    }

    /// Writes the chain's head (unmarked) and returns the attributes asked for.
    async fn write_head(
        &self,
        d: &DirRef,
        c: &Chain,
        new: Option<Slot>,
        get: Vec<AttrKey>,
    ) -> Result<proto::msg::AttrList> {
        let oid = data_oid(d.ino);
        let bytes = new.map(|mut s| {
            s.mark = false;
            s.encode()
        });
        let bytes = bytes.unwrap_or_default();
        if c.atomic {
            let (ok, old, attrs) = self
                .osds
                .cas(d.osd, oid, hash_key(c.h), c.raw.clone(), bytes, get)
                .await?;
            if !ok {
                return Err(NsError::new(
                    Errno::Io,
                    format!(
                        "directory {}: chain {} changed under its lock (now {} bytes); lease too short?",
                        d.ino,
                        c.h,
                        old.len()
                    ),
                ));
            }
            Ok(attrs)
        } else {
            self.osds
                .set(d.osd, oid, vec![(hash_key(c.h), bytes)])
                .await?;
            if get.is_empty() {
                Ok(Vec::new())
            } else {
                self.osds.get(d.osd, oid, get).await
            }
        }
    }

    /// Takes a free list slot and writes `s` there.
    async fn alloc_list_slot(&self, d: &DirRef, s: &Slot) -> Result<u32> {
        let oid = data_oid(d.ino);
        let bytes = s.encode();
        loop {
            let n = self.osds.fetch_add(d.osd, oid, DIR_LIST_NEXT, 1).await?;
            let slot = (n % u64::from(u32::MAX)) as u32 + 1;
            let (ok, ..) = self
                .osds
                .cas(
                    d.osd,
                    oid,
                    list_key(slot),
                    Vec::new(),
                    bytes.clone(),
                    Vec::new(),
                )
                .await?;
            if ok {
                return Ok(slot);
            }
        }
    }

    /// Inserts under the bucket lock (atomic) or the directory lock.
    async fn chain_insert(&self, d: &DirRef, h: u32, ent: &Dirent, atomic: bool) -> Result<Insert> {
        let oid = data_oid(d.ino);
        loop {
            let Some(c) = self.open_chain(d, h, atomic).await? else {
                let new = Slot::new(ent.clone()).encode();
                if atomic {
                    let (ok, _, attrs) = self
                        .osds
                        .cas(d.osd, oid, hash_key(h), Vec::new(), new, vec![DIR_DYING])
                        .await?;
                    if !ok {
                        continue;
                    }
                    self.settle_dying(d, &attrs).await?;
                } else {
                    self.osds.set(d.osd, oid, vec![(hash_key(h), new)]).await?;
                }
                return Ok(Ok(()));
            };
            if let Some((_, s, _)) = self
                .walk(d, &c.head, &ent.name, true)
                .await
                .map_err(|e| e.into_error(d))?
            {
                if atomic {
                    self.write_head(d, &c, Some(c.head.clone()), Vec::new())
                        .await?;
                }
                return Ok(Err(s.ent));
            }
            let slot = self
                .alloc_list_slot(
                    d,
                    &Slot {
                        mark: false,
                        next: c.head.next,
                        ent: ent.clone(),
                    },
                )
                .await?;
            let linked = Slot {
                mark: false,
                next: slot,
                ent: c.head.ent.clone(),
            };
            let want = if atomic { vec![DIR_DYING] } else { Vec::new() };
            let attrs = self.write_head(d, &c, Some(linked), want).await?;
            self.settle_dying(d, &attrs).await?;
            return Ok(Ok(()));
        }
    }

    /// Removes exactly `ent` (same name and inode) from `d`; false when it
    /// is not there (already removed, or the name now names another inode).
    pub async fn remove(&self, d: &DirRef, ent: &Dirent) -> Result<bool> {
        let oid = data_oid(d.ino);
        let h = d.header.hash.slot(&ent.name);
        match d.header.protocol {
            Protocol::Atomic => {
                let exact = Slot::new(ent.clone()).encode();
                let (ok, old, _) = self
                    .osds
                    .cas_and_set(
                        d.osd,
                        oid,
                        (hash_key(h), exact, Vec::new()),
                        Vec::new(),
                        stamp(),
                    )
                    .await?;
                if ok {
                    return Ok(true);
                }
                if old.is_empty() {
                    return Ok(false);
                }
                self.chain_remove_locked(d, h, ent, None).await
            }
            Protocol::Lock => self.chain_remove_locked(d, h, ent, None).await,
        }
    }

    /// [`OsdFs::chain_remove`] under the protocol's lock: the bucket's
    /// (atomic) or the directory's (lock).
    async fn chain_remove_locked(
        &self,
        d: &DirRef,
        h: u32,
        ent: &Dirent,
        swap: Option<&Dirent>,
    ) -> Result<bool> {
        let oid = data_oid(d.ino);
        let key = match d.header.protocol {
            Protocol::Atomic => bucket_lock_key(h),
            Protocol::Lock => DIR_LOCK,
        };
        let (held, _) = self.acquire(d.osd, oid, key, Vec::new()).await?;
        let r = self.chain_remove(d, h, ent, swap).await;
        let changed = matches!(r, Ok(true));
        self.release_stamped(d.osd, oid, key, held, changed).await?;
        r
    }

    /// Replaces entry `old` with `new` (same name) in place; false when
    /// `old` is no longer there.
    pub async fn replace(&self, d: &DirRef, old: &Dirent, new: &Dirent) -> Result<bool> {
        let oid = data_oid(d.ino);
        let h = d.header.hash.slot(&old.name);
        match d.header.protocol {
            Protocol::Atomic => {
                let (ok, cur, _) = self
                    .osds
                    .cas_and_set(
                        d.osd,
                        oid,
                        (
                            hash_key(h),
                            Slot::new(old.clone()).encode(),
                            Slot::new(new.clone()).encode(),
                        ),
                        Vec::new(),
                        stamp(),
                    )
                    .await?;
                if ok {
                    return Ok(true);
                }
                if cur.is_empty() {
                    return Ok(false);
                }
                self.chain_remove_locked(d, h, old, Some(new)).await
            }
            Protocol::Lock => self.chain_remove_locked(d, h, old, Some(new)).await,
        }
    }

    /// Under the chain's lock: removes `ent`, or swaps it for `swap`.
    async fn chain_remove(
        &self,
        d: &DirRef,
        h: u32,
        ent: &Dirent,
        swap: Option<&Dirent>,
    ) -> Result<bool> {
        let oid = data_oid(d.ino);
        let atomic = d.header.protocol == Protocol::Atomic;
        let Some(c) = self.open_chain(d, h, atomic).await? else {
            return Ok(false);
        };
        let found = self
            .walk(d, &c.head, &ent.name, true)
            .await
            .map_err(|e| e.into_error(d))?;
        let unmark = |c: &Chain| Some(c.head.clone());
        let Some((pos, s, prev)) = found.filter(|(_, s, _)| s.ent == *ent) else {
            if atomic {
                self.write_head(d, &c, unmark(&c), Vec::new()).await?;
            }
            return Ok(false);
        };
        match (pos, swap) {
            (Pos::Head, Some(new)) => {
                let head = Slot {
                    ent: new.clone(),
                    ..c.head.clone()
                };
                self.write_head(d, &c, Some(head), Vec::new()).await?;
            }
            (Pos::List(n), Some(new)) => {
                let v = Slot {
                    mark: false,
                    next: s.next,
                    ent: new.clone(),
                };
                self.osds
                    .set(d.osd, oid, vec![(list_key(n), v.encode())])
                    .await?;
                if atomic {
                    self.write_head(d, &c, unmark(&c), Vec::new()).await?;
                }
            }
            (Pos::Head, None) if c.head.next == 0 => {
                self.write_head(d, &c, None, Vec::new()).await?;
            }
            (Pos::Head, None) => {
                // Promote the second entry into the head, then free its slot.
                let n = c.head.next;
                let raw = self.osds.get1(d.osd, oid, list_key(n)).await?;
                let second = Slot::decode(&raw)?;
                self.write_head(d, &c, Some(second), Vec::new()).await?;
                self.osds
                    .set(d.osd, oid, vec![(list_key(n), Vec::new())])
                    .await?;
            }
            (Pos::List(n), None) => {
                match prev {
                    None => {
                        let head = Slot {
                            next: s.next,
                            ..c.head.clone()
                        };
                        self.write_head(d, &c, Some(head), Vec::new()).await?;
                    }
                    Some((p, ps)) => {
                        let v = Slot { next: s.next, ..ps };
                        self.osds
                            .set(d.osd, oid, vec![(list_key(p), v.encode())])
                            .await?;
                        if atomic {
                            self.write_head(d, &c, unmark(&c), Vec::new()).await?;
                        }
                    }
                }
                self.osds
                    .set(d.osd, oid, vec![(list_key(n), Vec::new())])
                    .await?;
            }
        }
        Ok(true)
    }

    /// One page of `d`'s entries: hash slots after `after` (at most `max`
    /// of them), each with its whole chain; and the cursor for the next
    /// page. A chain is never split across pages, so entries present for
    /// the whole listing appear exactly once.
    pub async fn readdir(
        &self,
        d: &DirRef,
        after: Option<u32>,
        max: u32,
    ) -> Result<(Vec<Dirent>, Option<u32>)> {
        let oid = data_oid(d.ino);
        let (heads, next) = self.osds.page(d.osd, oid, PAGE_HASH, after, max).await?;
        let mut out = Vec::with_capacity(heads.len());
        for (h, raw) in heads {
            let mut raw = raw;
            let mut torn = 0u32;
            loop {
                if raw.is_empty() {
                    break;
                }
                match self.chain_entries(d, Slot::decode(&raw)?).await {
                    Ok(v) => {
                        out.extend(v);
                        break;
                    }
                    Err(Walk::Torn(n)) if torn < 64 => {
                        // A remove freed a slot under us: list this chain
                        // again from its current head.
                        torn += 1;
                        tracing::debug!(
                            dir = d.ino,
                            slot = n,
                            "chain changed under readdir; again"
                        );
                        tokio::time::sleep(Duration::from_micros(50 << torn.min(6))).await;
                        raw = self.osds.get1(d.osd, oid, hash_key(h)).await?;
                    }
                    Err(e) => return Err(e.into_error(d)),
                }
            }
        }
        Ok((out, next))
    }

    /// Every entry of the chain starting at `head` (no lock: a freed slot
    /// on the way is reported as torn).
    async fn chain_entries(
        &self,
        d: &DirRef,
        head: Slot,
    ) -> std::result::Result<Vec<Dirent>, Walk> {
        let oid = data_oid(d.ino);
        let mut n = head.next;
        let mut out = vec![head.ent];
        while n != 0 {
            let raw = self.osds.get1(d.osd, oid, list_key(n)).await?;
            if raw.is_empty() {
                return Err(Walk::Torn(n));
            }
            let s = Slot::decode(&raw)?;
            n = s.next;
            out.push(s.ent);
            if out.len() > 1 << 20 {
                return Err(Walk::Failed(crate::error::corrupt(format!(
                    "directory {}: chain loops",
                    d.ino
                ))));
            }
        }
        Ok(out)
    }

    /// Every entry of `d`.
    pub async fn readdir_all(&self, d: &DirRef) -> Result<Vec<Dirent>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (v, next) = self.readdir(d, after, 1024).await?;
            out.extend(v);
            match next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// Whether `d` has no entries (one round trip).
    pub async fn is_empty(&self, d: &DirRef) -> Result<bool> {
        let (v, _) = self
            .osds
            .page(d.osd, data_oid(d.ino), PAGE_HASH, None, 1)
            .await?;
        Ok(v.is_empty())
    }
}
