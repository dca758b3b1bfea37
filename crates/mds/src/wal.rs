//! The MDS write-ahead log: a ring of 4 KiB blocks on its own file, written
//! with direct I/O and flushed once per batch of operations (group commit).
//! It exists because the KV's own durable commit costs a host-file-system
//! journal commit (~3 ms here) while a flushed overwrite of a preallocated
//! file costs ~0.1–0.3 ms: operations are durable once their batch is in
//! the log, and the KV is made durable only at checkpoints.
//!
//! Record: a 32-byte header — magic `TMWL`, version u16, flags u16, lsn
//! u64, payload length u32, crc32c u32 (over lsn, flags, length and
//! payload), 8 reserved bytes — then the payload, padded to whole blocks.
//! A record that does not fit before the end of the ring is preceded by a
//! one-block WRAP record and written at offset 0. Replay starts at the
//! position the last checkpoint recorded and accepts only consecutive lsns
//! with good crcs, so stale records of earlier laps and a torn last batch
//! (never acknowledged) end it.

use std::io;

use store::device::{AlignedBuf, BLOCK, Device};

const MAGIC: [u8; 4] = *b"TMWL";
const VERSION: u16 = 1;
const FLAG_WRAP: u16 = 1;
const HEADER: usize = 32;

/// The log: where the next record goes and where live records start.
pub struct Wal {
    dev: Box<dyn Device>,
    /// Offset of the next record.
    pub head: u64,
    /// Offset of the oldest record not yet in a durable KV checkpoint.
    pub tail: u64,
}

fn crc(lsn: u64, flags: u16, payload: &[u8]) -> u32 {
    let mut c = crc32c::crc32c(&lsn.to_le_bytes());
    c = crc32c::crc32c_append(c, &flags.to_le_bytes());
    c = crc32c::crc32c_append(c, &(payload.len() as u32).to_le_bytes());
    crc32c::crc32c_append(c, payload)
}

fn encode(lsn: u64, flags: u16, payload: &[u8]) -> AlignedBuf {
    let len = (HEADER + payload.len()).div_ceil(BLOCK as usize) * BLOCK as usize;
    let mut b = AlignedBuf::zeroed(len);
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b[6..8].copy_from_slice(&flags.to_le_bytes());
    b[8..16].copy_from_slice(&lsn.to_le_bytes());
    b[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[20..24].copy_from_slice(&crc(lsn, flags, payload).to_le_bytes());
    b[HEADER..HEADER + payload.len()].copy_from_slice(payload);
    b
}

impl Wal {
    /// A log on `dev` whose live records start at `tail` (the next record
    /// goes to `head`, found by [`Wal::replay`]).
    pub fn new(dev: Box<dyn Device>, tail: u64) -> Wal {
        Wal {
            dev,
            head: tail,
            tail,
        }
    }

    /// Ring size in bytes.
    pub fn capacity(&self) -> u64 {
        self.dev.len()
    }

    /// Bytes between tail and head (what a checkpoint would free).
    pub fn live(&self) -> u64 {
        if self.head >= self.tail {
            self.head - self.tail
        } else {
            self.capacity() - self.tail + self.head
        }
    }

    /// Bytes a record with `payload_len` bytes takes (with a possible WRAP).
    pub fn footprint(payload_len: usize) -> u64 {
        ((HEADER + payload_len).div_ceil(BLOCK as usize) as u64 + 1) * BLOCK
    }

    /// Appends one record and flushes the device. The caller keeps `live()
    /// + footprint` below the capacity (by checkpointing).
    pub fn append(&mut self, lsn: u64, payload: &[u8]) -> io::Result<()> {
        self.write_record(lsn, payload)?;
        self.flush()
    }

    /// Makes every record written so far durable.
    pub fn flush(&mut self) -> io::Result<()> {
        self.dev.flush()
    }

    /// Writes one record after the head without flushing (group commit:
    /// several records, then one [`Wal::flush`]).
    pub fn write_record(&mut self, lsn: u64, payload: &[u8]) -> io::Result<()> {
        self.write_record_at(lsn, payload).map(|_| ())
    }

    /// [`Wal::write_record`], returning the offset the record went to.
    /// Refuses a record that would reach the live records (the ring is
    /// full until the tail moves).
    pub fn write_record_at(&mut self, lsn: u64, payload: &[u8]) -> io::Result<u64> {
        let rec = encode(lsn, 0, payload);
        let len = rec.len() as u64;
        if len + BLOCK > self.capacity() {
            return Err(io::Error::other(format!(
                "log record of {len} bytes does not fit a {}-byte log",
                self.capacity()
            )));
        }
        let mut at = if self.head >= self.capacity() {
            0
        } else {
            self.head
        };
        // What the record takes from the free space: itself, and when it
        // wraps the whole rest of the ring before it (the WRAP record and
        // the gap). One block always stays free between head and tail.
        let takes = if at + len > self.capacity() {
            self.capacity() - at + len
        } else {
            len
        };
        if self.live() + takes + BLOCK > self.capacity() {
            return Err(io::Error::other(format!(
                "log full: {} of {} bytes live",
                self.live(),
                self.capacity()
            )));
        }
        if at + len > self.capacity() {
            self.dev.write_at(&encode(lsn, FLAG_WRAP, &[]), at)?;
            at = 0;
        }
        self.dev.write_at(&rec, at)?;
        self.head = at + len;
        Ok(at)
    }

    /// Marks everything up to the head as checkpointed.
    pub fn checkpointed(&mut self) {
        self.tail = self.head;
    }

    /// Zeroes everything from `at` (a record's offset between tail and
    /// head) to the head, flushes, and makes `at` the head: the records
    /// there can never be read back, not even after a crash.
    pub fn cut(&mut self, at: u64) -> io::Result<()> {
        let cap = self.capacity();
        let head = self.head.min(cap);
        let spans: Vec<(u64, u64)> = if at <= head {
            vec![(at, head)]
        } else {
            vec![(at, cap), (0, head)]
        };
        let zero = AlignedBuf::zeroed(1 << 20);
        for (from, to) in spans {
            let mut p = from;
            while p < to {
                let n = (to - p).min(1 << 20);
                self.dev.write_at(&zero[..n as usize], p)?;
                p += n;
            }
        }
        self.dev.flush()?;
        self.head = at;
        Ok(())
    }

    /// The record at `at`, if a whole one with a good crc is there.
    pub fn read_record(&self, at: u64) -> io::Result<Option<Record>> {
        let cap = self.capacity();
        if at + BLOCK > cap {
            return Ok(None);
        }
        let mut hb = AlignedBuf::zeroed(BLOCK as usize);
        self.dev.read_at(&mut hb, at)?;
        if hb[..4] != MAGIC || u16::from_le_bytes([hb[4], hb[5]]) != VERSION {
            return Ok(None);
        }
        let flags = u16::from_le_bytes([hb[6], hb[7]]);
        let lsn = u64::from_le_bytes(hb[8..16].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(hb[16..20].try_into().unwrap_or_default()) as usize;
        let want = u32::from_le_bytes(hb[20..24].try_into().unwrap_or_default());
        if (HEADER + len) as u64 > cap {
            return Ok(None);
        }
        let total = (HEADER + len).div_ceil(BLOCK as usize) * BLOCK as usize;
        if at + total as u64 > cap {
            return Ok(None);
        }
        let body = if total > BLOCK as usize {
            let mut b = AlignedBuf::zeroed(total);
            self.dev.read_at(&mut b, at)?;
            b
        } else {
            hb
        };
        let payload = &body[HEADER..HEADER + len];
        if crc(lsn, flags, payload) != want {
            return Ok(None);
        }
        Ok(Some(Record {
            lsn,
            wrap: flags & FLAG_WRAP != 0,
            payload: payload.to_vec(),
            next: at + total as u64,
        }))
    }

    /// Reads records from the tail: calls `f(lsn, payload)` for each with
    /// lsn `first`, `first + 1`, …, and leaves the head after the last.
    /// Returns how many were read.
    pub fn replay(
        &mut self,
        first: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
    ) -> io::Result<u64> {
        self.replay_at(first, &mut |lsn, _, p| f(lsn, p))
    }

    /// [`Wal::replay`], also giving each record's offset.
    pub fn replay_at(&mut self, first: u64, f: &mut RecordVisitor<'_>) -> io::Result<u64> {
        let cap = self.capacity();
        let mut at = self.tail;
        let mut lsn = first;
        let mut n = 0;
        let mut wrapped = false;
        loop {
            if at >= cap {
                at = 0;
            }
            let Some(rec) = self.read_record(at)? else {
                break;
            };
            if rec.lsn != lsn {
                break;
            }
            if rec.wrap {
                if wrapped {
                    break;
                }
                wrapped = true;
                at = 0;
                continue;
            }
            f(lsn, at, &rec.payload)?;
            n += 1;
            lsn += 1;
            at = rec.next;
        }
        self.head = at;
        Ok(n)
    }
}

/// A visitor of (lsn, offset, payload) during replay.
pub type RecordVisitor<'a> = dyn FnMut(u64, u64, &[u8]) -> io::Result<()> + 'a;

/// One record read back from the log.
pub struct Record {
    /// Its lsn.
    pub lsn: u64,
    /// A WRAP record (the next record is at offset 0).
    pub wrap: bool,
    /// What it carries.
    pub payload: Vec<u8>,
    /// Offset just after it.
    pub next: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::device::MemDevice;

    #[test]
    fn records_replay_in_order_across_the_wrap() {
        let dev = std::sync::Arc::new(MemDevice::new(64 * BLOCK));
        let mut w = Wal::new(Box::new(dev.clone()), 0);
        let mut lsn = 1;
        let mut tail_lsn = 1;
        for round in 0..40u64 {
            let payload = vec![round as u8; (round as usize * 1000) % 9000];
            if w.live() + Wal::footprint(payload.len()) > w.capacity() / 2 {
                w.checkpointed();
                tail_lsn = lsn;
            }
            w.append(lsn, &payload).unwrap();
            lsn += 1;
        }
        let mut r = Wal::new(Box::new(dev), w.tail);
        let mut got = Vec::new();
        let n = r
            .replay(tail_lsn, &mut |l, p| {
                got.push((l, p.len()));
                Ok(())
            })
            .unwrap();
        assert_eq!(n, lsn - tail_lsn);
        assert_eq!(r.head, w.head);
        assert_eq!(got.first().map(|g| g.0), Some(tail_lsn));
    }

    #[test]
    fn a_record_that_would_wrap_onto_live_records_is_refused() {
        // 64 blocks; live records from block 7 to 50; a 15-block record
        // would wrap (14 blocks left at the end) and cover blocks 0..15,
        // past the tail at 7, though the ring has 20 blocks free in all.
        let dev = std::sync::Arc::new(MemDevice::new(64 * BLOCK));
        let mut w = Wal::new(Box::new(dev.clone()), 0);
        let mut lsn = 1;
        while w.head < 7 * BLOCK {
            w.append(lsn, b"x").unwrap();
            lsn += 1;
        }
        w.checkpointed();
        let (tail, first) = (w.tail, lsn);
        while w.head < 50 * BLOCK {
            w.append(lsn, &[1u8; 3000]).unwrap();
            lsn += 1;
        }
        let before = w.head;
        assert!(w.append(lsn, &[2u8; 15 * 4096 - 100]).is_err());
        assert_eq!(w.head, before, "a refused record moves nothing");
        // Everything live still reads back.
        let mut r = Wal::new(Box::new(dev), tail);
        assert_eq!(r.replay(first, &mut |_, _| Ok(())).unwrap(), lsn - first);
    }

    #[test]
    fn stale_and_torn_records_end_replay() {
        let dev = std::sync::Arc::new(MemDevice::new(16 * BLOCK));
        let mut w = Wal::new(Box::new(dev.clone()), 0);
        w.append(1, b"one").unwrap();
        w.append(2, &[7u8; 5000]).unwrap();
        // tear the second record's last block
        let mut z = AlignedBuf::zeroed(BLOCK as usize);
        z[0] = 1;
        dev.write_at(&z, 2 * BLOCK).unwrap();
        let mut r = Wal::new(Box::new(dev.clone()), 0);
        assert_eq!(r.replay(1, &mut |_, _| Ok(())).unwrap(), 1);
        assert_eq!(r.head, BLOCK);
        // asking for a later lsn at the same place finds nothing (stale lap)
        let mut r = Wal::new(Box::new(dev), 0);
        assert_eq!(r.replay(5, &mut |_, _| Ok(())).unwrap(), 0);
    }
}
