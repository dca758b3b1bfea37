//! MDS messages round-trip through their encoding; random and truncated
//! bytes are errors, never panics (the decoder every MDS request meets).

use proptest::prelude::*;

use crate::layout::LayoutSpec;
use crate::mds::*;
use crate::msg::{decode, encode};

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._-]{0,40}"
}

/// Any lock request.
fn lock() -> impl Strategy<Value = crate::locks::LockSpec> {
    use crate::locks::{LockKind, LockSpec};
    let kind = prop_oneof![
        Just(LockKind::Read),
        Just(LockKind::Write),
        Just(LockKind::Unlock)
    ];
    (any::<u64>(), any::<u64>(), any::<u64>(), kind, any::<u32>()).prop_map(
        |(owner, start, end, kind, pid)| LockSpec {
            owner,
            start,
            end,
            kind,
            pid,
        },
    )
}

/// Any MDS operation.
pub fn op() -> impl Strategy<Value = Op> {
    let u = any::<u64>;
    prop_oneof![
        (u(), name()).prop_map(|(parent, name)| Op::Lookup { parent, name }),
        u().prop_map(|ino| Op::GetAttr { ino }),
        u().prop_map(|ino| Op::Stat { ino }),
        (
            u(),
            proptest::option::of(any::<u32>()),
            proptest::option::of(u()),
            proptest::option::of(any::<i64>())
        )
            .prop_map(|(ino, mode, size, at)| Op::SetAttr {
                ino,
                set: SetAttr {
                    mode,
                    size,
                    mtime: at.map(SetTime::At),
                    atime: Some(SetTime::Now),
                    ..SetAttr::default()
                }
            }),
        (u(), name(), any::<u32>(), any::<bool>()).prop_map(|(parent, name, mode, exclusive)| {
            Op::Create {
                parent,
                name,
                mode,
                exclusive,
            }
        }),
        (u(), name(), u(), name(), any::<bool>()).prop_map(
            |(parent, name, new_parent, new_name, noreplace)| Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                noreplace
            }
        ),
        (
            u(),
            proptest::option::of(name()),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(|(ino, after, max, plus)| Op::Readdir {
                ino,
                after,
                max,
                plus
            }),
        (u(), name(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(
            |(ino, name, value)| Op::SetXattr {
                ino,
                name,
                value,
                mode: XattrMode::Create
            }
        ),
        (
            u(),
            any::<u32>(),
            any::<u32>(),
            u(),
            any::<u8>(),
            any::<u8>()
        )
            .prop_map(
                |(ino, stripe_unit, stripe_count, object_size, replicas, min_replicas)| {
                    Op::SetLayout {
                        ino,
                        spec: LayoutSpec {
                            stripe_unit,
                            stripe_count,
                            object_size,
                            replicas,
                            min_replicas,
                        },
                    }
                }
            ),
        (u(), u(), any::<u32>(), any::<u32>()).prop_map(|(ino, objset, stripe, osd)| {
            Op::MarkStale {
                ino,
                objset,
                stripe,
                osd,
            }
        }),
        (any::<u32>(), any::<bool>(), any::<bool>()).prop_map(|(osd, out, force)| Op::SetOsdOut {
            osd,
            out,
            force
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(group, osd)| Op::AdoptGroup { group, osd }),
        (any::<u64>(), ".{0,40}", ".{0,40}").prop_map(|(id, addr, peer)| Op::GroupAdd {
            id,
            addr,
            peer
        }),
        any::<u64>().prop_map(|id| Op::GroupRemove { id }),
        (u(), any::<bool>()).prop_map(|(ino, deep)| Op::Scrub { ino, deep }),
        any::<u32>().prop_map(|osd| Op::Ticket { osd }),
        (u(), lock()).prop_map(|(ino, lock)| Op::Lock { ino, lock }),
        (u(), lock()).prop_map(|(ino, lock)| Op::TestLock { ino, lock }),
        proptest::collection::vec((u(), lock()), 0..8).prop_map(|locks| Op::LocksHeld { locks }),
        Just(Op::Whoami),
        Just(Op::AuthList),
        Just(Op::Sync),
        (u(), proptest::collection::vec((u(), u(), name()), 0..4)).prop_map(|(instance, v)| {
            Op::Replay {
                instance,
                ops: v
                    .into_iter()
                    .map(|(transno, parent, name)| crate::mds::ReplayOp {
                        transno,
                        creds: Creds::root(),
                        op: Op::Unlink { parent, name },
                        ino: (transno % 2 == 0).then_some(parent),
                        seal: transno
                            .to_le_bytes()
                            .repeat(2)
                            .try_into()
                            .unwrap_or_default(),
                    })
                    .collect(),
            }
        }),
        name().prop_map(|name| Op::AuthRemove { name }),
        name().prop_map(|name| Op::AuthRotate { name }),
        (name(), name(), any::<bool>(), any::<u32>(), any::<u32>()).prop_map(
            |(name, path, ro, uid, gid)| Op::AuthAdd(crate::mds::PrincipalSpec {
                name,
                path,
                access: if ro {
                    crate::mds::Access::ReadOnly
                } else {
                    crate::mds::Access::ReadWrite
                },
                uids: crate::mds::UidMap::Fixed { uid, gid },
                admin: ro,
            })
        ),
        report(),
        Just(Op::Status),
        name().prop_map(|path| Op::Resolve { path }),
    ]
}

/// Any OSD report.
fn report() -> impl Strategy<Value = Op> {
    let u = any::<u64>;
    (
        any::<u32>(),
        name(),
        u(),
        u(),
        any::<u32>(),
        u(),
        any::<[u8; 32]>(),
    )
        .prop_map(|(osd_id, addr, capacity, used, key_version, at_ms, mac)| {
            Op::Report(OsdReport {
                osd_id,
                addr,
                weight: key_version ^ 0x1_0000,
                capacity,
                used,
                objects: 0,
                key_version,
                at_ms,
                load: crate::mds::OsdLoad {
                    requests: at_ms,
                    bytes_out: capacity,
                    ..Default::default()
                },
                store: crate::mds::StoreMark {
                    uuid: mac[..16].try_into().unwrap_or_default(),
                    seq: at_ms ^ capacity,
                },
                mac,
                host: format!("host-{osd_id}"),
            })
        })
}

/// Any MDS request.
pub fn request() -> impl Strategy<Value = MdsRequest> {
    (
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u32>(), 0..4),
        any::<u32>(),
        op(),
    )
        .prop_map(|(uid, gid, groups, prefetch, op)| MdsRequest {
            creds: Creds { uid, gid, groups },
            session: u64::from(prefetch) << 7,
            early: prefetch % 2 == 0,
            prefetch,
            op,
        })
}

proptest! {
    #[test]
    fn requests_round_trip(req in request()) {
        prop_assert_eq!(decode::<MdsRequest>(&encode(&req)).unwrap(), req);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<MdsRequest>(&bytes);
        let _ = decode::<MdsResponse>(&bytes);
    }

    #[test]
    fn truncated_requests_are_errors(req in request(), cut in 1usize..8) {
        let b = encode(&req);
        let n = b.len().saturating_sub(cut);
        prop_assert!(decode::<MdsRequest>(&b[..n]).is_err());
    }
}
