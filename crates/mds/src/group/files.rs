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
