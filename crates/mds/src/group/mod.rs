//! A replicated MDS group: N members (3 or 5), one of which leads and
//! serves clients and OSDs while the others apply what it commits. The
//! leader's KV batches travel as raft entries ([`crate::raft`], on the
//! openraft engine); a batch is answered durably once a majority holds
//! it. A member that stops leading restarts itself (crash-only): its KV
//! goes back to its last durable point and the log brings it forward, so
//! nothing it ran but the group did not commit survives. See `docs/HA.md`.
//!
//! Map: [`peer`] (raft's messages between members), [`sink`] (the
//! leader's batches into raft), [`member`] (a member's life: follow,
//! take over, serve, step down), [`admin`] (adding and removing members
//! on the leader), [`reverted`] (refusing to start on data older than what
//! the member acknowledged), [`files`] (the group key, formatting the members'
//! directories and making a joining member's).

pub mod admin;
pub mod files;
pub mod member;
pub mod peer;
pub mod reverted;
pub mod sink;

pub use member::{Exit, run};
