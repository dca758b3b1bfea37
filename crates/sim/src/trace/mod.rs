//! `tessera sim trace`: trace-driven metadata prefetch (seed 004 §4.2).
