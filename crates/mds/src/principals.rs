//! Principals: who may talk to the MDS, with which key, and what each may
//! do. Kept in the KV (`principals` table: name → record with its secret)
//! and in memory for the handshake; `client.admin` is made at format time
//! and its key written next to the database.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use proto::auth::Secret;
use proto::mds::{Access, Errno, MdsError, PrincipalInfo, PrincipalSpec, ROOT_INO, UidMap};
use serde::{Deserialize, Serialize};

use crate::kv::{Kv, T, Tx, View, io_err};

/// The principal `mds format` makes: every right.
pub const ADMIN: &str = "client.admin";
/// Where `mds format` writes the admin's key, under the MDS directory.
pub const ADMIN_KEY_FILE: &str = "client.admin.key";
/// Longest principal name (after `client.`).
pub const MAX_NAME: usize = 64;
const SEQ_KEY: &[u8] = b"principal_seq";

/// A principal as stored: what it may do and its key.
#[derive(Clone, Serialize, Deserialize)]
pub struct PrincipalRecord {
    /// What the MDS reports.
    pub info: PrincipalInfo,
    /// The key (never leaves the MDS but wrapped for an admin).
    pub secret: Secret,
}

/// Checks a principal name: `client.` then 1..=64 of `[A-Za-z0-9_-]`.
pub fn check_name(name: &str) -> Result<(), MdsError> {
    let bad = |why: &str| {
        Err(MdsError::new(
            Errno::Inval,
            format!(
                "principal name {name:?}: {why} (client.NAME, NAME of letters, digits, - and _, at most {MAX_NAME})"
            ),
        ))
    };
    let Some(rest) = name.strip_prefix("client.") else {
        return bad("must start with client.");
    };
    if rest.is_empty() || rest.len() > MAX_NAME {
        return bad("bad length");
    }
    if !rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return bad("bad character");
    }
    Ok(())
}

/// Whether `spec` may manage principals and OSDs and see them: an admin
/// with every right (the whole tree, read-write, its uids trusted).
pub fn full_admin(spec: &PrincipalSpec) -> bool {
    spec.admin
        && spec.path == "/"
        && spec.access == Access::ReadWrite
        && spec.uids == UidMap::Trusted
}

/// The principals in memory (the KV holds the truth).
#[derive(Default)]
pub struct Principals {
    by_name: RwLock<HashMap<String, Arc<PrincipalRecord>>>,
}

impl Principals {
    /// Loads every principal from the KV.
    pub fn load(kv: &Kv) -> Result<Principals, MdsError> {
        let mut by_name = HashMap::new();
        kv.read()?.try_scan_all(T::Principals, &mut |_, v| {
            let r: PrincipalRecord =
                postcard::from_bytes(v).map_err(|e| io_err("decode principal", e))?;
            by_name.insert(r.info.spec.name.clone(), Arc::new(r));
            Ok(true)
        })?;
        Ok(Principals {
            by_name: RwLock::new(by_name),
        })
    }

    /// The principal named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<PrincipalRecord>> {
        self.by_name
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every principal, by name.
    pub fn list(&self) -> Vec<PrincipalInfo> {
        let m = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<PrincipalInfo> = m.values().map(|r| r.info.clone()).collect();
        v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        v
    }

    /// Records a change the KV has committed (`None` = removed).
    pub fn set(&self, name: &str, rec: Option<PrincipalRecord>) {
        let mut m = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        match rec {
            Some(r) => {
                m.insert(name.into(), Arc::new(r));
            }
            None => {
                m.remove(name);
            }
        }
    }
}

/// Stores `rec` in a write transaction.
pub fn put(tx: &mut Tx, rec: &PrincipalRecord) -> Result<(), MdsError> {
    let v = postcard::to_allocvec(rec).map_err(|e| io_err("encode principal", e))?;
    tx.put(T::Principals, rec.info.spec.name.as_bytes(), &v)
}

/// Removes principal `name` in a write transaction.
pub fn del(tx: &mut Tx, name: &str) -> Result<(), MdsError> {
    tx.del(T::Principals, name.as_bytes())
}

/// The next principal id (never reused, so a removed principal's
/// capabilities never fit a new one).
pub fn next_id(tx: &mut Tx) -> Result<u64, MdsError> {
    let cur = match tx.get(T::Meta, SEQ_KEY)? {
        Some(v) => u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| io_err("principal sequence", format!("{} bytes", v.len())))?,
        ),
        None => 1,
    };
    tx.put(T::Meta, SEQ_KEY, &(cur + 1).to_le_bytes())?;
    Ok(cur)
}

/// A new record for `spec` rooted at `root_ino`, with a fresh key.
pub fn new_record(id: u64, spec: PrincipalSpec, root_ino: u64, secret: Secret) -> PrincipalRecord {
    PrincipalRecord {
        info: PrincipalInfo {
            id,
            spec,
            root_ino,
            key_version: 1,
            created_ms: proto::clock::now_ms(),
        },
        secret,
    }
}

/// What `client.admin` may do: everything.
pub fn admin_spec() -> PrincipalSpec {
    PrincipalSpec {
        name: ADMIN.into(),
        path: "/".into(),
        access: Access::ReadWrite,
        uids: UidMap::Trusted,
        admin: true,
    }
}

/// Where the admin key of an MDS directory is.
pub fn admin_key_path(dir: &Path) -> PathBuf {
    dir.join(ADMIN_KEY_FILE)
}

/// Makes `client.admin` in a freshly formatted KV and writes its key file.
pub fn format_admin(kv: &Kv, dir: &Path, cluster_id: &str) -> Result<(), MdsError> {
    let secret = net::keys::random_key();
    kv.write_blocking(move |tx| {
        let id = next_id(tx)?;
        put(tx, &new_record(id, admin_spec(), ROOT_INO, secret))
    })?;
    let key = net::auth::ClientKey::new(cluster_id, ADMIN, 1, &secret);
    let p = admin_key_path(dir);
    key.save(&p)
        .map_err(|e| MdsError::new(Errno::Io, format!("{}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("client.alice-2_x").is_ok());
        for bad in [
            "alice",
            "client.",
            "client.a b",
            "osd.1",
            "client.é",
            &format!("client.{}", "a".repeat(65)),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
