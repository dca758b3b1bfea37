//! What a replica chain can pass down: a change sent to a head must fit,
//! as a FORWARD, the next member's frame limit, or applying it at the head
//! would cost that member its place when it refuses the forward.

use proto::WireError;
use proto::msg::{AttrKey, Request};

/// Most header bytes a change sent to a head may have: half the frame
/// limit, so its FORWARD (the change, the set list, the answer and the
/// attributes kept for retries) always fits a member's limit.
pub const FORWARDABLE_HEADER: usize = (1 << 20) / 2;
/// Most bytes of answered attributes a FORWARD carries for retries.
pub const FORWARDED_ATTRS: usize = (1 << 20) / 4;

/// Refuses, before it is applied anywhere, a change too large to pass
/// down the chain: applied at the head and refused by the next member, it
/// would cost that member its place (see `Chains::pass_down`).
pub(super) fn check_forwardable(req: &Request) -> Result<(), WireError> {
    let len = proto::msg::encode(req).len();
    if len > FORWARDABLE_HEADER {
        return Err(WireError::bad(
            "header",
            format!(
                "a change of {len} header bytes cannot be passed down a replica chain \
                 (at most {FORWARDABLE_HEADER}); set fewer or smaller attributes at once"
            ),
        ));
    }
    Ok(())
}

/// The answered attributes a FORWARD keeps for retries: all of them when
/// they fit [`FORWARDED_ATTRS`], else none (a retry after a failover then
/// answers without them).
pub(super) fn forwarded_attrs(attrs: &[(AttrKey, Vec<u8>)]) -> Vec<(AttrKey, Vec<u8>)> {
    let len: usize = attrs.iter().map(|(_, v)| v.len() + 16).sum();
    if len <= FORWARDED_ATTRS {
        attrs.to_vec()
    } else {
        Vec::new()
    }
}
