//! The label: block 0, written once by mkfs, holding the store's identity and
//! geometry. It never changes afterwards, so a torn label can only come from
//! mkfs itself (which flushes it last).

use super::FORMAT_VERSION;
use super::codec::{DecodeError, Reader, Writer, crc};
use crate::device::BLOCK;

/// Magic at byte 0 of every Tessera store.
pub const LABEL_MAGIC: [u8; 8] = *b"TSRSTORE";

/// Encoded size of the label fields, including the trailing crc.
pub const LABEL_LEN: usize = 108;

/// Which allocation policy the store was formatted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// EBOFS closest good fit over free extents in size buckets.
    Extent = 1,
    /// OBFS fixed-size regions of small (4 KiB) or large blocks.
    Region = 2,
}

impl Policy {
    /// Decodes the on-disk policy byte.
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        match v {
            1 => Ok(Policy::Extent),
            2 => Ok(Policy::Region),
            _ => Err(DecodeError::new(
                "label.policy",
                format!("unknown policy {v}"),
            )),
        }
    }
    /// Lower-case name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Extent => "extent",
            Policy::Region => "region",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = crate::error::StoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "extent" => Ok(Policy::Extent),
            "region" => Ok(Policy::Region),
            _ => Err(crate::error::StoreError::invalid(
                "policy",
                format!("unknown policy '{s}' (expected extent or region)"),
            )),
        }
    }
}

/// Identity and geometry of a store; immutable after mkfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Format version that wrote the store.
    pub version: u32,
    /// Random identity, also stamped into slots, journal batches and checkpoints.
    pub uuid: [u8; 16],
    /// Usable device size in bytes at mkfs.
    pub device_len: u64,
    /// Allocation policy.
    pub policy: Policy,
    /// Large block size in bytes (region policy's large blocks; also the
    /// size above which an object counts as large).
    pub large_block: u32,
    /// Region size in bytes (region policy).
    pub region_size: u64,
    /// Largest object kept inline in its onode, in bytes.
    pub inline_max: u32,
    /// Byte offset of the journal region.
    pub journal_off: u64,
    /// Length of the journal region in bytes.
    pub journal_len: u64,
    /// Byte offset of the data area (allocated space).
    pub data_off: u64,
    /// Length of the data area in bytes.
    pub data_len: u64,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: u64,
}

impl Label {
    /// Encodes into a full block.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(&LABEL_MAGIC);
        w.u32(self.version);
        w.u32(BLOCK as u32);
        w.bytes(&self.uuid);
        w.u64(self.device_len);
        w.u8(self.policy as u8);
        w.bytes(&[0; 3]);
        w.u32(self.large_block);
        w.u64(self.region_size);
        w.u32(self.inline_max);
        w.u32(0);
        w.u64(self.journal_off);
        w.u64(self.journal_len);
        w.u64(self.data_off);
        w.u64(self.data_len);
        w.u64(self.created_ns);
        let c = crc(&w.buf);
        w.u32(c);
        debug_assert_eq!(w.len(), LABEL_LEN);
        w.buf.resize(BLOCK as usize, 0);
        w.buf
    }

    /// Decodes and validates a label block. A wrong magic is reported as
    /// `None` (not a Tessera store); anything else wrong is an error.
    pub fn decode(block: &[u8]) -> Result<Option<Label>, DecodeError> {
        if block.len() < LABEL_LEN || block[..8] != LABEL_MAGIC {
            return Ok(None);
        }
        let stored = u32::from_le_bytes([
            block[LABEL_LEN - 4],
            block[LABEL_LEN - 3],
            block[LABEL_LEN - 2],
            block[LABEL_LEN - 1],
        ]);
        let actual = crc(&block[..LABEL_LEN - 4]);
        if stored != actual {
            return Err(DecodeError::new(
                "label",
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        let mut r = Reader::new(&block[8..]);
        let version = r.u32("label.version")?;
        let block_size = r.u32("label.block_size")?;
        if block_size != BLOCK as u32 {
            return Err(DecodeError::new(
                "label.block_size",
                format!("{block_size}, this build supports only {BLOCK}"),
            ));
        }
        let uuid = r.array("label.uuid")?;
        let device_len = r.u64("label.device_len")?;
        let policy = Policy::from_u8(r.u8("label.policy")?)?;
        r.take(3, "label.reserved")?;
        let large_block = r.u32("label.large_block")?;
        let region_size = r.u64("label.region_size")?;
        let inline_max = r.u32("label.inline_max")?;
        r.u32("label.reserved")?;
        let label = Label {
            version,
            uuid,
            device_len,
            policy,
            large_block,
            region_size,
            inline_max,
            journal_off: r.u64("label.journal_off")?,
            journal_len: r.u64("label.journal_len")?,
            data_off: r.u64("label.data_off")?,
            data_len: r.u64("label.data_len")?,
            created_ns: r.u64("label.created_ns")?,
        };
        if label.version == 0 {
            return Err(DecodeError::new(
                "label.version",
                "0 is not a valid version",
            ));
        }
        if label.version <= FORMAT_VERSION {
            label.validate()?;
        }
        Ok(Some(label))
    }

    /// Checks that the geometry is self-consistent.
    pub fn validate(&self) -> Result<(), DecodeError> {
        let b = BLOCK;
        let lb = u64::from(self.large_block);
        let ok = lb >= b
            && lb.is_multiple_of(b)
            && lb.is_power_of_two()
            && self.journal_off.is_multiple_of(b)
            && self.journal_len.is_multiple_of(b)
            && self.journal_len >= 16 * b
            && self.data_off.is_multiple_of(lb.max(b))
            && self.data_off >= self.journal_off + self.journal_len
            && self.data_len.is_multiple_of(b)
            && self
                .data_off
                .checked_add(self.data_len)
                .is_some_and(|e| e <= self.device_len)
            && (self.policy == Policy::Extent
                || (self.region_size.is_multiple_of(lb) && self.region_size >= lb))
            && u64::from(self.inline_max) < b;
        if ok {
            Ok(())
        } else {
            Err(DecodeError::new(
                "label",
                format!("inconsistent geometry {self:?}"),
            ))
        }
    }

    /// Number of 4 KiB blocks in the data area.
    pub fn data_blocks(&self) -> u64 {
        self.data_len / BLOCK
    }

    /// Blocks per large block.
    pub fn large_blocks(&self) -> u64 {
        u64::from(self.large_block) / BLOCK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Label {
        Label {
            version: FORMAT_VERSION,
            uuid: [7; 16],
            device_len: 64 << 20,
            policy: Policy::Region,
            large_block: 512 << 10,
            region_size: 8 << 20,
            inline_max: 512,
            journal_off: 3 * BLOCK,
            journal_len: 4 << 20,
            data_off: 8 << 20,
            data_len: 56 << 20,
            created_ns: 1,
        }
    }

    #[test]
    fn round_trip() {
        let l = sample();
        assert_eq!(Label::decode(&l.encode()).unwrap(), Some(l));
    }

    #[test]
    fn bad_crc_and_foreign() {
        let mut b = sample().encode();
        b[20] ^= 1;
        assert!(Label::decode(&b).is_err());
        assert_eq!(Label::decode(&[0u8; 4096]).unwrap(), None);
    }
}
