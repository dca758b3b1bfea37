//! A heap buffer aligned to [`BLOCK`](super::BLOCK) bytes, as O_DIRECT needs
//! (`Vec<u8>` gives no alignment guarantee). Its length is always a multiple of
//! the block size and its contents start zeroed.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use super::BLOCK;

/// Zero-initialised, 4 KiB-aligned byte buffer whose length is a multiple of 4 KiB.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes, rounded up to whole blocks.
    pub fn zeroed(len: usize) -> Self {
        let len = (len.max(1)).next_multiple_of(BLOCK as usize);
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len }
    }

    /// A buffer holding a copy of `data` followed by zero padding to a block boundary.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut buf = Self::zeroed(data.len());
        buf[..data.len()].copy_from_slice(data);
        buf
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, BLOCK as usize) {
            Ok(l) => l,
            Err(_) => panic!("buffer of {len} bytes exceeds the address space"),
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this exact layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded_up() {
        let b = AlignedBuf::zeroed(5000);
        assert_eq!(b.len(), 8192);
        assert_eq!(b.as_ptr() as usize % BLOCK as usize, 0);
        assert!(b.iter().all(|&x| x == 0));
        let c = AlignedBuf::from_slice(b"abc");
        assert_eq!(&c[..4], b"abc\0");
    }
}
