//! Commit slots: blocks 1 and 2, written alternately. Each names the current
//! checkpoint and where journal replay starts. The valid slot with the higher
//! generation wins, so a torn slot write leaves the other, older one in force.

use super::codec::{DecodeError, Reader, Writer, crc};
use crate::device::BLOCK;

/// Magic of a commit slot.
pub const SLOT_MAGIC: [u8; 8] = *b"TSRSLOT1";
/// Encoded size of a slot, including the trailing crc.
pub const SLOT_LEN: usize = 92;

/// One commit slot: the root from which the store's state is rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slot {
    /// Store identity (must match the label).
    pub uuid: [u8; 16],
    /// Increases by one on every slot write; the higher valid slot wins.
    pub generation: u64,
    /// First block (data-area relative) of the checkpoint chain; 0 = none.
    pub checkpoint_block: u64,
    /// Block count of that first chunk.
    pub checkpoint_blocks: u32,
    /// crc32c of the whole checkpoint payload.
    pub checkpoint_crc: u32,
    /// Payload bytes of the whole checkpoint.
    pub checkpoint_bytes: u64,
    /// Byte offset within the journal region where replay starts.
    pub journal_head: u64,
    /// Sequence number of the first batch to replay.
    pub journal_seq: u64,
    /// 1 if written by a clean close (nothing to replay is expected).
    pub clean: u8,
}

impl Slot {
    /// Encodes into a full block.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.bytes(&SLOT_MAGIC);
        w.bytes(&self.uuid);
        w.u64(self.generation);
        w.u64(self.checkpoint_block);
        w.u32(self.checkpoint_blocks);
        w.u32(self.checkpoint_crc);
        w.u64(self.checkpoint_bytes);
        w.u64(self.journal_head);
        w.u64(self.journal_seq);
        w.u8(self.clean);
        w.bytes(&[0; 7]);
        w.bytes(&[0; 8]);
        let c = crc(&w.buf);
        w.u32(c);
        debug_assert_eq!(w.len(), SLOT_LEN);
        w.buf.resize(BLOCK as usize, 0);
        w.buf
    }

    /// Decodes a slot block; any damage is an error (the caller falls back
    /// to the other slot).
    pub fn decode(block: &[u8]) -> Result<Slot, DecodeError> {
        if block.len() < SLOT_LEN || block[..8] != SLOT_MAGIC {
            return Err(DecodeError::new("slot", "bad magic"));
        }
        let stored = u32::from_le_bytes([
            block[SLOT_LEN - 4],
            block[SLOT_LEN - 3],
            block[SLOT_LEN - 2],
            block[SLOT_LEN - 1],
        ]);
        let actual = crc(&block[..SLOT_LEN - 4]);
        if stored != actual {
            return Err(DecodeError::new(
                "slot",
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        let mut r = Reader::new(&block[8..]);
        Ok(Slot {
            uuid: r.array("slot.uuid")?,
            generation: r.u64("slot.generation")?,
            checkpoint_block: r.u64("slot.checkpoint_block")?,
            checkpoint_blocks: r.u32("slot.checkpoint_blocks")?,
            checkpoint_crc: r.u32("slot.checkpoint_crc")?,
            checkpoint_bytes: r.u64("slot.checkpoint_bytes")?,
            journal_head: r.u64("slot.journal_head")?,
            journal_seq: r.u64("slot.journal_seq")?,
            clean: r.u8("slot.clean")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let s = Slot {
            uuid: [1; 16],
            generation: 9,
            checkpoint_block: 100,
            checkpoint_blocks: 3,
            checkpoint_crc: 5,
            checkpoint_bytes: 9000,
            journal_head: 4096,
            journal_seq: 77,
            clean: 1,
        };
        let b = s.encode();
        assert_eq!(Slot::decode(&b).unwrap(), s);
        let mut d = b.clone();
        d[30] ^= 4;
        assert!(Slot::decode(&d).is_err());
    }
}
