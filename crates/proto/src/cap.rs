//! Capabilities: what the MDS grants and every OSD request carries. A
//! capability names a partition, an object id range, a rights mask, an
//! expiry, a version and the key version that signed it; its MAC is
//! HMAC-SHA256 over a fixed byte layout of all of that plus the OSD id, with
//! a secret only the MDS and that OSD hold.
//!
//! HMAC-SHA256 rather than keyed BLAKE3: both cost ~150 ns here (SHA-NI),
//! HMAC-SHA256 is the standard every reviewer and HSM knows, and the `hmac`
//! crate gives constant-time verification.
//!
//! Versions follow Hendricks et al.: the MDS keeps one monotonic counter, stamps
//! capabilities with it and bumps an object's stored version to revoke; a
//! capability is valid for an object only while the object's stored version
//! is below the capability's. One range capability thus stays valid for
//! every object not revoked after it was issued.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Rights bits.
pub mod rights {
    /// READ.
    pub const READ: u32 = 1;
    /// WRITE.
    pub const WRITE: u32 = 1 << 1;
    /// APPEND.
    pub const APPEND: u32 = 1 << 2;
    /// CREATE (objects; with [`PARTITION`], partitions).
    pub const CREATE: u32 = 1 << 3;
    /// REMOVE.
    pub const REMOVE: u32 = 1 << 4;
    /// GET ATTRIBUTES.
    pub const GET_ATTR: u32 = 1 << 5;
    /// SET ATTRIBUTES (also compare-and-swap and fetch-and-add).
    pub const SET_ATTR: u32 = 1 << 6;
    /// LIST.
    pub const LIST: u32 = 1 << 7;
    /// FORMAT the whole OSD.
    pub const FORMAT: u32 = 1 << 8;
    /// Set object versions (revocation; MDS only).
    pub const REVOKE: u32 = 1 << 9;
    /// Create and remove partitions.
    pub const PARTITION: u32 = 1 << 10;
    /// Every right.
    pub const ALL: u32 = (1 << 11) - 1;
}

/// Secret key length.
pub const KEY_LEN: usize = 32;

/// A signed capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capability {
    /// Which of the OSD's keys signed it.
    pub key_version: u32,
    /// Partition it covers.
    pub partition: u64,
    /// Lowest object id covered.
    pub oid_lo: u64,
    /// Highest object id covered (inclusive).
    pub oid_hi: u64,
    /// Rights bits.
    pub rights: u32,
    /// Expiry, milliseconds since the Unix epoch.
    pub expiry_ms: u64,
    /// Valid only for objects whose stored version is below this.
    pub version: u64,
    /// The principal it was issued to: an OSD accepts it only on a
    /// connection authenticated as that principal.
    pub holder: u64,
    /// HMAC-SHA256 over [`Capability::signed_bytes`].
    pub mac: [u8; 32],
}

/// Why a capability was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    /// None was sent.
    #[error("capability missing")]
    Missing,
    /// Signed with a key version the OSD does not hold.
    #[error("unknown key version {0}")]
    UnknownKeyVersion(u32),
    /// The MAC does not verify.
    #[error("capability MAC does not verify (forged or altered)")]
    Forged,
    /// Past its expiry.
    #[error("capability expired at {expiry_ms} ms (now {now_ms} ms)")]
    Expired {
        /// Expiry.
        expiry_ms: u64,
        /// Now.
        now_ms: u64,
    },
    /// For another partition.
    #[error("capability is for partition {cap:#x}, request is for {want:#x}")]
    WrongPartition {
        /// The capability's.
        cap: u64,
        /// The request's.
        want: u64,
    },
    /// Object outside the range.
    #[error("object {oid:#x} outside the capability's range {lo:#x}..={hi:#x}")]
    OutOfRange {
        /// Range start.
        lo: u64,
        /// Range end.
        hi: u64,
        /// Requested object.
        oid: u64,
    },
    /// Missing rights.
    #[error("capability rights {have:#x} lack {need:#x}")]
    Rights {
        /// Granted.
        have: u32,
        /// Needed.
        need: u32,
    },
    /// Issued to another principal than the connection's.
    #[error(
        "capability was issued to principal {cap}, this connection is principal {connection}: a capability works only for its holder"
    )]
    WrongHolder {
        /// The capability's holder.
        cap: u64,
        /// The connection's principal.
        connection: u64,
    },
    /// Revoked by a version bump.
    #[error("capability version {cap} is not above the object's version {object}: revoked")]
    Revoked {
        /// The capability's version.
        cap: u64,
        /// The object's stored version.
        object: u64,
    },
}

impl Capability {
    /// The exact bytes the MAC covers (documented in PROTOCOL.md).
    pub fn signed_bytes(&self, osd_id: u32) -> [u8; 68] {
        let mut b = [0u8; 68];
        b[..8].copy_from_slice(b"TSCAP002");
        b[8..12].copy_from_slice(&osd_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.key_version.to_le_bytes());
        b[16..24].copy_from_slice(&self.partition.to_le_bytes());
        b[24..32].copy_from_slice(&self.oid_lo.to_le_bytes());
        b[32..40].copy_from_slice(&self.oid_hi.to_le_bytes());
        b[40..44].copy_from_slice(&self.rights.to_le_bytes());
        b[44..52].copy_from_slice(&self.expiry_ms.to_le_bytes());
        b[52..60].copy_from_slice(&self.version.to_le_bytes());
        b[60..68].copy_from_slice(&self.holder.to_le_bytes());
        b
    }
}

/// What a capability grants, before it is signed: partition, object-id
/// range, rights, expiry and the object version it was issued at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapSpec {
    /// Partition.
    pub partition: u64,
    /// First object id covered.
    pub oid_lo: u64,
    /// Last object id covered.
    pub oid_hi: u64,
    /// Rights bit mask ([`rights`]).
    pub rights: u32,
    /// Expiry, ms since the epoch.
    pub expiry_ms: u64,
    /// Object version it was issued at (revocation).
    pub version: u64,
    /// Principal it is issued to ([`crate::auth::MDS_PRINCIPAL`] for the MDS).
    pub holder: u64,
}

impl CapSpec {
    /// Signs it with `key` (version `key_version`) for OSD `osd_id`:
    /// what the MDS does.
    pub fn sign(&self, key: &[u8; KEY_LEN], key_version: u32, osd_id: u32) -> Capability {
        let mut c = Capability {
            key_version,
            partition: self.partition,
            oid_lo: self.oid_lo,
            oid_hi: self.oid_hi,
            rights: self.rights,
            expiry_ms: self.expiry_ms,
            version: self.version,
            holder: self.holder,
            mac: [0; 32],
        };
        c.mac = mac(key, &c.signed_bytes(osd_id));
        c
    }
}

/// HMAC-SHA256 of `msg` with `key`: the MAC of capabilities and of OSD reports.
pub fn mac(key: &[u8; KEY_LEN], msg: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    m.update(msg);
    m.finalize().into_bytes().into()
}

/// Whether `tag` is the HMAC-SHA256 of `msg` with `key` (constant time).
pub fn mac_ok(key: &[u8; KEY_LEN], msg: &[u8], tag: &[u8]) -> bool {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    m.update(msg);
    m.verify_slice(tag).is_ok()
}

/// The keys an OSD accepts: at most two live versions, so keys rotate
/// without downtime (MDS signs with the new one while the old still verifies).
#[derive(Clone, Default)]
pub struct KeyRing {
    keys: Vec<(u32, [u8; KEY_LEN])>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let versions: Vec<u32> = self.keys.iter().map(|k| k.0).collect();
        write!(f, "KeyRing(versions {versions:?})")
    }
}

/// What a request asks of a capability.
#[derive(Debug, Clone, Copy)]
pub struct Need {
    /// Partition.
    pub partition: u64,
    /// First object id touched.
    pub oid_lo: u64,
    /// Last object id touched.
    pub oid_hi: u64,
    /// Rights needed.
    pub rights: u32,
}

/// Why a set of keys is not a key ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRingError {
    /// Not one or two keys.
    #[error("{0} keys given; an OSD holds one or two live key versions")]
    Count(usize),
    /// Two keys with one version.
    #[error("key version {0} given twice")]
    DuplicateVersion(u32),
}

impl KeyRing {
    /// A ring from (version, secret) pairs; at most two, distinct versions.
    pub fn new(keys: Vec<(u32, [u8; KEY_LEN])>) -> Result<KeyRing, KeyRingError> {
        if keys.is_empty() || keys.len() > 2 {
            return Err(KeyRingError::Count(keys.len()));
        }
        if keys.len() == 2 && keys[0].0 == keys[1].0 {
            return Err(KeyRingError::DuplicateVersion(keys[0].0));
        }
        Ok(KeyRing { keys })
    }

    /// The key of `version`, if held.
    pub fn key(&self, version: u32) -> Option<&[u8; KEY_LEN]> {
        self.keys.iter().find(|k| k.0 == version).map(|k| &k.1)
    }

    /// The newest key (highest version): what a signer uses.
    pub fn newest(&self) -> Option<(u32, &[u8; KEY_LEN])> {
        self.keys.iter().max_by_key(|k| k.0).map(|(v, k)| (*v, k))
    }

    /// The part of [`KeyRing::check`] that depends on the clock: whether
    /// `cap` has expired by `now_ms` (for a request checked whole when it
    /// was admitted and run later, after waits).
    pub fn check_expiry(cap: Option<&Capability>, now_ms: u64) -> Result<(), CapError> {
        match cap {
            Some(c) if now_ms >= c.expiry_ms => Err(CapError::Expired {
                expiry_ms: c.expiry_ms,
                now_ms,
            }),
            _ => Ok(()),
        }
    }

    /// Checks everything but the object version (which needs the store):
    /// key version, MAC, holder (the connection's principal), expiry,
    /// partition, range, rights.
    pub fn check(
        &self,
        cap: Option<&Capability>,
        osd_id: u32,
        holder: u64,
        now_ms: u64,
        need: &Need,
    ) -> Result<(), CapError> {
        let cap = cap.ok_or(CapError::Missing)?;
        let key = self
            .key(cap.key_version)
            .ok_or(CapError::UnknownKeyVersion(cap.key_version))?;
        if !mac_ok(key, &cap.signed_bytes(osd_id), &cap.mac) {
            return Err(CapError::Forged);
        }
        if cap.holder != holder {
            return Err(CapError::WrongHolder {
                cap: cap.holder,
                connection: holder,
            });
        }
        if now_ms >= cap.expiry_ms {
            return Err(CapError::Expired {
                expiry_ms: cap.expiry_ms,
                now_ms,
            });
        }
        if cap.partition != need.partition {
            return Err(CapError::WrongPartition {
                cap: cap.partition,
                want: need.partition,
            });
        }
        if need.oid_lo < cap.oid_lo || need.oid_hi > cap.oid_hi {
            let oid = if need.oid_lo < cap.oid_lo {
                need.oid_lo
            } else {
                need.oid_hi
            };
            return Err(CapError::OutOfRange {
                lo: cap.oid_lo,
                hi: cap.oid_hi,
                oid,
            });
        }
        if cap.rights & need.rights != need.rights {
            return Err(CapError::Rights {
                have: cap.rights,
                need: need.rights,
            });
        }
        Ok(())
    }

    /// The Hendricks et al. revocation rule for one object.
    pub fn check_version(cap: &Capability, object_version: u64) -> Result<(), CapError> {
        if object_version >= cap.version {
            return Err(CapError::Revoked {
                cap: cap.version,
                object: object_version,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: [u8; 32] = [1; 32];
    const K2: [u8; 32] = [2; 32];

    fn need() -> Need {
        Need {
            partition: 5,
            oid_lo: 100,
            oid_hi: 100,
            rights: rights::READ,
        }
    }

    #[test]
    fn every_bad_case_has_its_own_error() {
        let ring = KeyRing::new(vec![(1, K1), (2, K2)]).unwrap();
        let good = CapSpec {
            partition: 5,
            oid_lo: 0,
            oid_hi: 1000,
            rights: rights::READ | rights::WRITE,
            expiry_ms: 10_000,
            version: 50,
            holder: 4,
        }
        .sign(&K2, 2, 7);
        assert_eq!(ring.check(Some(&good), 7, 4, 1, &need()), Ok(()));
        let old = CapSpec {
            partition: 5,
            oid_lo: 0,
            oid_hi: 1000,
            rights: rights::READ,
            expiry_ms: 10_000,
            version: 50,
            holder: 4,
        }
        .sign(&K1, 1, 7);
        assert_eq!(
            ring.check(Some(&old), 7, 4, 1, &need()),
            Ok(()),
            "previous key version still verifies"
        );
        assert_eq!(ring.check(None, 7, 4, 1, &need()), Err(CapError::Missing));
        let unknown = CapSpec {
            partition: 5,
            oid_lo: 0,
            oid_hi: 1000,
            rights: rights::READ,
            expiry_ms: 10_000,
            version: 50,
            holder: 4,
        }
        .sign(&K1, 3, 7);
        assert_eq!(
            ring.check(Some(&unknown), 7, 4, 1, &need()),
            Err(CapError::UnknownKeyVersion(3))
        );
        let mut forged = good.clone();
        forged.rights = rights::ALL;
        assert_eq!(
            ring.check(Some(&forged), 7, 4, 1, &need()),
            Err(CapError::Forged)
        );
        assert_eq!(
            ring.check(Some(&good), 8, 4, 1, &need()),
            Err(CapError::Forged),
            "another OSD's capability"
        );
        assert_eq!(
            ring.check(Some(&good), 7, 5, 1, &need()),
            Err(CapError::WrongHolder {
                cap: 4,
                connection: 5
            }),
            "another principal's capability"
        );
        assert!(matches!(
            ring.check(Some(&good), 7, 4, 10_000, &need()),
            Err(CapError::Expired { .. })
        ));
        // The clock's part alone (a request admitted, then run later).
        assert_eq!(KeyRing::check_expiry(Some(&good), 1), Ok(()));
        assert!(matches!(
            KeyRing::check_expiry(Some(&good), 10_000),
            Err(CapError::Expired { .. })
        ));
        assert_eq!(
            KeyRing::check_expiry(Some(&good), good.expiry_ms - 1),
            Ok(())
        );
        assert!(KeyRing::check_expiry(Some(&good), good.expiry_ms).is_err());
        assert_eq!(KeyRing::check_expiry(None, 10_000), Ok(()));
        let other = Need {
            partition: 6,
            ..need()
        };
        assert!(matches!(
            ring.check(Some(&good), 7, 4, 1, &other),
            Err(CapError::WrongPartition { .. })
        ));
        let far = Need {
            oid_lo: 2000,
            oid_hi: 2000,
            ..need()
        };
        assert!(matches!(
            ring.check(Some(&good), 7, 4, 1, &far),
            Err(CapError::OutOfRange { .. })
        ));
        let rm = Need {
            rights: rights::REMOVE,
            ..need()
        };
        assert!(matches!(
            ring.check(Some(&good), 7, 4, 1, &rm),
            Err(CapError::Rights { .. })
        ));
        assert_eq!(KeyRing::check_version(&good, 49), Ok(()));
        assert!(matches!(
            KeyRing::check_version(&good, 50),
            Err(CapError::Revoked { .. })
        ));
        assert!(KeyRing::new(vec![(1, K1), (1, K2)]).is_err());
        assert!(KeyRing::new(vec![(1, K1), (2, K2), (3, K1)]).is_err());
    }
}
