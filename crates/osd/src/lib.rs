//! The OSD: serves the `proto` wire protocol from a `store`, checking a
//! capability on every request. Connections, limits and the Rust client
//! are the connection layer's (`net`).
//!
//! - [`exec`]: one request against the store (capability checks, attribute
//!   lists, error mapping): synchronous, run on the request's worker.
//! - [`server`]: the OSD as a service of the shared server loop (handshake,
//!   admission, metrics), and graceful shutdown.
//! - [`chain`]: replica chains: the head runs a group's requests and passes
//!   their effects down the chain; members apply them and pass them on.
//! - [`chain_authority`]: the MDS as an OSD's chain authority.
//! - [`metrics`]: Prometheus registry and the `/metrics` endpoint.

pub mod chain;
pub mod chain_authority;
pub mod digest;
pub mod exec;
pub mod metrics;
pub mod server;
