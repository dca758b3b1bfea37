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
pub mod error;
pub mod frame;
pub mod layout;
pub mod mds;
pub mod msg;
pub mod nesting;
pub mod placement;

pub use cap::{CapError, CapSpec, Capability, KeyRing, rights};
pub use error::{ErrorCode, UnknownName, WireError};
pub use frame::{Frame, FrameError, Kind, Limits, Prefix};
pub use msg::{AttrKey, Command, Hello, Reply, Request, Response, Welcome};

/// Protocol version spoken by this build. A peer with another major version
/// is refused at the handshake.
pub const PROTOCOL_VERSION: u16 = 7;

#[cfg(test)]
mod mds_proptests;
#[cfg(test)]
mod proptests;
