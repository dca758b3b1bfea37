//! The MDS's network front: the same frames as the OSD protocol (a Hello
//! naming [`MDS_ID`], then tagged requests answered in any order), each
//! request handled in its own task so slow ones (group-commit waits, OSD
//! revocations) never hold up others on the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use osd::wire::{frame, read_frame, write_frame};
use proto::mds::{Errno, MDS_ID, MdsError, MdsRequest, MdsResponse};
use proto::msg::{Hello, Welcome, decode};
use proto::{ErrorCode, Frame, Kind, Limits, PROTOCOL_VERSION, WireError};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::service::Mds;

/// Requests processed at once per connection.
const MAX_IN_FLIGHT: usize = 256;
/// Largest request header.
const MAX_HEADER: u32 = 1 << 20;

/// Serves until `shutdown` turns true, then drains and closes the KV.
pub async fn serve(mds: Arc<Mds>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
    // No connection limit yet (usize::MAX), as before this loop was shared.
    let m = mds.clone();
    osd::listen::accept_until(
        listener,
        shutdown,
        usize::MAX,
        Duration::from_secs(10),
        move |sock, stop| connection(m.clone(), sock, stop),
    )
    .await;
    let kv = mds.kv.clone();
    let _ = tokio::task::spawn_blocking(move || kv.close()).await;
}

async fn connection(mds: Arc<Mds>, sock: TcpStream, mut shutdown: watch::Receiver<bool>) {
    let _ = sock.set_nodelay(true);
    let (rd, wr) = sock.into_split();
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let mut wr = BufWriter::with_capacity(64 << 10, wr);
    let idle = Duration::from_secs(600);
    let io = Duration::from_secs(30);
    // Handshake.
    let hello_limits = Limits {
        max_header: 4096,
        max_payload: 0,
    };
    let Ok(f) = read_frame(&mut rd, &hello_limits, io, io).await else {
        return;
    };
    let refuse = |why: String| Welcome::Refused(WireError::new(ErrorCode::Handshake, why));
    let answer = match (f.kind, decode::<Hello>(&f.header)) {
        (Kind::Hello, Ok(h)) if h.version != PROTOCOL_VERSION => {
            refuse(format!("protocol version {} not supported", h.version))
        }
        (Kind::Hello, Ok(h)) if h.cluster_id != mds.sb.cluster_id => refuse(format!(
            "this MDS serves cluster {:?}, not {:?}",
            mds.sb.cluster_id, h.cluster_id
        )),
        (Kind::Hello, Ok(h)) if h.osd_id != MDS_ID => {
            refuse(format!("this is the MDS, not OSD {}", h.osd_id))
        }
        (Kind::Hello, Ok(_)) => Welcome::Ok {
            version: PROTOCOL_VERSION,
            cluster_id: mds.sb.cluster_id.clone(),
            osd_id: MDS_ID,
            max_payload: 0,
            max_in_flight: MAX_IN_FLIGHT as u32,
        },
        (k, Ok(_)) => refuse(format!("expected Hello, got {k:?}")),
        (_, Err(e)) => refuse(e.to_string()),
    };
    let ok = matches!(answer, Welcome::Ok { .. });
    if write_frame(
        &mut wr,
        &frame(Kind::Welcome, 0, f.tag, &answer, Bytes::new()),
    )
    .await
    .is_err()
        || wr.flush().await.is_err()
        || !ok
    {
        return;
    }
    let (tx, mut rx) = mpsc::channel::<Frame>(MAX_IN_FLIGHT + 4);
    let writer = tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            if write_frame(&mut wr, &f).await.is_err() {
                break;
            }
            if rx.is_empty() && wr.flush().await.is_err() {
                break;
            }
        }
        let _ = wr.flush().await;
    });
    let limits = Limits {
        max_header: MAX_HEADER,
        max_payload: 0,
    };
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let got = tokio::select! {
            r = read_frame(&mut rd, &limits, idle, io) => r,
            _ = shutdown.changed() => break,
        };
        let f = match got {
            Ok(f) if f.kind == Kind::Request => f,
            Ok(_) | Err(_) => break,
        };
        let mds = mds.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let (name, mandatory, result) = match decode::<MdsRequest>(&f.header) {
                Ok(req) => {
                    let (name, mandatory) = (req.op.name(), req.op.mandatory());
                    (name, mandatory, mds.handle(req).await)
                }
                Err(e) => (
                    "undecodable",
                    false,
                    Err(MdsError::new(
                        Errno::Proto,
                        format!("request header: {}", e.message),
                    )),
                ),
            };
            let errno = result.as_ref().err().map(|e| format!("{:?}", e.errno));
            mds.metrics.count(
                name,
                mandatory,
                started.elapsed().as_secs_f64(),
                errno.as_deref(),
            );
            let resp = MdsResponse { result };
            let _ = tx
                .send(frame(Kind::Response, f.opcode, f.tag, &resp, Bytes::new()))
                .await;
            drop(permit);
        });
    }
    let _ = slots.acquire_many(MAX_IN_FLIGHT as u32).await;
    drop(tx);
    let _ = writer.await;
}
