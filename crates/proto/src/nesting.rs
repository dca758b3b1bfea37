//! A bound on how deep a message may nest while it is decoded.
//!
//! Three wire types contain themselves: a FORWARD carries a command (which
//! could be a FORWARD), a REPLAY carries operations (which could be a
//! REPLAY), an early answer carries an answer (which could be an early
//! answer). Decoding is recursive, so without a bound a header of a few
//! hundred KiB of nested values overflows the decoding thread's stack and
//! aborts the whole process. Each recursive field decodes through
//! [`once`], which refuses a value of its own kind inside another while
//! the bytes are read — before any recursion deeper than one level.

use std::cell::Cell;

use serde::{Deserialize, Deserializer};

/// How many recursive fields may be open at once while one message
/// decodes: one FORWARD, REPLAY or early answer may hold ordinary
/// values, never another of the three.
pub const MAX_NESTING: u32 = 1;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Set when [`once`] refused a value (postcard keeps no message of a
    /// custom error; the decoder asks here to say why).
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// What a refused nesting is reported as.
pub const REFUSAL: &str = "a FORWARD, REPLAY or early answer may not contain another";

/// Whether [`once`] refused a value since the last call (and clears it).
pub fn take_refusal() -> bool {
    REFUSED.with(|r| r.replace(false))
}

/// Lowers the depth again however the nested decode ends.
struct Level;

impl Drop for Level {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Decodes a field that may hold a message of its own kind, refusing it
/// when another such field is already open (`#[serde(deserialize_with)]`).
/// Decoding is synchronous, so a per-thread counter sees exactly the
/// fields open in the message being decoded.
pub fn once<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let depth = DEPTH.with(|c| {
        let n = c.get() + 1;
        c.set(n);
        n
    });
    let _level = Level;
    if depth > MAX_NESTING {
        REFUSED.with(|r| r.set(true));
        return Err(serde::de::Error::custom(REFUSAL));
    }
    T::deserialize(d)
}

/// Builds the encoding of a value nested `depth` times, from the encodings
/// of the same value nested once (`level1`) and twice (`level2`) around
/// `inner`: what a hostile peer would send. For tests and fuzzing; `None`
/// when `inner` is not found where it must be.
pub fn deepen(level1: &[u8], level2: &[u8], inner: &[u8], depth: usize) -> Option<Vec<u8>> {
    let find = |hay: &[u8]| hay.windows(inner.len()).position(|w| w == inner);
    let (i1, i2) = (find(level1)?, find(level2)?);
    let prefix = level2.get(i1..i2)?;
    let grown = level2.len().checked_sub(level1.len())?;
    let suffix_len = grown.checked_sub(prefix.len())?;
    let after = i2 + inner.len();
    let suffix = level2.get(after..after + suffix_len)?;
    let extra = depth.checked_sub(1)?;
    let mut out = level1[..i1].to_vec();
    for _ in 0..extra {
        out.extend_from_slice(prefix);
    }
    out.extend_from_slice(inner);
    for _ in 0..extra {
        out.extend_from_slice(suffix);
    }
    out.extend_from_slice(&level1[i1 + inner.len()..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Forward;
    use crate::mds::{Creds, MdsRequest, Op, ReplayOp};
    use crate::msg::{Command, Reply, Request, decode, encode};

    const MARK: u64 = 0x5A5A_5A5A_5A5A_5A5A;

    fn forward(op: Command) -> Command {
        Command::Forward(Box::new(Forward {
            group: 1,
            epoch: 2,
            op,
            origin: 3,
            id: 4,
            reply: Reply::Done,
            attrs: vec![],
        }))
    }

    fn request(cmd: Command) -> Vec<u8> {
        encode(&Request {
            cap: None,
            id: 9,
            cmd,
            get: vec![],
            set: vec![],
        })
    }

    fn inner() -> Command {
        Command::DataRanges {
            pid: MARK,
            oid: MARK,
        }
    }

    fn nested_forward(depth: usize) -> Vec<u8> {
        let x = encode(&inner());
        let l1 = request(forward(inner()));
        let l2 = request(forward(forward(inner())));
        deepen(&l1, &l2, &x, depth).unwrap()
    }

    fn replay(op: Op) -> Op {
        Op::Replay {
            instance: 7,
            ops: vec![ReplayOp {
                transno: 1,
                creds: Creds::root(),
                op,
                ino: None,
                seal: [0x5A; crate::mds::SEAL_LEN],
            }],
        }
    }

    fn mds_request(op: Op) -> Vec<u8> {
        encode(&MdsRequest {
            creds: Creds::root(),
            prefetch: 0,
            session: 1,
            early: false,
            op,
        })
    }

    fn nested_replay(depth: usize) -> Vec<u8> {
        let x = encode(&Op::GetAttr { ino: MARK });
        let l1 = mds_request(replay(Op::GetAttr { ino: MARK }));
        let l2 = mds_request(replay(replay(Op::GetAttr { ino: MARK })));
        deepen(&l1, &l2, &x, depth).unwrap()
    }

    #[test]
    fn one_level_decodes_and_two_are_refused() {
        let one: Request = decode(&nested_forward(1)).unwrap();
        assert_eq!(one.cmd, forward(inner()));
        let e = decode::<Request>(&nested_forward(2)).unwrap_err();
        assert!(e.message.contains("may not contain another"), "{e}");
        let r: MdsRequest = decode(&nested_replay(1)).unwrap();
        assert_eq!(r.op, replay(Op::GetAttr { ino: MARK }));
        assert!(decode::<MdsRequest>(&nested_replay(2)).is_err());
    }

    #[test]
    fn a_million_levels_are_refused_without_exhausting_the_stack() {
        // Run on a small stack, as a server's worker thread would be.
        let h = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                for depth in [3, 1_000, 1_000_000] {
                    assert!(decode::<Request>(&nested_forward(depth)).is_err());
                    assert!(decode::<MdsRequest>(&nested_replay(depth)).is_err());
                }
                // The counter is back at zero: an ordinary message decodes.
                decode::<Request>(&nested_forward(1)).unwrap();
            })
            .unwrap();
        h.join().unwrap();
    }

    #[test]
    fn early_answers_nest_once() {
        use crate::mds::{EarlyReply, MdsReply};
        let early = |reply| {
            MdsReply::Early(Box::new(EarlyReply {
                transno: 1,
                durable: 0,
                instance: 2,
                seal: [0x5A; crate::mds::SEAL_LEN],
                reply,
            }))
        };
        let x = encode(&MdsReply::Done);
        let l1 = encode(&early(MdsReply::Done));
        let l2 = encode(&early(early(MdsReply::Done)));
        assert!(decode::<MdsReply>(&l1).is_ok());
        let deep = deepen(&l1, &l2, &x, 100_000).unwrap();
        assert!(decode::<MdsReply>(&deep).is_err());
    }
}
