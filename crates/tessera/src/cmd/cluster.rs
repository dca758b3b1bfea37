//! Finding the cluster a command talks to and who it speaks as: a key
//! file (`--key-file F`, naming the cluster and perhaps the MDS), `--mds
//! ADDR` (with `--cluster`), or the `cluster.toml` and `client.admin.key`
//! that `tessera up` writes in its data directory (`--data DIR`, default
//! `./tessera-data`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// Default data directory of `tessera up`.
pub const DEFAULT_DATA: &str = "tessera-data";

/// What `tessera up` records about the cluster it runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Cluster id.
    pub cluster_id: String,
    /// MDS address.
    pub mds: String,
    /// Number of OSDs.
    pub osds: u32,
    /// Size of each OSD's store file in bytes.
    pub osd_size: u64,
}

impl ClusterFile {
    /// Where the file lives under a data directory.
    pub fn path(data: &Path) -> PathBuf {
        data.join("cluster.toml")
    }

    /// Reads it (None if there is none).
    pub fn load(data: &Path) -> anyhow::Result<Option<ClusterFile>> {
        let p = Self::path(data);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(
                toml::from_str(&s).with_context(|| format!("{} is damaged", p.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
        }
    }

    /// Writes it.
    pub fn save(&self, data: &Path) -> anyhow::Result<()> {
        let p = Self::path(data);
        net::files::write_private(&p, toml::to_string(self)?.as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))
    }
}

/// Which cluster to talk to.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// MDS address (default: the cluster `tessera up` runs from --data).
    #[arg(long, global = true)]
    pub mds: Option<String>,
    /// Cluster id (with --mds; default "tessera").
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// Data directory of a `tessera up` cluster.
    #[arg(long, global = true, default_value = DEFAULT_DATA)]
    pub data: PathBuf,
    /// The principal's key file (default: $TESSERA_KEY_FILE, else the
    /// admin key of --data's cluster).
    #[arg(long, global = true, env = "TESSERA_KEY_FILE")]
    pub key_file: Option<PathBuf>,
}

/// Where the MDS is, which cluster, and who to speak as.
pub struct Resolved {
    /// MDS address.
    pub mds: String,
    /// Cluster id.
    pub cluster: String,
    /// The principal's identity.
    pub identity: net::auth::Identity,
}

/// The admin key `tessera up` writes in its data directory.
pub fn admin_key(data: &Path) -> PathBuf {
    data.join("client.admin.key")
}

/// Loads a key file with an error that says what to do.
pub fn load_key(p: &Path) -> anyhow::Result<net::auth::ClientKey> {
    net::auth::ClientKey::load(p).map_err(|e| {
        anyhow::anyhow!("{e}\n(a key file comes from `tessera auth add`, or `tessera up` writes DATA/client.admin.key)")
    })
}

impl Target {
    /// The MDS address, cluster id and identity to use.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let file = ClusterFile::load(&self.data)?;
        let key_path = match (&self.key_file, &file) {
            (Some(k), _) => k.clone(),
            (None, _) if admin_key(&self.data).exists() => admin_key(&self.data),
            (None, None) if self.mds.is_none() => bail!(
                "no cluster found in {}: start one with `tessera up --data {}`, or pass --mds ADDR and --key-file F",
                self.data.display(),
                self.data.display()
            ),
            (None, _) => bail!(
                "no key: pass --key-file F (from `tessera auth add`), or --data DIR of a `tessera up` cluster ({} has no client.admin.key)",
                self.data.display()
            ),
        };
        let key = load_key(&key_path)?;
        let mds = match (&self.mds, &key.mds, &file) {
            (Some(m), _, _) => m.clone(),
            (None, Some(m), _) => m.clone(),
            (None, None, Some(f)) => f.mds.clone(),
            (None, None, None) => bail!(
                "no MDS address: pass --mds ADDR ({} names none, and {} has no cluster.toml)",
                key_path.display(),
                self.data.display()
            ),
        };
        Ok(Resolved {
            mds,
            cluster: self
                .cluster
                .clone()
                .unwrap_or_else(|| key.cluster_id.clone()),
            identity: key.identity()?,
        })
    }
}
