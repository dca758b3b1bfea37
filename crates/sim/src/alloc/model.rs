//! The objects the aging engine tracks and the counters it keeps: plain
//! data shared by the engine, its checkpoints and its metrics (a leaf, so
//! none of them depends on another for these types).

use serde::{Deserialize, Serialize};

/// One mapped run of an object: logical block `l` onward lives at physical `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Piece {
    pub l: u64,
    pub p: u64,
    pub n: u64,
}

/// A live object.
#[derive(Debug, Clone)]
pub(crate) struct Obj {
    pub size: u64,
    pub target: u64,
    pub large: bool,
    pub temp: bool,
    pub map: Vec<Piece>,
    /// Index in `deletable`, or `NONE`.
    pub slot: u32,
}

/// Counters kept over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Write operations (allocations).
    pub writes: u64,
    /// Deletions of young (temporary) objects.
    pub young_deletes: u64,
    /// Deletions forced by the utilization target.
    pub old_deletes: u64,
    /// Allocations that found no space and forced an extra deletion.
    pub no_space: u64,
    /// Whole-object rewrites (region policy: conversion to large or a move).
    pub whole_rewrites: u64,
    /// Objects completed.
    pub completed: u64,
}
