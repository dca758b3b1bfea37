//! Scrub (copies compared by digest, shallow or deep) and the counts
//! behind `tessera status`.

use std::collections::HashMap;

use bytes::Bytes;
use net::ConnError;
use proto::layout::DATA_PARTITION;
use proto::mds::{
    Creds, Errno, FileKind, MdsError, MdsReply, NamespaceMode, ROOT_INO, Redundancy, ScrubReport,
};
use proto::placement::OsdMap;
use proto::{Command, ErrorCode};

use crate::records::Records;
use crate::service::{Mds, err};

impl Mds {
    /// The redundancy counts of the last pass.
    pub fn redundancy(&self) -> Redundancy {
        let rec = self.rec();
        Redundancy {
            scrub_unchecked: rec.scrub_unchecked,
            ..rec.counts.clone()
        }
    }

    /// Compares the copies of every stripe object under `ino` (a file or a
    /// whole subtree) and repairs the ones that differ from the majority
    /// (by size, and with `deep` by content digest): they are marked stale
    /// and re-copied at once.
    pub async fn scrub(&self, ino: u64, deep: bool) -> Result<ScrubReport, MdsError> {
        if self.namespace == NamespaceMode::Osd {
            // Copies kept by replica chains: every group, whatever `ino`.
            let rep = self.chain_scrub(deep).await?;
            self.rec().scrub_unchecked = rep.unchecked;
            return Ok(rep);
        }
        let files = self.files_under(ino)?;
        let map = self.current_map()?;
        let up = self.up_osds();
        let mut rep = ScrubReport::default();
        for f in files {
            let Some(i) = self.kv.read()?.inode(f)? else {
                continue;
            };
            let Some(l) = i.layout.clone() else { continue };
            let mut bad_copies = Vec::new();
            for (set, h) in l.homes.iter().enumerate() {
                let oid = l.objsets[set];
                for (j, c) in h.stripes.iter().enumerate() {
                    rep.objects += 1;
                    let mut seen: Vec<(u32, Option<(u64, u64)>)> = Vec::new();
                    // A fresh copy on an OSD that is down is not checked.
                    let down: Vec<u32> = c
                        .fresh
                        .iter()
                        .copied()
                        .filter(|o| !up.contains(o))
                        .collect();
                    let mut missed = !down.is_empty();
                    if missed {
                        rep.problems.push(format!(
                            "inode {f:#x} object {oid:#x} stripe {j}: copies on OSDs {down:?} are down; not checked"
                        ));
                    }
                    for &osd in c.fresh.iter().filter(|o| up.contains(o)) {
                        let d = match self.digest(&map, osd, oid, deep).await {
                            Ok(d) => d,
                            Err(e) => {
                                rep.problems.push(format!(
                                    "inode {f:#x} object {oid:#x} stripe {j}: copy on OSD {osd} not compared: {e}"
                                ));
                                missed = true;
                                continue;
                            }
                        };
                        rep.copies += 1;
                        if let Some((size, _)) = d
                            && deep
                        {
                            rep.bytes += size;
                        }
                        seen.push((osd, d));
                    }
                    if missed {
                        rep.unchecked += 1;
                    }
                    // The majority answer among the copies that could be read.
                    let mut votes: HashMap<(u64, u64), usize> = HashMap::new();
                    for (_, d) in &seen {
                        if let Some(d) = d {
                            *votes.entry(*d).or_default() += 1;
                        }
                    }
                    // A tie (two copies that disagree) is broken by the length
                    // the file's size gives the object; failing that it has no
                    // winner and is reported, not repaired.
                    let top = votes.values().copied().max().unwrap_or(0);
                    let tied: Vec<(u64, u64)> = votes
                        .iter()
                        .filter(|(_, n)| **n == top)
                        .map(|(d, _)| *d)
                        .collect();
                    let expected = l.spec.object_len(i.attr.size, set as u64, j as u32);
                    let good = match &tied[..] {
                        [d] => Some(*d),
                        many => {
                            let fit: Vec<&(u64, u64)> =
                                many.iter().filter(|d| d.0 == expected).collect();
                            match &fit[..] {
                                [d] => Some(**d),
                                _ => None,
                            }
                        }
                    };
                    // Every compared copy agrees: whatever an earlier scrub
                    // found here is over.
                    if good.is_some() && seen.iter().all(|(_, d)| *d == good) {
                        self.rec().inconsistent.remove(&(f, set as u64, j as u32));
                    }
                    for (osd, d) in &seen {
                        if *d != good || good.is_none() {
                            rep.inconsistent += 1;
                            let what = match d {
                                None => "unreadable (I/O or checksum error)".to_string(),
                                Some((size, hash)) => format!("size {size} digest {hash:#018x}"),
                            };
                            rep.problems.push(format!(
                                "inode {f:#x} object {oid:#x} stripe {j}: copy on OSD {osd} is {what}, others agree on {}",
                                good.map_or("nothing".into(), |(s, h)| format!("size {s} digest {h:#018x}"))
                            ));
                            if good.is_some() {
                                bad_copies.push((set as u64, j as u32, *osd));
                            } else {
                                self.rec().inconsistent.insert((f, set as u64, j as u32));
                            }
                        }
                    }
                }
            }
            if bad_copies.is_empty() {
                continue;
            }
            for &(set, j, _) in &bad_copies {
                self.rec().inconsistent.insert((f, set, j));
            }
            let n = bad_copies.len() as u64;
            let keys: Vec<(u64, u32)> = bad_copies.iter().map(|&(s, j, _)| (s, j)).collect();
            self.record_stale(f, bad_copies).await?;
            let left = self.recover_inode(f, &map, &up).await?;
            if !left {
                rep.repaired += n;
                let mut rec = self.rec();
                for (s, j) in keys {
                    rec.inconsistent.remove(&(f, s, j));
                }
            }
        }
        self.metrics.scrub_inconsistent.inc_by(rep.inconsistent);
        // Only a scrub of everything says whether everything was checked
        // (a subtree's must not clear an earlier warning).
        if ino == ROOT_INO {
            self.rec().scrub_unchecked = rep.unchecked;
        }
        Ok(rep)
    }

    /// SCRUB (root only).
    pub(in crate::service) async fn scrub_op(
        &self,
        c: &Creds,
        ino: u64,
        deep: bool,
    ) -> Result<MdsReply, MdsError> {
        if c.uid != 0 {
            return Err(err(Errno::Perm, "only root may scrub"));
        }
        Ok(MdsReply::Scrubbed(self.scrub(ino, deep).await?))
    }

    /// Size and (deep) digest of one copy; `None` when it cannot be read.
    /// `Ok(Some(size, digest))`, `Ok(None)` when the copy's bytes are bad
    /// (a checksum or device error), or `Err` when it could not be asked
    /// (unreachable, timed out, no lease): then it is not compared at all.
    pub(super) async fn digest(
        &self,
        map: &OsdMap,
        osd: u32,
        oid: u64,
        deep: bool,
    ) -> Result<Option<(u64, u64)>, String> {
        let client = self.osd_client(map, osd).map_err(|e| e.to_string())?;
        let cap = self.admin_cap(osd).map_err(|e| e.to_string())?;
        let cmd = Command::Digest {
            pid: DATA_PARTITION,
            oid,
            deep,
        };
        match client.run(Some(&cap), cmd, Bytes::new()).await {
            Ok(a) => match a.reply {
                proto::msg::Reply::Digest { size, hash, .. } => Ok(Some((size, hash))),
                other => Err(format!("DIGEST answered {other:?}")),
            },
            Err(ConnError::Remote(e)) if e.code == ErrorCode::NoObject => {
                Ok(Some((0, empty_hash(deep))))
            }
            Err(ConnError::Remote(e))
                if matches!(
                    e.code,
                    ErrorCode::Checksum | ErrorCode::Io | ErrorCode::Failed
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Files at or under `ino`.
    pub(super) fn files_under(&self, ino: u64) -> Result<Vec<u64>, MdsError> {
        let snap = self.kv.read()?;
        let mut out = Vec::new();
        let mut stack = vec![ino];
        while let Some(d) = stack.pop() {
            let Some(i) = snap.inode(d)? else { continue };
            match i.attr.kind {
                FileKind::Dir => {
                    let mut after: Option<String> = None;
                    loop {
                        let (entries, more) = snap.list_dir(d, after.as_deref(), 1024)?;
                        for (name, child, kind) in &entries {
                            match kind {
                                FileKind::Dir => stack.push(*child),
                                FileKind::File => out.push(*child),
                                _ => {}
                            }
                            after = Some(name.clone());
                        }
                        if !more {
                            break;
                        }
                    }
                }
                FileKind::File => out.push(d),
                _ => {}
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

/// A missing object's digest: an empty content.
pub(super) fn empty_hash(deep: bool) -> u64 {
    if deep {
        xxhash_rust::xxh3::xxh3_64(&[])
    } else {
        0
    }
}
