//! A device that models what a power cut and a failing disk do, for crash and
//! error tests. It keeps two images: what a reader sees now (every completed
//! write) and what survives power loss (only writes followed by a flush).
//!
//! Invariant: `durable` equals the initial image plus every write that
//! completed before the last successful flush, applied in order.

use std::io;
use std::ops::Range;
use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Device, SECTOR, check_io};

/// What a simulated power cut does to writes that were not yet flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unflushed write is lost.
    DropAll,
    /// Every unflushed write is lost except possibly a torn prefix of the last one.
    TearLast,
    /// Each unflushed write independently survives whole, is lost, or is torn
    /// into a random subset of its 512-byte sectors (the harshest model: a
    /// drive cache reorders writes freely).
    Reorder,
}

/// Injected I/O errors, by device byte range.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Reads overlapping any of these ranges fail with EIO.
    pub read_errors: Vec<Range<u64>>,
    /// Writes overlapping any of these ranges fail with EIO.
    pub write_errors: Vec<Range<u64>>,
    /// Flushes fail with EIO.
    pub fail_flush: bool,
}

struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    faults: FaultConfig,
    powered: bool,
    cut_after: Option<u64>,
    writes: u64,
    flushes: u64,
}

/// An in-memory device with volatile write cache, power cuts and EIO injection.
pub struct FaultDevice {
    state: Mutex<State>,
    len: u64,
}

fn overlaps(ranges: &[Range<u64>], off: u64, len: u64) -> bool {
    ranges.iter().any(|r| off < r.end && r.start < off + len)
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} error"))
}

impl FaultDevice {
    /// A zeroed device of `len` bytes whose initial contents are durable.
    pub fn new(len: u64) -> Self {
        Self::from_image(vec![0; (len - len % super::BLOCK) as usize])
    }

    /// A device whose durable and current contents are `image`.
    pub fn from_image(image: Vec<u8>) -> Self {
        let len = image.len() as u64;
        FaultDevice {
            state: Mutex::new(State {
                current: image.clone(),
                durable: image,
                pending: Vec::new(),
                faults: FaultConfig::default(),
                powered: true,
                cut_after: None,
                writes: 0,
                flushes: 0,
            }),
            len,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the injected faults.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.lock().faults = faults;
    }

    /// Cuts power: every later I/O fails, as if the device vanished.
    pub fn cut_power(&self) {
        self.lock().powered = false;
    }

    /// Cuts power when `ops` more writes or flushes have been attempted: the
    /// `ops`-th one fails and so does everything after it.
    pub fn cut_after(&self, ops: u64) {
        self.lock().cut_after = Some(ops);
    }

    /// Whether power is still on.
    pub fn powered(&self) -> bool {
        self.lock().powered
    }

    /// Number of writes and flushes issued so far (to pick cut points).
    pub fn counters(&self) -> (u64, u64) {
        let s = self.lock();
        (s.writes, s.flushes)
    }

    /// What the medium holds after a power cut now: the durable image plus
    /// the unflushed writes that `mode` lets survive, chosen by `seed`.
    pub fn crash_image(&self, mode: CrashMode, seed: u64) -> Vec<u8> {
        let s = self.lock();
        let mut img = s.durable.clone();
        let mut rng = SmallRng::seed_from_u64(seed);
        let n = s.pending.len();
        for (i, (off, data)) in s.pending.iter().enumerate() {
            let o = *off as usize;
            let sectors = data.len() / SECTOR as usize;
            match mode {
                CrashMode::DropAll => {}
                CrashMode::TearLast => {
                    if i + 1 == n {
                        let keep = rng.random_range(0..=sectors) * SECTOR as usize;
                        img[o..o + keep].copy_from_slice(&data[..keep]);
                    }
                }
                CrashMode::Reorder => match rng.random_range(0..3u8) {
                    0 => {}
                    1 => img[o..o + data.len()].copy_from_slice(data),
                    _ => {
                        for sct in 0..sectors {
                            if rng.random_bool(0.5) {
                                let a = sct * SECTOR as usize;
                                let b = a + SECTOR as usize;
                                img[o + a..o + b].copy_from_slice(&data[a..b]);
                            }
                        }
                    }
                },
            }
        }
        img
    }

    /// Flips bits in both images at a byte offset (bit-rot on the medium).
    pub fn corrupt(&self, offset: u64, xor: u8) {
        let mut s = self.lock();
        let o = offset as usize;
        if o < s.current.len() {
            s.current[o] ^= xor;
            s.durable[o] ^= xor;
        }
    }
}

impl State {
    /// Counts one write or flush against the scheduled power cut.
    fn tick(&mut self) -> io::Result<()> {
        if let Some(n) = &mut self.cut_after {
            if *n == 0 {
                self.powered = false;
                self.cut_after = None;
            } else {
                *n -= 1;
            }
        }
        if self.powered {
            Ok(())
        } else {
            Err(eio("power-off"))
        }
    }
}

impl Device for FaultDevice {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_io(buf, offset, self.len)?;
        let s = self.lock();
        if !s.powered {
            return Err(eio("power-off read"));
        }
        if overlaps(&s.faults.read_errors, offset, buf.len() as u64) {
            return Err(eio("read"));
        }
        let o = offset as usize;
        buf.copy_from_slice(&s.current[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_io(buf, offset, self.len)?;
        let mut s = self.lock();
        s.tick()?;
        if overlaps(&s.faults.write_errors, offset, buf.len() as u64) {
            return Err(eio("write"));
        }
        let o = offset as usize;
        s.current[o..o + buf.len()].copy_from_slice(buf);
        s.pending.push((offset, buf.to_vec()));
        s.writes += 1;
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        if s.faults.fail_flush {
            return Err(eio("flush"));
        }
        let pending = std::mem::take(&mut s.pending);
        for (off, data) in pending {
            let o = off as usize;
            s.durable[o..o + data.len()].copy_from_slice(&data);
        }
        s.flushes += 1;
        Ok(())
    }
    fn describe(&self) -> String {
        "fault-injecting memory device".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::AlignedBuf;

    fn buf(v: u8, n: usize) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(n);
        b.fill(v);
        b
    }

    #[test]
    fn unflushed_writes_are_lost_on_drop_all() {
        let d = FaultDevice::new(8192);
        d.write_at(&buf(1, 4096)[..512], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&buf(2, 4096)[..512], 512).unwrap();
        let img = d.crash_image(CrashMode::DropAll, 1);
        assert_eq!(img[0], 1);
        assert_eq!(img[512], 0);
        let mut b = buf(0, 512);
        d.read_at(&mut b[..512], 512).unwrap();
        assert_eq!(b[0], 2, "reads see unflushed writes");
    }

    #[test]
    fn torn_write_keeps_a_sector_prefix() {
        let d = FaultDevice::new(8192);
        d.write_at(&buf(7, 4096), 0).unwrap();
        for seed in 0..20 {
            let img = d.crash_image(CrashMode::TearLast, seed);
            let kept = img[..4096].iter().take_while(|&&b| b == 7).count();
            assert_eq!(kept % 512, 0);
            assert!(img[kept..4096].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn injected_errors_and_power_cut() {
        let d = FaultDevice::new(8192);
        d.set_faults(FaultConfig {
            read_errors: std::iter::once(4096..4097).collect(),
            ..Default::default()
        });
        let mut b = buf(0, 512);
        assert!(d.read_at(&mut b[..512], 4096).is_err());
        assert!(d.read_at(&mut b[..512], 0).is_ok());
        d.cut_power();
        assert!(d.write_at(&b[..512], 0).is_err());
        assert!(d.flush().is_err());
    }
}
