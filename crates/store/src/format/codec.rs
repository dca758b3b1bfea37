//! Little-endian encoding helpers shared by every on-disk structure and the
//! journal. [`Reader`] never panics: every read is bounds-checked and a
//! short buffer is a [`DecodeError`] naming the field.

/// A field could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct DecodeError {
    /// Which field or structure.
    pub what: &'static str,
    /// What was wrong with it.
    pub reason: String,
}

impl DecodeError {
    /// A decode error for `what`.
    pub fn new(what: &'static str, reason: impl Into<String>) -> Self {
        DecodeError {
            what,
            reason: reason.into(),
        }
    }
}

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub struct Writer {
    /// The encoded bytes so far.
    pub buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Appends a u16.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends raw bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    /// Appends a u32 length followed by the bytes.
    pub fn blob(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.bytes(v);
    }
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Reads little-endian fields from a byte slice, bounds-checked.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Current position.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::new(
                what,
                format!("needs {n} bytes, only {} left", self.remaining()),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// A fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }
    /// A u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    /// A u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// A u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// A u32-length-prefixed byte string of at most `max` bytes.
    pub fn blob(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(DecodeError::new(
                what,
                format!("length {n} exceeds limit {max}"),
            ));
        }
        self.take(n, what)
    }
    /// A count of items each at least `min_item` bytes, checked against what is left
    /// so a corrupt count cannot make the caller allocate.
    pub fn count(&mut self, min_item: usize, what: &'static str) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(DecodeError::new(
                what,
                format!(
                    "count {n} cannot fit in the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        Ok(n)
    }
}

/// crc32c of `data`.
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_short_input() {
        let mut w = Writer::new();
        w.u8(1);
        w.u16(2);
        w.u32(3);
        w.u64(4);
        w.blob(b"hi");
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.u16("b").unwrap(), 2);
        assert_eq!(r.u32("c").unwrap(), 3);
        assert_eq!(r.u64("d").unwrap(), 4);
        assert_eq!(r.blob(10, "e").unwrap(), b"hi");
        assert!(r.u8("f").is_err());
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(r.count(1, "n").is_err());
    }
}
