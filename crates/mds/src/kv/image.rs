//! The KV as one file, and the KV changed from outside the committer: what
//! a replicated MDS group needs. An *image* holds every replicated entry
//! of every table (a raft snapshot); `apply_logged` applies batches of
//! [`Write`]s that another member committed; `digest` fingerprints the
//! replicated contents so members can be compared.
//!
//! Image file (all integers little-endian): magic `TMKI`, version u16,
//! then the caller's metadata blob as u32 length + bytes + crc32c u32, then
//! chunks — u32 length, crc32c u32 of the body, body = postcard
//! `Vec<(table u8, key, value)>` — and a final chunk of length 0 whose crc
//! field holds the number of entries (mod 2³²). A missing end, a bad crc or
//! a short file refuses the whole image.

use std::io::{BufReader, BufWriter, Read, Write as _};
use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable};

use super::{CHECKPOINT_KEY, N, T, Write, def, io_err, open_tx};
use proto::mds::MdsError;

const MAGIC: [u8; 4] = *b"TMKI";
const VERSION: u16 = 1;
/// Entries per chunk, and bytes a chunk may reach before it is cut.
const CHUNK_ENTRIES: usize = 4096;
const CHUNK_BYTES: usize = 1 << 20;
/// Largest chunk or metadata blob a reader accepts.
const MAX_CHUNK: usize = 64 << 20;

/// Keys of the meta table that belong to one member, not to the group
/// (its log position, its raft state): never in an image or a digest.
pub const LOCAL_META: [&[u8]; 2] = [CHECKPOINT_KEY, RAFT_STATE_KEY];
/// Where a group member keeps what its KV has applied (raft log id and
/// membership, encoded by the raft layer).
pub const RAFT_STATE_KEY: &[u8] = b"raft_state";

fn replicated(t: usize, key: &[u8]) -> bool {
    t != T::Meta as usize || !LOCAL_META.contains(&key)
}

/// Visits every replicated entry, table by table in key order.
/// A visitor of (table, key, value) that may fail.
type TableVisitor<'a> = dyn FnMut(u8, &[u8], &[u8]) -> Result<(), MdsError> + 'a;

fn each_entry(r: &redb::ReadTransaction, f: &mut TableVisitor<'_>) -> Result<(), MdsError> {
    for t in 0..N {
        let table = r.open_table(def(t)).map_err(|e| io_err("open table", e))?;
        for item in table.iter().map_err(|e| io_err("scan", e))? {
            let (k, v) = item.map_err(|e| io_err("scan", e))?;
            if replicated(t, k.value()) {
                f(t as u8, k.value(), v.value())?;
            }
        }
    }
    Ok(())
}

/// A fingerprint of every replicated entry (equal on members that applied
/// the same log).
pub fn digest(db: &Database) -> Result<u64, MdsError> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let r = db.begin_read().map_err(|e| io_err("begin read", e))?;
    each_entry(&r, &mut |t, k, v| {
        h.update(&[t]);
        h.update(&(k.len() as u32).to_le_bytes());
        h.update(k);
        h.update(&(v.len() as u32).to_le_bytes());
        h.update(v);
        Ok(())
    })?;
    Ok(h.digest())
}

type Chunk = Vec<(u8, Vec<u8>, Vec<u8>)>;

fn put_chunk(out: &mut impl std::io::Write, body: &[u8], crc: u32) -> std::io::Result<()> {
    out.write_all(&(body.len() as u32).to_le_bytes())?;
    out.write_all(&crc.to_le_bytes())?;
    out.write_all(body)
}

/// Writes an image of `db`'s replicated entries to `path` (through a
/// temporary file, synced, then renamed), with the metadata `meta` makes
/// from the [`RAFT_STATE_KEY`] value at the image's point. Everything the
/// image holds is durable in `db` first (a durable commit at that point).
/// Returns the number of entries and the metadata.
pub fn write_image(
    db: &Database,
    path: &Path,
    meta: impl FnOnce(Option<Vec<u8>>) -> Result<Vec<u8>, MdsError>,
) -> Result<(u64, Vec<u8>), MdsError> {
    write_image_at(&durable_point(db)?, path, meta)
}

/// A read of `db` at a point made durable first: an empty durable commit
/// while no other writer runs, and the read taken at that point. (The
/// only step of a snapshot that needs the KV quiet.)
pub fn durable_point(db: &Database) -> Result<redb::ReadTransaction, MdsError> {
    let mut w = db.begin_write().map_err(|e| io_err("begin", e))?;
    let r = db.begin_read().map_err(|e| io_err("begin read", e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| io_err("durability", e))?;
    w.commit().map_err(|e| io_err("commit", e))?;
    Ok(r)
}

/// [`write_image`] of the read `r` (see [`durable_point`]).
pub fn write_image_at(
    r: &redb::ReadTransaction,
    path: &Path,
    meta: impl FnOnce(Option<Vec<u8>>) -> Result<Vec<u8>, MdsError>,
) -> Result<(u64, Vec<u8>), MdsError> {
    let meta = meta(raft_state_at(r)?)?;
    let meta = &meta[..];
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| io_err("create image", e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let ioe = |e: std::io::Error| io_err("write image", e);
    out.write_all(&MAGIC).map_err(ioe)?;
    out.write_all(&VERSION.to_le_bytes()).map_err(ioe)?;
    put_chunk(&mut out, meta, crc32c::crc32c(meta)).map_err(ioe)?;
    let mut chunk: Chunk = Vec::new();
    let mut bytes = 0usize;
    let mut count = 0u64;
    let flush = |chunk: &mut Chunk, out: &mut BufWriter<std::fs::File>| {
        let body = postcard::to_allocvec(&*chunk).map_err(|e| io_err("encode image", e))?;
        put_chunk(out, &body, crc32c::crc32c(&body)).map_err(ioe)?;
        chunk.clear();
        Ok::<(), MdsError>(())
    };
    each_entry(r, &mut |t, k, v| {
        chunk.push((t, k.to_vec(), v.to_vec()));
        bytes += k.len() + v.len();
        count += 1;
        if chunk.len() >= CHUNK_ENTRIES || bytes >= CHUNK_BYTES {
            flush(&mut chunk, &mut out)?;
            bytes = 0;
        }
        Ok(())
    })?;
    if !chunk.is_empty() {
        flush(&mut chunk, &mut out)?;
    }
    put_chunk(&mut out, &[], count as u32).map_err(ioe)?;
    let file = out.into_inner().map_err(|e| io_err("write image", e))?;
    file.sync_all().map_err(|e| io_err("sync image", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err("rename image", e))?;
    if let Some(Ok(d)) = path.parent().map(std::fs::File::open) {
        let _ = d.sync_all();
    }
    Ok((count, meta.to_vec()))
}

fn read_chunk(r: &mut impl Read) -> Result<(Vec<u8>, u32), MdsError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head)
        .map_err(|e| io_err("image", format!("truncated: {e}")))?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_CHUNK {
        return Err(io_err("image", format!("chunk of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(|e| io_err("image", format!("truncated: {e}")))?;
    Ok((body, crc))
}

fn open_image(path: &Path) -> Result<(BufReader<std::fs::File>, Vec<u8>), MdsError> {
    let file = std::fs::File::open(path)
        .map_err(|e| io_err(&format!("open image {}", path.display()), e))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; 6];
    r.read_exact(&mut head)
        .map_err(|e| io_err("image", format!("truncated: {e}")))?;
    if head[..4] != MAGIC {
        return Err(io_err("image", "not a KV image (bad magic)"));
    }
    let v = u16::from_le_bytes([head[4], head[5]]);
    if v != VERSION {
        return Err(io_err(
            "image",
            format!("version {v}, this build reads {VERSION}"),
        ));
    }
    let (meta, crc) = read_chunk(&mut r)?;
    if crc32c::crc32c(&meta) != crc {
        return Err(io_err("image", "metadata crc mismatch"));
    }
    Ok((r, meta))
}

/// The metadata blob of the image at `path`.
pub fn image_meta(path: &Path) -> Result<Vec<u8>, MdsError> {
    Ok(open_image(path)?.1)
}

/// Reads the rest of an image from `r`, checking every chunk's crc, each
/// entry's table and the count at its end, and gives `f` each entry.
fn each_image_entry(
    r: &mut impl Read,
    f: &mut dyn FnMut(u8, Vec<u8>, Vec<u8>) -> Result<(), MdsError>,
) -> Result<(), MdsError> {
    let mut count = 0u64;
    loop {
        let (body, crc) = read_chunk(r)?;
        if body.is_empty() {
            if crc != count as u32 {
                return Err(io_err(
                    "image",
                    format!("end says {crc} entries, {count} read"),
                ));
            }
            return Ok(());
        }
        if crc32c::crc32c(&body) != crc {
            return Err(io_err("image", "chunk crc mismatch"));
        }
        let chunk: Chunk = postcard::from_bytes(&body).map_err(|e| io_err("image chunk", e))?;
        for (t, k, v) in chunk {
            if t as usize >= N || !replicated(t as usize, &k) {
                return Err(io_err(
                    "image",
                    format!("entry of table {t} not replicated"),
                ));
            }
            f(t, k, v)?;
            count += 1;
        }
    }
}

/// Reads the whole image at `path` and checks every crc, the entries'
/// tables and the count at its end; returns its metadata blob.
pub fn verify_image(path: &Path) -> Result<Vec<u8>, MdsError> {
    let (mut r, meta) = open_image(path)?;
    each_image_entry(&mut r, &mut |_, _, _| Ok(()))?;
    Ok(meta)
}

/// Replaces every replicated entry of `db` with the image at `path`, and
/// stores `local` (raft state) under [`RAFT_STATE_KEY`], in one durable
/// commit: all of it or, on any error, nothing. Returns the image's
/// metadata blob.
pub fn load_image(db: &Database, path: &Path, local: &[u8]) -> Result<Vec<u8>, MdsError> {
    let (mut r, meta) = open_image(path)?;
    let mut txn = db.begin_write().map_err(|e| io_err("begin", e))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|e| io_err("durability", e))?;
    {
        for t in 0..N {
            let mut table = txn
                .open_table(def(t))
                .map_err(|e| io_err("open table", e))?;
            table
                .retain(|k, _| !replicated(t, k))
                .map_err(|e| io_err("clear table", e))?;
        }
        let mut tx = open_tx(&txn)?;
        each_image_entry(&mut r, &mut |t, k, v| tx.apply(&Write::Put(t, k, v)))?;
        tx.put(T::Meta, RAFT_STATE_KEY, local)?;
    }
    txn.commit().map_err(|e| io_err("commit image", e))?;
    Ok(meta)
}

/// Applies batches of writes (each a postcard `Vec<Write>`, as the log
/// records them) and stores `local` under [`RAFT_STATE_KEY`], in one
/// commit — durable when asked, else visible only (made durable by a
/// later durable commit).
pub fn apply_logged<'a>(
    db: &Database,
    batches: impl IntoIterator<Item = &'a [u8]>,
    local: &[u8],
    durable: bool,
) -> Result<(), MdsError> {
    let mut txn = db.begin_write().map_err(|e| io_err("begin", e))?;
    let level = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    txn.set_durability(level)
        .map_err(|e| io_err("durability", e))?;
    {
        let mut tx = open_tx(&txn)?;
        for payload in batches {
            let writes: Vec<Write> =
                postcard::from_bytes(payload).map_err(|e| io_err("decode batch", e))?;
            for w in &writes {
                let (t, k) = match w {
                    Write::Put(t, k, _) | Write::Del(t, k) => (*t as usize, k),
                };
                if t >= N || !replicated(t, k) {
                    return Err(io_err(
                        "apply",
                        format!("write to table {t} not replicated"),
                    ));
                }
                tx.apply(w)?;
            }
        }
        tx.put(T::Meta, RAFT_STATE_KEY, local)?;
    }
    txn.commit().map_err(|e| io_err("commit", e))
}

/// What the read `r` holds under [`RAFT_STATE_KEY`].
pub fn raft_state_at(r: &redb::ReadTransaction) -> Result<Option<Vec<u8>>, MdsError> {
    let t = r
        .open_table(def(T::Meta as usize))
        .map_err(|e| io_err("meta", e))?;
    Ok(t.get(RAFT_STATE_KEY)
        .map_err(|e| io_err("meta", e))?
        .map(|g| g.value().to_vec()))
}

/// What `db` holds under [`RAFT_STATE_KEY`].
pub fn raft_state(db: &Database) -> Result<Option<Vec<u8>>, MdsError> {
    let r = db.begin_read().map_err(|e| io_err("begin read", e))?;
    let meta = r
        .open_table(def(T::Meta as usize))
        .map_err(|e| io_err("meta", e))?;
    Ok(meta
        .get(RAFT_STATE_KEY)
        .map_err(|e| io_err("meta", e))?
        .map(|g| g.value().to_vec()))
}
