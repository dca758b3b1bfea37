//! The OSD: serves the `proto` wire protocol from a `store`, checking a
//! capability on every request; and the Rust client for it.
//!
//! - [`keys`]: the key file (cluster id, OSD id, one or two secrets).
//! - [`exec`]: one request against the store (capability checks, attribute
//!   lists, error mapping): synchronous, run on tokio's blocking pool.
//! - [`server`]: connections, limits, timeouts, graceful shutdown.
//! - [`listen`]: the accept loop shared with the MDS.
//! - [`metrics`]: Prometheus registry and the `/metrics` endpoint.
//! - [`client`]: pipelined client connections and a pool.

pub mod client;
pub mod exec;
pub mod keys;
pub mod listen;
pub mod metrics;
pub mod server;
pub mod wire;
