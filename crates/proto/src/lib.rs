//! Tessera's OSD wire protocol. Knows nothing of sockets or disks: it defines
//! frames (a fixed 32-byte prefix, a postcard-encoded header, raw bulk
//! payload), the request and response messages with T10 OSD-2 semantics plus
//! compare-and-swap and fetch-and-add, typed error codes, and capabilities
//! with their MAC; the metadata-server messages, file layouts and the
//! placement function clients share with the MDS. `docs/PROTOCOL.md` describes the same bytes for people.

pub mod auth;
pub mod cap;
pub mod chain;
pub mod clock;
pub mod errno;
pub mod error;
pub mod frame;
pub mod layout;
pub mod locks;
pub mod mds;
pub mod msg;
pub mod nesting;
pub mod placement;
pub mod replay;
pub mod report;
pub mod space;
pub mod status;
pub mod token;

pub use cap::{CapError, CapSpec, Capability, KeyRing, rights};
pub use error::{ErrorCode, UnknownName, WireError};
pub use frame::{Frame, FrameError, Kind, Limits, Prefix};
pub use msg::{AttrKey, Command, Hello, Reply, Request, Response, Welcome};

/// Protocol version spoken by this build. A peer with another major version
/// is refused at the handshake.
pub const PROTOCOL_VERSION: u16 = 17;

#[cfg(any(test, feature = "strategies"))]
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        unused_imports,
        reason = "only the generators are used outside tests"
    )
)]
mod mds_proptests;
#[cfg(any(test, feature = "strategies"))]
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        unused_imports,
        reason = "only the generators are used outside tests"
    )
)]
mod proptests;

/// Generators of every request type (feature `strategies`): for tests
/// that feed live daemons random, nested, oversized and truncated
/// encodings.
#[cfg(any(test, feature = "strategies"))]
pub mod strategies {
    pub use crate::mds_proptests::{op as mds_op, request as mds_request};
    pub use crate::proptests::request as osd_request;
}
