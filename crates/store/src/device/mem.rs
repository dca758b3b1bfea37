//! An in-memory device: fast tests and simulations. Writes are immediately
//! "durable" (there is no power to lose); use [`super::FaultDevice`] to model
//! crashes.

use std::io;
use std::sync::RwLock;

use super::{Device, check_io};

/// A device backed by a byte vector.
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `len` bytes (rounded down to 4 KiB).
    pub fn new(len: u64) -> Self {
        let len = len - len % super::BLOCK;
        MemDevice {
            bytes: RwLock::new(vec![0; len as usize]),
        }
    }

    /// A device holding a copy of `image`.
    pub fn from_image(image: Vec<u8>) -> Self {
        MemDevice {
            bytes: RwLock::new(image),
        }
    }

    /// A copy of the whole device contents.
    pub fn image(&self) -> Vec<u8> {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Flips bits at a byte offset (tests of checksum detection).
    pub fn corrupt(&self, offset: u64, xor: u8) {
        let mut b = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = b.get_mut(offset as usize) {
            *x ^= xor;
        }
    }
}

impl Device for MemDevice {
    fn len(&self) -> u64 {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let b = self.bytes.read().unwrap_or_else(|e| e.into_inner());
        check_io(buf, offset, b.len() as u64)?;
        let o = offset as usize;
        buf.copy_from_slice(&b[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut b = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        check_io(buf, offset, b.len() as u64)?;
        let o = offset as usize;
        b[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "memory device".into()
    }
}
