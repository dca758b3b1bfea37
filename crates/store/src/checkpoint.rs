//! Checkpoints: the whole metadata state written as a chain of chunks in
//! freshly allocated blocks (never over the previous checkpoint), then made
//! current by a commit slot. Recovery reads the newest checkpoint and replays
//! only the journal written after it, so recovery time is bounded by the
//! journal size, not by the store's age.
//!
//! Chunk layout: 64-byte header (magic, uuid, slot generation, chunk index,
//! chunk blocks, payload bytes in this chunk, next chunk's block and block
//! count, crc32c of header and payload), then payload.

use crate::alloc::{Allocator, Class, Extent, Request};
use crate::device::{AlignedBuf, BLOCK, Device};
use crate::error::{Result, StoreError};
use crate::format::codec::Reader;
use crate::format::label::Label;
use crate::format::slot::Slot;

/// Magic of a checkpoint chunk.
pub const CHUNK_MAGIC: [u8; 8] = *b"TSRCHUNK";
const CHUNK_HEADER: u64 = 64;

/// Allocates blocks for a checkpoint of `payload_len` bytes.
pub fn plan(payload_len: u64, alloc: &mut dyn Allocator) -> Result<Vec<Extent>> {
    let mut extents: Vec<Extent> = Vec::new();
    let capacity = |ex: &[Extent]| ex.iter().map(|e| e.len * BLOCK - CHUNK_HEADER).sum::<u64>();
    while capacity(&extents) < payload_len.max(1) {
        let missing = payload_len.max(1) - capacity(&extents);
        let blocks = (missing + CHUNK_HEADER).div_ceil(BLOCK);
        let goal = extents.last().map(|e| e.end());
        match alloc.allocate(&Request {
            blocks,
            goal,
            class: Class::Meta,
            grow: 0,
        }) {
            Ok(mut got) => extents.append(&mut got),
            Err(e) => {
                for x in extents {
                    let _ = alloc.free(x);
                }
                return Err(StoreError::NoSpace {
                    needed: payload_len,
                    free: match e {
                        crate::alloc::AllocError::NoSpace { free, .. } => free * BLOCK,
                        _ => 0,
                    },
                });
            }
        }
    }
    Ok(extents)
}

/// Writes `payload` into the planned chunks (not flushed). Returns the slot
/// fields that name the checkpoint.
pub fn write(
    dev: &dyn Device,
    label: &Label,
    generation: u64,
    extents: &[Extent],
    payload: &[u8],
) -> Result<(u64, u32, u32, u64)> {
    let mut off = 0usize;
    for (i, e) in extents.iter().enumerate() {
        let cap = (e.len * BLOCK - CHUNK_HEADER) as usize;
        let n = cap.min(payload.len() - off);
        let mut buf = AlignedBuf::zeroed((e.len * BLOCK) as usize);
        let next = extents.get(i + 1).filter(|_| off + n < payload.len());
        buf[..8].copy_from_slice(&CHUNK_MAGIC);
        buf[8..24].copy_from_slice(&label.uuid);
        buf[24..32].copy_from_slice(&generation.to_le_bytes());
        buf[32..36].copy_from_slice(&(i as u32).to_le_bytes());
        buf[36..40].copy_from_slice(&(e.len as u32).to_le_bytes());
        buf[40..44].copy_from_slice(&(n as u32).to_le_bytes());
        buf[44..52].copy_from_slice(&next.map_or(0, |x| x.start).to_le_bytes());
        buf[52..56].copy_from_slice(&next.map_or(0, |x| x.len as u32).to_le_bytes());
        buf[64..64 + n].copy_from_slice(&payload[off..off + n]);
        let c = chunk_crc(&buf[..64 + n]);
        buf[60..64].copy_from_slice(&c.to_le_bytes());
        dev.write_at(&buf, label.data_off + e.start * BLOCK)
            .map_err(|err| {
                StoreError::io(format!("checkpoint chunk {i} at block {}", e.start), err)
            })?;
        off += n;
        if next.is_none() {
            break;
        }
    }
    let first = extents.first().copied().unwrap_or(Extent::new(0, 0));
    Ok((
        first.start,
        first.len as u32,
        crc32c::crc32c(payload),
        payload.len() as u64,
    ))
}

fn chunk_crc(bytes: &[u8]) -> u32 {
    let h = crc32c::crc32c(&bytes[..60]);
    crc32c::crc32c_append(h, &bytes[64..])
}

/// Reads the checkpoint a slot names: its payload and the extents it occupies.
pub fn read(dev: &dyn Device, label: &Label, slot: &Slot) -> Result<(Vec<u8>, Vec<Extent>)> {
    let mut payload = Vec::with_capacity(slot.checkpoint_bytes.min(1 << 30) as usize);
    let mut extents = Vec::new();
    if slot.checkpoint_blocks == 0 {
        return Ok((payload, extents));
    }
    let mut cur = Extent::new(slot.checkpoint_block, u64::from(slot.checkpoint_blocks));
    let data_blocks = label.data_blocks();
    for i in 0u32.. {
        let what = || format!("checkpoint chunk {i} at data block {}", cur.start);
        if cur.end() > data_blocks || cur.len == 0 {
            return Err(StoreError::corrupt(format!(
                "{} lies outside the data area",
                what()
            )));
        }
        let mut buf = AlignedBuf::zeroed((cur.len * BLOCK) as usize);
        dev.read_at(&mut buf, label.data_off + cur.start * BLOCK)
            .map_err(|e| StoreError::io(what(), e))?;
        let mut r = Reader::new(&buf);
        let bad = |m: String| StoreError::corrupt(format!("{}: {m}", what()));
        let ok_magic = r.take(8, "magic").ok() == Some(&CHUNK_MAGIC[..]);
        let ok_uuid = r.take(16, "uuid").ok() == Some(&label.uuid[..]);
        if !ok_magic || !ok_uuid {
            return Err(bad("not a checkpoint chunk of this store".into()));
        }
        let generation = r.u64("generation").map_err(|e| bad(e.to_string()))?;
        let index = r.u32("index").map_err(|e| bad(e.to_string()))?;
        let blocks = r.u32("blocks").map_err(|e| bad(e.to_string()))?;
        let n = r.u32("payload").map_err(|e| bad(e.to_string()))? as u64;
        let next_start = r.u64("next").map_err(|e| bad(e.to_string()))?;
        let next_len = r.u32("next_len").map_err(|e| bad(e.to_string()))?;
        if generation != slot.generation || index != i || u64::from(blocks) != cur.len {
            return Err(bad(format!(
                "belongs to generation {generation} index {index}, expected {} index {i}",
                slot.generation
            )));
        }
        if n > cur.len * BLOCK - CHUNK_HEADER {
            return Err(bad(format!("payload length {n} exceeds the chunk")));
        }
        let stored = u32::from_le_bytes([buf[60], buf[61], buf[62], buf[63]]);
        let actual = chunk_crc(&buf[..(CHUNK_HEADER + n) as usize]);
        if stored != actual {
            return Err(StoreError::Checksum {
                what: what(),
                offset: label.data_off + cur.start * BLOCK,
                expected: stored,
                actual,
            });
        }
        payload.extend_from_slice(&buf[64..(64 + n) as usize]);
        extents.push(cur);
        if payload.len() as u64 > slot.checkpoint_bytes {
            return Err(bad("chain is longer than the slot says".into()));
        }
        if next_len == 0 {
            break;
        }
        cur = Extent::new(next_start, u64::from(next_len));
    }
    if payload.len() as u64 != slot.checkpoint_bytes
        || crc32c::crc32c(&payload) != slot.checkpoint_crc
    {
        return Err(StoreError::corrupt(format!(
            "checkpoint of generation {} has {} bytes with crc {:#010x}; the commit slot expects {} bytes with crc {:#010x}",
            slot.generation,
            payload.len(),
            crc32c::crc32c(&payload),
            slot.checkpoint_bytes,
            slot.checkpoint_crc
        )));
    }
    Ok((payload, extents))
}
