//! `fsck`: rebuilds the store's state read-only and checks every invariant:
//! label and slots, checkpoint and journal checksums, every onode's structure,
//! no block owned twice, free space equal to the complement of owned blocks,
//! partition counts equal to the index, and the checksum of every data block.

use std::sync::Arc;

use crate::alloc::{Extent, coalesce};
use crate::device::{AlignedBuf, BLOCK, Device};
use crate::error::Result;
use crate::journal::block_crc;
use crate::store::open::recover;

/// What fsck found.
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// Each problem, precisely located; empty when the store is clean.
    pub problems: Vec<String>,
    /// Partitions.
    pub partitions: u64,
    /// Objects.
    pub objects: u64,
    /// Data blocks owned by objects and checkpoints.
    pub used_blocks: u64,
    /// Free data blocks.
    pub free_blocks: u64,
    /// Data blocks whose checksum was verified.
    pub verified_blocks: u64,
    /// Journal batches replayed.
    pub replayed_batches: usize,
    /// Whether the last journal batch was dropped (an unacknowledged commit).
    pub dropped_batch: bool,
}

impl FsckReport {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the store on `dev`. An error means the store cannot even be
/// rebuilt (damaged label, slots or checkpoint); problems found after that
/// are listed in the report.
pub fn fsck(dev: Arc<dyn Device>, mut progress: impl FnMut(u64, u64)) -> Result<FsckReport> {
    let mut problems = Vec::new();
    let rec = recover(dev.as_ref(), false, &mut problems)?;
    let label = &rec.label;
    let mut report = FsckReport {
        partitions: rec.meta.partitions.len() as u64,
        objects: rec.meta.objects.len() as u64,
        replayed_batches: rec.replayed,
        dropped_batch: rec.discarded,
        ..FsckReport::default()
    };
    if let Err(e) = rec.alloc.check() {
        problems.push(format!("allocator: {e}"));
    }
    // Free space must be exactly the complement of owned blocks.
    let mut owned: Vec<Extent> = rec.ckpt_extents.clone();
    for o in rec.meta.objects.values() {
        owned.extend(o.physical());
    }
    let owned = coalesce(owned);
    report.used_blocks = owned.iter().map(|e| e.len).sum();
    let mut complement = Vec::new();
    let mut at = 0;
    for e in &owned {
        if e.start > at {
            complement.push(Extent::new(at, e.start - at));
        }
        at = at.max(e.end());
    }
    if at < label.data_blocks() {
        complement.push(Extent::new(at, label.data_blocks() - at));
    }
    let free = rec.alloc.free_extents();
    report.free_blocks = free.iter().map(|e| e.len).sum();
    if free != complement && problems.is_empty() {
        let diff = free.iter().zip(&complement).find(|(a, b)| a != b);
        problems.push(format!(
            "free space ({} blocks in {} runs) is not the complement of owned space ({} blocks in {} runs); first difference {:?}",
            report.free_blocks,
            free.len(),
            complement.iter().map(|e| e.len).sum::<u64>(),
            complement.len(),
            diff
        ));
    }
    for (pid, p) in &rec.meta.partitions {
        let n = rec.meta.objects.range((*pid, 0)..=(*pid, u64::MAX)).count() as u64;
        if n != p.objects {
            problems.push(format!(
                "partition {pid:#x}: index holds {n} objects, count says {}",
                p.objects
            ));
        }
    }
    // Every data block against its checksum.
    let total: u64 = rec
        .meta
        .objects
        .values()
        .map(|o| o.extents.iter().map(|e| e.len()).sum::<u64>())
        .sum();
    let mut done = 0;
    for ((pid, oid), o) in rec.meta.objects.iter() {
        for e in &o.extents {
            if e.pblock + e.len() > label.data_blocks() {
                continue;
            }
            let mut buf = AlignedBuf::zeroed((e.len() * BLOCK) as usize);
            if let Err(err) = dev.read_at(&mut buf, label.data_off + e.pblock * BLOCK) {
                problems.push(format!(
                    "object {pid:#x}/{oid:#x} bytes {}..: read error {err}",
                    e.lblock * BLOCK
                ));
                continue;
            }
            for (i, (blk, want)) in buf.chunks(BLOCK as usize).zip(e.crcs.iter()).enumerate() {
                let got = block_crc(blk);
                if got != *want {
                    problems.push(format!(
                        "object {pid:#x}/{oid:#x} byte offset {}: data checksum mismatch (stored {want:#010x}, computed {got:#010x}, device block {})",
                        (e.lblock + i as u64) * BLOCK,
                        e.pblock + i as u64
                    ));
                }
            }
            done += e.len();
            report.verified_blocks += e.len();
            progress(done, total);
        }
    }
    report.problems = problems;
    Ok(report)
}
