//! Framing. Every message is a 32-byte prefix, then `header_len` bytes of
//! header, then `payload_len` bytes of raw payload (object data, never
//! re-encoded). Lengths are checked against [`Limits`] from the prefix alone,
//! before anything is allocated; the header and the payload each carry a
//! crc32c.
//!
//! Prefix layout (little-endian): magic `TSP1` (4), version (1), kind (1),
//! opcode (2), tag (8), header_len (4), payload_len (4), header crc32c (4,
//! over prefix bytes 0..24 then the header), payload crc32c (4).

use bytes::Bytes;

/// Magic at the start of every frame.
pub const MAGIC: [u8; 4] = *b"TSP1";
/// Frame format version.
pub const FRAME_VERSION: u8 = 1;
/// Size of the fixed prefix.
pub const PREFIX_LEN: usize = 32;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client's first frame: who it wants to talk to.
    Hello = 1,
    /// Server's answer to Hello.
    Welcome = 2,
    /// A command.
    Request = 3,
    /// The reply to the request with the same tag.
    Response = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Request,
            4 => Kind::Response,
            _ => return None,
        })
    }
}

/// Size bounds a receiver enforces before allocating.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest header.
    pub max_header: u32,
    /// Largest payload.
    pub max_payload: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header: 1 << 20,
            max_payload: 16 << 20,
        }
    }
}

/// Why a frame was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first four bytes are not `TSP1`.
    #[error("bad frame magic {0:02x?} (not a Tessera peer?)")]
    BadMagic([u8; 4]),
    /// Frame version this build does not speak.
    #[error("unsupported frame version {0}")]
    Version(u8),
    /// Unknown frame kind byte.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// Header longer than the limit.
    #[error("header of {len} bytes exceeds the {max}-byte limit")]
    HeaderTooLarge {
        /// Announced length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// Payload longer than the limit.
    #[error("payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge {
        /// Announced length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// Header bytes do not match their crc.
    #[error("header checksum mismatch")]
    HeaderChecksum,
    /// Payload bytes do not match their crc.
    #[error("payload checksum mismatch")]
    PayloadChecksum,
    /// The frame fails its authentication tag.
    #[error("{0}")]
    Unauthentic(#[from] crate::auth::Unauthentic),
}

/// The decoded fixed prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Frame kind.
    pub kind: Kind,
    /// Command code (requests and responses), 0 otherwise.
    pub opcode: u16,
    /// Request tag, echoed by the response.
    pub tag: u64,
    /// Header bytes that follow.
    pub header_len: u32,
    /// Payload bytes after the header.
    pub payload_len: u32,
    /// crc32c of prefix bytes 0..24 and the header.
    pub header_crc: u32,
    /// crc32c of the payload.
    pub payload_crc: u32,
}

impl Prefix {
    /// Parses and bounds-checks a prefix.
    pub fn decode(b: &[u8; PREFIX_LEN], limits: &Limits) -> Result<Prefix, FrameError> {
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        if b[4] != FRAME_VERSION {
            return Err(FrameError::Version(b[4]));
        }
        let kind = Kind::from_u8(b[5]).ok_or(FrameError::Kind(b[5]))?;
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let p = Prefix {
            kind,
            opcode: u16::from_le_bytes([b[6], b[7]]),
            tag: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
            header_len: u32at(16),
            payload_len: u32at(20),
            header_crc: u32at(24),
            payload_crc: u32at(28),
        };
        if p.header_len > limits.max_header {
            return Err(FrameError::HeaderTooLarge {
                len: p.header_len,
                max: limits.max_header,
            });
        }
        if p.payload_len > limits.max_payload {
            return Err(FrameError::PayloadTooLarge {
                len: p.payload_len,
                max: limits.max_payload,
            });
        }
        Ok(p)
    }

    /// The fixed fields (prefix bytes 0..24): what a frame's
    /// authentication tag covers besides its header and payload.
    pub fn head_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = FRAME_VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&self.opcode.to_le_bytes());
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..20].copy_from_slice(&self.header_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Checks the header and payload against the prefix's crcs.
    pub fn verify(&self, header: &[u8], payload: &[u8]) -> Result<(), FrameError> {
        let h = crc32c::crc32c_append(crc32c::crc32c(&self.head_bytes()), header);
        if h != self.header_crc {
            return Err(FrameError::HeaderChecksum);
        }
        if crc32c::crc32c(payload) != self.payload_crc {
            return Err(FrameError::PayloadChecksum);
        }
        Ok(())
    }
}

/// A whole frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Frame kind.
    pub kind: Kind,
    /// Command code.
    pub opcode: u16,
    /// Tag.
    pub tag: u64,
    /// Encoded header.
    pub header: Bytes,
    /// Raw payload.
    pub payload: Bytes,
}

impl Frame {
    /// The 32-byte prefix for this frame (the caller writes prefix, header
    /// and payload with one vectored write; the payload is not copied).
    pub fn prefix(&self) -> [u8; PREFIX_LEN] {
        let head = self.head();
        let header_crc = crc32c::crc32c_append(crc32c::crc32c(&head), &self.header);
        let mut b = [0u8; PREFIX_LEN];
        b[..24].copy_from_slice(&head);
        b[24..28].copy_from_slice(&header_crc.to_le_bytes());
        b[28..32].copy_from_slice(&crc32c::crc32c(&self.payload).to_le_bytes());
        b
    }

    /// The fixed fields its authentication tag covers (prefix bytes 0..24).
    pub fn head(&self) -> [u8; 24] {
        Prefix {
            kind: self.kind,
            opcode: self.opcode,
            tag: self.tag,
            header_len: self.header.len() as u32,
            payload_len: self.payload.len() as u32,
            header_crc: 0,
            payload_crc: 0,
        }
        .head_bytes()
    }

    /// Prefix, header and payload in one buffer (tests and fuzzing).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = self.prefix().to_vec();
        v.extend_from_slice(&self.header);
        v.extend_from_slice(&self.payload);
        v
    }

    /// Decodes one whole frame from the start of `buf`; returns it and the
    /// bytes consumed, or `Ok(None)` if more bytes are needed.
    pub fn decode(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, FrameError> {
        let Some(pre) = buf.get(..PREFIX_LEN) else {
            return Ok(None);
        };
        let mut a = [0u8; PREFIX_LEN];
        a.copy_from_slice(pre);
        let p = Prefix::decode(&a, limits)?;
        let end = PREFIX_LEN + p.header_len as usize + p.payload_len as usize;
        let Some(rest) = buf.get(PREFIX_LEN..end) else {
            return Ok(None);
        };
        let (header, payload) = rest.split_at(p.header_len as usize);
        p.verify(header, payload)?;
        Ok(Some((
            Frame {
                kind: p.kind,
                opcode: p.opcode,
                tag: p.tag,
                header: Bytes::copy_from_slice(header),
                payload: Bytes::copy_from_slice(payload),
            },
            end,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let f = Frame {
            kind: Kind::Request,
            opcode: 7,
            tag: 99,
            header: Bytes::from_static(b"hdr"),
            payload: Bytes::from_static(b"payload"),
        };
        let v = f.to_vec();
        let l = Limits::default();
        assert_eq!(Frame::decode(&v, &l).unwrap(), Some((f.clone(), v.len())));
        assert_eq!(Frame::decode(&v[..v.len() - 1], &l).unwrap(), None);
        let mut bad = v.clone();
        bad[PREFIX_LEN] ^= 1;
        assert_eq!(Frame::decode(&bad, &l), Err(FrameError::HeaderChecksum));
        let mut bad = v.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(Frame::decode(&bad, &l), Err(FrameError::PayloadChecksum));
        let small = Limits {
            max_header: 2,
            max_payload: 100,
        };
        assert!(matches!(
            Frame::decode(&v, &small),
            Err(FrameError::HeaderTooLarge { .. })
        ));
        assert!(matches!(
            Frame::decode(b"GET / HTTP/1.1\r\n\r\n..............", &l),
            Err(FrameError::BadMagic(_))
        ));
    }
}
