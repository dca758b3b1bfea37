//! Reading and writing frames on async streams. The prefix is read first
//! and its lengths checked against the limits before the header and payload
//! buffers are allocated; the payload becomes `Bytes` without a copy.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proto::auth::{FrameSeal, TAG_LEN};
use proto::frame::{PREFIX_LEN, Prefix};
use proto::{Frame, FrameError, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why reading a frame stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The peer closed cleanly between frames.
    #[error("connection closed")]
    Closed,
    /// No frame started within the idle timeout.
    #[error("idle for {0:?}")]
    Idle(Duration),
    /// A frame started but did not finish within the I/O timeout.
    #[error("slow peer: frame not complete within {0:?}")]
    Slow(Duration),
    /// The bytes are not a valid frame; `tag` is known when the prefix parsed.
    #[error("bad frame: {err}")]
    Bad {
        /// What was wrong.
        err: FrameError,
        /// The request's tag, when the prefix was readable.
        tag: Option<u64>,
        /// Whether the stream is still in sync (lengths were sane).
        in_sync: bool,
    },
    /// Socket error.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one frame: waits up to `idle` for it to start, then `io` for the
/// rest; on an authenticated connection `seal` checks (and decrypts) it.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: &Limits,
    idle: Duration,
    io: Duration,
    seal: Option<&mut FrameSeal>,
) -> Result<Frame, ReadError> {
    let p = read_prefix(r, limits, idle, io).await?;
    read_body(r, &p, io, seal).await
}

/// Reads and checks a frame's prefix only, so a server can reserve memory
/// for the announced lengths before it reads (and allocates) the body.
pub async fn read_prefix<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: &Limits,
    idle: Duration,
    io: Duration,
) -> Result<Prefix, ReadError> {
    let mut pre = [0u8; PREFIX_LEN];
    let first = match tokio::time::timeout(idle, r.read(&mut pre)).await {
        Err(_) => return Err(ReadError::Idle(idle)),
        Ok(Ok(0)) => return Err(ReadError::Closed),
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(e.into()),
    };
    match tokio::time::timeout(io, r.read_exact(&mut pre[first..])).await {
        Err(_) => return Err(ReadError::Slow(io)),
        Ok(Err(e)) => return Err(e.into()),
        Ok(Ok(_)) => {}
    }
    Prefix::decode(&pre, limits).map_err(|err| {
        let tag = (pre[..4] == proto::frame::MAGIC)
            .then(|| u64::from_le_bytes(pre[8..16].try_into().unwrap_or([0; 8])));
        ReadError::Bad {
            err,
            tag,
            in_sync: false,
        }
    })
}

/// Reads the header and payload a prefix announced and checks their crcs;
/// with a `seal` (an authenticated connection) also the tag that follows
/// them, decrypting in the encrypted mode. A frame that fails its tag
/// leaves the stream out of sync (the connection must close).
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    p: &Prefix,
    io: Duration,
    seal: Option<&mut FrameSeal>,
) -> Result<Frame, ReadError> {
    let sealed = seal.is_some();
    let hlen = p.header_len as usize;
    let body = async {
        let body = read_n(r, hlen + p.payload_len as usize).await?;
        let mut tag = [0u8; TAG_LEN];
        if sealed {
            r.read_exact(&mut tag).await?;
        }
        Ok::<_, std::io::Error>((body, tag))
    };
    let (mut body, tag) = match tokio::time::timeout(io, body).await {
        Err(_) => return Err(ReadError::Slow(io)),
        Ok(r) => r?,
    };
    let bad = |err| ReadError::Bad {
        err,
        tag: Some(p.tag),
        in_sync: !sealed,
    };
    let (h, pl) = body.split_at(hlen);
    p.verify(h, pl).map_err(bad)?;
    if let Some(s) = seal {
        body = s
            .open(&p.head_bytes(), hlen, body, &tag)
            .map_err(|e| bad(FrameError::Unauthentic(e)))?;
    }
    let header = body.split_to(hlen);
    Ok(Frame {
        kind: p.kind,
        opcode: p.opcode,
        tag: p.tag,
        header: header.freeze(),
        payload: body.freeze(),
    })
}

/// Reads exactly `n` bytes into a fresh buffer without zero-filling it first.
async fn read_n<R: AsyncRead + Unpin>(r: &mut R, n: usize) -> std::io::Result<BytesMut> {
    let mut b = BytesMut::with_capacity(n);
    while b.len() < n {
        let mut limited = (&mut *r).take((n - b.len()) as u64);
        if limited.read_buf(&mut b).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(b)
}

/// Writes one frame (prefix, header, payload; the payload is not copied).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    w.write_all(&f.prefix()).await?;
    w.write_all(&f.header).await?;
    if !f.payload.is_empty() {
        w.write_all(&f.payload).await?;
    }
    Ok(())
}

/// Seals `f` for an authenticated connection: the frame as it goes on the
/// wire (encrypted in the encrypted mode) and the tag to write after it.
pub fn seal_frame(seal: &mut FrameSeal, f: Frame) -> (Frame, [u8; TAG_LEN]) {
    let head = f.head();
    let (header, payload, tag) = seal.seal(&head, f.header, f.payload);
    (
        Frame {
            header,
            payload,
            ..f
        },
        tag,
    )
}

/// A frame with an encoded header.
pub fn frame<T: serde::Serialize>(
    kind: proto::Kind,
    opcode: u16,
    tag: u64,
    header: &T,
    payload: Bytes,
) -> Frame {
    Frame {
        kind,
        opcode,
        tag,
        header: Bytes::from(proto::msg::encode(header)),
        payload,
    }
}
