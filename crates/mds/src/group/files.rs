//! A member's files beyond a single MDS's: the group key (`group.key`,
//! 64 hex digits, owner-only: every member holds the same, and a peer
//! proves it in the handshake), the raft log (`mds.raftlog`, `mds.raft`)
//! and `[group]` in `mds.toml`. A group is formatted once, in one
//! directory, then copied to every member: all start from the same KV.

use std::path::{Path, PathBuf};

use proto::auth::Secret;

use crate::config::{GroupConfig, GroupMember, MdsConfig};

/// The group key's file in a member's data directory.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join("group.key")
}

/// Reads the group key.
pub fn load_key(dir: &Path) -> Result<Secret, String> {
    let p = key_path(dir);
    let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let s = s.trim();
    let mut k = [0u8; 32];
    if s.len() != 64 {
        return Err(format!("{}: not 64 hex digits", p.display()));
    }
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("{}: not 64 hex digits", p.display()))?;
    }
    Ok(k)
}

fn save_key(dir: &Path, k: &Secret) -> Result<(), String> {
    let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
    net::files::write_private(&key_path(dir), format!("{hex}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", key_path(dir).display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    // Owner-only, as a single MDS's directory: keys are inside.
    net::files::create_private_dir(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for e in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| format!("{}: {e}", src.display()))?;
        }
    }
    Ok(())
}

/// Turns the freshly formatted single-MDS directory `formatted` into one
/// directory per member under `out` (`member-<id>`), each with the same
/// KV, the group key, an empty raft log and `[group]` naming it.
/// Returns the directories.
pub fn make_members(
    formatted: &Path,
    out: &Path,
    members: &[GroupMember],
    log_bytes: u64,
) -> Result<Vec<PathBuf>, String> {
    if members.is_empty() || members.len() > 9 {
        return Err(format!("{} members: a group has 1 to 9", members.len()));
    }
    let mut ids: Vec<u64> = members.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != members.len() || ids.contains(&0) {
        return Err("member ids must be distinct and not 0".into());
    }
    let key = net::keys::random_key();
    let mut dirs = Vec::new();
    let made = make_each(formatted, out, members, log_bytes, &key, &mut dirs);
    if made.is_err() {
        // Nothing half made is left behind.
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    made.map(|()| dirs)
}

fn make_each(
    formatted: &Path,
    out: &Path,
    members: &[GroupMember],
    log_bytes: u64,
    key: &Secret,
    dirs: &mut Vec<PathBuf>,
) -> Result<(), String> {
    for m in members {
        let dir = out.join(format!("member-{}", m.id));
        if dir.exists() {
            return Err(format!(
                "{} exists: refusing to format over it",
                dir.display()
            ));
        }
        dirs.push(dir.clone());
        copy_tree(formatted, &dir)?;
        save_key(&dir, key)?;
        crate::raft::log_store::create(&dir, log_bytes, m.id)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let p = dir.join("mds.toml");
        let mut cfg = MdsConfig::load(&p).map_err(|e| e.to_string())?;
        cfg.group = Some(GroupConfig {
            id: m.id,
            members: members.to_vec(),
            log_bytes,
        });
        let text = toml::to_string_pretty(&cfg).map_err(|e| e.to_string())?;
        net::files::write_private(&p, text.as_bytes())
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// Checks a member's KV offline (the member must not be running) with
/// `check`. It holds the member's last durable point: what a restart
/// starts from before the raft log brings it forward. Opened read-only;
/// a file left unclosed by a step-down (which ends without destructors)
/// needs redb's repair first, which rebuilds its allocation state and
/// changes no entry.
pub fn check_db<R>(
    dir: &Path,
    check: impl Fn(&crate::kv::Snapshot) -> Result<R, proto::mds::MdsError>,
) -> Result<R, String> {
    let p = crate::kv::KvPaths::new(dir).db;
    let run = |s: Result<crate::kv::Snapshot, proto::mds::MdsError>| {
        s.and_then(|s| check(&s)).map_err(|e| e.to_string())
    };
    match redb::ReadOnlyDatabase::open(&p) {
        Ok(db) => run(crate::kv::read_db(&db)),
        Err(_) => {
            let db = redb::Database::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            run(crate::kv::read_db(&db))
        }
    }
}

/// What [`make_joiner`] made.
#[derive(Debug, Clone)]
pub struct Joiner {
    /// The cluster.
    pub cluster_id: String,
    /// The members as `from` knew them, the new one last.
    pub members: Vec<GroupMember>,
}

/// Makes `out` the directory of a new member `me` from `from`, a
/// member's directory or a copy of one (only its `mds.toml`, `group.key`,
/// `client.admin.key` and `keys/` are read, so `from` may belong to a
/// running member). The new member gets its own raft log, an empty KV
/// and the marker [`crate::raft::state_machine::awaiting_snapshot_path`]:
/// it starts from the leader's snapshot once the leader adds it.
pub fn make_joiner(from: &Path, out: &Path, me: &GroupMember) -> Result<Joiner, String> {
    let cfg_path = from.join("mds.toml");
    let mut cfg = MdsConfig::load(&cfg_path).map_err(|e| e.to_string())?;
    let Some(group) = cfg.group.clone() else {
        return Err(format!(
            "{}: no [group]: not a replicated MDS group's member",
            cfg_path.display()
        ));
    };
    if let Some(m) = group.members.iter().find(|m| {
        m.id == me.id
            || [&m.addr, &m.peer]
                .iter()
                .any(|a| *a == &me.addr || *a == &me.peer)
    }) {
        return Err(format!(
            "member {} ({}, peer {}) already has that id or address: ids are never reused",
            m.id, m.addr, m.peer
        ));
    }
    let key = load_key(from)?;
    let admin = from.join("client.admin.key");
    let cluster_id = net::auth::ClientKey::load(&admin)
        .map_err(|e| e.to_string())?
        .cluster_id;
    if out.exists() {
        return Err(format!(
            "{} exists: refusing to make a member over it",
            out.display()
        ));
    }
    let made = (|| {
        net::files::create_private_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
        if from.join("keys").is_dir() {
            copy_tree(&from.join("keys"), &out.join("keys"))?;
        }
        std::fs::copy(&admin, out.join("client.admin.key"))
            .map_err(|e| format!("{}: {e}", admin.display()))?;
        save_key(out, &key)?;
        let wal_bytes =
            std::fs::metadata(crate::kv::KvPaths::new(from).wal).map_or(64 << 20, |m| m.len());
        empty_kv(out, &cluster_id, wal_bytes)?;
        crate::raft::log_store::create(out, group.log_bytes, me.id)
            .map_err(|e| format!("{}: {e}", out.display()))?;
        let mut members = group.members.clone();
        members.push(me.clone());
        cfg.group = Some(GroupConfig {
            id: me.id,
            members: members.clone(),
            log_bytes: group.log_bytes,
        });
        let text = toml::to_string_pretty(&cfg).map_err(|e| e.to_string())?;
        let p = out.join("mds.toml");
        net::files::write_private(&p, text.as_bytes())
            .map_err(|e| format!("{}: {e}", p.display()))?;
        let marker = crate::raft::state_machine::awaiting_snapshot_path(out);
        net::files::write_private(&marker, b"waiting for the leader's snapshot\n")
            .map_err(|e| format!("{}: {e}", marker.display()))?;
        Ok(Joiner {
            cluster_id: cluster_id.clone(),
            members,
        })
    })();
    if made.is_err() {
        // Nothing half made is left behind.
        let _ = std::fs::remove_dir_all(out);
    }
    made
}

/// A KV holding only the superblock naming `cluster_id` (what a member
/// reads before raft runs; the snapshot replaces all of it).
fn empty_kv(dir: &Path, cluster_id: &str, wal_bytes: u64) -> Result<(), String> {
    let paths = crate::kv::KvPaths::new(dir);
    crate::kv::create(&paths, wal_bytes).map_err(|e| e.to_string())?;
    let kv = crate::kv::Kv::open(&paths, 1 << 20).map_err(|e| e.to_string())?;
    let policy = crate::ids::IdPolicy::new(
        crate::ids::PolicyKind::ChildClosest,
        crate::ids::Geometry::default(),
    )
    .map_err(|e| e.to_string())?;
    let sb = crate::records::Superblock {
        version: crate::records::RECORDS_VERSION,
        cluster_id: cluster_id.to_string(),
        policy,
        created_ms: proto::clock::now_ms(),
    };
    let written = kv.write_blocking(move |tx| tx.put_superblock(&sb));
    kv.close();
    written.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, port: u16) -> GroupMember {
        GroupMember {
            id,
            addr: format!("127.0.0.1:{port}"),
            peer: format!("127.0.0.1:{}", port + 100),
        }
    }

    #[test]
    fn a_joining_member_is_made_from_a_members_directory_and_refused_reuse() {
        let tmp = tempfile::tempdir().unwrap();
        let formatted = tmp.path().join("f");
        let layout = proto::layout::LayoutSpec {
            stripe_unit: 65536,
            stripe_count: 1,
            object_size: 0,
            replicas: 1,
            min_replicas: 0,
        };
        crate::service::format(&formatted, &crate::FormatOptions::new("c", layout)).unwrap();
        let members = [member(1, 7001), member(2, 7002), member(3, 7003)];
        let dirs = make_members(&formatted, tmp.path(), &members, 1 << 20).unwrap();
        let out = tmp.path().join("m4");
        // Refused: not a member's directory, an id or address in use.
        let e = make_joiner(&formatted, &out, &member(4, 7004)).unwrap_err();
        assert!(e.contains("no [group]"), "{e}");
        let e = make_joiner(&dirs[0], &out, &member(2, 7004)).unwrap_err();
        assert!(e.contains("ids are never reused"), "{e}");
        let e = make_joiner(&dirs[0], &out, &member(4, 7003)).unwrap_err();
        assert!(e.contains("already has that id or address"), "{e}");
        assert!(!out.exists());
        let j = make_joiner(&dirs[1], &out, &member(4, 7004)).unwrap();
        assert_eq!(j.cluster_id, "c");
        assert_eq!(j.members.len(), 4);
        // Its own raft log, the group's key and admin key, the marker.
        let log = crate::raft::log_store::LogStore::open(&out).unwrap();
        assert_eq!(log.member(), 4);
        assert_eq!(load_key(&out).unwrap(), load_key(&dirs[0]).unwrap());
        assert_eq!(
            std::fs::read(out.join("client.admin.key")).unwrap(),
            std::fs::read(dirs[0].join("client.admin.key")).unwrap()
        );
        assert!(crate::raft::state_machine::awaiting_snapshot_path(&out).exists());
        let cfg = MdsConfig::load(&out.join("mds.toml")).unwrap();
        assert_eq!(cfg.group.unwrap().id, 4);
        // Made once: a second time over it is refused, and it is kept.
        let e = make_joiner(&dirs[1], &out, &member(5, 7005)).unwrap_err();
        assert!(e.contains("exists"), "{e}");
        assert!(out.join("mds.toml").exists());
    }
}
