//! Principals (who may connect, confined where, with which rights), the
//! namespace mode, and the grants of a namespace kept on the OSDs.

use serde::{Deserialize, Serialize};

use super::{Creds, Grant};
use crate::placement::OsdMap;

/// What a principal may do, as an operator asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalSpec {
    /// `client.NAME`.
    pub name: String,
    /// Absolute path of the subtree it is confined to (`/` = everything).
    pub path: String,
    /// Read-only or read-write.
    pub access: Access,
    /// How its claimed uids are treated.
    pub uids: UidMap,
    /// May manage principals and OSDs (out/in, scrub).
    pub admin: bool,
}

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Every change refused with EROFS.
    ReadOnly,
    /// Changes allowed (as permissions allow).
    ReadWrite,
}

/// How the MDS treats the uid and gids a principal's requests claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UidMap {
    /// As claimed (root included): for trusted hosts.
    Trusted,
    /// As claimed, but uid 0 and gid 0 become nobody (65534).
    SquashRoot,
    /// Always this uid and gid, whatever is claimed.
    Fixed {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
}

impl UidMap {
    /// The credentials the MDS acts with when a request claims `c`.
    pub fn apply(&self, c: Creds) -> Creds {
        const NOBODY: u32 = 65534;
        match *self {
            UidMap::Trusted => c,
            UidMap::SquashRoot => {
                let sq = |x: u32| if x == 0 { NOBODY } else { x };
                Creds {
                    uid: sq(c.uid),
                    gid: sq(c.gid),
                    groups: c.groups.into_iter().map(sq).collect(),
                }
            }
            UidMap::Fixed { uid, gid } => Creds {
                uid,
                gid,
                groups: Vec::new(),
            },
        }
    }

    /// Parses `trusted`, `squash-root` or `fixed:UID:GID`.
    pub fn parse(s: &str) -> Result<UidMap, String> {
        match s {
            "trusted" => Ok(UidMap::Trusted),
            "squash-root" => Ok(UidMap::SquashRoot),
            _ => {
                let bad = || {
                    format!(
                        "uid mapping {s:?}: use trusted, squash-root or fixed:UID:GID (numbers)"
                    )
                };
                let rest = s.strip_prefix("fixed:").ok_or_else(bad)?;
                let (u, g) = rest.split_once(':').ok_or_else(bad)?;
                Ok(UidMap::Fixed {
                    uid: u.parse().map_err(|_| bad())?,
                    gid: g.parse().map_err(|_| bad())?,
                })
            }
        }
    }
}

impl std::fmt::Display for UidMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UidMap::Trusted => write!(f, "trusted"),
            UidMap::SquashRoot => write!(f, "squash-root"),
            UidMap::Fixed { uid, gid } => write!(f, "fixed:{uid}:{gid}"),
        }
    }
}

/// A principal as the MDS reports it (never with its key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalInfo {
    /// Its id (capabilities name it as their holder).
    pub id: u64,
    /// What it may do.
    pub spec: PrincipalSpec,
    /// Inode of its root directory.
    pub root_ino: u64,
    /// Current key version.
    pub key_version: u32,
    /// When it was added (ms since the epoch).
    pub created_ms: u64,
}

/// Where a file system's namespace lives, fixed at format time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum NamespaceMode {
    /// In the MDS's database (the MDS answers every metadata operation).
    #[default]
    Mds,
    /// On the OSDs (Ali et al.); the MDS only hands out maps and capabilities.
    Osd,
}

impl NamespaceMode {
    /// Parses "mds" or "osd".
    pub fn parse(s: &str) -> Result<NamespaceMode, crate::UnknownName> {
        match s {
            "mds" => Ok(NamespaceMode::Mds),
            "osd" => Ok(NamespaceMode::Osd),
            _ => Err(crate::UnknownName {
                what: "namespace mode",
                got: s.into(),
                expected: "mds or osd",
            }),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            NamespaceMode::Mds => "mds",
            NamespaceMode::Osd => "osd",
        }
    }
}

/// What a namespace-on-OSDs client gets from the MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceGrant {
    /// Current OSD map.
    pub map: OsdMap,
    /// Capabilities over all namespace objects.
    pub grant: Grant,
    /// OSD of the root directory, once it is made.
    pub root_osd: Option<u32>,
    /// Directory protocol to make the root with ("atomic" or "lock").
    pub dir_protocol: String,
    /// Layout of new files.
    pub layout: crate::layout::LayoutSpec,
    /// The replica chains, when the file system keeps copies (then
    /// `grant.caps` holds, per group, a capability for the group's head
    /// over the group's partition).
    pub chains: Option<crate::chain::ChainTable>,
}

/// What an OSD needs to take part in the replica chains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainGrant {
    /// Every group's chain.
    pub table: crate::chain::ChainTable,
    /// Where the OSD's successors listen: (OSD, address).
    pub addrs: Vec<(u32, String)>,
    /// (group, successor, capability over the group's partition on the
    /// successor, held by the asking OSD).
    pub caps: Vec<(u32, u32, crate::cap::Capability)>,
    /// (successor, ticket naming the asking OSD, session key wrapped
    /// with the asking OSD's key).
    pub tickets: Vec<(u32, crate::auth::SealedTicket, Vec<u8>)>,
}
