//! A connection driven by hand, one frame at a time, after the same
//! handshake as [`crate::Connection`]: for tests and tools that must send
//! what the pipelined client never would (undecodable headers, replays,
//! frames after a tampered one).

use std::time::Duration;

use proto::auth::FrameSeal;
use proto::{Frame, Limits};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::auth::Identity;
use crate::connection::{ConnConfig, ConnError, handshake};
use crate::frame_io::{ReadError, read_frame, seal_frame, write_frame};

/// One hand-driven connection.
pub struct RawSession {
    /// The socket.
    pub stream: TcpStream,
    /// Seals outgoing frames (`None` on an `--insecure` OSD).
    pub send: Option<FrameSeal>,
    /// Opens incoming frames.
    pub recv: Option<FrameSeal>,
}

impl RawSession {
    /// Connects to `addr` and authenticates as `id` (cluster, server id
    /// and mode from `cfg`).
    pub async fn open(
        addr: &str,
        cfg: &ConnConfig,
        id: &Identity,
    ) -> Result<RawSession, ConnError> {
        let cerr = |e: std::io::Error| ConnError::Connect {
            addr: addr.into(),
            why: e.to_string(),
        };
        let mut stream = TcpStream::connect(addr).await.map_err(cerr)?;
        let seals = {
            let (mut rd, mut wr) = stream.split();
            handshake(&mut rd, &mut wr, id, cfg, cerr).await?.seals
        };
        let (send, recv) = match seals {
            Some((s, r)) => (Some(s), Some(r)),
            None => (None, None),
        };
        Ok(RawSession { stream, send, recv })
    }

    /// Seals `f` and returns the bytes that would go on the wire (to
    /// tamper with before [`RawSession::send_bytes`]).
    pub fn seal(&mut self, f: Frame) -> Vec<u8> {
        match self.send.as_mut() {
            Some(s) => {
                let (f, tag) = seal_frame(s, f);
                let mut v = f.to_vec();
                v.extend_from_slice(&tag);
                v
            }
            None => f.to_vec(),
        }
    }

    /// Sends bytes as they are.
    pub async fn send_bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(b).await
    }

    /// Seals and sends one frame.
    pub async fn send(&mut self, f: Frame) -> std::io::Result<()> {
        let b = self.seal(f);
        self.send_bytes(&b).await
    }

    /// Reads one frame (checked and opened with the receive seal).
    pub async fn recv(&mut self, timeout: Duration) -> Result<Frame, ReadError> {
        let limits = Limits {
            max_header: 16 << 20,
            max_payload: u32::MAX,
        };
        read_frame(
            &mut self.stream,
            &limits,
            timeout,
            timeout,
            self.recv.as_mut(),
        )
        .await
    }

    /// Writes a frame unsealed (what an attacker without the key can do).
    pub async fn send_unsealed(&mut self, f: &Frame) -> std::io::Result<()> {
        write_frame(&mut self.stream, f).await
    }
}
