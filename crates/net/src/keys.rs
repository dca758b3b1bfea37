//! The OSD key file: TOML naming the cluster, the OSD and its live secrets.
//! The OSD signs its heartbeats and checks capabilities with them; the MDS
//! holds a copy of each to sign capabilities.
//!
//! ```toml
//! cluster_id = "c0ffee"
//! osd_id = 0
//! [[keys]]
//! version = 1
//! secret = "64 hex digits"
//! ```

use std::path::{Path, PathBuf};

use proto::KeyRing;
use proto::cap::{KEY_LEN, KeyRingError};
use serde::{Deserialize, Serialize};

/// Why a key file or secret is unusable.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("key file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the key-file shape.
    #[error("key file {}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A secret is not 64 hex digits.
    #[error("secret must be {expected} hex digits, got {actual} characters")]
    BadSecret {
        /// Hex digits a secret has.
        expected: usize,
        /// Characters given (or the position of a non-hex one).
        actual: usize,
    },
    /// A secret of one key version is bad.
    #[error("key version {version}: {source}")]
    Version {
        /// The version.
        version: u32,
        /// What is wrong with it.
        source: Box<KeyError>,
    },
    /// The keys do not form a ring.
    #[error("{0}")]
    Ring(#[from] KeyRingError),
    /// The file holds no key.
    #[error("key file of OSD {0} holds no key")]
    Empty(u32),
    /// A key file in a key directory names another cluster.
    #[error("{}: key file is for cluster {found:?}, this MDS serves {expected:?}", path.display())]
    OtherCluster {
        /// The file.
        path: PathBuf,
        /// The cluster it names.
        found: String,
        /// The cluster expected.
        expected: String,
    },
    /// A file of the key in context (wrapping an error with its path).
    #[error("key file {}: {source}", path.display())]
    In {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: Box<KeyError>,
    },
}

/// One secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// Key version (capabilities name it).
    pub version: u32,
    /// 32 bytes as 64 hex digits.
    pub secret: String,
}

/// The whole key file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// Cluster this OSD belongs to (checked at every handshake).
    pub cluster_id: String,
    /// This OSD's id.
    pub osd_id: u32,
    /// One or two live keys.
    pub keys: Vec<KeyEntry>,
}

/// Parses 64 hex digits.
pub fn parse_secret(s: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let s = s.trim();
    let bad = KeyError::BadSecret {
        expected: 2 * KEY_LEN,
        actual: s.len(),
    };
    if s.len() != 2 * KEY_LEN || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad);
    }
    let mut k = [0u8; KEY_LEN];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| KeyError::BadSecret {
            expected: 2 * KEY_LEN,
            actual: 2 * i,
        })?;
    }
    Ok(k)
}

/// Reads a TOML key file of shape `T`; errors name the file.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| KeyError::Syntax {
        path: path.into(),
        message: e.to_string(),
    })
}

/// Hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl KeyFile {
    /// Reads and validates a key file; errors name the file and the problem.
    pub fn load(path: &Path) -> Result<KeyFile, KeyError> {
        let kf: KeyFile = read_toml(path)?;
        kf.ring().map_err(|e| KeyError::In {
            path: path.into(),
            source: Box::new(e),
        })?;
        Ok(kf)
    }

    /// The key ring it describes.
    pub fn ring(&self) -> Result<KeyRing, KeyError> {
        let mut keys = Vec::new();
        for k in &self.keys {
            let secret = parse_secret(&k.secret).map_err(|e| KeyError::Version {
                version: k.version,
                source: Box::new(e),
            })?;
            keys.push((k.version, secret));
        }
        Ok(KeyRing::new(keys)?)
    }

    /// The newest key (version, secret): what a signer uses.
    pub fn newest(&self) -> Result<(u32, [u8; KEY_LEN]), KeyError> {
        let ring = self.ring()?;
        ring.newest()
            .map(|(v, k)| (v, *k))
            .ok_or(KeyError::Empty(self.osd_id))
    }

    /// A new key file with one random key (version 1).
    pub fn generate(cluster_id: &str, osd_id: u32) -> KeyFile {
        KeyFile {
            cluster_id: cluster_id.into(),
            osd_id,
            keys: vec![KeyEntry {
                version: 1,
                secret: hex(&random_key()),
            }],
        }
    }

    /// Writes the file owner-only (0600), atomically and durably
    /// ([`crate::files::write_private`]).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        crate::files::write_private(path, text.as_bytes())
    }
}

/// 32 random bytes from the OS.
pub fn random_key() -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut k).is_ok() {
            return k;
        }
    }
    panic!("no /dev/urandom: cannot generate a key safely");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.toml");
        let kf = KeyFile::generate("c1", 3);
        kf.save(&p).unwrap();
        let back = KeyFile::load(&p).unwrap();
        assert_eq!(back.osd_id, 3);
        assert!(back.ring().unwrap().newest().is_some());
        std::fs::write(&p, "cluster_id = \"c\"\nosd_id = 1\nkeys = []\n").unwrap();
        assert!(
            KeyFile::load(&p)
                .unwrap_err()
                .to_string()
                .contains("one or two")
        );
        std::fs::write(
            &p,
            "cluster_id = \"c\"\nosd_id = 1\n[[keys]]\nversion = 1\nsecret = \"zz\"\n",
        )
        .unwrap();
        assert!(
            KeyFile::load(&p)
                .unwrap_err()
                .to_string()
                .contains("hex digits")
        );
        std::fs::write(&p, "cluster_id = \"c\"\nosd_id = 1\ncolour = 2\n").unwrap();
        assert!(
            KeyFile::load(&p)
                .unwrap_err()
                .to_string()
                .contains("colour")
        );
    }
}
