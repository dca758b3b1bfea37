//! Namespace consistency check over a snapshot: every entry names a live
//! inode of the right kind, link counts and entry counts match the
//! entries, every inode is reachable from the root, the inode counter is
//! right. Used by `tessera fsck --mds` and by the crash tests.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;

use proto::mds::{FileKind, MdsError, ROOT_INO};

use crate::kv::T;
use crate::records::{Inode, Records, decode_dentry};

/// What a check found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Inodes seen.
    pub inodes: u64,
    /// Directory entries seen.
    pub entries: u64,
    /// Files queued for object deletion.
    pub delete_queue: u64,
    /// Unlinked inodes kept while clients may hold them open.
    pub orphans: u64,
    /// Problems, each naming what and where.
    pub problems: Vec<String>,
}

/// Checks the namespace in `v`.
pub fn check(v: &impl Records) -> Result<Report, MdsError> {
    let mut r = Report::default();
    let mut inodes: HashMap<u64, Inode> = HashMap::new();
    let mut bad = Vec::new();
    v.scan(
        T::Inodes,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        &mut |k, val| {
            match postcard::from_bytes::<Inode>(val) {
                Ok(i) => {
                    if k != i.attr.ino.to_be_bytes() {
                        bad.push(format!(
                            "inode record under key {k:02x?} says ino {:#x}",
                            i.attr.ino
                        ));
                    }
                    inodes.insert(i.attr.ino, i);
                }
                Err(e) => bad.push(format!("inode {k:02x?}: undecodable: {e}")),
            }
            true
        },
    )?;
    r.problems.extend(bad);
    r.inodes = inodes.len() as u64;
    let mut links: HashMap<u64, u32> = HashMap::new();
    let mut entries: HashMap<u64, u64> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut problems = Vec::new();
    v.scan(
        T::Dentries,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        &mut |k, val| {
            let parent = u64::from_be_bytes(k[..8].try_into().unwrap_or([0; 8]));
            let name = String::from_utf8_lossy(&k[8..]).into_owned();
            match decode_dentry(val) {
                Ok((ino, kind)) => {
                    match inodes.get(&ino) {
                        None => problems.push(format!(
                            "entry {name:?} in {parent:#x} names missing inode {ino:#x}"
                        )),
                        Some(i) if i.attr.kind != kind => problems.push(format!(
                            "entry {name:?} in {parent:#x} says {kind:?}, inode {ino:#x} is {:?}",
                            i.attr.kind
                        )),
                        Some(_) => {}
                    }
                    match inodes.get(&parent) {
                        Some(p) if p.attr.kind == FileKind::Dir => {}
                        _ => problems.push(format!(
                            "entry {name:?} lives in {parent:#x}, which is not a directory"
                        )),
                    }
                    *links.entry(ino).or_default() += 1;
                    *entries.entry(parent).or_default() += 1;
                    if kind == FileKind::Dir {
                        *subdirs.entry(parent).or_default() += 1;
                    }
                    children.entry(parent).or_default().push(ino);
                }
                Err(e) => problems.push(format!("entry {name:?} in {parent:#x}: {e}")),
            }
            true
        },
    )?;
    r.problems.extend(problems);
    r.entries = entries.values().sum();
    for (ino, i) in &inodes {
        let n = links.get(ino).copied().unwrap_or(0);
        match i.attr.kind {
            FileKind::Dir => {
                if *ino != ROOT_INO && n != 1 {
                    r.problems
                        .push(format!("directory {ino:#x} has {n} entries naming it"));
                }
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if i.attr.nlink != want {
                    r.problems.push(format!(
                        "directory {ino:#x}: nlink {} but {want} expected",
                        i.attr.nlink
                    ));
                }
                let e = entries.get(ino).copied().unwrap_or(0);
                if i.dir.as_ref().map(|d| d.entries) != Some(e) {
                    r.problems.push(format!(
                        "directory {ino:#x}: entry count {:?} but {e} entries",
                        i.dir.as_ref().map(|d| d.entries)
                    ));
                }
            }
            _ => {
                if i.attr.nlink != n {
                    r.problems.push(format!(
                        "inode {ino:#x}: nlink {} but {n} entries",
                        i.attr.nlink
                    ));
                }
            }
        }
    }
    shared_objects(&inodes, &mut r.problems);
    // Reachability from the root.
    let mut seen = HashSet::from([ROOT_INO]);
    let mut stack = vec![ROOT_INO];
    while let Some(d) = stack.pop() {
        for &c in children.get(&d).map(|v| v.as_slice()).unwrap_or(&[]) {
            if seen.insert(c) && inodes.get(&c).is_some_and(|i| i.attr.kind == FileKind::Dir) {
                stack.push(c);
            }
        }
    }
    if !inodes.contains_key(&ROOT_INO) {
        r.problems.push("the root directory is missing".into());
    }
    let mut orphans = HashSet::new();
    v.try_scan_all(T::Orphans, &mut |k, _| {
        if let Ok(k) = <[u8; 8]>::try_from(k) {
            orphans.insert(u64::from_be_bytes(k));
        } else {
            r.problems.push(format!("orphan record under key {k:02x?}"));
        }
        Ok(true)
    })?;
    r.orphans = orphans.len() as u64;
    for (ino, i) in &inodes {
        let orphan = orphans.contains(ino);
        if orphan && (i.attr.nlink != 0 || i.attr.kind == FileKind::Dir) {
            r.problems.push(format!(
                "inode {ino:#x} is listed as an orphan but has {} links",
                i.attr.nlink
            ));
        }
        if !seen.contains(ino) && !orphan {
            r.problems
                .push(format!("inode {ino:#x} is not reachable from the root"));
        }
    }
    let st = v.state()?;
    if st.inodes != r.inodes {
        r.problems.push(format!(
            "inode counter {} but {} inodes",
            st.inodes, r.inodes
        ));
    }
    v.scan(
        T::DeleteQueue,
        Bound::Unbounded,
        Bound::Unbounded,
        false,
        &mut |_, _| {
            r.delete_queue += 1;
            true
        },
    )?;
    Ok(r)
}

/// Reports every object id that more than one file's layout names, and
/// every inode number that carries the object-id tag: two files sharing
/// objects read and overwrite each other's bytes (a forged replay could
/// once make one).
fn shared_objects(inodes: &HashMap<u64, Inode>, problems: &mut Vec<String>) {
    let mut owner: HashMap<u64, u64> = HashMap::new();
    let mut sorted: Vec<&Inode> = inodes.values().collect();
    sorted.sort_by_key(|i| i.attr.ino);
    for i in sorted {
        let ino = i.attr.ino;
        if !proto::layout::is_inode_number(ino) {
            problems.push(format!(
                "inode {ino:#x} is outside the id space (it names object ids)"
            ));
        }
        let Some(l) = i.layout.as_ref() else { continue };
        for &oid in &l.objsets {
            if let Some(first) = owner.insert(oid, ino)
                && first != ino
            {
                problems.push(format!(
                    "object {oid:#x} belongs to both inode {first:#x} and inode {ino:#x}"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::layout::{Layout, LayoutSpec, data_oid};
    use proto::mds::Attr;

    fn file(ino: u64, objsets: Vec<u64>) -> Inode {
        Inode {
            attr: Attr {
                ino,
                kind: FileKind::File,
                mode: 0o644,
                nlink: 1,
                uid: 0,
                gid: 0,
                size: 0,
                atime: 0,
                mtime: 0,
                ctime: 0,
                rdev: 0,
            },
            parent: ROOT_INO,
            name: format!("f{ino}"),
            layout: Some(Layout {
                spec: LayoutSpec::default(),
                map_epoch: 1,
                objsets,
                homes: Vec::new(),
            }),
            target: None,
            dir: None,
        }
    }

    #[test]
    fn two_files_sharing_an_object_are_reported() {
        let mut inodes = HashMap::new();
        inodes.insert(7, file(7, vec![data_oid(7)]));
        inodes.insert(8, file(8, vec![data_oid(8)]));
        let mut p = Vec::new();
        shared_objects(&inodes, &mut p);
        assert!(p.is_empty(), "{p:?}");
        // A forged replay once made an inode whose number was 7's object id.
        let forged = data_oid(7);
        inodes.insert(forged, file(forged, vec![data_oid(forged)]));
        shared_objects(&inodes, &mut p);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().any(|m| m.contains("outside the id space")));
        assert!(p.iter().any(|m| m.contains("belongs to both")));
    }
}
