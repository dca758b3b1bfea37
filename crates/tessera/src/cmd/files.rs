//! File commands without a mount: `tessera put|get|ls|rm|mkdir|stat`,
//! through the client library (data straight to and from the OSDs).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use client::Client;
use proto::mds::{Creds, Entry, FileKind, SetAttr};

use super::cluster::Target;

/// Bytes per read or write call.
const CHUNK: usize = 4 << 20;
/// Files at least this large get a progress bar.
const BAR_FROM: u64 = 16 << 20;

/// Copy a local file into Tessera.
///
/// Example: tessera put ./data.bin /datasets/data.bin
#[derive(clap::Args)]
pub struct PutArgs {
    /// Local file ("-" for standard input).
    pub local: PathBuf,
    /// Path in Tessera (an existing directory gets the local file's name).
    pub remote: String,
    #[command(flatten)]
    pub to: Target,
}

/// Copy a file out of Tessera.
///
/// Example: tessera get /datasets/data.bin ./copy.bin
#[derive(clap::Args)]
pub struct GetArgs {
    /// Path in Tessera.
    pub remote: String,
    /// Local file ("-" for standard output; a directory gets the remote name).
    pub local: PathBuf,
    #[command(flatten)]
    pub to: Target,
}

/// List a directory.
#[derive(clap::Args)]
pub struct LsArgs {
    /// Path in Tessera.
    #[arg(default_value = "/")]
    pub remote: String,
    /// Long format: type, mode, links, owner, size, name.
    #[arg(short, long)]
    pub long: bool,
    #[command(flatten)]
    pub to: Target,
}

/// Remove a file, or a directory with -r.
#[derive(clap::Args)]
pub struct RmArgs {
    /// Path in Tessera.
    pub remote: String,
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    #[command(flatten)]
    pub to: Target,
}

/// Make a directory.
#[derive(clap::Args)]
pub struct MkdirArgs {
    /// Path in Tessera.
    pub remote: String,
    /// Make parents as needed; no error if it exists.
    #[arg(short, long)]
    pub parents: bool,
    #[command(flatten)]
    pub to: Target,
}

/// Show a path's attributes and layout.
#[derive(clap::Args)]
pub struct StatArgs {
    /// Path in Tessera.
    pub remote: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub to: Target,
}

fn creds() -> Creds {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Creds {
        uid,
        gid,
        groups: Vec::new(),
    }
}

async fn connect(to: &Target) -> anyhow::Result<Client> {
    let r = to.resolve()?;
    let mut cfg = client::ClientConfig::new(&r.mds, &r.cluster, r.identity);
    cfg.attr_timeout = std::time::Duration::ZERO;
    Client::connect(cfg)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn split(path: &str) -> anyhow::Result<(String, String)> {
    if !path.starts_with('/') {
        bail!("'{path}': paths in Tessera are absolute (start with /)");
    }
    let t = path.trim_end_matches('/');
    let (dir, name) = t.rsplit_once('/').unwrap_or(("", t));
    if name.is_empty() {
        bail!("'{path}' names the root; give a file name");
    }
    Ok((
        if dir.is_empty() {
            "/".into()
        } else {
            dir.into()
        },
        name.into(),
    ))
}

fn fs_err(path: &str) -> impl Fn(client::FsError) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("{path}: {e}")
}

async fn resolve(c: &Client, cr: &Creds, path: &str) -> anyhow::Result<Entry> {
    if !path.starts_with('/') {
        bail!("'{path}': paths in Tessera are absolute (start with /)");
    }
    c.resolve(cr, path).await.map_err(fs_err(path))
}

fn bar(len: u64) -> indicatif::ProgressBar {
    if len < BAR_FROM {
        return indicatif::ProgressBar::hidden();
    }
    super::progress_bar(
        len,
        "{bytes}/{total_bytes} [{bar:30}] {bytes_per_sec} eta {eta}",
    )
}

use super::runtime;

pub fn put(a: PutArgs) -> anyhow::Result<i32> {
    // The local side first: a bad local path fails before touching the cluster.
    let (mut input, len): (Box<dyn Read>, u64) = if a.local == Path::new("-") {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = std::fs::File::open(&a.local)
            .with_context(|| format!("cannot open {}", a.local.display()))?;
        let m = f.metadata()?;
        if !m.is_file() {
            bail!("{} is not a regular file", a.local.display());
        }
        (Box::new(f), m.len())
    };
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        let mut remote = a.remote.clone();
        let resolved = c.resolve(&cr, &remote).await;
        if remote.ends_with('/') && !matches!(&resolved, Ok(e) if e.attr.kind == FileKind::Dir) {
            bail!("{remote}: no such directory (make it with: tessera mkdir -p {remote})");
        }
        if let Ok(e) = resolved
            && e.attr.kind == FileKind::Dir
        {
            let base = a
                .local
                .file_name()
                .and_then(|n| n.to_str())
                .context("the local path has no file name; give the remote name")?;
            remote = format!("{}/{base}", remote.trim_end_matches('/'));
        }
        let (dir, name) = split(&remote)?;
        let parent = resolve(&c, &cr, &dir).await?;
        let (e, fh) = c
            .create(&cr, parent.attr.ino, &name, 0o644, false)
            .await
            .map_err(fs_err(&remote))?;
        if e.attr.size > 0 {
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            c.setattr(&cr, e.attr.ino, set)
                .await
                .map_err(fs_err(&remote))?;
        }
        let pb = bar(len);
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        let res = async {
            loop {
                let n = super::read_full(&mut input, &mut buf)?;
                if n == 0 {
                    break;
                }
                c.write(fh, off, &buf[..n]).await.map_err(fs_err(&remote))?;
                off += n as u64;
                pb.set_position(off);
            }
            c.fsync(fh).await.map_err(fs_err(&remote))
        }
        .await;
        let closed = c.release(fh).await.map_err(fs_err(&remote));
        pb.finish_and_clear();
        res?;
        closed?;
        println!("{} -> {remote} ({})", a.local.display(), super::human(off));
        Ok(0)
    })
}

pub fn get(a: GetArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        let e = resolve(&c, &cr, &a.remote).await?;
        if e.attr.kind != FileKind::File {
            bail!("{}: not a regular file", a.remote);
        }
        let to_stdout = a.local == Path::new("-");
        let local = if !to_stdout && a.local.is_dir() {
            a.local.join(&e.name)
        } else {
            a.local.clone()
        };
        let mut out: Box<dyn Write> = if to_stdout {
            Box::new(std::io::stdout().lock())
        } else {
            Box::new(
                std::fs::File::create(&local)
                    .with_context(|| format!("cannot create {}", local.display()))?,
            )
        };
        let fh = c
            .open(&cr, e.attr.ino, false)
            .await
            .map_err(fs_err(&a.remote))?;
        let pb = bar(e.attr.size);
        let mut off = 0u64;
        let res = async {
            loop {
                let d = c
                    .read(fh, off, CHUNK as u32)
                    .await
                    .map_err(fs_err(&a.remote))?;
                if d.is_empty() {
                    break;
                }
                out.write_all(&d)?;
                off += d.len() as u64;
                pb.set_position(off);
            }
            out.flush()?;
            Ok::<(), anyhow::Error>(())
        }
        .await;
        let _ = c.release(fh).await;
        pb.finish_and_clear();
        res?;
        if !to_stdout {
            eprintln!(
                "{} -> {} ({})",
                a.remote,
                local.display(),
                super::human(off)
            );
        }
        Ok(0)
    })
}

fn kind_char(k: FileKind) -> char {
    match k {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::CharDev => 'c',
        FileKind::BlockDev => 'b',
        FileKind::Socket => 's',
    }
}

pub fn ls(a: LsArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        let e = resolve(&c, &cr, &a.remote).await?;
        let rows: Vec<(String, proto::mds::Attr)> = if e.attr.kind == FileKind::Dir {
            c.readdir(&cr, e.attr.ino)
                .await
                .map_err(fs_err(&a.remote))?
                .into_iter()
                .filter_map(|d| d.attr.map(|at| (d.name, at)))
                .collect()
        } else {
            vec![(e.name.clone(), e.attr.clone())]
        };
        for (name, at) in rows {
            if a.long {
                println!(
                    "{}{:04o} {:>3} {:>5} {:>5} {:>12}  {name}",
                    kind_char(at.kind),
                    at.mode & 0o7777,
                    at.nlink,
                    at.uid,
                    at.gid,
                    at.size
                );
            } else {
                println!("{name}{}", if at.kind == FileKind::Dir { "/" } else { "" });
            }
        }
        Ok(0)
    })
}

async fn remove_tree(c: &Client, cr: &Creds, dir: u64, path: &str) -> anyhow::Result<()> {
    for d in c.readdir(cr, dir).await.map_err(fs_err(path))? {
        let p = format!("{}/{}", path.trim_end_matches('/'), d.name);
        if d.kind == FileKind::Dir {
            Box::pin(remove_tree(c, cr, d.ino, &p)).await?;
            c.rmdir(cr, dir, &d.name).await.map_err(fs_err(&p))?;
        } else {
            c.unlink(cr, dir, &d.name).await.map_err(fs_err(&p))?;
        }
    }
    Ok(())
}

pub fn rm(a: RmArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        let (dir, name) = split(&a.remote)?;
        let parent = resolve(&c, &cr, &dir).await?;
        let e = resolve(&c, &cr, &a.remote).await?;
        if e.attr.kind == FileKind::Dir {
            if !a.recursive {
                bail!("{}: is a directory (use -r)", a.remote);
            }
            remove_tree(&c, &cr, e.attr.ino, &a.remote).await?;
            c.rmdir(&cr, parent.attr.ino, &name)
                .await
                .map_err(fs_err(&a.remote))?;
        } else {
            c.unlink(&cr, parent.attr.ino, &name)
                .await
                .map_err(fs_err(&a.remote))?;
        }
        // With the namespace on the OSDs a removed file's objects wait a
        // while for other clients' cached opens; this command's client
        // ends now, so they go now (else they stay as orphans).
        c.sync_all().await.map_err(fs_err(&a.remote))?;
        Ok(0)
    })
}

pub fn mkdir(a: MkdirArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        if !a.parents {
            let (dir, name) = split(&a.remote)?;
            let parent = resolve(&c, &cr, &dir).await?;
            c.mkdir(&cr, parent.attr.ino, &name, 0o755)
                .await
                .map_err(fs_err(&a.remote))?;
            return Ok(0);
        }
        split(&a.remote)?;
        let mut ino = c.root();
        let mut at = String::new();
        for part in a.remote.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            ino = match c.lookup(&cr, ino, part).await {
                Ok(e) if e.attr.kind == FileKind::Dir => e.attr.ino,
                Ok(_) => bail!("{at}: exists and is not a directory"),
                Err(e) if e.is(client::error::Errno::NoEnt) => {
                    match c.mkdir(&cr, ino, part, 0o755).await {
                        Ok(e) => e.attr.ino,
                        // Someone else made it meanwhile.
                        Err(_) => {
                            c.lookup(&cr, ino, part)
                                .await
                                .map_err(fs_err(&at))?
                                .attr
                                .ino
                        }
                    }
                }
                Err(e) => return Err(fs_err(&at)(e)),
            };
        }
        Ok(0)
    })
}

pub fn stat(a: StatArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async {
        let c = connect(&a.to).await?;
        let cr = creds();
        let e = resolve(&c, &cr, &a.remote).await?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&e)?);
            return Ok(0);
        }
        let at = &e.attr;
        println!("  path: {}", a.remote);
        println!(
            " inode: {}  type: {:?}  mode: {:04o}  links: {}",
            at.ino,
            at.kind,
            at.mode & 0o7777,
            at.nlink
        );
        println!(
            "  size: {} ({})  uid: {}  gid: {}",
            at.size,
            super::human(at.size),
            at.uid,
            at.gid
        );
        let t = |ns: i64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
        println!(
            " times: atime {}  mtime {}  ctime {} (seconds since the epoch)",
            t(at.atime),
            t(at.mtime),
            t(at.ctime)
        );
        if let Some(l) = &e.layout {
            println!(
                "layout: stripe unit {} B, stripe count {}, object size {}, replicas {} (writes need {}); OSD map epoch {}",
                l.spec.stripe_unit,
                l.spec.stripe_count,
                if l.spec.object_size == 0 {
                    "unbounded".into()
                } else {
                    format!("{} B", l.spec.object_size)
                },
                l.spec.replicas,
                l.spec.min_copies(),
                l.map_epoch
            );
            for (set, oid) in l.objsets.iter().enumerate() {
                match l.homes.get(set) {
                    Some(h) => {
                        for (j, cp) in h.stripes.iter().enumerate() {
                            let stale = if cp.stale.is_empty() {
                                String::new()
                            } else {
                                format!(", stale on {:?}", cp.stale)
                            };
                            println!(
                                "  object set {set} stripe {j}: object {oid:#x} fresh on OSDs {:?}{stale}",
                                cp.fresh
                            );
                        }
                    }
                    None => {
                        let (_, osds) = c
                            .inner()
                            .osds
                            .place(&c.inner().mds, l, set as u64)
                            .await
                            .map_err(fs_err(&a.remote))?;
                        println!("  object set {set}: object {oid:#x} on OSDs {osds:?}");
                    }
                }
            }
        }
        Ok(0)
    })
}
