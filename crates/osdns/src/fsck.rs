//! `fsck --namespace`: finds and repairs what interrupted operations left
//! on the OSDs, and reports it. Run it with no clients changing the
//! namespace, or with a grace period longer than any operation (objects
//! younger than the grace are never called orphans: they may belong to a
//! create in flight).
//!
//! Passes: (1) scan every OSD's objects with their inode, intent and header
//! attributes; (2) finish or undo renames that left an intent; (3) walk the
//! tree from the root, checking every entry names an existing object
//! (removing any that does not), clearing leftover locks, marks, dying
//! marks and unreachable list slots; (4) remove objects no entry reaches;
//! (5) correct link counts and directories' parent pointers.

use std::collections::{HashMap, HashSet, VecDeque};

use proto::layout::{DATA_OID_TAG, data_oid};
use proto::mds::ROOT_INO;
use proto::msg::AttrKey;

use crate::error::Result;
use crate::format::*;
use crate::fs::{DirRef, OsdFs};
use crate::transport::pick;

/// What fsck found (and, when repairing, fixed).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Directories walked.
    pub dirs: u64,
    /// Files and symlinks reached.
    pub files: u64,
    /// Renames finished from their intent.
    pub renames_finished: u64,
    /// Renames undone (intent cleared).
    pub renames_undone: u64,
    /// Entries naming a missing object (removed).
    pub dangling: Vec<String>,
    /// Unreachable inodes whose objects were removed.
    pub orphans: Vec<u64>,
    /// Leftover directory, bucket and rename locks cleared.
    pub locks: u64,
    /// Chain heads left marked, unmarked.
    pub marks: u64,
    /// Directories left marked dying, cleared.
    pub dying: u64,
    /// List slots no chain reaches, freed.
    pub list_slots: u64,
    /// Link counts corrected.
    pub nlinks: u64,
    /// Parent pointers corrected.
    pub parents: u64,
    /// The inode counter (what it said, what was counted) when they
    /// differ: clients add their counts in batches, so this is not damage
    /// (set to the count when repairing).
    pub inode_counter: Option<(u64, u64)>,
    /// Whether what was found was also fixed (`--repair`).
    pub repaired: bool,
}

impl Report {
    /// Whether nothing needed repair.
    pub fn clean(&self) -> bool {
        self.renames_finished == 0
            && self.renames_undone == 0
            && self.dangling.is_empty()
            && self.orphans.is_empty()
            && self.locks == 0
            && self.marks == 0
            && self.dying == 0
            && self.list_slots == 0
            && self.nlinks == 0
            && self.parents == 0
    }

    /// Human-readable lines.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![format!(
            "{} directories, {} files and symlinks reached",
            self.dirs, self.files
        )];
        let fixed = self.repaired;
        let mut add = |n: u64, found: &str, done: &str| {
            if n > 0 {
                v.push(format!("{n} {}", if fixed { done } else { found }));
            }
        };
        let interrupted = "interrupted renames";
        add(
            self.renames_finished,
            &format!("{interrupted} to finish"),
            &format!("{interrupted} finished"),
        );
        add(
            self.renames_undone,
            &format!("{interrupted} to undo"),
            &format!("{interrupted} undone"),
        );
        let dangling = "entries naming missing objects";
        add(
            self.dangling.len() as u64,
            &format!("{dangling} found (not removed)"),
            &format!("{dangling} removed"),
        );
        add(
            self.orphans.len() as u64,
            "orphan inodes found (not removed)",
            "orphan inodes removed",
        );
        add(self.locks, "leftover locks found", "leftover locks cleared");
        add(
            self.marks,
            "marked chain heads found",
            "marked chain heads unmarked",
        );
        add(self.dying, "dying marks found", "dying marks cleared");
        let slots = "unreachable list slots";
        add(
            self.list_slots,
            &format!("{slots} found"),
            &format!("{slots} freed"),
        );
        add(
            self.nlinks,
            "wrong link counts found",
            "link counts corrected",
        );
        add(
            self.parents,
            "wrong parent pointers found",
            "parent pointers corrected",
        );
        if let Some((was, counted)) = self.inode_counter {
            v.push(format!(
                "inode counter said {was}, {counted} counted (clients add theirs in batches)"
            ));
        }
        for d in &self.dangling {
            v.push(format!("  dangling: {d}"));
        }
        for o in &self.orphans {
            v.push(format!("  orphan inode {o}"));
        }
        if self.clean() {
            v.push("namespace is consistent".into());
        }
        v
    }
}

struct Obj {
    attrs: proto::msg::AttrList,
}

/// The attributes the scan reads of every object.
const SCANNED: [AttrKey; 7] = [
    INODE,
    INTENT,
    DIR_HEADER,
    DIR_LOCK,
    DIR_DYING,
    CREATED,
    DIR_SUBDIRS,
];

/// Checks the namespace and, with `repair`, fixes it. Objects younger than
/// `grace_ms` are not treated as orphans.
pub async fn fsck(fs: &OsdFs, repair: bool, grace_ms: u64) -> Result<Report> {
    let mut r = Report {
        repaired: repair,
        ..Report::default()
    };
    let root = fs.root().await?;
    let keys = SCANNED.to_vec();
    // (1) scan
    let map = fs.osds.map();
    let mut objs: HashMap<(u32, u64), Obj> = HashMap::new();
    for o in &map.osds {
        for (oid, attrs) in fs.osds.list(o.id, keys.clone()).await? {
            objs.insert((o.id, oid), Obj { attrs });
        }
    }
    // (2) intents
    for ((osd, oid), o) in &objs {
        let raw = pick(&o.attrs, INTENT);
        if raw.is_empty() {
            continue;
        }
        let intent: Intent = decode("rename intent", &raw)?;
        let ino = oid & !DATA_OID_TAG;
        let inode = Inode::decode(&pick(&o.attrs, INODE))?;
        let moving = Dirent {
            name: intent.dst.1.clone(),
            kind: inode.kind,
            ino,
            osd: *osd,
        };
        let ((dino, dosd), dname) = &intent.dst;
        let landed = match fs.dir(*dino, *dosd).await {
            Ok(d) => fs.find(&d, dname).await?.is_some_and(|e| e.ino == ino),
            Err(_) => false,
        };
        if landed {
            r.renames_finished += 1;
            if repair && let Some((i, o, rec)) = fs.finish_rename(&moving, &intent, raw).await? {
                fs.destroy(i, o, &rec).await?;
            }
        } else {
            r.renames_undone += 1;
            if repair {
                fs.osds
                    .cas(*osd, *oid, INTENT, raw, Vec::new(), Vec::new())
                    .await?;
            }
        }
    }
    // (3) walk
    let rename_lock = fs
        .osds
        .get1(root.osd, data_oid(ROOT_INO), FS_RENAME_LOCK)
        .await?;
    if !rename_lock.is_empty() {
        r.locks += 1;
        if repair {
            fs.osds
                .set(
                    root.osd,
                    data_oid(ROOT_INO),
                    vec![(FS_RENAME_LOCK, Vec::new())],
                )
                .await?;
        }
    }
    let mut refs: HashMap<u64, u32> = HashMap::new();
    let mut parent_of: HashMap<u64, (u64, u32)> = HashMap::new();
    let mut subdirs: HashMap<u64, u64> = HashMap::new();
    let mut reached: HashSet<u64> = HashSet::from([ROOT_INO]);
    let mut queue = VecDeque::from([root]);
    while let Some(d) = queue.pop_front() {
        r.dirs += 1;
        repair_dir(fs, &d, repair, &mut r).await?;
        for e in fs.readdir_all(&d).await? {
            let exists = objs
                .get(&(e.osd, data_oid(e.ino)))
                .is_some_and(|o| !pick(&o.attrs, INODE).is_empty());
            if !exists {
                r.dangling
                    .push(format!("{} in directory {}", e.name, d.ino));
                if repair {
                    fs.remove(&d, &e).await?;
                }
                continue;
            }
            *refs.entry(e.ino).or_default() += 1;
            parent_of.entry(e.ino).or_insert((d.ino, d.osd));
            if !reached.insert(e.ino) {
                continue;
            }
            if e.kind == Kind::Dir {
                *subdirs.entry(d.ino).or_default() += 1;
                queue.push_back(fs.dir(e.ino, e.osd).await?);
            } else {
                r.files += 1;
            }
        }
    }
    // (4) orphans
    let now = proto::clock::now_ms();
    let mut orphan_inos: Vec<u64> = Vec::new();
    for ((_, oid), o) in &objs {
        let ino = oid & !DATA_OID_TAG;
        if reached.contains(&ino) {
            continue;
        }
        let created = pick(&o.attrs, CREATED);
        let created_ms = created.get(..8).map_or(0, |b| {
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) / 1_000_000
        });
        if now.saturating_sub(created_ms) >= grace_ms {
            orphan_inos.push(ino);
        }
    }
    orphan_inos.sort_unstable();
    orphan_inos.dedup();
    if repair {
        for ((osd, oid), _) in objs
            .iter()
            .filter(|((_, oid), _)| orphan_inos.binary_search(&(oid & !DATA_OID_TAG)).is_ok())
        {
            fs.osds.remove(*osd, *oid).await?;
        }
    }
    r.orphans = orphan_inos;
    // The inode counter: every directory and file reached.
    let counted = r.dirs + r.files;
    let raw = fs
        .osds
        .get1(root.osd, data_oid(ROOT_INO), FS_INODES)
        .await?;
    let was = <[u8; 8]>::try_from(raw.as_slice()).map_or(0, u64::from_le_bytes);
    if was != counted {
        r.inode_counter = Some((was, counted));
        if repair {
            fs.set_inodes(counted).await?;
        }
    }
    // (5) link counts and parents
    for ((osd, oid), o) in &objs {
        let ino = oid & !DATA_OID_TAG;
        let raw = pick(&o.attrs, INODE);
        if raw.is_empty() || !reached.contains(&ino) {
            continue;
        }
        let i = Inode::decode(&raw)?;
        if i.kind == Kind::Dir {
            // A directory's link count is 2 + its subdirectory counter.
            let want = subdirs.get(&ino).copied().unwrap_or(0);
            let have = <[u8; 8]>::try_from(pick(&o.attrs, DIR_SUBDIRS).as_slice())
                .map_or(0, u64::from_le_bytes);
            if have != want {
                r.nlinks += 1;
                if repair {
                    let v = want.to_le_bytes().to_vec();
                    fs.osds.set(*osd, *oid, vec![(DIR_SUBDIRS, v)]).await?;
                }
            }
        }
        if ino == ROOT_INO {
            continue;
        }
        let want_links = if i.kind == Kind::Dir {
            2
        } else {
            refs.get(&ino).copied().unwrap_or(0)
        };
        let want_parent = parent_of.get(&ino).copied();
        let fix_link = i.nlink != want_links;
        let fix_parent = i.kind == Kind::Dir && want_parent.is_some_and(|p| p != i.parent);
        r.nlinks += u64::from(fix_link);
        r.parents += u64::from(fix_parent);
        if repair && (fix_link || fix_parent) {
            fs.update(ino, *osd, |i| {
                i.nlink = want_links;
                if let Some(p) = want_parent.filter(|_| i.kind == Kind::Dir) {
                    i.parent = p;
                }
                Ok(())
            })
            .await?;
        }
    }
    Ok(r)
}

/// Clears a directory's leftover lock, bucket locks, dying mark, head
/// marks and unreachable list slots.
async fn repair_dir(fs: &OsdFs, d: &DirRef, repair: bool, r: &mut Report) -> Result<()> {
    let oid = data_oid(d.ino);
    let mut clear: Vec<(AttrKey, Vec<u8>)> = Vec::new();
    let own = fs.osds.get(d.osd, oid, vec![DIR_LOCK, DIR_DYING]).await?;
    if !pick(&own, DIR_LOCK).is_empty() {
        r.locks += 1;
        clear.push((DIR_LOCK, Vec::new()));
    }
    if !pick(&own, DIR_DYING).is_empty() {
        r.dying += 1;
        clear.push((DIR_DYING, Vec::new()));
    }
    for (n, _) in fs.osds.page_all(d.osd, oid, PAGE_BUCKET_LOCK).await? {
        r.locks += 1;
        clear.push((bucket_lock_key(n), Vec::new()));
    }
    let heads = fs.osds.page_all(d.osd, oid, PAGE_HASH).await?;
    let list: HashMap<u32, Slot> = fs
        .osds
        .page_all(d.osd, oid, PAGE_LIST)
        .await?
        .into_iter()
        .map(|(n, v)| Slot::decode(&v).map(|s| (n, s)))
        .collect::<Result<_>>()?;
    let mut linked: HashSet<u32> = HashSet::new();
    for (n, raw) in &heads {
        let mut s = Slot::decode(raw)?;
        let mut next = s.next;
        while next != 0 && linked.insert(next) {
            next = list.get(&next).map_or(0, |x| x.next);
        }
        if s.mark {
            r.marks += 1;
            s.mark = false;
            clear.push((hash_key(*n), s.encode()));
        }
    }
    for n in list.keys().filter(|n| !linked.contains(n)) {
        r.list_slots += 1;
        clear.push((list_key(*n), Vec::new()));
    }
    if repair && !clear.is_empty() {
        for chunk in clear.chunks(512) {
            fs.osds.set(d.osd, oid, chunk.to_vec()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Report;

    /// A check without `--repair` says what it found, never that it
    /// removed or fixed it; a repair says what it did.
    #[test]
    fn a_check_says_found_and_a_repair_says_fixed() {
        let mut r = Report {
            orphans: vec![7],
            nlinks: 2,
            ..Report::default()
        };
        let checked = r.lines().join("\n");
        assert!(
            checked.contains("1 orphan inodes found (not removed)"),
            "{checked}"
        );
        assert!(checked.contains("2 wrong link counts found"), "{checked}");
        assert!(
            !checked.contains("removed\n") && !checked.contains("corrected"),
            "{checked}"
        );
        r.repaired = true;
        let repaired = r.lines().join("\n");
        assert!(repaired.contains("1 orphan inodes removed"), "{repaired}");
        assert!(repaired.contains("2 link counts corrected"), "{repaired}");
    }
}
