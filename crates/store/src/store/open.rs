//! Formatting a device and opening a store: read the label and the newer
//! valid commit slot, load its checkpoint, replay the journal after it,
//! rebuild free space from the blocks the metadata owns.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};

use super::{DEFAULT_PARTITION, Inner, Ring, STRIPES, State, Store, commit};
use crate::alloc::{Allocator, Class, Extent, ExtentAllocator, RegionAllocator};
use crate::checkpoint;
use crate::device::{AlignedBuf, BLOCK, Device};
use crate::error::{Result, StoreError};
use crate::format::codec::{Reader, Writer};
use crate::format::label::{Label, Policy};
use crate::format::slot::Slot;
use crate::format::{FORMAT_VERSION, JOURNAL_FIRST_BLOCK, LABEL_BLOCK, SLOT_BLOCKS, signature};
use crate::journal::record::Record;
use crate::journal::{BATCH_HEADER, parse_header, raw_seq, verify_batch};
use crate::meta::Meta;

/// Choices made when a store is formatted (`tessera mkfs`).
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Allocation policy.
    pub policy: Policy,
    /// Large block size in bytes (power of two, ≥ 4 KiB).
    pub large_block: u32,
    /// Journal size in bytes; `None` picks 1/16 of the device, 4 MiB–256 MiB.
    pub journal_len: Option<u64>,
    /// Region size in bytes for the region policy; `None` picks up to
    /// 256 MiB while keeping at least 16 regions.
    pub region_size: Option<u64>,
    /// Objects up to this many bytes are kept inline in their onode.
    pub inline_max: u32,
    /// Overwrite whatever the device holds.
    pub force: bool,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            policy: Policy::Extent,
            large_block: 512 * 1024,
            journal_len: None,
            region_size: None,
            inline_max: 512,
            force: false,
        }
    }
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Inspect only: replay in memory, write nothing, start no committer.
    pub read_only: bool,
    /// Checkpoint when the journal ring is this full (0.05–0.5; more would let
    /// a wrapping batch reach the oldest live one).
    pub checkpoint_fraction: f64,
    /// User attributes the store may hold in all, values and keys as
    /// they encode (all of them live in memory): a change that would grow
    /// them past this is refused with [`StoreError::MetadataFull`], so
    /// whoever may write attributes cannot exhaust the daemon's memory.
    /// Changes that do not grow them (replacing with no larger values,
    /// removing) always go through. Data's own metadata (block maps and
    /// checksums) is bounded by the device, not by this.
    pub max_attr_bytes: u64,
    /// User attributes one object may carry (a directory on the OSDs
    /// holds one to two per entry).
    pub max_attrs_per_object: usize,
}

/// Default [`OpenOptions::max_attr_bytes`]: 4 GiB.
pub const DEFAULT_MAX_ATTR_BYTES: u64 = 4 << 30;

/// Default [`OpenOptions::max_attrs_per_object`]: 4,194,304.
pub const DEFAULT_MAX_ATTRS_PER_OBJECT: usize = 1 << 22;

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            checkpoint_fraction: 0.5,
            max_attr_bytes: DEFAULT_MAX_ATTR_BYTES,
            max_attrs_per_object: DEFAULT_MAX_ATTRS_PER_OBJECT,
        }
    }
}

fn random_uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut u).is_ok() {
            return u;
        }
    }
    let t = super::now_ns() ^ u64::from(std::process::id()).rotate_left(32);
    u[..8].copy_from_slice(&t.to_le_bytes());
    u[8..].copy_from_slice(&t.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    u
}

/// Formats `dev` as an empty store with one partition ([`DEFAULT_PARTITION`]).
/// Refuses a device that holds a recognisable file system or store unless
/// `opts.force`.
pub fn format(dev: Arc<dyn Device>, opts: &FormatOptions) -> Result<Label> {
    let len = dev.len();
    let probe_len =
        (signature::PROBE_LEN as u64).min(len) as usize / BLOCK as usize * BLOCK as usize;
    if probe_len > 0 && !opts.force {
        let mut head = AlignedBuf::zeroed(probe_len);
        dev.read_at(&mut head, 0)
            .map_err(|e| StoreError::io("device head", e))?;
        if let Some(what) = signature::detect(&head) {
            return Err(StoreError::Signature(format!(
                "{} holds {what}; refusing to format it (pass --force to overwrite)",
                dev.describe()
            )));
        }
    }
    let lb = u64::from(opts.large_block);
    if lb < BLOCK || !lb.is_power_of_two() {
        return Err(StoreError::invalid(
            "large block",
            format!("{lb} bytes; must be a power of two of at least 4 KiB"),
        ));
    }
    if u64::from(opts.inline_max) >= BLOCK {
        return Err(StoreError::invalid(
            "inline max",
            "must be below 4096 bytes",
        ));
    }
    let journal_off = JOURNAL_FIRST_BLOCK * BLOCK;
    let journal_len = opts
        .journal_len
        .unwrap_or((len / 16).clamp(4 << 20, 256 << 20))
        .next_multiple_of(BLOCK);
    let data_off = (journal_off + journal_len).next_multiple_of(lb);
    let data_len = len.saturating_sub(data_off) / lb * lb;
    if data_len < 16 * lb || journal_len < 16 * BLOCK {
        return Err(StoreError::invalid(
            "device size",
            format!(
                "{len} bytes is too small for a {journal_len}-byte journal and 16 large blocks of data"
            ),
        ));
    }
    let region_size = match opts.region_size {
        Some(r) => r,
        None => {
            let mut r: u64 = 256 << 20;
            while r > lb && data_len / r < 16 {
                r /= 2;
            }
            r.max(lb)
        }
    };
    let label = Label {
        version: FORMAT_VERSION,
        uuid: random_uuid(),
        device_len: len,
        policy: opts.policy,
        large_block: opts.large_block,
        region_size,
        inline_max: opts.inline_max,
        journal_off,
        journal_len,
        data_off,
        data_len,
        created_ns: super::now_ns(),
    };
    label
        .validate()
        .map_err(|e| StoreError::invalid("geometry", e.to_string()))?;
    let w = |buf: &[u8], at: u64, what: &str| {
        dev.write_at(&AlignedBuf::from_slice(buf), at)
            .map_err(|e| StoreError::io(what.to_string(), e))
    };
    // Invalidate the label first so a crash mid-mkfs leaves no half store.
    w(&[0u8; BLOCK as usize], LABEL_BLOCK * BLOCK, "label")?;
    let slot = Slot {
        uuid: label.uuid,
        generation: 1,
        journal_seq: 1,
        clean: 1,
        ..Slot::default()
    };
    w(&slot.encode(), SLOT_BLOCKS[1] * BLOCK, "commit slot")?;
    w(
        &[0u8; BLOCK as usize],
        SLOT_BLOCKS[0] * BLOCK,
        "commit slot",
    )?;
    dev.flush().map_err(|e| StoreError::io("device flush", e))?;
    w(&label.encode(), LABEL_BLOCK * BLOCK, "label")?;
    dev.flush().map_err(|e| StoreError::io("device flush", e))?;
    let store = Store::open(dev, &OpenOptions::default())?;
    store.create_partition(DEFAULT_PARTITION)?;
    store.close()?;
    Ok(label)
}

/// The state rebuilt from disk.
pub(crate) struct Recovered {
    pub label: Label,
    pub slot: Slot,
    pub meta: Meta,
    pub alloc: Box<dyn Allocator>,
    pub ckpt_extents: Vec<Extent>,
    pub ring: Ring,
    pub next_seq: u64,
    pub replayed: usize,
    pub discarded: bool,
}

fn read_block(dev: &dyn Device, block: u64, what: &str) -> Result<AlignedBuf> {
    let mut b = AlignedBuf::zeroed(BLOCK as usize);
    dev.read_at(&mut b, block * BLOCK)
        .map_err(|e| StoreError::io(what.to_string(), e))?;
    Ok(b)
}

/// Reads and checks the label.
pub(crate) fn read_label(dev: &dyn Device) -> Result<Label> {
    let head = read_block(dev, LABEL_BLOCK, "label")?;
    let label = match Label::decode(&head) {
        Ok(Some(l)) => l,
        Ok(None) => {
            let mut probe = AlignedBuf::zeroed(signature::PROBE_LEN.min(dev.len() as usize));
            let what = dev
                .read_at(&mut probe, 0)
                .ok()
                .and_then(|()| signature::detect(&probe));
            return Err(StoreError::Signature(match what {
                Some(w) => format!("{} is not a Tessera store: it holds {w}", dev.describe()),
                None => format!(
                    "{} is not a Tessera store (no label; run `tessera mkfs`)",
                    dev.describe()
                ),
            }));
        }
        Err(e) => {
            return Err(StoreError::corrupt(format!(
                "label (block 0) is damaged: {e}"
            )));
        }
    };
    if label.version > FORMAT_VERSION {
        return Err(StoreError::NewerFormat {
            found: label.version,
            supported: FORMAT_VERSION,
        });
    }
    if label.device_len > dev.len() {
        return Err(StoreError::corrupt(format!(
            "the store was made for {} bytes but {} has only {}",
            label.device_len,
            dev.describe(),
            dev.len()
        )));
    }
    Ok(label)
}

/// The newer valid commit slot; a damaged slot is skipped (its write was torn).
pub(crate) fn read_slot(dev: &dyn Device, label: &Label) -> Result<Slot> {
    let mut best: Option<Slot> = None;
    let mut errs = Vec::new();
    for b in SLOT_BLOCKS {
        match Slot::decode(&read_block(dev, b, "commit slot")?) {
            Ok(s) if s.uuid == label.uuid => {
                if best.as_ref().is_none_or(|x| s.generation > x.generation) {
                    best = Some(s);
                }
            }
            Ok(_) => errs.push(format!("slot {b}: belongs to another store")),
            Err(e) => errs.push(format!("slot {b}: {e}")),
        }
    }
    best.ok_or_else(|| StoreError::corrupt(format!("no valid commit slot ({})", errs.join("; "))))
}

struct Batch {
    seq: u64,
    pos: u64,
    len: u64,
    records: Vec<Record>,
}

/// Reads the batches after the checkpoint, in order, while they are valid.
/// Reads the journal ring through a window of a few MiB, so replaying
/// thousands of small batches costs a few large reads, not two per batch.
struct RingReader<'a> {
    dev: &'a dyn Device,
    off: u64,
    ring: u64,
    win_start: u64,
    win: AlignedBuf,
    win_len: u64,
}

impl RingReader<'_> {
    const WINDOW: u64 = 4 << 20;

    /// Bytes `[at, at + len)` of the ring (`at + len <= ring`).
    fn get(&mut self, at: u64, len: u64) -> Result<&[u8]> {
        if at < self.win_start || at + len > self.win_start + self.win_len {
            let n = Self::WINDOW.max(len).min(self.ring - at);
            if self.win.len() < n as usize {
                self.win = AlignedBuf::zeroed(n as usize);
            }
            self.dev
                .read_at(&mut self.win[..n as usize], self.off + at)
                .map_err(|e| StoreError::io(format!("journal at byte {at}"), e))?;
            self.win_start = at;
            self.win_len = n;
        }
        let a = (at - self.win_start) as usize;
        Ok(&self.win[a..a + len as usize])
    }
}

fn read_journal(dev: &dyn Device, label: &Label, slot: &Slot) -> Result<(Vec<Batch>, u64, u64)> {
    let ring = label.journal_len;
    let mut rr = RingReader {
        dev,
        off: label.journal_off,
        ring,
        win_start: 0,
        win: AlignedBuf::zeroed(BLOCK as usize),
        win_len: 0,
    };
    let mut pos = slot.journal_head;
    let mut seq = slot.journal_seq;
    let mut max_seen = seq.saturating_sub(1);
    let mut out = Vec::new();
    let mut skipped_total = 0u64;
    let mut read_total = 0u64;
    'outer: loop {
        for (attempt, at) in [pos, 0].into_iter().enumerate() {
            if attempt == 1 && pos == 0 {
                break;
            }
            if at + BLOCK > ring {
                continue;
            }
            let head = rr.get(at, BLOCK)?;
            if let Some(s) = raw_seq(head, &label.uuid) {
                max_seen = max_seen.max(s);
            }
            let Some(h) = parse_header(head, &label.uuid, seq, ring) else {
                continue;
            };
            let total = u64::from(h.total_len);
            if at + total > ring {
                continue;
            }
            let buf = rr.get(at, total)?;
            if !verify_batch(buf, &h) {
                continue;
            }
            let mut r = Reader::new(&buf[BATCH_HEADER..BATCH_HEADER + h.payload_len as usize]);
            let mut records = Vec::with_capacity((h.records as usize).min(h.payload_len as usize));
            for i in 0..h.records {
                records.push(Record::decode(&mut r).map_err(|e| {
                    StoreError::corrupt(format!(
                        "journal batch {seq} record {i} (checksum valid) does not decode: {e}"
                    ))
                })?);
            }
            if at != pos {
                skipped_total += ring - pos;
            }
            read_total += skipped_total + total;
            skipped_total = 0;
            if read_total > ring {
                break 'outer;
            }
            out.push(Batch {
                seq,
                pos: at,
                len: total,
                records,
            });
            pos = at + total;
            seq += 1;
            continue 'outer;
        }
        break;
    }
    Ok((out, pos, max_seen))
}

/// Whether every data block the batch's records name holds what they say.
fn batch_data_intact(dev: &dyn Device, label: &Label, b: &Batch) -> bool {
    for r in &b.records {
        if let Record::SetData { extents, .. } = r {
            for e in extents {
                if e.pblock
                    .checked_add(e.len())
                    .is_none_or(|x| x > label.data_blocks())
                {
                    return false;
                }
                let mut buf = AlignedBuf::zeroed((e.len() * BLOCK) as usize);
                if dev
                    .read_at(&mut buf, label.data_off + e.pblock * BLOCK)
                    .is_err()
                {
                    return false;
                }
                let ok = buf
                    .chunks(BLOCK as usize)
                    .zip(e.crcs.iter())
                    .all(|(blk, c)| crate::journal::block_crc(blk) == *c);
                if !ok {
                    return false;
                }
            }
        }
    }
    true
}

/// A new allocator of the label's policy with every block free.
pub fn new_allocator(label: &Label) -> Box<dyn Allocator> {
    match label.policy {
        Policy::Extent => Box::new(ExtentAllocator::new(label.data_blocks())),
        Policy::Region => Box::new(RegionAllocator::new(
            label.data_blocks(),
            label.region_size / BLOCK,
            label.large_blocks(),
        )),
    }
}

/// Claims every block the metadata owns. In strict mode the first conflict
/// is an error; otherwise every problem is appended to `problems`.
pub(crate) fn rebuild_alloc(
    label: &Label,
    meta: &Meta,
    ckpt: &[Extent],
    problems: &mut Vec<String>,
    strict: bool,
) -> Result<Box<dyn Allocator>> {
    let mut alloc = new_allocator(label);
    let mut owners: BTreeMap<u64, String> = BTreeMap::new();
    let fail = |msg: String, problems: &mut Vec<String>| -> Result<()> {
        if strict {
            return Err(StoreError::corrupt(msg));
        }
        problems.push(msg);
        Ok(())
    };
    for e in ckpt {
        if let Err(err) = alloc.reserve(*e, Class::Meta) {
            fail(
                format!("checkpoint chunk at block {}: {err}", e.start),
                problems,
            )?;
        }
        if !strict {
            owners.insert(e.start, "the checkpoint".into());
        }
    }
    for ((pid, oid), o) in meta.objects.iter() {
        if let Err(why) = o.check(label.large_blocks(), label.data_blocks(), label.inline_max) {
            fail(format!("object {pid:#x}/{oid:#x}: {why}"), problems)?;
            continue;
        }
        let class = if o.large { Class::Large } else { Class::Small };
        for e in o.physical() {
            if let Err(err) = alloc.reserve(e, class) {
                let other = owners
                    .range(..e.end())
                    .next_back()
                    .map(|(_, w)| format!(" (also claimed by {w})"))
                    .unwrap_or_default();
                fail(
                    format!(
                        "object {pid:#x}/{oid:#x} blocks {}..{}: {err}{other}",
                        e.start,
                        e.end()
                    ),
                    problems,
                )?;
            }
            if !strict {
                owners.insert(e.start, format!("object {pid:#x}/{oid:#x}"));
            }
        }
    }
    Ok(alloc)
}

/// Rebuilds the store's state from the device without writing anything.
pub(crate) fn recover(
    dev: &dyn Device,
    strict: bool,
    problems: &mut Vec<String>,
) -> Result<Recovered> {
    let label = read_label(dev)?;
    let slot = read_slot(dev, &label)?;
    let (payload, ckpt_extents) = checkpoint::read(dev, &label, &slot)?;
    let mut meta = if payload.is_empty() {
        Meta::default()
    } else {
        Meta::decode(&payload).map_err(|e| {
            StoreError::corrupt(format!("checkpoint of generation {}: {e}", slot.generation))
        })?
    };
    let (mut batches, mut end, max_seen) = read_journal(dev, &label, &slot)?;
    let mut discarded = false;
    if let Some(last) = batches.last()
        && !batch_data_intact(dev, &label, last)
    {
        // Its flush never completed (or it would verify): it was never
        // acknowledged, so it is dropped whole.
        tracing::info!(
            seq = last.seq,
            "dropping the last journal batch: its data never reached the device"
        );
        end = last.pos;
        batches.pop();
        discarded = true;
    }
    let large = label.large_blocks();
    for b in &batches {
        for (i, r) in b.records.iter().enumerate() {
            meta.apply(r, large).map_err(|e| {
                StoreError::corrupt(format!("journal batch {} record {i}: {e}", b.seq))
            })?;
        }
    }
    let alloc = rebuild_alloc(&label, &meta, &ckpt_extents, problems, strict)?;
    let mut live = 0;
    let mut p = slot.journal_head;
    for b in &batches {
        if b.pos != p {
            live += label.journal_len - p;
        }
        live += b.len;
        p = b.pos + b.len;
    }
    let last_seq = batches
        .last()
        .map_or(slot.journal_seq.saturating_sub(1), |b| b.seq);
    Ok(Recovered {
        next_seq: last_seq.max(max_seen) + 1,
        replayed: batches.len(),
        discarded,
        ring: Ring { head: end, live },
        label,
        slot,
        meta,
        alloc,
        ckpt_extents,
    })
}

impl Store {
    /// Opens a formatted store, recovering from a crash if needed.
    pub fn open(dev: Arc<dyn Device>, opts: &OpenOptions) -> Result<Store> {
        let started = std::time::Instant::now();
        let rec = recover(dev.as_ref(), true, &mut Vec::new())?;
        let needs_seal = rec.replayed > 0 || rec.discarded || rec.next_seq != rec.slot.journal_seq;
        tracing::info!(
            device = %dev.describe(),
            objects = rec.meta.objects.len(),
            replayed_batches = rec.replayed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "store opened"
        );
        let durable = rec.next_seq - 1;
        let mut label = rec.label;
        if label.version < FORMAT_VERSION && !opts.read_only {
            // Opening read-write may write records an older build cannot
            // read: the label says so first, so that build refuses the
            // store with a clear message instead of failing in replay.
            let old = label.version;
            label.version = FORMAT_VERSION;
            dev.write_at(
                &AlignedBuf::from_slice(&label.encode()),
                LABEL_BLOCK * BLOCK,
            )
            .and_then(|()| dev.flush())
            .map_err(|e| StoreError::io("label upgrade", e))?;
            tracing::info!(from = old, to = FORMAT_VERSION, "store format upgraded");
        }
        let inner = Arc::new(Inner {
            dev,
            label,
            state: Mutex::new(State {
                meta: rec.meta,
                alloc: rec.alloc,
                pending: Writer::new(),
                pending_records: 0,
                pending_frees: Vec::new(),
                pending_seq: rec.next_seq,
                durable_seq: durable,
                ring: rec.ring,
                slot_gen: rec.slot.generation,
                ckpt_extents: rec.ckpt_extents,
                deferred_frees: Vec::new(),
                failed: None,
                stop: false,
                ckpt_wanted: false,
                stats: Default::default(),
            }),
            durable_cv: Condvar::new(),
            work_cv: Condvar::new(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            read_only: opts.read_only,
            checkpoint_fraction: opts.checkpoint_fraction.clamp(0.05, 0.5),
            max_attr_bytes: opts.max_attr_bytes,
            max_attrs_per_object: opts.max_attrs_per_object.max(1),
        });
        let committer = if opts.read_only {
            None
        } else {
            let i = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("tessera-commit".into())
                    .spawn(move || commit::run(i))
                    .map_err(|e| StoreError::io("committer thread", e))?,
            )
        };
        let store = Store {
            inner,
            committer: Mutex::new(committer),
        };
        if needs_seal && !opts.read_only {
            // A fresh checkpoint makes the replayed state the new base, so a
            // dropped batch can never be mistaken for a new one later.
            store.checkpoint()?;
        }
        Ok(store)
    }
}
