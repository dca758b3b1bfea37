//! The power-cut test driver behind `tessera store crashtest`.
//!
//! Each cut: open the store on a [`FaultDevice`] holding the image the last
//! cut left (recovery runs), check it against a model of what was
//! acknowledged, run a seeded random workload, cut power after a random number
//! of device operations, and take the image a power loss leaves (unflushed
//! writes dropped, reordered or torn at 512-byte granularity). Checks:
//! fsck is clean; every acknowledged change reads back exactly; the one
//! operation in flight at the cut shows its old or its new state, never a mix.
//! Every run is reproducible from its seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::device::{CrashMode, Device, FaultDevice};
use crate::error::StoreError;
use crate::format::label::Policy;
use crate::fsck::fsck;
use crate::store::{DEFAULT_PARTITION, FormatOptions, OpenOptions, Store, format};

/// Parameters of a crash test run.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Number of power cuts.
    pub cuts: u64,
    /// Seed of everything random.
    pub seed: u64,
    /// Device size in bytes.
    pub device_len: u64,
    /// Most operations between cuts.
    pub max_ops: u32,
    /// Start over from a fresh mkfs every this many cuts (alternating policy).
    pub reformat_every: u64,
    /// Concurrent writers (each owns a disjoint set of objects, so each has
    /// at most one operation in flight at the cut). With more than one, the
    /// operations are seeded but their interleaving is the scheduler's.
    pub threads: usize,
}

impl Default for CrashConfig {
    fn default() -> Self {
        CrashConfig {
            cuts: 200,
            seed: 1,
            device_len: 12 << 20,
            max_ops: 40,
            reformat_every: 50,
            threads: 1,
        }
    }
}

/// Outcome of a run.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Cuts performed.
    pub cuts: u64,
    /// Each violation, with the cut and seed that reproduce it.
    pub violations: Vec<String>,
    /// Operations acknowledged in total.
    pub acknowledged: u64,
    /// Operations in flight at a cut.
    pub in_flight: u64,
    /// Cuts whose recovery dropped an unacknowledged batch.
    pub dropped_batches: u64,
}

const OBJECTS: u64 = 16;
const ATTR: (u32, u32) = (0x10, 1);

/// Model state of one object id: absent, or its bytes and one attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Obj {
    data: Vec<u8>,
    attr: Vec<u8>,
}

type State = Option<Obj>;

fn oid(i: u64) -> u64 {
    crate::meta::FIRST_USER_ID + i
}

fn fill(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let tag: u8 = rng.random();
    (0..n)
        .map(|i| tag.wrapping_add((i / 512) as u8).wrapping_mul(31) ^ (i as u8))
        .collect()
}

fn size(rng: &mut SmallRng) -> usize {
    match rng.random_range(0..10) {
        0..=2 => rng.random_range(0..600),
        3..=6 => rng.random_range(0..40_000),
        _ => rng.random_range(40_000..300_000),
    }
}

/// One random operation; returns the id it touches and the state it would
/// produce if it takes effect (`None` when it is a no-op on the model).
fn step(
    store: &Store,
    rng: &mut SmallRng,
    model: &BTreeMap<u64, State>,
    objects: &[u64],
) -> (u64, Option<State>, Result<(), StoreError>) {
    let i = objects[rng.random_range(0..objects.len())];
    let id = oid(i);
    let p = DEFAULT_PARTITION;
    let cur = model.get(&i).cloned().flatten();
    let Some(obj) = cur else {
        if rng.random_bool(0.5) {
            let r = store.create(p, Some(id)).map(|_| ());
            let empty = Obj {
                data: Vec::new(),
                attr: Vec::new(),
            };
            return (i, Some(Some(empty)), r);
        }
        let n = size(rng);
        let data = fill(rng, n);
        let r = store.create_and_write(p, id, &data);
        return (
            i,
            Some(Some(Obj {
                data,
                attr: Vec::new(),
            })),
            r,
        );
    };
    match rng.random_range(0..100) {
        0..=34 => {
            // Whole-object overwrite at 0 (or a partial write).
            let n = size(rng);
            let off = if rng.random_bool(0.7) {
                0
            } else {
                rng.random_range(0..obj.data.len() as u64 + 70_000)
            };
            let data = fill(rng, n);
            let mut new = obj.clone();
            let end = off as usize + n;
            // A zero-length write changes nothing, even past the end (POSIX).
            if n > 0 {
                if new.data.len() < end {
                    new.data.resize(end, 0);
                }
                new.data[off as usize..end].copy_from_slice(&data);
            }
            let r = store.write(p, id, off, &data);
            (i, Some(Some(new)), r)
        }
        35..=49 => {
            let n = size(rng) / 4;
            let data = fill(rng, n);
            let mut new = obj.clone();
            new.data.extend_from_slice(&data);
            let r = store
                .append(p, id, &data)
                .map(|off| assert_eq!(off as usize, obj.data.len()));
            (i, Some(Some(new)), r)
        }
        50..=62 => {
            let n = rng.random_range(0..obj.data.len() as u64 + 100_000);
            let mut new = obj.clone();
            new.data.resize(n as usize, 0);
            let r = store.truncate(p, id, n);
            (i, Some(Some(new)), r)
        }
        63..=72 => (i, Some(None), store.remove(p, id)),
        73..=82 => {
            let n = rng.random_range(1..300);
            let v = fill(rng, n);
            let mut new = obj.clone();
            new.attr = v.clone();
            let r = store.set_attr(p, id, ATTR.0, ATTR.1, &v);
            (i, Some(Some(new)), r)
        }
        83..=92 => {
            // CAS expecting the current value: must swap.
            let v = 7u64.to_le_bytes().to_vec();
            let mut new = obj.clone();
            new.attr = v.clone();
            let r = store
                .cas_attr(p, id, ATTR.0, ATTR.1, &obj.attr, &v)
                .map(|o| {
                    assert!(
                        o.swapped && o.old == obj.attr,
                        "CAS with the current value did not swap"
                    );
                });
            (i, Some(Some(new)), r)
        }
        93..=95 => (i, None, store.checkpoint()),
        96..=97 => {
            // Room reserved in and past the data: the bytes read the same.
            let off = rng.random_range(0..obj.data.len() as u64 + 70_000);
            let n = rng.random_range(1..200_000);
            (i, None, store.reserve(p, id, off, n, false))
        }
        _ => (i, None, store.flush()),
    }
}

/// What one writer did between two cuts.
#[derive(Default)]
struct Work {
    /// Acknowledged states of its objects.
    model: BTreeMap<u64, State>,
    /// The operation in flight at the cut: its object and allowed states.
    uncertain: Option<(u64, Vec<State>)>,
    acknowledged: u64,
    violations: Vec<String>,
}

/// Runs random operations on `objects` until `ops` are done or power fails.
fn workload(
    store: &Store,
    dev: &FaultDevice,
    rng: &mut SmallRng,
    mut model: BTreeMap<u64, State>,
    objects: &[u64],
    ops: u32,
    ctx: &str,
) -> Work {
    let mut w = Work::default();
    for _ in 0..ops {
        let (i, next, result) = step(store, rng, &model, objects);
        tracing::debug!(object = i, ok = result.is_ok(), err = ?result.as_ref().err(), "crashtest op");
        match result {
            Ok(()) => {
                w.acknowledged += 1;
                if let Some(n) = next {
                    model.insert(i, n);
                }
            }
            Err(StoreError::NoSpace { .. }) => {}
            Err(_) if !dev.powered() => {
                if let Some(n) = next {
                    let old = model.get(&i).cloned().flatten();
                    w.uncertain = Some((i, vec![old, n]));
                }
                break;
            }
            Err(e) => {
                w.violations
                    .push(format!("{ctx}: unexpected error with power on: {e}"));
                break;
            }
        }
    }
    w.model = model;
    w
}

fn observe(store: &Store, i: u64) -> Result<State, StoreError> {
    let p = DEFAULT_PARTITION;
    match store.stat(p, oid(i)) {
        Err(StoreError::NoObject { .. }) => Ok(None),
        Err(e) => Err(e),
        Ok(info) => {
            let data = store.read(p, oid(i), 0, info.size + 10)?;
            let attr = store
                .get_attr(p, oid(i), ATTR.0, ATTR.1)?
                .unwrap_or_default();
            Ok(Some(Obj { data, attr }))
        }
    }
}

fn describe(s: &State) -> String {
    match s {
        None => "absent".into(),
        Some(o) => format!(
            "{} bytes (crc {:#010x}), attr {} bytes",
            o.data.len(),
            crc32c::crc32c(&o.data),
            o.attr.len()
        ),
    }
}

fn fresh_image(cfg: &CrashConfig, round: u64) -> Result<Vec<u8>, StoreError> {
    let dev = Arc::new(FaultDevice::new(cfg.device_len));
    let policy = if round.is_multiple_of(2) {
        Policy::Extent
    } else {
        Policy::Region
    };
    let opts = FormatOptions {
        policy,
        large_block: 64 * 1024,
        journal_len: Some(256 * 1024),
        region_size: Some(1 << 20),
        ..FormatOptions::default()
    };
    format(dev.clone(), &opts)?;
    Ok(dev.crash_image(CrashMode::DropAll, 0))
}

/// Runs the crash test; `progress` is called after every cut.
pub fn run(
    cfg: &CrashConfig,
    mut progress: impl FnMut(&CrashReport),
) -> Result<CrashReport, StoreError> {
    let mut report = CrashReport::default();
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut image = Vec::new();
    let mut model: BTreeMap<u64, State> = BTreeMap::new();
    let mut uncertain: BTreeMap<u64, Vec<State>> = BTreeMap::new();
    for cut in 0..cfg.cuts {
        let cut_seed: u64 = rng.random();
        let ctx = format!("cut {cut} (run seed {}, cut seed {cut_seed:#x})", cfg.seed);
        if cut % cfg.reformat_every.max(1) == 0 {
            image = fresh_image(cfg, cut / cfg.reformat_every.max(1))?;
            model.clear();
            uncertain.clear();
        }
        let mut crng = SmallRng::seed_from_u64(cut_seed);
        let dev = Arc::new(FaultDevice::from_image(std::mem::take(&mut image)));
        // 1. fsck the image the last cut left.
        match fsck(dev.clone(), |_, _| {}) {
            Ok(r) => {
                if r.dropped_batch {
                    report.dropped_batches += 1;
                }
                for p in r.problems {
                    report.violations.push(format!("{ctx}: fsck: {p}"));
                }
            }
            Err(e) => report
                .violations
                .push(format!("{ctx}: fsck cannot rebuild the store: {e}")),
        }
        // 2. Recover and compare with the model.
        let store = match Store::open(dev.clone(), &OpenOptions::default()) {
            Ok(s) => s,
            Err(e) => {
                report
                    .violations
                    .push(format!("{ctx}: open after the cut failed: {e}"));
                image = fresh_image(cfg, cut)?;
                model.clear();
                uncertain.clear();
                report.cuts += 1;
                continue;
            }
        };
        for i in 0..OBJECTS {
            let seen = match observe(&store, i) {
                Ok(s) => s,
                Err(e) => {
                    report
                        .violations
                        .push(format!("{ctx}: object {i}: read failed: {e}"));
                    continue;
                }
            };
            let want = model.get(&i).cloned().flatten();
            let allowed: Vec<State> = match uncertain.get(&i) {
                Some(states) => states.clone(),
                None => vec![want.clone()],
            };
            if allowed.contains(&seen) {
                model.insert(i, seen);
            } else {
                report.violations.push(format!(
                    "{ctx}: object {i}: found {}, expected {}",
                    describe(&seen),
                    allowed
                        .iter()
                        .map(describe)
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
                model.insert(i, seen);
            }
        }
        // 3. Workload, then a power cut at a random device operation.
        uncertain.clear();
        dev.cut_after(crng.random_range(0..120));
        let threads = cfg.threads.max(1) as u64;
        let parts: Vec<Vec<u64>> = (0..threads)
            .map(|t| (0..OBJECTS).filter(|i| i % threads == t).collect())
            .collect();
        let works: Vec<Work> = if threads == 1 {
            let ops = crng.random_range(1..=cfg.max_ops);
            vec![workload(
                &store,
                &dev,
                &mut crng,
                model.clone(),
                &parts[0],
                ops,
                &ctx,
            )]
        } else {
            let seeds: Vec<(u64, u32)> = (0..threads)
                .map(|_| (crng.random(), crng.random_range(1..=cfg.max_ops)))
                .collect();
            std::thread::scope(|sc| {
                let hs: Vec<_> = parts
                    .iter()
                    .zip(&seeds)
                    .map(|(objs, &(seed, ops))| {
                        let mine: BTreeMap<u64, State> = objs
                            .iter()
                            .map(|i| (*i, model.get(i).cloned().flatten()))
                            .collect();
                        let (store, dev, ctx) = (&store, &dev, &ctx);
                        sc.spawn(move || {
                            workload(
                                store,
                                dev,
                                &mut SmallRng::seed_from_u64(seed),
                                mine,
                                objs,
                                ops,
                                ctx,
                            )
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| Work {
                            violations: vec![format!("{ctx}: a writer panicked")],
                            ..Work::default()
                        })
                    })
                    .collect()
            })
        };
        for w in works {
            report.acknowledged += w.acknowledged;
            report.violations.extend(w.violations);
            model.extend(w.model);
            if let Some((i, states)) = w.uncertain {
                uncertain.insert(i, states);
                report.in_flight += 1;
            }
        }
        dev.cut_power();
        drop(store);
        let mode = match crng.random_range(0..3) {
            0 => CrashMode::DropAll,
            1 => CrashMode::TearLast,
            _ => CrashMode::Reorder,
        };
        image = dev.crash_image(mode, crng.random());
        report.cuts += 1;
        progress(&report);
    }
    // Final check of the last image.
    let dev: Arc<dyn Device> = Arc::new(FaultDevice::from_image(image));
    if let Ok(r) = fsck(dev, |_, _| {}) {
        for p in r.problems {
            report.violations.push(format!("final image: fsck: {p}"));
        }
    }
    Ok(report)
}
