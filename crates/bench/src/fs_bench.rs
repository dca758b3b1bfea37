//! `tessera bench fs`: the whole file system through the FUSE mount,
//! through the client library directly, and local ext4 on a loop device
//! over the same disk, in one run. Sequential write of one big file with
//! fsync, cold sequential read, 4 KiB random reads at depth 1, empty-file
//! creates from one process, 4 KiB appends to one file (one fsync at the
//! end), and a log writer (4 KiB appends, fsync every 8). Ratios are
//! against ext4 in the same run.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use proto::layout::LayoutSpec;
use proto::mds::Creds;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::loopdev::{LoopDev, Mount, drop_caches};

/// One measure for the three targets.
#[derive(Debug, Clone, Serialize)]
pub struct FsRow {
    /// What was measured.
    pub test: String,
    /// Unit of the figures.
    pub unit: String,
    /// Through the FUSE mount.
    pub mount: f64,
    /// Through the client library (authenticated connections).
    pub library: f64,
    /// Through the client library with every connection encrypted.
    pub library_encrypted: f64,
    /// Local ext4 on the same disk.
    pub ext4: f64,
}

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct FsParams {
    /// Bytes of the sequential file.
    pub file: u64,
    /// Random 4 KiB reads per target.
    pub random_reads: usize,
    /// Empty files created per target.
    pub creates: usize,
    /// 4 KiB appends to one file, fsync once at the end.
    pub appends: usize,
    /// 4 KiB appends of the log writer (fsync after every
    /// [`LOG_FSYNC_EVERY`]).
    pub log_appends: usize,
}

/// The log writer's appends per fsync.
pub const LOG_FSYNC_EVERY: usize = 8;

/// What each measure is, in the order the suites answer them.
pub const MEASURES: [(&str, &str); 6] = [
    ("sequential write + fsync", "MB/s"),
    ("cold sequential read", "MB/s"),
    ("4 KiB random reads, depth 1", "IOPS"),
    ("empty-file creates, 1 process", "files/s"),
    ("4 KiB appends, one fsync", "MB/s"),
    ("log: 4 KiB appends, fsync/8", "appends/s"),
];

const IO: usize = 1 << 20;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..len).map(|_| r.random()).collect()
}

/// POSIX side: sequential write + fsync (MB/s).
fn posix_write(path: &Path, size: u64) -> anyhow::Result<f64> {
    let buf = pattern(IO, 1);
    let t = Instant::now();
    let mut f = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
    let mut left = size;
    while left > 0 {
        let n = left.min(IO as u64) as usize;
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    drop(f);
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn posix_read(path: &Path) -> anyhow::Result<f64> {
    drop_caches();
    let f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; IO];
    let t = Instant::now();
    let mut off = 0u64;
    loop {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(off as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn posix_random(path: &Path, size: u64, n: usize) -> anyhow::Result<f64> {
    drop_caches();
    let f = std::fs::File::open(path)?;
    {
        use std::os::fd::AsRawFd;
        // SAFETY: advisory call on an open descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    }
    let mut r = rand::rngs::SmallRng::seed_from_u64(9);
    let mut buf = vec![0u8; 4096];
    let blocks = size / 4096;
    let t = Instant::now();
    for _ in 0..n {
        let off = r.random_range(0..blocks) * 4096;
        f.read_exact_at(&mut buf, off)?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn posix_creates(dir: &Path, n: usize) -> anyhow::Result<f64> {
    std::fs::create_dir_all(dir)?;
    let t = Instant::now();
    for i in 0..n {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(format!("f{i}")))?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Appends `n` blocks of 4 KiB to a new file at `path`, each its own
/// `write`, with an fsync after every `every` (and at the end): the
/// appends per second.
fn posix_appends(path: &Path, n: usize, every: usize) -> anyhow::Result<f64> {
    let block = pattern(4096, 3);
    let t = Instant::now();
    let mut f = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
    for i in 1..=n {
        f.write_all(&block)?;
        if i % every == 0 {
            f.sync_data()?;
        }
    }
    f.sync_data()?;
    drop(f);
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The measures of [`MEASURES`] through std::fs on `root` (the mount or
/// ext4).
fn posix_suite(root: &Path, p: FsParams) -> anyhow::Result<[f64; 6]> {
    let file = root.join("seq.bin");
    let w = posix_write(&file, p.file)?;
    let r = posix_read(&file)?;
    let rr = posix_random(&file, p.file, p.random_reads)?;
    let c = posix_creates(&root.join("creates"), p.creates)?;
    let a = posix_appends(&root.join("appends.bin"), p.appends, usize::MAX)? * 4096.0 / 1e6;
    let l = posix_appends(&root.join("log.bin"), p.log_appends, LOG_FSYNC_EVERY)?;
    Ok([w, r, rr, c, a, l])
}

/// [`posix_appends`] through the client library, in directory `d`.
async fn library_appends(
    c: &Client,
    d: u64,
    name: &str,
    n: usize,
    every: usize,
) -> anyhow::Result<f64> {
    let cr = Creds::root();
    let block = pattern(4096, 3);
    let t = Instant::now();
    let (_, fh) = c.create(&cr, d, name, 0o644, true).await?;
    for i in 1..=n {
        c.write(fh, (i as u64 - 1) * 4096, &block).await?;
        if i % every == 0 {
            c.fsync(fh).await?;
        }
    }
    c.fsync(fh).await?;
    c.release(fh).await?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The same measures through the client library, in directory `dir`.
async fn library_suite(cfg: ClientConfig, p: FsParams, dir: &str) -> anyhow::Result<[f64; 6]> {
    let cr = Creds::root();
    let c = Client::connect(cfg.clone()).await?;
    let d = c.mkdir(&cr, 0, dir, 0o755).await?.attr.ino;
    let buf = pattern(IO, 1);
    let t = Instant::now();
    let (ent, fh) = c.create(&cr, d, "seq.bin", 0o644, true).await?;
    let mut off = 0u64;
    while off < p.file {
        let n = (p.file - off).min(IO as u64) as usize;
        c.write(fh, off, &buf[..n]).await?;
        off += n as u64;
    }
    c.fsync(fh).await?;
    c.release(fh).await?;
    let w = p.file as f64 / t.elapsed().as_secs_f64() / 1e6;
    drop_caches();
    // A fresh client: nothing cached.
    let c = Client::connect(cfg).await?;
    let ino = ent.attr.ino;
    let t = Instant::now();
    let fh = c.open(&cr, ino, false).await?;
    let mut off = 0u64;
    loop {
        let got = c.read(fh, off, IO as u32).await?;
        if got.is_empty() {
            break;
        }
        off += got.len() as u64;
    }
    let r = off as f64 / t.elapsed().as_secs_f64() / 1e6;
    c.release(fh).await?;
    drop_caches();
    let fh = c.open(&cr, ino, false).await?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
    let blocks = p.file / 4096;
    let t = Instant::now();
    for _ in 0..p.random_reads {
        let off = rng.random_range(0..blocks) * 4096;
        c.read(fh, off, 4096).await?;
    }
    let rr = p.random_reads as f64 / t.elapsed().as_secs_f64();
    c.release(fh).await?;
    let cd = c.mkdir(&cr, d, "creates", 0o755).await?.attr.ino;
    let t = Instant::now();
    for i in 0..p.creates {
        let (_, fh) = c.create(&cr, cd, &format!("f{i}"), 0o644, true).await?;
        c.release(fh).await?;
    }
    let cr_s = p.creates as f64 / t.elapsed().as_secs_f64();
    let a = library_appends(&c, d, "appends.bin", p.appends, usize::MAX).await? * 4096.0 / 1e6;
    let l = library_appends(&c, d, "log.bin", p.log_appends, LOG_FSYNC_EVERY).await?;
    Ok([w, r, rr, cr_s, a, l])
}

/// Runs the suite under `dir` (needs root: loop device, ext4, FUSE).
pub fn run(dir: &Path, p: FsParams) -> anyhow::Result<Vec<FsRow>> {
    crate::in_scratch(dir, "fs-bench", |work| run_in(work, p))
}

fn run_in(work: &Path, p: FsParams) -> anyhow::Result<Vec<FsRow>> {
    // ext4 on a loop device over a file on the same disk.
    let dev_size = p.file + (1 << 30);
    let ld = LoopDev::create(&work.join("ext4.img"), dev_size)?;
    let ext4 = Mount::make("ext4", ld.dev(), &work.join("ext4"))?;
    let ext = posix_suite(&ext4.dir, p)?;
    drop(ext4);
    drop(ld);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let opts = FormatOptions::new(
        "fsbench",
        LayoutSpec {
            stripe_unit: 512 << 10,
            stripe_count: 3,
            object_size: 0,
            ..LayoutSpec::default()
        },
    );
    // Three files of `p.file` bytes and three sets of appended files
    // (mount, library, encrypted library), each striped over the three
    // OSDs: one set's size per OSD, and room for the store's own records.
    let appended = (p.appends + p.log_appends) as u64 * 4096;
    let osd_size = p.file.max(256 << 20) + appended + (512 << 20);
    let cl = rt
        .block_on(LocalCluster::start(
            &work.join("cluster"),
            3,
            osd_size,
            &opts,
        ))
        .map_err(anyhow::Error::msg)?;
    let mut cfg = ClientConfig::new(&cl.mds_addr(), "fsbench", cl.admin()?);
    let lib = rt.block_on(async {
        let cfg = cfg.clone();
        tokio::spawn(async move { library_suite(cfg, p, "lib").await }).await?
    })?;
    let lib_enc = rt.block_on(async {
        let mut cfg = cfg.clone();
        cfg.encrypt = true;
        tokio::spawn(async move { library_suite(cfg, p, "lib-encrypted").await }).await?
    })?;
    // As a mount is by default.
    cfg.early_answers = true;
    let fuse = crate::mounted::through_mount(&rt, cl, cfg, work, |mp| posix_suite(mp, p))?;
    Ok(MEASURES
        .iter()
        .enumerate()
        .map(|(i, (t, u))| FsRow {
            test: t.to_string(),
            unit: u.to_string(),
            mount: fuse[i],
            library: lib[i],
            library_encrypted: lib_enc[i],
            ext4: ext[i],
        })
        .collect())
}

/// Prints the table with ratios against ext4.
pub fn print(rows: &[FsRow], p: FsParams) {
    println!(
        "file system benchmark: {} MiB file, {} random reads, {} creates, {} + {} appends of 4 KiB; Tessera = 3 OSDs + MDS on 127.0.0.1, stripe 512 KiB x 3",
        p.file >> 20,
        p.random_reads,
        p.creates,
        p.appends,
        p.log_appends
    );
    println!(
        "{:<32} {:>8} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>9}",
        "test", "unit", "mount", "library", "lib enc", "ext4", "mount/ext4", "lib/ext4", "enc/lib"
    );
    for r in rows {
        println!(
            "{:<32} {:>8} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>11.2} {:>11.2} {:>9.2}",
            r.test,
            r.unit,
            r.mount,
            r.library,
            r.library_encrypted,
            r.ext4,
            r.mount / r.ext4,
            r.library / r.ext4,
            r.library_encrypted / r.library
        );
    }
    println!(
        "mount and library: authenticated connections (every frame tagged); lib enc: the library with every connection encrypted (AES-256-GCM)"
    );
    println!(
        "note: Tessera's creates are durable before they return (MDS log flush); ext4's are page-cache creates"
    );
}
