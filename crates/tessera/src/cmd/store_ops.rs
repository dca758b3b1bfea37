//! `tessera store …`: operator commands straight on a store (the store must
//! not be in use by a daemon at the same time).

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use indicatif::ProgressBar;
use store::{DEFAULT_PARTITION, OpenOptions, Store, StoreError};

use crate::args;

/// Bytes moved per store call by put and get.
const CHUNK: usize = 4 << 20;
/// Files larger than this get a progress bar.
const BAR_ABOVE: u64 = 16 << 20;

#[derive(clap::Subcommand)]
pub enum StoreCmd {
    /// Store a local file as object ID (replacing its contents if it exists).
    Put {
        /// Store path.
        path: PathBuf,
        /// Object id (decimal or 0x hex, at least 0x10000).
        #[arg(value_parser = args::id)]
        id: u64,
        /// Local file to read, or - for stdin.
        file: PathBuf,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
    },
    /// Copy object ID into a local file.
    Get {
        /// Store path.
        path: PathBuf,
        /// Object id.
        #[arg(value_parser = args::id)]
        id: u64,
        /// Local file to write, or - for stdout.
        outfile: PathBuf,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
    },
    /// List object ids (with sizes) in id order.
    Ls {
        /// Store path.
        path: PathBuf,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
        /// Lowest id listed.
        #[arg(long, value_parser = args::id, default_value_t = 0x10000)]
        from: u64,
        /// Highest id listed.
        #[arg(long, value_parser = args::id, default_value_t = u64::MAX)]
        to: u64,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Remove object ID.
    Rm {
        /// Store path.
        path: PathBuf,
        /// Object id.
        #[arg(value_parser = args::id)]
        id: u64,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
    },
    /// Show one object's metadata, or the whole store's space without ID.
    Stat {
        /// Store path.
        path: PathBuf,
        /// Object id.
        #[arg(value_parser = args::id)]
        id: Option<u64>,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
    },
    /// List, get or set an object's attributes (page:number; user pages start at 0x10).
    Attr {
        /// Store path.
        path: PathBuf,
        /// Object id.
        #[arg(value_parser = args::id)]
        id: u64,
        /// Print one attribute's value.
        #[arg(long, value_parser = args::attr_key)]
        get: Option<(u32, u32)>,
        /// Set an attribute: PAGE:NUMBER=VALUE (an empty VALUE removes it).
        #[arg(long)]
        set: Option<String>,
        /// Partition id.
        #[arg(long, value_parser = args::id, default_value_t = DEFAULT_PARTITION)]
        partition: u64,
    },
    /// Power-cut test: random workload, cut, recover, check; repeat.
    ///
    /// Prints `cuts=N violations=V`; exit 0 only when V = 0. Runs in memory
    /// on a fault-injecting device; any seed reproduces its run exactly.
    Crashtest {
        /// Number of power cuts.
        #[arg(long, default_value_t = 2000)]
        cuts: u64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Concurrent writers (their operations share journal batches, so a
        /// cut can catch several in flight; interleaving is the scheduler's).
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

fn open(path: &std::path::Path) -> anyhow::Result<Store> {
    let dev = super::open_device(path)?;
    Store::open(dev, &OpenOptions::default())
        .with_context(|| format!("cannot open the store on {}", path.display()))
}

fn bar(len: u64, what: &str) -> ProgressBar {
    if len <= BAR_ABOVE {
        return ProgressBar::hidden();
    }
    super::progress_bar(
        len,
        &format!("{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} ({{eta}})"),
    )
}

pub fn run(c: StoreCmd) -> anyhow::Result<i32> {
    match c {
        StoreCmd::Put {
            path,
            id,
            file,
            partition,
        } => {
            let s = open(&path)?;
            let mut input: Box<dyn Read> = if file.as_os_str() == "-" {
                Box::new(std::io::stdin())
            } else {
                Box::new(
                    std::fs::File::open(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?,
                )
            };
            let len = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            match s.create(partition, Some(id)) {
                Ok(_) | Err(StoreError::ObjectExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let pb = bar(len, "put");
            let mut buf = vec![0u8; CHUNK];
            let mut off = 0u64;
            loop {
                let n = super::read_full(&mut input, &mut buf)?;
                if n == 0 {
                    break;
                }
                s.write(partition, id, off, &buf[..n])?;
                off += n as u64;
                pb.set_position(off);
            }
            s.truncate(partition, id, off)?;
            pb.finish_and_clear();
            s.close()?;
            println!("stored {off} bytes as object {id:#x}");
        }
        StoreCmd::Get {
            path,
            id,
            outfile,
            partition,
        } => {
            let s = open(&path)?;
            let size = s.stat(partition, id)?.size;
            let mut out: Box<dyn Write> = if outfile.as_os_str() == "-" {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(
                    std::fs::File::create(&outfile)
                        .with_context(|| format!("cannot write {}", outfile.display()))?,
                )
            };
            let pb = bar(size, "get");
            let mut off = 0;
            while off < size {
                let chunk = s.read(partition, id, off, CHUNK as u64)?;
                if chunk.is_empty() {
                    break;
                }
                out.write_all(&chunk)?;
                off += chunk.len() as u64;
                pb.set_position(off);
            }
            out.flush()?;
            pb.finish_and_clear();
        }
        StoreCmd::Ls {
            path,
            partition,
            from,
            to,
            limit,
        } => {
            let s = open(&path)?;
            let mut after = None;
            let mut shown = 0;
            while shown < limit {
                let page = s.list(partition, from, to, after, (limit - shown).min(1000))?;
                for id in &page.ids {
                    let st = s.stat(partition, *id)?;
                    println!("{id:#x}\t{}", st.size);
                }
                shown += page.ids.len();
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        StoreCmd::Rm {
            path,
            id,
            partition,
        } => {
            let s = open(&path)?;
            s.remove(partition, id)?;
            s.close()?;
        }
        StoreCmd::Stat {
            path,
            id,
            partition,
        } => {
            let s = open(&path)?;
            match id {
                Some(id) => {
                    let st = s.stat(partition, id)?;
                    println!("object      {id:#x} (partition {partition:#x})");
                    println!("size        {}", st.size);
                    println!("used        {}", st.used_bytes);
                    println!("version     {}", st.version);
                    println!(
                        "layout      {}{} extents",
                        if st.inline {
                            "inline, "
                        } else if st.large {
                            "large blocks, "
                        } else {
                            ""
                        },
                        st.extents
                    );
                    println!("attributes  {}", st.attributes);
                    let layout = s.layout(partition, id)?;
                    for (l, p, n) in layout.iter().take(8) {
                        println!("extent      logical block {l} -> data block {p}, {n} blocks");
                    }
                    if layout.len() > 8 {
                        println!("extent      … {} more", layout.len() - 8);
                    }
                    println!("created     {}", st.created);
                    println!("modified    {}", st.data_modified);
                }
                None => {
                    let f = s.statfs();
                    let l = s.label();
                    println!(
                        "policy      {} (large block {})",
                        f.policy,
                        super::human(u64::from(l.large_block))
                    );
                    println!(
                        "data        {} total, {} free ({:.1} % used)",
                        super::human(f.total_bytes),
                        super::human(f.free_bytes),
                        100.0 * (1.0 - f.free_bytes as f64 / f.total_bytes as f64)
                    );
                    println!(
                        "free runs   {} (largest {})",
                        f.free_extents,
                        super::human(f.largest_free_bytes)
                    );
                    println!("journal     {}", super::human(f.journal_bytes));
                    println!("partitions  {}", f.partitions);
                    println!("objects     {}", f.objects);
                }
            }
        }
        StoreCmd::Attr {
            path,
            id,
            get,
            set,
            partition,
        } => {
            let s = open(&path)?;
            if let Some(spec) = set {
                let (k, v) = spec
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("--set wants PAGE:NUMBER=VALUE"))?;
                let (p, n) = args::attr_key(k).map_err(anyhow::Error::msg)?;
                s.set_attr(partition, id, p, n, v.as_bytes())?;
                s.close()?;
            } else if let Some((p, n)) = get {
                match s.get_attr(partition, id, p, n)? {
                    Some(v) => println!("{}", show(&v)),
                    None => bail!("attribute {p:#x}:{n:#x} is not set"),
                }
            } else {
                for ((p, n), v) in s.list_attrs(partition, id)? {
                    println!("{p:#x}:{n:#x}\t{}", show(&v));
                }
            }
        }
        StoreCmd::Crashtest {
            cuts,
            seed,
            threads,
        } => {
            let cfg = store::crashtest::CrashConfig {
                cuts,
                seed,
                threads,
                ..Default::default()
            };
            let pb = super::progress_bar(cuts, "cuts {bar:40} {pos}/{len} {per_sec} ({eta}) {msg}");
            let started = std::time::Instant::now();
            let r = store::crashtest::run(&cfg, |r| {
                pb.set_position(r.cuts);
                pb.set_message(format!("violations {}", r.violations.len()));
            })?;
            pb.finish_and_clear();
            for v in &r.violations {
                println!("VIOLATION: {v}");
            }
            println!(
                "acknowledged={} in_flight={} dropped_batches={} seconds={:.1}",
                r.acknowledged,
                r.in_flight,
                r.dropped_batches,
                started.elapsed().as_secs_f64()
            );
            println!("cuts={} violations={}", r.cuts, r.violations.len());
            return Ok(if r.violations.is_empty() { 0 } else { 1 });
        }
    }
    Ok(0)
}

/// Shows a value as text when it is printable, else as hex (8-byte values
/// also as a number).
fn show(v: &[u8]) -> String {
    if v.len() == 8 {
        let n = u64::from_le_bytes(v.try_into().unwrap_or([0; 8]));
        return format!("{n}");
    }
    match std::str::from_utf8(v) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => v.iter().map(|b| format!("{b:02x}")).collect(),
    }
}
