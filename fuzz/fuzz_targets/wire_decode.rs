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
    let _ = decode::<proto::mds::MdsRequest>(data);
    let _ = decode::<proto::mds::MdsResponse>(data);
});
