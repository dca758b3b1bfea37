//! Making and opening the KV: the files of an empty one, and opening
//! one — redb, then the log's batches after the last checkpoint replayed,
//! then the committer started.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use proto::mds::{Errno, MdsError};
use redb::{Database, ReadableDatabase};
use store::device::{AlignedBuf, Device, FileDevice};

use super::commit::{self, Committer, FlushItem, Marks, Queue, Shared};
use super::{
    CHECKPOINT_KEY, Checkpoint, Kv, KvPaths, KvStats, MAX_QUEUED_WRITES, N, Snapshot, T, View,
    Write, def, io_err, open_tx, put_checkpoint,
};
use crate::wal::Wal;

/// How a KV is opened.
#[derive(Debug, Clone, Copy)]
pub struct KvOptions {
    /// redb's page cache.
    pub cache_bytes: usize,
    /// Holds back every log flush (fault injection for tests; zero).
    pub flush_delay: std::time::Duration,
    /// How long the sessions found recorded at open keep their records
    /// (while the MDS waits for their replays, and some time after).
    pub recovered_hold: std::time::Duration,
}

impl Default for KvOptions {
    fn default() -> KvOptions {
        KvOptions {
            cache_bytes: 64 << 20,
            flush_delay: std::time::Duration::ZERO,
            recovered_hold: std::time::Duration::from_secs(120),
        }
    }
}

/// Creates the files of an empty KV (`wal_bytes` of log, zero-filled so
/// later overwrites need no allocation by the host file system).
pub fn create(paths: &KvPaths, wal_bytes: u64) -> Result<(), MdsError> {
    if paths.db.exists() {
        return Err(MdsError::new(
            Errno::Exist,
            format!("{} exists: refusing to format over it", paths.db.display()),
        ));
    }
    let wal_bytes = wal_bytes.max(1 << 20) & !4095;
    {
        let dev = FileDevice::create(&paths.wal, wal_bytes).map_err(|e| io_err("create log", e))?;
        let zero = AlignedBuf::zeroed(1 << 20);
        let mut at = 0;
        while at < wal_bytes {
            let n = (wal_bytes - at).min(1 << 20) as usize;
            dev.write_at(&zero[..n], at)
                .map_err(|e| io_err("zero log", e))?;
            at += n as u64;
        }
        dev.flush().map_err(|e| io_err("flush log", e))?;
    }
    // Owner-only from the start: redb opens the file this makes.
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&paths.db)
            .map_err(|e| io_err("create database", e))?;
    }
    let db = Database::create(&paths.db).map_err(|e| io_err("create database", e))?;
    let txn = db.begin_write().map_err(|e| io_err("begin", e))?;
    {
        for t in 0..N {
            txn.open_table(def(t))
                .map_err(|e| io_err("create table", e))?;
        }
    }
    put_checkpoint(&txn, &Checkpoint::default())?;
    txn.commit().map_err(|e| io_err("commit", e))?;
    Ok(())
}

impl Kv {
    /// Opens the KV, replays the log, and starts the committer.
    pub fn open(paths: &KvPaths, cache_bytes: usize) -> Result<Kv, MdsError> {
        Kv::open_with(
            paths,
            KvOptions {
                cache_bytes,
                ..KvOptions::default()
            },
        )
    }

    /// [`Kv::open`] with every option.
    pub fn open_with(paths: &KvPaths, opts: KvOptions) -> Result<Kv, MdsError> {
        let db = redb::Builder::new()
            .set_cache_size(opts.cache_bytes)
            .open(&paths.db)
            .map_err(|e| io_err(&format!("open {}", paths.db.display()), e))?;
        let dev = FileDevice::open_with(&paths.wal, true)
            .map_err(|e| io_err(&format!("open {}", paths.wal.display()), e))?;
        let cp: Checkpoint = {
            let r = db.begin_read().map_err(|e| io_err("begin read", e))?;
            let meta = r
                .open_table(def(T::Meta as usize))
                .map_err(|e| io_err("meta", e))?;
            let raw = meta
                .get(CHECKPOINT_KEY)
                .map_err(|e| io_err("meta", e))?
                .ok_or_else(|| io_err("meta", "no checkpoint record: not an MDS database"))?;
            postcard::from_bytes(raw.value()).map_err(|e| io_err("checkpoint record", e))?
        };
        let mut wal = Wal::new(Box::new(dev), cp.wal_pos);
        // Replay the batches logged after the checkpoint, then checkpoint them.
        let mut last = cp.lsn;
        {
            let txn = db.begin_write().map_err(|e| io_err("begin", e))?;
            {
                let mut tx = open_tx(&txn)?;
                let mut failure = None;
                let n = wal
                    .replay(cp.lsn + 1, &mut |lsn, payload| {
                        let writes: Vec<Write> = postcard::from_bytes(payload)
                            .map_err(|e| std::io::Error::other(format!("log record {lsn}: {e}")))?;
                        for w in &writes {
                            if let Err(e) = tx.apply(w) {
                                failure = Some(e);
                            }
                        }
                        last = lsn;
                        Ok(())
                    })
                    .map_err(|e| io_err("replay log", e))?;
                if let Some(e) = failure {
                    return Err(e);
                }
                if n > 0 {
                    tracing::info!(batches = n, "replayed the metadata log");
                }
            }
            put_checkpoint(
                &txn,
                &Checkpoint {
                    lsn: last,
                    wal_pos: wal.head,
                },
            )?;
            txn.commit().map_err(|e| io_err("commit", e))?;
            wal.checkpointed();
        }
        start(Arc::new(db), wal, last, opts, None)
    }

    /// Opens a replicated group leader's KV on `db` (the member's, already
    /// open, holding everything the group committed): no log replay here,
    /// and batches are durable once `sink` says so (see [`super::group`]).
    pub fn open_group(
        db: Arc<Database>,
        opts: KvOptions,
        sink: Arc<dyn super::group::Replicate>,
    ) -> Result<Kv, MdsError> {
        // The local log is not used: a ring in memory stands in for it.
        let wal = Wal::new(Box::new(store::device::MemDevice::new(1 << 20)), 0);
        let last = 0;
        start(db, wal, last, opts, Some(sink))
    }
}

/// Starts the committer and the flusher (or the group loop) on an open KV.
fn start(
    db: Arc<Database>,
    wal: Wal,
    last: u64,
    opts: KvOptions,
    sink: Option<Arc<dyn super::group::Replicate>>,
) -> Result<Kv, MdsError> {
    // What the log's last durable batch knew: the last transno and
    // the sessions that may hold early answers beyond it.
    let (transno, sessions) = {
        let r = db.begin_read().map_err(|e| io_err("begin read", e))?;
        let snap = Snapshot {
            txn: r,
            tables: Default::default(),
        };
        let transno = snap
            .get(T::Meta, commit::TRANSNO_KEY)?
            .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
            .map_or(0, u64::from_le_bytes);
        let mut sessions = Vec::new();
        snap.try_scan_all(T::Sessions, &mut |k, _| {
            if let Ok(b) = <[u8; 8]>::try_from(k) {
                sessions.push(u64::from_be_bytes(b));
            }
            Ok(true)
        })?;
        (transno, sessions)
    };
    let group = sink.is_some();
    // A group never checkpoints through the log: a capacity no batch nears.
    let wal_capacity = if group { u64::MAX / 4 } else { wal.capacity() };
    let (live0, wal) = (wal.live(), Arc::new(std::sync::Mutex::new(wal)));
    let (ftx, frx) = mpsc::channel::<FlushItem>();
    let failed = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(KvStats::default());
    let marks = Arc::new(Marks::new(last, transno));
    marks.wal_live.store(live0, Ordering::SeqCst);
    let flusher = {
        let (wal, marks, failed, stats) =
            (wal.clone(), marks.clone(), failed.clone(), stats.clone());
        std::thread::Builder::new()
            .name("mds-flush".into())
            .spawn(move || match sink {
                Some(sink) => super::group::group_loop(&*sink, &frx, &marks, &failed, &stats),
                None => commit::flush_loop(&wal, &frx, &marks, &failed, &stats, opts.flush_delay),
            })
            .map_err(|e| io_err("spawn flusher", e))?
    };
    let mut c = Committer {
        db: db.clone(),
        wal,
        lsn: last,
        transno,
        sessions: Default::default(),
        last_sweep: std::time::Instant::now(),
        flusher: ftx,
        wal_capacity,
        marks: marks.clone(),
        failed: failed.clone(),
        stats: stats.clone(),
        leading: false,
        broken: false,
        group,
    };
    c.hold_recovered(&sessions, opts.recovered_hold);
    let shared = Arc::new(Shared {
        queue: Queue::default(),
        committer: std::sync::Mutex::new(c),
    });
    let committer = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("mds-commit".into())
            .spawn(move || shared.run())
            .map_err(|e| io_err("spawn committer", e))?
    };
    Ok(Kv {
        db,
        shared,
        queued: Arc::new(tokio::sync::Semaphore::new(MAX_QUEUED_WRITES)),
        last_busy_us: AtomicU64::new(0),
        epoch: std::time::Instant::now(),
        committer: std::sync::Mutex::new(Some(committer)),
        flusher: std::sync::Mutex::new(Some(flusher)),
        failed,
        marks,
        recovered_sessions: sessions,
        recovered_transno: transno,
        stats,
    })
}
