//! Every message round-trips through its encoding and a frame; random and
//! truncated bytes are errors, never panics.

use bytes::Bytes;
use proptest::prelude::*;

use crate::cap::Capability;
use crate::frame::{Frame, Kind, Limits};
use crate::msg::*;
use crate::{ErrorCode, WireError};

fn key() -> impl Strategy<Value = AttrKey> {
    (any::<u32>(), any::<u32>()).prop_map(|(page, number)| AttrKey { page, number })
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..64)
}

fn cap() -> impl Strategy<Value = Capability> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(key_version, partition, oid_lo, oid_hi, rights, expiry_ms, version, mac)| {
                Capability {
                    key_version,
                    partition,
                    oid_lo,
                    oid_hi,
                    rights,
                    expiry_ms,
                    version,
                    holder: version ^ expiry_ms,
                    mac,
                }
            },
        )
}

fn command() -> impl Strategy<Value = Command> {
    let u = any::<u64>;
    prop_oneof![
        "[a-z]{0,8}".prop_map(|policy| Command::Format { policy }),
        u().prop_map(|pid| Command::CreatePartition { pid }),
        u().prop_map(|pid| Command::RemovePartition { pid }),
        (u(), proptest::option::of(u()), any::<u32>())
            .prop_map(|(pid, oid, count)| Command::Create { pid, oid, count }),
        (u(), u()).prop_map(|(pid, oid)| Command::Remove { pid, oid }),
        (u(), u(), u(), any::<u32>()).prop_map(|(pid, oid, offset, len)| Command::Read {
            pid,
            oid,
            offset,
            len
        }),
        (u(), u(), u()).prop_map(|(pid, oid, offset)| Command::Write { pid, oid, offset }),
        (u(), u()).prop_map(|(pid, oid)| Command::Append { pid, oid }),
        (u(), u()).prop_map(|(pid, oid)| Command::CreateAndWrite { pid, oid }),
        u().prop_map(|pid| Command::Flush { pid }),
        (
            u(),
            u(),
            u(),
            proptest::option::of(u()),
            any::<u32>(),
            proptest::collection::vec(key(), 0..4)
        )
            .prop_map(|(pid, lo, hi, after, max, attrs)| Command::List {
                pid,
                lo,
                hi,
                after,
                max,
                attrs
            }),
        (u(), u()).prop_map(|(pid, oid)| Command::GetAttributes { pid, oid }),
        (u(), u()).prop_map(|(pid, oid)| Command::SetAttributes { pid, oid }),
        (u(), u(), key(), blob(), blob()).prop_map(|(pid, oid, key, expected, new)| Command::Cas {
            pid,
            oid,
            key,
            expected,
            new
        }),
        (u(), u(), key(), u()).prop_map(|(pid, oid, key, delta)| Command::FetchAdd {
            pid,
            oid,
            key,
            delta
        }),
        (u(), u(), u()).prop_map(|(pid, oid, version)| Command::SetVersion { pid, oid, version }),
        Just(Command::Statfs),
        (u(), u(), u()).prop_map(|(pid, oid, len)| Command::Truncate { pid, oid, len }),
        (u(), u(), u(), u()).prop_map(|(pid, oid, offset, len)| Command::Punch {
            pid,
            oid,
            offset,
            len
        }),
        (u(), u()).prop_map(|(pid, oid)| Command::DataRanges { pid, oid }),
        (u(), u()).prop_map(|(pid, oid)| Command::Install { pid, oid }),
        (u(), proptest::collection::vec(u(), 0..8))
            .prop_map(|(pid, oids)| Command::RemoveObjects { pid, oids }),
        (u(), u(), u(), u()).prop_map(|(pid, oid, offset, len)| Command::Reserve {
            pid,
            oid,
            offset,
            len
        }),
        (
            (u(), u(), u()),
            (u(), u(), any::<u32>()),
            proptest::option::of(cap())
        )
            .prop_map(|((pid, oid, offset), (src_oid, src_offset, len), c)| {
                Command::Copy {
                    pid,
                    oid,
                    offset,
                    src_oid,
                    src_offset,
                    len,
                    src_cap: c.map(Box::new),
                }
            }),
        (
            u(),
            u(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
            any::<u32>()
        )
            .prop_map(|(pid, oid, page, after, max)| Command::GetPage {
                pid,
                oid,
                page,
                after,
                max
            }),
    ]
}

/// A command, or a FORWARD of one (with the head's answer).
fn command_or_forward() -> impl Strategy<Value = Command> {
    prop_oneof![
        3 => command(),
        1 => (any::<u32>(), any::<bool>()).prop_map(|(group, deep)| Command::ScrubGroup { group, deep }),
        1 => (command(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>(), blob()).prop_map(
            |(op, group, epoch, origin, id, old)| Command::Forward(Box::new(crate::chain::Forward {
                group,
                epoch,
                op,
                origin,
                id,
                reply: Reply::Cas { swapped: true, old },
                attrs: Vec::new(),
            }))
        ),
    ]
}

/// Any OSD request (FORWARDs included).
pub fn request() -> impl Strategy<Value = Request> {
    (
        proptest::option::of(cap()),
        any::<u64>(),
        command_or_forward(),
        proptest::collection::vec(key(), 0..4),
        proptest::collection::vec((key(), blob()), 0..4),
    )
        .prop_map(|(cap, id, cmd, get, set)| Request {
            cap,
            id,
            cmd,
            get,
            set,
        })
}

fn reply() -> impl Strategy<Value = Result<Reply, WireError>> {
    let u = any::<u64>;
    prop_oneof![
        Just(Ok(Reply::Done)),
        proptest::collection::vec(u(), 0..8).prop_map(|v| Ok(Reply::Created(v))),
        u().prop_map(|size| Ok(Reply::Read { size })),
        u().prop_map(|offset| Ok(Reply::Appended { offset })),
        (any::<u32>(), any::<u32>())
            .prop_map(|(removed, absent)| Ok(Reply::Removed { removed, absent })),
        (
            proptest::collection::vec(
                (u(), proptest::collection::vec((key(), blob()), 0..3)),
                0..4
            ),
            proptest::option::of(u())
        )
            .prop_map(|(entries, next)| Ok(Reply::Listed { entries, next })),
        (any::<bool>(), blob()).prop_map(|(swapped, old)| Ok(Reply::Cas { swapped, old })),
        u().prop_map(|old| Ok(Reply::FetchAdd { old })),
        (
            proptest::collection::vec((any::<u32>(), blob()), 0..4),
            proptest::option::of(any::<u32>())
        )
            .prop_map(|(attrs, next)| Ok(Reply::Page { attrs, next })),
        (u(), u(), u()).prop_map(|(total_bytes, free_bytes, objects)| Ok(Reply::Statfs {
            total_bytes,
            free_bytes,
            objects
        })),
        any::<u32>().prop_map(|len| Ok(Reply::Copied { len })),
        "[ -~]{0,40}".prop_map(|m| Err(WireError::new(ErrorCode::CapRevoked, m))),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip_through_frames(req in request(), payload in blob(), tag in any::<u64>()) {
        let f = Frame { kind: Kind::Request, opcode: req.cmd.opcode(), tag, header: Bytes::from(encode(&req)), payload: Bytes::from(payload) };
        let bytes = f.to_vec();
        let (back, used) = Frame::decode(&bytes, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(&back, &f);
        prop_assert_eq!(decode::<Request>(&back.header).unwrap(), req);
    }

    #[test]
    fn responses_round_trip(result in reply(), attrs in proptest::collection::vec((key(), blob()), 0..4)) {
        let r = Response { result, attrs };
        prop_assert_eq!(decode::<Response>(&encode(&r)).unwrap(), r);
    }

    #[test]
    fn handshakes_round_trip(cluster in "[a-z0-9-]{0,20}", osd in any::<u32>(), v in any::<u16>()) {
        let h = Hello { version: v, cluster_id: cluster.clone(), osd_id: osd, client: "c".into(), credential: crate::auth::Credential::Key { principal: cluster.clone(), key_version: osd }, nonce: [osd as u8; 16], encrypt: osd % 2 == 0 };
        prop_assert_eq!(decode::<Hello>(&encode(&h)).unwrap(), h);
        let w = Welcome::Ok { version: v, cluster_id: cluster, osd_id: osd, max_payload: 1, max_in_flight: 2, peers: vec!["a:1".into()] };
        prop_assert_eq!(decode::<Welcome>(&encode(&w)).unwrap(), w);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Frame::decode(&bytes, &Limits::default());
        let _ = decode::<Request>(&bytes);
        let _ = decode::<Response>(&bytes);
        let _ = decode::<Hello>(&bytes);
        let _ = decode::<Welcome>(&bytes);
    }

    #[test]
    fn truncated_headers_are_errors(req in request(), cut in 1usize..16) {
        let b = encode(&req);
        let n = b.len().saturating_sub(cut);
        prop_assert!(decode::<Request>(&b[..n]).is_err());
    }
}
