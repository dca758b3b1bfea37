//! The thrasher's oracle: every change the cluster acknowledged (a file
//! written, fsync'd and closed; a file removed), and the check that every
//! acknowledged byte reads back.

use std::collections::BTreeMap;
use std::time::Duration;

use client::{Client, ClientConfig};
use proto::mds::{Creds, ROOT_INO};

use super::Rng;

/// How long one client operation may take before the workload gives up on
/// it (it is then not acknowledged, and not recorded).
pub const OP_LIMIT: Duration = Duration::from_secs(60);

/// Deterministic content: `len` bytes from `seed`.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed ^ 0xC0FF_EE00_D15C_0DE5);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// What the cluster acknowledged: each file's content (seed, length), and
/// the names whose removal it acknowledged (durably).
#[derive(Debug, Default)]
pub struct Oracle {
    /// Name in the root directory → (content seed, length).
    pub files: BTreeMap<String, (u64, usize)>,
    /// Names removed: they must stay gone.
    pub removed: std::collections::BTreeSet<String>,
}

/// What one round's workload did.
#[derive(Debug, Default)]
pub struct Done {
    /// Files written and acknowledged (new or rewritten).
    pub written: u64,
    /// Files removed and acknowledged.
    pub removed: u64,
    /// Changes that failed (not acknowledged, so not recorded).
    pub failed: u64,
}

impl Done {
    /// Counts `other`'s changes in too.
    pub fn add(&mut self, other: &Done) {
        self.written += other.written;
        self.removed += other.removed;
        self.failed += other.failed;
    }
}

/// A client of the cluster as its admin (attributes never cached).
pub async fn connect(mds: &str, id: net::auth::Identity) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::new(mds, super::cluster::CLUSTER, id);
    cfg.attr_timeout = Duration::ZERO;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) if std::time::Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Writes `data` as file `name` of the root (made or replaced), fsync'd
/// and closed: acknowledged once this returns Ok.
pub async fn write_whole(c: &Client, name: &str, data: &[u8]) -> client::Result<()> {
    let (_, fh) = c
        .create(&Creds::root(), ROOT_INO, name, 0o644, false)
        .await?;
    let mut at = 0;
    while at < data.len() {
        let n = (data.len() - at).min(1 << 20);
        c.write(fh, at as u64, &data[at..at + n]).await?;
        at += n;
    }
    // A rewrite shorter than before: the length is what was written.
    c.setattr(
        &Creds::root(),
        c.lookup(&Creds::root(), ROOT_INO, name).await?.attr.ino,
        proto::mds::SetAttr {
            size: Some(data.len() as u64),
            ..Default::default()
        },
    )
    .await?;
    c.fsync(fh).await?;
    c.release(fh).await
}

/// Reads a whole file of the root directory.
pub async fn read_whole(c: &Client, name: &str) -> client::Result<Vec<u8>> {
    let e = c.lookup(&Creds::root(), ROOT_INO, name).await?;
    let fh = c.open(&Creds::root(), e.attr.ino, false).await?;
    let mut out = Vec::new();
    loop {
        let b = c.read(fh, out.len() as u64, 1 << 20).await?;
        if b.is_empty() {
            break;
        }
        out.extend_from_slice(&b);
    }
    c.release(fh).await?;
    Ok(out)
}

impl Oracle {
    /// One round's workload: `n` changes chosen by `rng` — new files
    /// (named after `tag`), rewrites and removals — each recorded only
    /// once acknowledged.
    pub async fn work(&mut self, c: &Client, rng: &mut Rng, tag: &str, n: u64) -> Done {
        let mut done = Done::default();
        for k in 0..n {
            let existing: Vec<String> = self.files.keys().cloned().collect();
            let pick = rng.below(10);
            if pick < 2 && !existing.is_empty() {
                let name = existing[rng.below(existing.len() as u64) as usize].clone();
                // Acknowledged once durable: a removal may be answered
                // before the MDS has it (a directory lease, an early
                // answer), so the namespace is synced first.
                let unlink = async {
                    c.unlink(&Creds::root(), ROOT_INO, &name).await?;
                    c.sync_namespace().await
                };
                let r = tokio::time::timeout(OP_LIMIT, unlink).await;
                self.files.remove(&name);
                match r {
                    Ok(Ok(())) => {
                        self.removed.insert(name);
                        done.removed += 1;
                    }
                    // Not acknowledged: it may or may not be gone.
                    _ => done.failed += 1,
                }
                continue;
            }
            let name = if pick < 4 && !existing.is_empty() {
                existing[rng.below(existing.len() as u64) as usize].clone()
            } else {
                format!("{tag}-f{k}")
            };
            let len = match rng.below(4) {
                0 => rng.below(100) as usize,
                1 => 1000 + rng.below(60_000) as usize,
                2 => 200_000 + rng.below(800_000) as usize,
                _ => (1 << 20) + rng.below(2 << 20) as usize,
            };
            let seed = rng.next();
            let data = content(seed, len);
            self.removed.remove(&name);
            match tokio::time::timeout(OP_LIMIT, write_whole(c, &name, &data)).await {
                Ok(Ok(())) => {
                    self.files.insert(name, (seed, len));
                    done.written += 1;
                }
                _ => {
                    // Not acknowledged: its content is unknown now.
                    self.files.remove(&name);
                    done.failed += 1;
                }
            }
        }
        done
    }

    /// Reads every acknowledged file through `c`; what does not read back
    /// exactly.
    pub async fn check(&self, c: &Client) -> Vec<String> {
        let mut bad = Vec::new();
        for (name, (seed, len)) in &self.files {
            match tokio::time::timeout(OP_LIMIT, read_whole(c, name)).await {
                Ok(Ok(got)) if got == content(*seed, *len) => {}
                Ok(Ok(got)) => {
                    let first = got
                        .iter()
                        .zip(content(*seed, *len))
                        .position(|(a, b)| *a != b);
                    bad.push(format!(
                        "{name}: {} bytes read, {len} acknowledged; first difference at {:?}",
                        got.len(),
                        first
                    ));
                }
                Ok(Err(e)) => bad.push(format!("{name}: {e}")),
                Err(_) => bad.push(format!("{name}: no answer in {OP_LIMIT:?}")),
            }
        }
        for name in &self.removed {
            let found = c.lookup(&Creds::root(), ROOT_INO, name).await;
            match found {
                Err(e) if e.raw() == libc::ENOENT => {}
                Ok(_) => bad.push(format!("{name}: removed (acknowledged), but back")),
                Err(e) => bad.push(format!("{name}: removed, but lookup says {e}")),
            }
        }
        bad
    }
}
