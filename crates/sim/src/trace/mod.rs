//! `tessera sim trace`: trace-driven metadata prefetch (Hendricks et al. §4.2).
//!
//! A trace (the Harvard nfsdump text format, see [`nfsdump`], or Tessera's
//! own path format, see [`pathfmt`]) is parsed into [`Event`]s over opaque
//! handles. Phase one ([`namespace`]) reconstructs the namespace the trace
//! touches and numbers it with each object-id policy, using the MDS's own
//! code ([`mds::ids::IdPolicy`]). Phase two ([`replay`]) replays the events
//! per client through the client's own segmented-LRU cache
//! ([`client::cache::MetaCache`]); every miss is an MDS request whose answer
//! prefetches the N inodes with the nearest ids (the MDS's own choice,
//! [`mds::ids::nearest_by_id`]). [`report`] turns the counts into the seed's
//! figures 4 and 5; [`generate`] writes synthetic traces for scale tests.

mod event;
pub mod generate;
pub mod namespace;
pub mod nfsdump;
pub mod pathfmt;
pub mod replay;
pub mod report;
pub mod strace;

pub use event::{Event, Handle, Kind, Op, ParseStats, Trace};
