//! MDS settings: a TOML file (`<data>/mds.toml`, written at format time and
//! editable) with defaults for everything but the cluster id.

use std::path::Path;

use proto::layout::LayoutSpec;
use serde::{Deserialize, Serialize};

/// Run-time settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MdsConfig {
    /// Most related entries sent with a lookup (Hendricks et al. used 32; 0 disables).
    pub prefetch_max: u32,
    /// Capability lifetime in seconds (clients renew before expiry).
    pub cap_ttl_secs: u64,
    /// How often OSDs report, in milliseconds.
    pub heartbeat_ms: u64,
    /// An OSD silent this long is marked down.
    pub down_after_ms: u64,
    /// KV page cache in MiB.
    pub cache_mib: usize,
    /// Delete-queue retry interval while an OSD is unreachable, in ms.
    pub delete_retry_ms: u64,
    /// An OSD down this long is marked out (a new map epoch) and its copies
    /// are re-made on the others; 0 = never automatically.
    pub out_after_ms: u64,
    /// How often recovery checks every object's copies when nothing woke
    /// it (a write failure, an OSD coming back or going out wakes it at once).
    pub recovery_interval_ms: u64,
    /// Recovery's copying rate limit in MiB/s (0 = unlimited).
    pub recovery_mib_per_sec: u64,
    /// Seconds between scheduled light scrubs (sizes and versions); 0 = never.
    pub scrub_interval_secs: u64,
    /// Seconds between scheduled deep scrubs (every byte); 0 = never.
    pub deep_scrub_interval_secs: u64,
    /// Encrypt every connection's frames (AES-256-GCM), not only those
    /// whose client asks (`tessera mds format --encrypt` sets it); clients
    /// then encrypt their OSD connections too.
    pub require_encryption: bool,
    /// A client session not heard from for this long (ms) holds no open
    /// files; an unlinked inode is kept at least this long after it lost
    /// its last name, and then as long as a session holds it open. 0 turns
    /// both off (unlinked files go at once: for tests).
    pub hold_expiry_ms: u64,
    /// After a crash, how long (ms) the MDS waits for the client sessions
    /// that may hold early-answered, not yet durable namespace changes to
    /// replay them, serving nothing else meanwhile; one that has not come
    /// back by then loses them. It ends sooner once all have replayed.
    pub replay_window_ms: u64,
    /// Holds every metadata log flush back this long (ms): fault injection
    /// for tests (a crash then always finds early answers not yet
    /// durable). 0 in production.
    pub wal_flush_delay_ms: u64,
    /// No longer used: a returning chain member is caught up by change
    /// stamps, not by time. Accepted so older files load; not written.
    #[serde(skip_serializing)]
    pub chain_catch_up_margin_ms: u64,
    /// Authenticated connections served at once (each mount holds two).
    /// When full, the principal holding the most gives its idlest one up
    /// to a principal holding fewer (`docs/SECURITY.md`). Raise the open
    /// files limit with it: the MDS asks for its hard limit at start.
    pub max_connections: usize,
    /// This MDS as a member of a replicated group (absent: a single MDS).
    /// Written by `tessera mds format --members`; see `docs/HA.md`.
    pub group: Option<GroupConfig>,
}

/// A replicated MDS group as one member knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// This member's id.
    pub id: u64,
    /// Every member, this one included.
    pub members: Vec<GroupMember>,
    /// Bytes of the raft log ring (`mds.raftlog`).
    #[serde(default = "default_raft_log_bytes")]
    pub log_bytes: u64,
}

fn default_raft_log_bytes() -> u64 {
    256 << 20
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMember {
    /// Its id (never reused for another data directory).
    pub id: u64,
    /// Where clients and OSDs reach it while it leads.
    pub addr: String,
    /// Where the other members reach it (raft's messages).
    pub peer: String,
}

impl GroupConfig {
    /// This member's entry.
    pub fn me(&self) -> Option<&GroupMember> {
        self.members.iter().find(|m| m.id == self.id)
    }

    /// Every member's client address, comma-separated (what `--mds`
    /// takes).
    pub fn addrs(&self) -> String {
        self.members
            .iter()
            .map(|m| m.addr.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Default for MdsConfig {
    fn default() -> Self {
        MdsConfig {
            prefetch_max: 32,
            cap_ttl_secs: 300,
            heartbeat_ms: 2000,
            down_after_ms: 6000,
            cache_mib: 256,
            delete_retry_ms: 2000,
            out_after_ms: 600_000,
            recovery_interval_ms: 5000,
            recovery_mib_per_sec: 512,
            scrub_interval_secs: 86_400,
            deep_scrub_interval_secs: 7 * 86_400,
            require_encryption: false,
            hold_expiry_ms: proto::mds::HOLD_EXPIRY_MS,
            replay_window_ms: 15_000,
            wal_flush_delay_ms: 0,
            chain_catch_up_margin_ms: 600_000,
            max_connections: net::serve::DEFAULT_MAX_CONNECTIONS,
            group: None,
        }
    }
}

impl MdsConfig {
    /// Reads `path`; a missing file means defaults.
    pub fn load(path: &Path) -> Result<MdsConfig, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(s) => toml::from_str(&s).map_err(|e| ConfigError::Syntax {
                path: path.into(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MdsConfig::default()),
            Err(source) => Err(ConfigError::Io {
                path: path.into(),
                source,
            }),
        }
    }
}

/// Why `mds.toml` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the config's shape (unknown fields
    /// are refused by name).
    #[error("{}: {message}", path.display())]
    Syntax {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        message: String,
    },
}

/// Choices fixed when a file system is formatted.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Cluster id (OSD key files must name the same).
    pub cluster_id: String,
    /// Object-id policy.
    pub policy: crate::ids::IdPolicy,
    /// The root directory's default layout.
    pub layout: LayoutSpec,
    /// Bytes of write-ahead log.
    pub wal_bytes: u64,
    /// Where the namespace lives (the MDS, or the OSDs per Ali et al.).
    pub namespace: proto::mds::NamespaceMode,
    /// Namespace on the OSDs: the directory protocol the root (and so every
    /// directory) is made with, "atomic" or "lock" (empty = atomic).
    pub dir_protocol: String,
}

impl FormatOptions {
    /// The usual choices: child-closest ids with the default geometry,
    /// `layout` at the root, a 64 MiB log, the namespace in the MDS.
    pub fn new(cluster_id: &str, layout: LayoutSpec) -> FormatOptions {
        FormatOptions {
            cluster_id: cluster_id.into(),
            policy: crate::ids::IdPolicy {
                kind: crate::ids::PolicyKind::ChildClosest,
                geo: crate::ids::Geometry::default(),
            },
            layout,
            wal_bytes: 64 << 20,
            namespace: proto::mds::NamespaceMode::Mds,
            dir_protocol: String::new(),
        }
    }
}
