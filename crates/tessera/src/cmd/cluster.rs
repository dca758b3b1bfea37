//! Finding the cluster a command talks to: `--mds ADDR` (with `--cluster`),
//! or the `cluster.toml` that `tessera up` writes in its data directory
//! (`--data DIR`, default `./tessera-data`).

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
}

impl Target {
    /// (MDS address, cluster id).
    pub fn resolve(&self) -> anyhow::Result<(String, String)> {
        if let Some(m) = &self.mds {
            return Ok((
                m.clone(),
                self.cluster.clone().unwrap_or_else(|| "tessera".into()),
            ));
        }
        match ClusterFile::load(&self.data)? {
            Some(f) => Ok((f.mds, self.cluster.clone().unwrap_or(f.cluster_id))),
            None => bail!(
                "no cluster found in {}: start one with `tessera up --data {}`, or pass --mds ADDR",
                self.data.display(),
                self.data.display()
            ),
        }
    }
}
