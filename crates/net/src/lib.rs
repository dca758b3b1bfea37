//! Tessera's connection layer: everything between a socket and a request's
//! meaning. Frames on async streams ([`frame_io`]), pipelined client
//! connections and pools ([`connection`], [`pool`]), the Rust clients of
//! the OSD and MDS protocols ([`osd_client`], [`mds_client`]), the OSD's
//! heartbeat to the MDS ([`heartbeat`]), key files ([`keys`]) and other
//! owner-only files written atomically ([`files`]), and the one
//! server loop every daemon runs with the same limits and timeouts
//! ([`accept`], [`serve`]). It knows how requests travel, never what they
//! mean: the OSD and the MDS plug in through [`serve::Service`].

pub mod accept;
pub mod auth;
pub mod connection;
pub mod files;
pub mod frame_io;
pub mod handshakes;
pub mod heartbeat;
pub mod http;
pub mod keys;
pub mod mds_client;
pub mod osd_client;
pub mod pool;
pub mod raw;
pub mod seats;
pub mod serve;
pub mod wire;

pub use connection::{ConnConfig, ConnError, Connection};
pub use heartbeat::Lease;
pub use mds_client::{CallError, MdsClient};
pub use osd_client::{Answer, CHAIN_RETRY, OsdClient, chain_retryable};
pub use pool::Pool;
pub use proto::clock;
