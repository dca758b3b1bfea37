//! The write side of a connection, shared by the connection's writer task
//! and by the tasks (or blocked FUSE threads) that have a frame to send.
//!
//! A frame normally goes to the writer task through a channel, which
//! batches what is queued into one system call. That costs a thread
//! wake-up per message when traffic is light, and on a small machine a
//! wake-up (tens of microseconds) is a good part of a metadata round trip.
//! So a sender whose frame is small first tries [`send_now`]: when nobody
//! holds the wire, it seals the frame and hands it to the socket without
//! waiting (`try_write_vectored`). Should the socket take only part of
//! it, a task finishes the rest while still holding the wire, so frames
//! never interleave; a sender never waits on the socket itself, so being
//! cancelled cannot leave half a frame behind.

use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proto::Frame;
use proto::auth::FrameSeal;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;

use crate::frame_io::seal_frame;

/// Frames whose header and payload together exceed this always go
/// through the writer task (bulk data gains nothing from skipping it).
pub const DIRECT_MAX: usize = 64 << 10;

/// The payload is written in pieces this large by
/// [`Wire::write_progress`].
pub const WRITE_CHUNK: usize = 256 << 10;

/// A connection's socket write half and its sealing state.
pub struct Wire {
    wr: BufWriter<OwnedWriteHalf>,
    seal: Option<FrameSeal>,
}

/// A [`Wire`] shared by the writer task and direct senders, and whether
/// the connection is broken (a write failed or stopped part-way: nothing
/// more may follow on it).
#[derive(Clone)]
pub struct SharedWire {
    io: Arc<tokio::sync::Mutex<Wire>>,
    broken: Arc<AtomicBool>,
}

impl SharedWire {
    /// Waits for the wire (the writer task).
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Wire> {
        self.io.lock().await
    }

    /// Marks the connection broken: no sender writes on it any more.
    pub fn break_off(&self) {
        self.broken.store(true, Ordering::SeqCst);
    }

    /// Whether the connection is broken.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// A guard that marks the connection broken when dropped: a writer
    /// task holds one, so a writer that ends — or is aborted part-way
    /// through a frame — lets no direct sender write after it.
    pub fn break_on_drop(&self) -> BreakOnDrop {
        BreakOnDrop(self.broken.clone())
    }
}

/// See [`SharedWire::break_on_drop`].
pub struct BreakOnDrop(Arc<AtomicBool>);

impl Drop for BreakOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Wire {
    /// The wire over `wr`, sealing with `seal` on an authenticated
    /// connection.
    pub fn shared(wr: BufWriter<OwnedWriteHalf>, seal: Option<FrameSeal>) -> SharedWire {
        SharedWire {
            io: Arc::new(tokio::sync::Mutex::new(Wire { wr, seal })),
            broken: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Puts `f` in the buffer, sealed (the writer task; [`Wire::flush`]
    /// sends). The writer task flushes before it lets the wire go, so a
    /// direct sender always finds the buffer empty.
    pub async fn write(&mut self, f: Frame) -> std::io::Result<()> {
        self.write_progress(f, || {}).await
    }

    /// `f` as it goes on the wire, and the tag that follows it on an
    /// authenticated connection (sealing advances the nonce: call it only
    /// for a frame that is then written).
    fn seal(&mut self, f: Frame) -> (Frame, Option<[u8; proto::auth::TAG_LEN]>) {
        match self.seal.as_mut() {
            Some(s) => {
                let (f, t) = seal_frame(s, f);
                (f, Some(t))
            }
            None => (f, None),
        }
    }

    /// [`Wire::write`], calling `progress` after each [`WRITE_CHUNK`] of
    /// the payload (a watchdog tells a slow reader from a stalled one).
    pub async fn write_progress(&mut self, f: Frame, progress: impl Fn()) -> std::io::Result<()> {
        let (f, tag) = self.seal(f);
        self.wr.write_all(&f.prefix()).await?;
        self.wr.write_all(&f.header).await?;
        for chunk in f.payload.chunks(WRITE_CHUNK) {
            self.wr.write_all(chunk).await?;
            progress();
        }
        if let Some(t) = tag {
            self.wr.write_all(&t).await?;
        }
        Ok(())
    }

    /// Sends what is buffered.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.wr.flush().await
    }

    /// Flushes and closes the write direction.
    pub async fn shutdown(&mut self) {
        let _ = self.wr.flush().await;
        let _ = self.wr.shutdown().await;
    }
}

/// What [`send_now`] did with a frame.
pub enum Sent {
    /// On the socket (or being finished by a task that holds the wire).
    Done,
    /// Not sent: the wire was busy or the frame large; queue it for the
    /// writer task.
    Queue(Frame),
    /// The socket failed: the connection is broken.
    Failed(std::io::Error),
}

/// Sends `f` without waiting when the wire is free and `f` is small; a
/// rest the socket did not take is finished by a task within `finish`
/// (else the connection is broken off and its write direction closed, so
/// the peer sees it end rather than half a frame). A broken connection
/// takes nothing.
pub fn send_now(wire: &SharedWire, f: Frame, finish: Duration) -> Sent {
    if f.header.len() + f.payload.len() > DIRECT_MAX {
        return Sent::Queue(f);
    }
    let Ok(mut g) = wire.io.clone().try_lock_owned() else {
        return Sent::Queue(f);
    };
    if wire.is_broken() {
        return Sent::Failed(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "the connection broke off",
        ));
    }
    if !g.wr.buffer().is_empty() {
        return Sent::Queue(f);
    }
    let (f, tag) = g.seal(f);
    let prefix = f.prefix();
    let tag: &[u8] = tag.as_ref().map_or(&[], |t| &t[..]);
    let parts: [&[u8]; 4] = [&prefix, &f.header, &f.payload, tag];
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let slices = parts.map(IoSlice::new);
    let n = match g.wr.get_ref().try_write_vectored(&slices) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ) =>
        {
            0
        }
        Err(e) => {
            wire.break_off();
            return Sent::Failed(e);
        }
    };
    if n == total {
        return Sent::Done;
    }
    let rest: Vec<u8> = parts.concat().split_off(n);
    let wire = wire.clone();
    tokio::spawn(async move {
        let w = g.wr.get_mut();
        let done = tokio::time::timeout(finish, w.write_all(&rest)).await;
        if !matches!(done, Ok(Ok(()))) {
            wire.break_off();
            let _ = w.shutdown().await;
        }
    });
    Sent::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame_io::{frame, read_frame};
    use bytes::Bytes;
    use proto::{Kind, Limits};
    use tokio::io::BufReader;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (SharedWire, BufReader<tokio::net::tcp::OwnedReadHalf>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        let (_, wr) = a.into_split();
        let (rd, _) = b.into_split();
        (Wire::shared(BufWriter::new(wr), None), BufReader::new(rd))
    }

    fn f(tag: u64, len: usize) -> Frame {
        frame(
            Kind::Request,
            1,
            tag,
            &tag,
            Bytes::from(vec![(tag % 251) as u8; len]),
        )
    }

    /// Direct sends, queued ones and ones the socket takes only in part
    /// (far more than its buffer while nobody reads yet) arrive whole, in
    /// order, and never interleave.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_arrive_whole_whichever_way_they_went() {
        const N: u64 = 400;
        let (wire, mut rd) = pair().await;
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for want in 0..N {
                let got = read_frame(
                    &mut rd,
                    &Limits::default(),
                    Duration::from_secs(30),
                    Duration::from_secs(30),
                    None,
                )
                .await
                .unwrap();
                assert_eq!(got.tag, want);
                assert_eq!(got.payload.len(), 40_000);
                assert!(got.payload.iter().all(|&b| b == (want % 251) as u8));
            }
        });
        let (mut direct, mut queued) = (0, 0);
        for tag in 0..N {
            match send_now(&wire, f(tag, 40_000), Duration::from_secs(30)) {
                Sent::Done => direct += 1,
                Sent::Queue(fr) => {
                    queued += 1;
                    let mut w = wire.lock().await;
                    w.write(fr).await.unwrap();
                    w.flush().await.unwrap();
                }
                Sent::Failed(e) => panic!("{e}"),
            }
        }
        reader.await.unwrap();
        assert!(direct > 0, "an idle wire takes frames at once");
        assert!(
            queued > 0,
            "a wire whose socket is full makes senders queue"
        );
    }

    /// Once a writer task ends (or is aborted within a frame), nothing
    /// more goes on the connection directly.
    #[tokio::test]
    async fn a_broken_connection_takes_nothing() {
        let (wire, _rd) = pair().await;
        assert!(matches!(
            send_now(&wire, f(1, 10), Duration::from_secs(1)),
            Sent::Done
        ));
        drop(wire.break_on_drop());
        assert!(wire.is_broken());
        assert!(matches!(
            send_now(&wire, f(2, 10), Duration::from_secs(1)),
            Sent::Failed(_)
        ));
    }

    #[tokio::test]
    async fn large_frames_always_queue() {
        let (wire, _rd) = pair().await;
        assert!(matches!(
            send_now(&wire, f(1, DIRECT_MAX + 1), Duration::from_secs(1)),
            Sent::Queue(_)
        ));
    }
}
