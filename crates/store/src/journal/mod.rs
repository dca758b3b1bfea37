//! The journal: a circular region of batches. One batch is what one group
//! commit writes: a 64-byte header, then records, padded to 4 KiB. A batch is
//! valid only whole (one crc32c over header and payload) and only with the
//! exact sequence number replay expects next, so stale batches from an
//! earlier lap of the ring, or a torn batch, end replay.
//!
//! Ordering rule that makes one flush per batch enough: batch `s` is written
//! only after batch `s-1` (and all the data its records name) was flushed.
//! So when batch `s+1` is on disk, batch `s` is durable; only the last valid
//! batch might name data blocks that never reached the medium, and replay
//! checks their checksums before trusting it.

pub mod record;

use crate::device::{AlignedBuf, BLOCK};
use crate::format::codec::{Reader, crc};

/// Magic of a journal batch.
pub const BATCH_MAGIC: [u8; 8] = *b"TSRJRNL1";
/// Size of the batch header.
pub const BATCH_HEADER: usize = 64;

/// A decoded batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Sequence number.
    pub seq: u64,
    /// Payload bytes after the header.
    pub payload_len: u32,
    /// Number of records.
    pub records: u32,
    /// Bytes the batch occupies in the ring (a multiple of 4 KiB).
    pub total_len: u32,
}

/// Encodes one batch: header + `payload` (encoded records), padded to 4 KiB.
pub fn encode_batch(uuid: &[u8; 16], seq: u64, payload: &[u8], records: u32) -> AlignedBuf {
    let total = (BATCH_HEADER + payload.len()).next_multiple_of(BLOCK as usize);
    let mut buf = AlignedBuf::zeroed(total);
    buf[..8].copy_from_slice(&BATCH_MAGIC);
    buf[8..24].copy_from_slice(uuid);
    buf[24..32].copy_from_slice(&seq.to_le_bytes());
    buf[32..36].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    buf[36..40].copy_from_slice(&records.to_le_bytes());
    buf[40..44].copy_from_slice(&(total as u32).to_le_bytes());
    buf[BATCH_HEADER..BATCH_HEADER + payload.len()].copy_from_slice(payload);
    let c = batch_crc(&buf[..BATCH_HEADER + payload.len()]);
    buf[60..64].copy_from_slice(&c.to_le_bytes());
    buf
}

fn batch_crc(bytes: &[u8]) -> u32 {
    let h = crc32c::crc32c(&bytes[..60]);
    crc32c::crc32c_append(h, &bytes[BATCH_HEADER..])
}

/// Parses a header if it belongs to this store and carries `seq`; `None`
/// means "no batch here" (end of the journal).
pub fn parse_header(head: &[u8], uuid: &[u8; 16], seq: u64, ring_len: u64) -> Option<BatchHeader> {
    let mut r = Reader::new(head);
    if r.take(8, "magic").ok()? != BATCH_MAGIC || r.take(16, "uuid").ok()? != uuid {
        return None;
    }
    let h = BatchHeader {
        seq: r.u64("seq").ok()?,
        payload_len: r.u32("payload").ok()?,
        records: r.u32("records").ok()?,
        total_len: r.u32("total").ok()?,
    };
    let ok = h.seq == seq
        && u64::from(h.total_len).is_multiple_of(BLOCK)
        && h.total_len as usize >= BATCH_HEADER + h.payload_len as usize
        && u64::from(h.total_len) <= ring_len;
    ok.then_some(h)
}

/// Checks the crc of a whole batch (header + payload) read from disk.
pub fn verify_batch(bytes: &[u8], h: &BatchHeader) -> bool {
    let end = BATCH_HEADER + h.payload_len as usize;
    if bytes.len() < end {
        return false;
    }
    let stored = u32::from_le_bytes([bytes[60], bytes[61], bytes[62], bytes[63]]);
    stored == batch_crc(&bytes[..end])
}

/// The sequence number a header carries, ignoring validity (to keep new
/// sequence numbers above anything already on disk).
pub fn raw_seq(head: &[u8], uuid: &[u8; 16]) -> Option<u64> {
    if head.len() < 32 || head[..8] != BATCH_MAGIC || &head[8..24] != uuid {
        return None;
    }
    Some(u64::from_le_bytes(head[24..32].try_into().ok()?))
}

/// crc32c of a block of data (re-exported for the store's data path).
pub fn block_crc(b: &[u8]) -> u32 {
    crc(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip_and_tear() {
        let uuid = [3u8; 16];
        let b = encode_batch(&uuid, 42, b"payload", 1);
        let h = parse_header(&b, &uuid, 42, 1 << 20).unwrap();
        assert_eq!(h.payload_len, 7);
        assert!(verify_batch(&b, &h));
        assert!(parse_header(&b, &uuid, 43, 1 << 20).is_none());
        let mut t = b.to_vec();
        t[70] ^= 1;
        assert!(!verify_batch(&t, &h));
    }
}
