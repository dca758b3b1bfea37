//! The aging engine: the workload of [`super::AllocParams`] applied to one of
//! the store's real allocators, with the store's real placement rules
//! ([`store::alloc::plan`]): copy-on-write at the allocation unit, the goal
//! after the object's previous extent, OBFS conversion to large blocks and
//! moves between regions.
//!
//! Determinism: every `EPOCH` operations the random generator is reseeded
//! from itself, and checkpoints are taken only at those boundaries, so a run
//! stopped and resumed gives exactly the samples of a run never stopped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use store::alloc::plan::{ObjectShape, PlanGeometry, goal_for, plan_write};
use store::alloc::{
    AllocError, Allocator, Class, Extent, ExtentAllocator, RegionAllocator, Request,
};

use super::checkpoint::{Checkpoint, ObjectRecord};
use super::metrics::{Sample, SampleClock};
pub use super::model::Counters;
use super::model::{Obj, Piece};
use super::workload::{AllocParams, ParamError, SimPolicy};

/// Why the aging engine cannot start, resume or go on.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A knob is out of its domain.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// A checkpoint's object claims blocks the allocator refuses.
    #[error("checkpoint object {id}: {source}")]
    CheckpointExtent {
        /// The object.
        id: u32,
        /// What the allocator said.
        source: AllocError,
    },
    /// A checkpoint's object id is beyond its slots.
    #[error("checkpoint object id {0} out of range")]
    CheckpointId(u32),
    /// A checkpoint names an object it does not hold.
    #[error("checkpoint names object {0}, which it does not hold")]
    MissingObject(u32),
    /// The allocator's own invariants fail.
    #[error("allocator: {0}")]
    Allocator(#[from] store::StoreError),
    /// Blocks mapped by objects and blocks in use disagree.
    #[error("{mapped} blocks mapped by objects, {used} in use")]
    Mapped {
        /// Blocks the objects map.
        mapped: u64,
        /// Blocks the allocator has in use.
        used: u64,
    },
    /// An allocation failed with nothing left to delete.
    #[error("op {op}: {source} — the device is too small for this workload")]
    NoSpace {
        /// The operation number.
        op: u64,
        /// What the allocator said.
        source: AllocError,
    },
}

const BLOCK: u64 = 4096;
/// Operations between reseeds of the random generator (and possible checkpoints).
pub(crate) const EPOCH: u64 = 1 << 20;
const NONE: u32 = u32::MAX;

/// How a call to [`AgingSim::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All operations done.
    Finished,
    /// Stopped on request at an epoch boundary; the checkpoint resumes it.
    Stopped,
}

/// The result of a finished (or stopped) run, as written to JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// The run's name (see [`AllocParams::label`]).
    pub label: String,
    /// Its parameters.
    pub params: AllocParams,
    /// Operations done.
    pub ops_done: u64,
    /// Whole-run counters.
    pub counters: Counters,
    /// Log-spaced samples over time.
    pub samples: Vec<Sample>,
    /// Operations per second over the part of the run done by this process.
    pub ops_per_sec: f64,
}

/// An allocation-aging run in memory.
pub struct AgingSim {
    pub(crate) params: AllocParams,
    alloc: Box<dyn Allocator>,
    geo: PlanGeometry,
    pub(crate) objs: Vec<Option<Obj>>,
    pub(crate) free_ids: Vec<u32>,
    pub(crate) streams: Vec<u32>,
    pub(crate) deletable: Vec<u32>,
    pub(crate) dying: BinaryHeap<Reverse<(u64, u32)>>,
    pub(crate) ops: u64,
    rng: SmallRng,
    pub(crate) epoch_seed: u64,
    pub(crate) counters: Counters,
    pub(crate) clock: SampleClock,
    pub(crate) samples: Vec<Sample>,
    target_used: u64,
}

fn new_allocator(p: &AllocParams) -> Box<dyn Allocator> {
    let blocks = p.disk / BLOCK;
    match p.policy {
        SimPolicy::Extent => Box::new(ExtentAllocator::with_spacing(blocks, p.spacing)),
        SimPolicy::Region => Box::new(RegionAllocator::new(
            blocks,
            p.region_size / BLOCK,
            p.large_block / BLOCK,
        )),
    }
}

impl AgingSim {
    /// A fresh run: an empty device and `streams` new objects in progress.
    pub fn new(params: AllocParams) -> Result<Self, SimError> {
        params.validate()?;
        let mut sim = Self::empty(params.clone(), params.seed);
        for _ in 0..params.streams {
            let id = sim.new_object();
            sim.streams.push(id);
        }
        Ok(sim)
    }

    fn empty(params: AllocParams, epoch_seed: u64) -> Self {
        let alloc = new_allocator(&params);
        let target_used = (alloc.total_blocks() as f64 * params.utilization) as u64;
        AgingSim {
            geo: PlanGeometry {
                region: params.policy == SimPolicy::Region,
                large_blocks: params.large_block / BLOCK,
            },
            alloc,
            objs: Vec::new(),
            free_ids: Vec::new(),
            streams: Vec::new(),
            deletable: Vec::new(),
            dying: BinaryHeap::new(),
            ops: 0,
            rng: SmallRng::seed_from_u64(epoch_seed),
            epoch_seed,
            counters: Counters::default(),
            clock: SampleClock::default(),
            samples: Vec::new(),
            target_used,
            params,
        }
    }

    /// Rebuilds a run from a checkpoint: the allocator gets every mapped
    /// extent reserved, which restores exactly the state it had (both
    /// allocators' state is a function of the set of owned blocks).
    pub fn resume(cp: Checkpoint) -> Result<Self, SimError> {
        cp.params.validate()?;
        let mut sim = Self::empty(cp.params, cp.epoch_seed);
        sim.ops = cp.ops;
        sim.counters = cp.counters;
        sim.clock = cp.clock;
        sim.samples = cp.samples;
        sim.free_ids = cp.free_ids;
        sim.streams = cp.streams;
        sim.objs = vec![None; cp.slots as usize];
        for o in cp.objects {
            let class = if o.large { Class::Large } else { Class::Small };
            for pc in &o.map {
                sim.alloc
                    .reserve(Extent::new(pc.p, pc.n), class)
                    .map_err(|source| SimError::CheckpointExtent { id: o.id, source })?;
            }
            let slot = sim
                .objs
                .get_mut(o.id as usize)
                .ok_or(SimError::CheckpointId(o.id))?;
            *slot = Some(Obj {
                size: o.size,
                target: o.target,
                large: o.large,
                temp: o.temp,
                map: o.map,
                slot: NONE,
            });
        }
        for (i, &id) in cp.deletable.iter().enumerate() {
            sim.obj_mut(id)?.slot = i as u32;
        }
        sim.deletable = cp.deletable;
        sim.dying = cp.dying.into_iter().map(Reverse).collect();
        for id in sim.streams.clone() {
            sim.obj_mut(id)?;
        }
        sim.alloc.check()?;
        Ok(sim)
    }

    fn obj_mut(&mut self, id: u32) -> Result<&mut Obj, SimError> {
        self.objs
            .get_mut(id as usize)
            .and_then(|o| o.as_mut())
            .ok_or(SimError::MissingObject(id))
    }

    /// The state to write to a checkpoint file. Only valid at an epoch
    /// boundary (which is where [`AgingSim::run`] stops).
    pub fn checkpoint(&self) -> Checkpoint {
        debug_assert!(self.ops.is_multiple_of(EPOCH) || self.ops >= self.params.ops);
        Checkpoint {
            version: Checkpoint::VERSION,
            params: self.params.clone(),
            ops: self.ops,
            epoch_seed: self.epoch_seed,
            counters: self.counters.clone(),
            clock: self.clock.clone(),
            samples: self.samples.clone(),
            slots: self.objs.len() as u32,
            free_ids: self.free_ids.clone(),
            streams: self.streams.clone(),
            deletable: self.deletable.clone(),
            dying: self.dying.iter().map(|r| r.0).collect(),
            objects: self
                .objs
                .iter()
                .enumerate()
                .filter_map(|(i, o)| {
                    o.as_ref().map(|o| ObjectRecord {
                        id: i as u32,
                        size: o.size,
                        target: o.target,
                        large: o.large,
                        temp: o.temp,
                        map: o.map.clone(),
                    })
                })
                .collect(),
        }
    }

    /// Operations done so far.
    pub fn ops_done(&self) -> u64 {
        self.ops
    }

    /// The run's parameters.
    pub fn params(&self) -> &AllocParams {
        &self.params
    }

    /// Samples taken so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The run's counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The run so far as a result, with the rate this process measured.
    pub fn result(&self, ops_per_sec: f64) -> RunResult {
        RunResult {
            label: self.params.label(),
            params: self.params.clone(),
            ops_done: self.ops,
            counters: self.counters.clone(),
            samples: self.samples.clone(),
            ops_per_sec,
        }
    }

    /// Verifies the allocator's invariants and that every block is either
    /// free or mapped by exactly one object.
    pub fn check(&self) -> Result<(), SimError> {
        self.alloc.check()?;
        let mapped: u64 = self
            .objs
            .iter()
            .flatten()
            .flat_map(|o| o.map.iter())
            .map(|p| p.n)
            .sum();
        let used = self.alloc.total_blocks() - self.alloc.free_blocks();
        if mapped != used {
            return Err(SimError::Mapped { mapped, used });
        }
        Ok(())
    }

    /// Runs until `params.ops` operations are done, or `stop` is set (then it
    /// stops at the next epoch boundary). `progress(ops)` is called about
    /// every 65,536 operations; `checkpoint` at epoch boundaries at most
    /// every `every`.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        every: Duration,
        mut progress: impl FnMut(u64),
        mut checkpoint: impl FnMut(&AgingSim) -> anyhow::Result<()>,
    ) -> anyhow::Result<Outcome> {
        let mut last_cp = Instant::now();
        while self.ops < self.params.ops {
            let stop_at = (self.ops / EPOCH + 1) * EPOCH;
            let until = stop_at.min(self.params.ops);
            while self.ops < until {
                let chunk = (self.ops + 65_536).min(until);
                while self.ops < chunk {
                    self.step().map_err(anyhow::Error::msg)?;
                }
                progress(self.ops);
            }
            if self.ops == stop_at {
                self.epoch_seed = self.rng.next_u64();
                self.rng = SmallRng::seed_from_u64(self.epoch_seed);
                let stopping = stop.load(Ordering::Relaxed);
                if stopping || last_cp.elapsed() >= every {
                    checkpoint(self)?;
                    last_cp = Instant::now();
                }
                if stopping && self.ops < self.params.ops {
                    return Ok(Outcome::Stopped);
                }
            }
        }
        if self.samples.last().is_none_or(|s| s.ops != self.ops) {
            self.take_sample();
        }
        Ok(Outcome::Finished)
    }

    /// One operation: a due young deletion, else a deletion to hold the
    /// utilization target, else one write increment.
    fn step(&mut self) -> Result<(), SimError> {
        self.ops += 1;
        if let Some(&Reverse((due, id))) = self.dying.peek()
            && due <= self.ops
        {
            self.dying.pop();
            self.delete(id);
            self.counters.young_deletes += 1;
        } else if self.used() > self.target_used && !self.deletable.is_empty() {
            self.delete_random_old();
        } else {
            let s = self.rng.random_range(0..self.streams.len());
            self.write(s)?;
            self.counters.writes += 1;
        }
        if self.ops >= self.clock.next {
            self.take_sample();
        }
        Ok(())
    }

    fn used(&self) -> u64 {
        self.alloc.total_blocks() - self.alloc.free_blocks()
    }

    fn take_sample(&mut self) {
        let s = Sample::take(self.ops, self.alloc.as_ref(), self.objs.iter().flatten());
        self.samples.push(s);
        self.clock.advance(self.ops);
    }

    fn new_object(&mut self) -> u32 {
        let target = self.params.object_size(&mut self.rng);
        let temp = self.rng.random::<f64>() < self.params.temp_fraction;
        let obj = Obj {
            size: 0,
            target,
            large: false,
            temp,
            map: Vec::new(),
            slot: NONE,
        };
        match self.free_ids.pop() {
            Some(id) => {
                self.objs[id as usize] = Some(obj);
                id
            }
            None => {
                self.objs.push(Some(obj));
                (self.objs.len() - 1) as u32
            }
        }
    }

    fn delete_random_old(&mut self) {
        let i = self.rng.random_range(0..self.deletable.len());
        let id = self.deletable[i];
        self.delete(id);
        self.counters.old_deletes += 1;
    }

    /// Frees an object's blocks and forgets it.
    fn delete(&mut self, id: u32) {
        let Some(obj) = self.objs[id as usize].take() else {
            return;
        };
        for pc in &obj.map {
            self.alloc
                .free(Extent::new(pc.p, pc.n))
                .expect("a mapped extent is owned");
        }
        if obj.slot != NONE {
            let i = obj.slot as usize;
            self.deletable.swap_remove(i);
            if let Some(&moved) = self.deletable.get(i)
                && let Some(o) = self.objs[moved as usize].as_mut()
            {
                o.slot = i as u32;
            }
        }
        self.free_ids.push(id);
    }

    /// Appends one increment to stream `s`'s object, the way the store
    /// places a write: new blocks first (the old ones still owned), then the
    /// replaced blocks freed.
    fn write(&mut self, s: usize) -> Result<(), SimError> {
        let id = self.streams[s];
        let obj = self.objs[id as usize]
            .as_ref()
            .expect("streams hold live objects");
        let off = obj.size;
        let end = (off + self.params.increment).min(obj.target);
        let shape = ObjectShape {
            size: obj.size,
            large: obj.large,
            inline: false,
            first_block: obj.map.first().map(|p| p.p),
        };
        let alloc = &self.alloc;
        let plan = plan_write(&self.geo, &shape, off, end, |n, g| alloc.fits_with(n, g));
        let goal = goal_for(plan.first, obj.map.iter().map(|p| (p.l, p.p)));
        let req = Request {
            blocks: plan.end - plan.first,
            goal,
            class: if plan.large {
                Class::Large
            } else {
                Class::Small
            },
            grow: plan.grow,
        };
        let got = loop {
            match self.alloc.allocate(&req) {
                Ok(v) => break v,
                Err(AllocError::NoSpace { .. }) if !self.deletable.is_empty() => {
                    self.counters.no_space += 1;
                    self.delete_random_old();
                }
                Err(e) => {
                    return Err(SimError::NoSpace {
                        op: self.ops,
                        source: e,
                    });
                }
            }
        };
        if plan.whole {
            self.counters.whole_rewrites += 1;
        }
        let obj = self.objs[id as usize].as_mut().expect("still live");
        for old in unmap_from(&mut obj.map, plan.first) {
            self.alloc
                .free(Extent::new(old.p, old.n))
                .expect("a mapped extent is owned");
        }
        let mut l = plan.first;
        for e in got {
            push_piece(
                &mut obj.map,
                Piece {
                    l,
                    p: e.start,
                    n: e.len,
                },
            );
            l += e.len;
        }
        obj.size = end;
        obj.large = plan.large;
        if end == obj.target {
            self.counters.completed += 1;
            if obj.temp {
                let due = self.ops + self.params.lifetime(&mut self.rng);
                self.dying.push(Reverse((due, id)));
            } else {
                obj.slot = self.deletable.len() as u32;
                self.deletable.push(id);
            }
            self.streams[s] = self.new_object();
        }
        Ok(())
    }
}

/// Removes the mapping of logical blocks `first..` and returns the physical
/// runs it held.
fn unmap_from(map: &mut Vec<Piece>, first: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    while let Some(last) = map.last_mut() {
        if last.l >= first {
            out.push(*last);
            map.pop();
        } else if last.l + last.n > first {
            let keep = first - last.l;
            out.push(Piece {
                l: first,
                p: last.p + keep,
                n: last.n - keep,
            });
            last.n = keep;
            break;
        } else {
            break;
        }
    }
    out
}

/// Appends a run, merging it into the previous one when both logical and
/// physical blocks continue it (one extent on disk).
fn push_piece(map: &mut Vec<Piece>, pc: Piece) {
    if let Some(last) = map.last_mut()
        && last.l + last.n == pc.l
        && last.p + last.n == pc.p
    {
        last.n += pc.n;
        return;
    }
    map.push(pc);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(policy: SimPolicy, ops: u64, seed: u64) -> AllocParams {
        AllocParams {
            ops,
            policy,
            disk: 4 << 30,
            large_max: 16 << 20,
            temp_life: 20_000,
            seed,
            ..AllocParams::default()
        }
    }

    fn run(sim: &mut AgingSim) -> Outcome {
        sim.run(&AtomicBool::new(false), Duration::MAX, |_| {}, |_| Ok(()))
            .expect("runs")
    }

    #[test]
    fn both_policies_hold_the_utilization_target_and_keep_every_block_accounted() {
        for policy in [SimPolicy::Extent, SimPolicy::Region] {
            let mut sim = AgingSim::new(small(policy, 400_000, 3)).expect("valid");
            assert_eq!(run(&mut sim), Outcome::Finished);
            sim.check().expect("consistent");
            let last = sim.samples().last().expect("sampled");
            assert_eq!(last.ops, 400_000);
            assert!(
                last.utilization > 0.7 && last.utilization < 0.85,
                "{policy}: utilization {}",
                last.utilization
            );
            assert!(last.extents_per_object >= 1.0);
            let c = sim.counters();
            assert!(c.young_deletes > 0 && c.old_deletes > 0, "{c:?}");
            assert_eq!(c.writes + c.young_deletes + c.old_deletes, 400_000);
            if policy == SimPolicy::Region {
                assert!(c.whole_rewrites > 0, "small objects convert to large");
            }
        }
    }

    #[test]
    fn a_seed_repeats_exactly_and_different_seeds_differ() {
        let a = {
            let mut s = AgingSim::new(small(SimPolicy::Extent, 100_000, 5)).expect("valid");
            run(&mut s);
            s.samples().to_vec()
        };
        let b = {
            let mut s = AgingSim::new(small(SimPolicy::Extent, 100_000, 5)).expect("valid");
            run(&mut s);
            s.samples().to_vec()
        };
        let c = {
            let mut s = AgingSim::new(small(SimPolicy::Extent, 100_000, 6)).expect("valid");
            run(&mut s);
            s.samples().to_vec()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn unmap_splits_the_piece_that_straddles_the_cut() {
        let mut map = vec![
            Piece {
                l: 0,
                p: 100,
                n: 10,
            },
            Piece {
                l: 10,
                p: 500,
                n: 5,
            },
        ];
        let out = unmap_from(&mut map, 4);
        assert_eq!(map, vec![Piece { l: 0, p: 100, n: 4 }]);
        assert_eq!(
            out,
            vec![
                Piece {
                    l: 10,
                    p: 500,
                    n: 5
                },
                Piece { l: 4, p: 104, n: 6 }
            ]
        );
        push_piece(&mut map, Piece { l: 4, p: 104, n: 2 });
        assert_eq!(map, vec![Piece { l: 0, p: 100, n: 6 }]);
        push_piece(&mut map, Piece { l: 6, p: 900, n: 2 });
        assert_eq!(map.len(), 2);
    }
}
