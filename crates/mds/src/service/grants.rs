//! Capabilities and server-driven prefetch: the grants a caller gets for a
//! file's objects, and the numerically closest neighbours (with one range
//! capability per run of equal rights) a lookup or open carries along.
use posix::perm::{self, R, W};
use proto::layout::{DATA_PARTITION, data_oid};
use proto::mds::{Creds, Entry, Found, Grant, MdsError, MdsReply};
use proto::placement::OsdMap;

use super::{Mds, READ_RIGHTS, WRITE_RIGHTS};
use crate::records::{Inode, Records};

impl Mds {
    /// Capabilities for object ids `[lo, hi]` on every OSD of `map` we
    /// hold a key for, issued to the principal of the request being
    /// answered ([`super::auth::holder`]).
    pub fn grant(&self, map: &OsdMap, lo: u64, hi: u64, rights: u32, version: u64) -> Grant {
        self.grant_on(map.osds.iter().map(|o| o.id), lo, hi, rights, version)
    }

    /// [`Mds::grant`] for the OSDs `osds` only.
    fn grant_on(
        &self,
        osds: impl Iterator<Item = u32>,
        lo: u64,
        hi: u64,
        rights: u32,
        version: u64,
    ) -> Grant {
        let expiry_ms = proto::clock::now_ms() + self.cfg.cap_ttl_secs * 1000;
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let caps = osds
            .filter_map(|id| {
                let ring = keys.get(&id)?;
                let (kv, key) = ring.newest()?;
                Some((
                    id,
                    proto::CapSpec {
                        partition: DATA_PARTITION,
                        oid_lo: lo,
                        oid_hi: hi,
                        rights,
                        expiry_ms,
                        version,
                        holder: super::auth::holder(),
                    }
                    .sign(key, kv, id),
                ))
            })
            .collect();
        Grant {
            lo,
            hi,
            rights,
            expiry_ms,
            caps,
        }
    }

    /// `held`: the caller's session holds the file open (for writing, if
    /// `write`): the rights of that open, whatever the bits say now.
    pub(super) fn rights_for(i: &Inode, c: &Creds, write: bool, held: bool) -> u32 {
        let mut r = 0;
        if held || perm::allowed(&i.attr, c, R) {
            r |= READ_RIGHTS;
        }
        if write && (held || perm::allowed(&i.attr, c, W)) {
            r |= WRITE_RIGHTS;
        }
        r
    }

    pub(super) fn entry(i: &Inode) -> Entry {
        Entry {
            parent: i.parent,
            name: i.name.clone(),
            attr: i.attr.clone(),
            layout: i.layout.clone(),
        }
    }

    /// A lookup-style answer with the entry only (no capabilities, no prefetch).
    pub(super) fn bare(i: &Inode) -> Found {
        Found {
            entry: Self::entry(i),
            grants: Vec::new(),
            prefetch: Vec::new(),
            prefetch_grants: Vec::new(),
            dir: None,
        }
    }

    /// Grants for one file's objects: each object set's capabilities for
    /// the OSDs its copies are recorded on (fresh or stale), not for every
    /// OSD of the map — an open signs and carries stripes × copies of
    /// them, not OSDs × object sets. A layout placed by its map alone (no
    /// records) gets them for every OSD of the map.
    pub(super) fn file_grants(
        &self,
        map: &OsdMap,
        i: &Inode,
        rights: u32,
        version: u64,
    ) -> Vec<Grant> {
        match (&i.layout, rights) {
            (Some(l), r) if r != 0 => l
                .objsets
                .iter()
                .enumerate()
                .map(|(k, &oid)| match l.homes.get(k) {
                    Some(h) => {
                        let osds: std::collections::BTreeSet<u32> = h
                            .stripes
                            .iter()
                            .flat_map(|c| c.fresh.iter().chain(&c.stale).copied())
                            .collect();
                        self.grant_on(osds.into_iter(), oid, oid, r, version)
                    }
                    None => self.grant(map, oid, oid, r, version),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A file's entry with its grants, from a fresh snapshot, no prefetch:
    /// with write rights when `write` says so, or (`None`) when the caller
    /// may write it (`held`: as in [`Mds::rights_for`]).
    pub(super) fn file_answer(
        &self,
        c: &Creds,
        ino: u64,
        write: Option<bool>,
        held: bool,
    ) -> Result<MdsReply, MdsError> {
        let snap = self.kv.read()?;
        let i = snap.live_inode(ino)?;
        let write = write.unwrap_or_else(|| perm::allowed(&i.attr, c, W));
        Ok(MdsReply::Found(Box::new(self.found(
            &snap,
            c,
            i,
            (write, held),
            0,
        )?)))
    }

    /// The entry and write capabilities of each file a DIR OPS made (as a
    /// CREATE answers them, without its range grants for reading): the
    /// holder writes them without an OPEN. The counters and the OSD map are
    /// read once for the batch. The changes are made by now, so a file
    /// that cannot be read back is only left out (its writer then asks
    /// with an OPEN).
    pub(super) fn made_answers(&self, c: &Creds, made: &[u64]) -> Vec<Found> {
        let read = || -> Result<_, MdsError> {
            let snap = self.kv.read()?;
            let st = snap.state()?;
            let map = snap.map(st.map_epoch)?.unwrap_or_default();
            Ok((snap, st, map))
        };
        let Ok((snap, st, map)) = read() else {
            return Vec::new();
        };
        made.iter()
            .filter_map(|&ino| {
                let i = snap.live_inode(ino).ok()?;
                let rights = Self::rights_for(&i, c, true, true);
                let mut f = Self::bare(&i);
                f.grants = self.file_grants(&map, &i, rights, st.cap_version);
                Some(f)
            })
            .collect()
    }

    /// A lookup-style answer with prefetched neighbours.
    pub(super) fn found(
        &self,
        v: &impl Records,
        c: &Creds,
        i: Inode,
        (write, held): (bool, bool),
        prefetch: u32,
    ) -> Result<Found, MdsError> {
        let n = prefetch.min(self.cfg.prefetch_max) as usize;
        if n == 0 && i.layout.is_none() {
            // Nothing to sign: skip reading the counters and the map.
            return Ok(Self::bare(&i));
        }
        let st = v.state()?;
        let map = v.map(st.map_epoch)?.unwrap_or_default();
        let rights = Self::rights_for(&i, c, write, held);
        let grants = self.file_grants(&map, &i, rights, st.cap_version);
        let mut near = v.neighbours(i.attr.ino, n)?;
        if c.uid != 0 && !near.is_empty() {
            // A neighbour is named only where the caller could have found
            // it by a path walk and a listing of its directory.
            let mut memo = std::collections::HashMap::new();
            let mut keep = Vec::with_capacity(near.len());
            for x in near {
                if super::search::visible(v, c, &x, &mut memo)? {
                    keep.push(x);
                }
            }
            near = keep;
        }
        // Not from a directory another session holds the lease of: its
        // names are the holder's to answer for (its changes, and a file's
        // data kept by a close under it, may not be here yet).
        // (One lock; the caller's key, a MAC, only when a lease is held.)
        let leases = self.leases();
        if !near.is_empty() && leases.any() {
            let me = super::auth::caller_key();
            near.retain(|x| !leases.other_holds(x.parent, me));
        }
        drop(leases);
        near.sort_by_key(|x| x.attr.ino);
        // The entry itself joins the runs (its own grants come separately):
        // an unbroken run of neighbours goes through it when its rights agree.
        let mut runs: Vec<&Inode> = near.iter().collect();
        let at = runs.partition_point(|x| x.attr.ino < i.attr.ino);
        runs.insert(at, &i);
        // One range capability per run of files whose read rights agree and
        // whose ids are consecutive: a range never covers an id that is not
        // one of these entries (a file not prefetched, another file's extra
        // object set from the same id space, or a file made later — ids are
        // never reused, so a run with no gap cannot gain one). Directories
        // and symlinks have no objects: an unbroken run goes through them.
        let mut prefetch_grants = Vec::new();
        let mut run: Option<(u64, u64, u32)> = None;
        for x in runs {
            let oid = data_oid(x.attr.ino);
            if x.layout.is_none() {
                if let Some((lo, hi, r)) = run
                    && hi.checked_add(1) == Some(oid)
                {
                    run = Some((lo, oid, r));
                }
                continue;
            }
            let r = Self::rights_for(x, c, false, false);
            run = match run {
                Some((lo, hi, rr)) if rr == r && hi.checked_add(1) == Some(oid) => {
                    Some((lo, oid, r))
                }
                Some((lo, hi, rr)) => {
                    if rr != 0 {
                        prefetch_grants.push(self.grant(&map, lo, hi, rr, st.cap_version));
                    }
                    Some((oid, oid, r))
                }
                None => Some((oid, oid, r)),
            };
        }
        if let Some((lo, hi, r)) = run
            && r != 0
        {
            prefetch_grants.push(self.grant(&map, lo, hi, r, st.cap_version));
        }
        Ok(Found {
            entry: Self::entry(&i),
            grants,
            prefetch: near.iter().map(Self::entry).collect(),
            prefetch_grants,
            dir: None,
        })
    }
}
