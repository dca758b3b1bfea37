//! Group commit. Callers apply their records to the in-memory state and
//! append them to the pending batch under the state lock (so journal order is
//! apply order), then wait. The committer thread takes the whole pending
//! batch, writes it to the journal ring (or, when the ring is half full,
//! writes a checkpoint that subsumes it), flushes once, and wakes everyone
//! whose records it carried.

use std::sync::{Arc, MutexGuard};

use super::{Inner, State};
use crate::checkpoint;
use crate::device::BLOCK;
use crate::error::{Result, StoreError};
use crate::format::SLOT_BLOCKS;
use crate::format::codec::Writer;
use crate::format::slot::Slot;
use crate::journal::encode_batch;
use crate::journal::record::Record;
use crate::meta::ATTR_OVERHEAD;

/// Applies `recs` in memory and queues them; returns the batch sequence
/// number to wait for. Nothing is applied if the first record fails.
pub(crate) fn log(inner: &Inner, st: &mut State, recs: &[Record]) -> Result<u64> {
    let large = inner.label.large_blocks();
    // Encode once: the bytes both measure how much the metadata may grow and
    // are what the journal gets.
    let mut w = Writer::new();
    let mut ends = Vec::with_capacity(recs.len());
    let mut growth = 0u64;
    for r in recs {
        let start = w.len();
        r.encode(&mut w);
        ends.push(w.len());
        if grows(r) {
            growth += (w.len() - start) as u64;
        }
    }
    // Records that add metadata must leave room for two checkpoints of the
    // grown metadata (the data path checks the same when it allocates), so
    // a full store still commits removals and still reopens.
    check_attr_bytes(inner, st, recs)?;
    if growth > 0 {
        let free = st.alloc.free_blocks();
        if free < super::reserve_blocks(st.meta.approx_bytes + growth) {
            return Err(StoreError::NoSpace {
                needed: growth,
                free: free.saturating_sub(super::reserve_blocks(st.meta.approx_bytes)) * BLOCK,
            });
        }
    }
    for (i, r) in recs.iter().enumerate() {
        match st.meta.apply(r, large) {
            Ok(freed) => st.pending_frees.extend(freed),
            Err(e) => {
                // Journal exactly what was applied.
                let done = if i == 0 { 0 } else { ends[i - 1] };
                st.pending.bytes(&w.buf[..done]);
                st.pending_records += i as u32;
                return Err(StoreError::corrupt(e.to_string()));
            }
        }
    }
    st.pending.bytes(&w.buf);
    st.pending_records += recs.len() as u32;
    inner.work_cv.notify_one();
    Ok(st.pending_seq)
}

/// Refuses `recs` when they would grow the user attributes past the
/// store's bound.
pub(crate) fn check_attr_bytes(inner: &Inner, st: &State, recs: &[Record]) -> Result<()> {
    let growth = attr_growth(st, recs);
    if growth > 0 && st.meta.attr_bytes + growth > inner.max_attr_bytes {
        return Err(StoreError::MetadataFull {
            what: format!(
                "user attributes of {} bytes in all growing by {growth}",
                st.meta.attr_bytes
            ),
            limit: inner.max_attr_bytes,
        });
    }
    Ok(())
}

/// How much `recs` would grow the user attributes (0 when they shrink
/// them or leave them as they are).
pub(crate) fn attr_growth(st: &State, recs: &[Record]) -> u64 {
    let mut delta = 0i64;
    for r in recs {
        if let Record::SetAttr {
            pid,
            oid,
            page,
            number,
            value,
            ..
        } = r
        {
            let cost = |n: usize| (ATTR_OVERHEAD + n as u64) as i64;
            let old = st
                .meta
                .objects
                .get(&(*pid, *oid))
                .and_then(|o| o.attrs.get(&(*page, *number)).map(|v| cost(v.len())))
                .unwrap_or(0);
            let new = if value.is_empty() {
                0
            } else {
                cost(value.len())
            };
            delta += new - old;
        }
    }
    delta.max(0) as u64
}

/// Whether a record can make the metadata bigger (data records are checked
/// when their blocks are allocated).
fn grows(r: &Record) -> bool {
    match r {
        Record::CreatePartition { .. }
        | Record::CreateObject { .. }
        | Record::SetInline { .. }
        | Record::Reserve { .. } => true,
        Record::SetAttr { value, .. } => !value.is_empty(),
        _ => false,
    }
}

/// Waits until batch `seq` is durable.
pub(crate) fn wait(inner: &Inner, mut st: MutexGuard<'_, State>, seq: u64) -> Result<()> {
    inner.work_cv.notify_one();
    while st.durable_seq < seq {
        if let Some(f) = &st.failed {
            return Err(StoreError::Failed(f.clone()));
        }
        st = inner.durable_cv.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    Ok(())
}

/// The committer thread's loop; returns when the store stops or fails.
pub(crate) fn run(inner: Arc<Inner>) {
    loop {
        let mut st = inner.lock();
        while st.pending_records == 0 && !st.stop && !st.ckpt_wanted {
            st = inner.work_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let stopping = st.stop;
        // A panic here must not leave callers waiting forever: it fails the store.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit_one(&inner, st)))
                .unwrap_or_else(|_| {
                    Err(StoreError::Failed(
                        "the committer panicked (a bug); see the log".into(),
                    ))
                });
        let mut st = inner.lock();
        if let Err(e) = result {
            tracing::error!(error = %e, "commit failed; the store stops accepting changes");
            st.failed = Some(e.to_string());
            inner.durable_cv.notify_all();
            return;
        }
        inner.durable_cv.notify_all();
        if stopping && st.pending_records == 0 {
            return;
        }
    }
}

fn commit_one(inner: &Inner, mut st: MutexGuard<'_, State>) -> Result<()> {
    let seq = st.pending_seq;
    st.pending_seq += 1;
    let payload = std::mem::take(&mut st.pending.buf);
    let records = std::mem::take(&mut st.pending_records);
    let frees = std::mem::take(&mut st.pending_frees);
    let batch_len = (super::super::journal::BATCH_HEADER + payload.len())
        .next_multiple_of(BLOCK as usize) as u64;
    let ring_len = inner.label.journal_len;
    let limit = (ring_len as f64 * inner.checkpoint_fraction) as u64;
    let wrap_skip = if st.ring.head + batch_len > ring_len {
        ring_len - st.ring.head
    } else {
        0
    };
    let want_ckpt = st.stop || st.ckpt_wanted || st.ring.live + wrap_skip + batch_len > limit;

    if want_ckpt {
        st.ckpt_wanted = false;
        let snapshot = st.meta.encode();
        debug_assert!(
            snapshot.len() as u64 <= st.meta.approx_bytes,
            "metadata bound {} below its encoding {}",
            st.meta.approx_bytes,
            snapshot.len()
        );
        let extents = checkpoint::plan(snapshot.len() as u64, st.alloc.as_mut())?;
        let generation = st.slot_gen + 1;
        tracing::debug!(seq, generation, head = st.ring.head, records, "checkpoint");
        let head = st.ring.head;
        let clean = st.stop;
        drop(st);
        let written = (|| {
            let (block, blocks, crc, bytes) = checkpoint::write(
                inner.dev.as_ref(),
                &inner.label,
                generation,
                &extents,
                &snapshot,
            )?;
            flush(inner)?;
            let slot = Slot {
                uuid: inner.label.uuid,
                generation,
                checkpoint_block: block,
                checkpoint_blocks: blocks,
                checkpoint_crc: crc,
                checkpoint_bytes: bytes,
                journal_head: head,
                journal_seq: seq + 1,
                clean: u8::from(clean),
            };
            let at = SLOT_BLOCKS[(generation % 2) as usize] * BLOCK;
            inner
                .dev
                .write_at(&crate::device::AlignedBuf::from_slice(&slot.encode()), at)
                .map_err(|e| StoreError::io("commit slot", e))?;
            flush(inner)
        })();
        let mut st = inner.lock();
        if let Err(e) = written {
            for x in extents {
                let _ = st.alloc.free(x);
            }
            return Err(e);
        }
        let old = std::mem::replace(&mut st.ckpt_extents, extents);
        let deferred = std::mem::take(&mut st.deferred_frees);
        release(&mut st, old.into_iter().chain(deferred).chain(frees));
        st.slot_gen = generation;
        st.ring.live = 0;
        st.durable_seq = seq;
        st.stats.checkpoints += 1;
        st.stats.flushes += 2;
        st.stats.records += u64::from(records);
        return Ok(());
    }

    let mut pos = st.ring.head;
    let mut skipped = 0;
    if pos + batch_len > ring_len {
        skipped = ring_len - pos;
        pos = 0;
    }
    let buf = encode_batch(&inner.label.uuid, seq, &payload, records);
    tracing::debug!(
        seq,
        pos,
        len = batch_len,
        records,
        live = st.ring.live,
        "journal batch"
    );
    drop(st);
    let written = inner
        .dev
        .write_at(&buf, inner.label.journal_off + pos)
        .map_err(|e| StoreError::io(format!("journal batch {seq}"), e))
        .and_then(|()| flush(inner));
    let mut st = inner.lock();
    written?;
    st.ring.head = pos + batch_len;
    st.ring.live += skipped + batch_len;
    let deferred = std::mem::replace(&mut st.deferred_frees, frees);
    release(&mut st, deferred.into_iter());
    st.durable_seq = seq;
    st.stats.batches += 1;
    st.stats.flushes += 1;
    st.stats.records += u64::from(records);
    Ok(())
}

fn flush(inner: &Inner) -> Result<()> {
    inner
        .dev
        .flush()
        .map_err(|e| StoreError::io("device flush", e))
}

fn release(st: &mut State, frees: impl Iterator<Item = crate::alloc::Extent>) {
    for e in frees {
        if let Err(err) = st.alloc.free(e) {
            // A bug, not a device problem: keep going, fsck will report it.
            tracing::error!(extent = ?e, error = %err, "releasing blocks failed");
        }
    }
}
