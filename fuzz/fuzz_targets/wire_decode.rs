//! Fuzzes the protocol decoders: frames, then every header type — the
//! handshake (Hello, Welcome), OSD requests and responses, MDS requests
//! (OSD reports included) and responses. Any input must give a value or an
//! error, never a panic or an unbounded allocation.
//! Run: cargo +nightly fuzz run wire_decode
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::msg::{Hello, Request, Response, Welcome, decode};
use proto::{Frame, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(Some((f, used))) = Frame::decode(data, &limits) {
        assert!(used <= data.len());
        let _ = decode::<Request>(&f.header).map(|r| r.validate(f.payload.len()));
        let _ = decode::<Response>(&f.header);
        let _ = decode::<Hello>(&f.header);
        let _ = decode::<Welcome>(&f.header);
    }
    let _ = decode::<Request>(data);
    let _ = decode::<Response>(data);
    let _ = decode::<Hello>(data);
    let _ = decode::<Welcome>(data);
    let _ = decode::<proto::auth::Proof>(data);
    let _ = decode::<proto::mds::MdsRequest>(data);
    let _ = decode::<proto::mds::MdsResponse>(data);
    if let Ok(t) = decode::<proto::auth::SealedTicket>(data) {
        let _ = proto::auth::Ticket::open(&t, &[7; 32], 1, 0);
    }
    let _ = proto::auth::unwrap_session_key(&[7; 32], data);
    if data.len() >= 40 {
        let (head, rest) = data.split_at(24);
        let (tag, body) = rest.split_at(16);
        let head: [u8; 24] = head.try_into().unwrap_or([0; 24]);
        let tag: [u8; 16] = tag.try_into().unwrap_or([0; 16]);
        for encrypt in [false, true] {
            let mut seal = proto::auth::FrameSeal::new(&[7; 32], encrypt);
            let _ = seal.open(&head, body.len() / 2, bytes::BytesMut::from(body), &tag);
        }
    }
});
