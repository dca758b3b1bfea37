//! Directory leases on the client: while this client holds a directory's
//! lease (no other client reads or changes its names meanwhile), it
//! answers creates of new files, removals of files and lookups of names in
//! it on its own, from the names the lease came with and the inode numbers
//! the MDS delegated, and sends the changes after, in order, in batches
//! (one DIR OPS in flight per directory). A change answered here is kept
//! like an early answer: it becomes durable at fsync, syncfs or unmount,
//! and a restarted MDS gets it again.
//!
//! Rules that keep this exact:
//! - every other request to the MDS waits until the changes queued before
//!   it are answered ([`DirLeases::drain`]), so the MDS sees this client's
//!   operations in the order they were made;
//! - anything the lease cannot answer for certain (a directory with the
//!   sticky bit, a permission it would refuse, an existing name opened
//!   without `O_EXCL`, a removal of a directory) goes to the MDS as before;
//! - a lease is asked for only after two changes in one directory within
//!   a second (at the first in a directory this client made), is used for at most [`LEASE_TERM_MS`] after its last answer,
//!   and goes back when it has been idle for [`IDLE`], when the MDS says
//!   another client waits, or after any refused change;
//! - a change the MDS refuses after it was answered here (which needs a
//!   lease lapsed under a cut-off client) is logged and reported by the
//!   next fsync of a directory or syncfs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use net::{CallError, MdsClient};
use posix::perm::{self, W, X};
use proto::mds::{
    Attr, Creds, DIR_OPS_MAX, DirOp, Entry, FileKind, Found, LEASE_TERM_MS, MdsReply, Op,
};

use crate::error::{Errno, FsError, Result};

pub mod made;

/// A lease unused this long goes back.
pub const IDLE: Duration = Duration::from_millis(50);

/// Changes in one directory within [`HOT_WINDOW`] before a lease is asked.
const HOT_CHANGES: u32 = 2;
const HOT_WINDOW: Duration = Duration::from_secs(1);

/// After a refusal or a contended lease, how long before asking again.
const BACK_OFF: Duration = Duration::from_secs(1);

/// How long a batch that is not full waits for more changes before it
/// is sent (no longer than a request of this client that needs the queue
/// sent: see [`DirLeases::drain`]). Without it a lone writer sends a batch
/// every two or three creates, and the MDS's transactions for them take
/// the CPU the creates need.
const BATCH_LINGER: Duration = Duration::from_millis(1);

/// Counts a drain under way while it lives.
struct Draining<'a>(&'a AtomicUsize);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Directories remembered before idle ones are forgotten.
const MAX_DIRS: usize = 4096;

/// A name and what it names now (nothing: removed).
type NameChange = (String, Option<(u64, FileKind)>);

/// The lease itself.
struct Held {
    /// The directory's attributes, as this client's changes left them.
    attr: Attr,
    /// Every name in it.
    names: HashMap<String, (u64, FileKind)>,
    /// Inode numbers for new files.
    ids: VecDeque<u64>,
    /// Usable until then (a term after the last answer's request left).
    until: Instant,
    /// Last used.
    used: Instant,
    /// No new changes: it goes back once its queue is empty.
    give_back: bool,
    /// Files made under this lease (no other client can name them while
    /// it lasts), with their names and attributes as this client left
    /// them: their closes may leave the data to be written later, and
    /// their attributes are changed here ([`made`]).
    made: HashMap<u64, (String, Attr)>,
}

impl Held {
    fn usable(&self) -> bool {
        !self.give_back && Instant::now() < self.until
    }
}

/// What this client knows of one directory.
#[derive(Default)]
struct Dir {
    lease: Option<Held>,
    /// Changes made under the lease, not yet sent: (as whom, what).
    queue: VecDeque<(Creds, DirOp)>,
    /// A DIR OPS is under way.
    in_flight: bool,
    /// A DIR LEASE is under way, and the synchronous changes to names
    /// finished meanwhile (applied over the listing when it arrives).
    asking: Option<Vec<NameChange>>,
    /// Changes counted towards asking: (first of the window, count).
    hot: Option<(Instant, u32)>,
    /// Not asked before then.
    not_before: Option<Instant>,
    /// A DIR RELEASE is under way (a new lease is not asked before it is
    /// answered, or it could void the new one).
    releasing: bool,
    /// Files made under the lease whose closes left their data buffered:
    /// written out before the lease goes back ([`DirLeases::defer_close`]).
    deferred: HashSet<u64>,
}

impl Dir {
    /// Nothing held, queued, asked or counted: safe to forget.
    fn idle(&self) -> bool {
        self.lease.is_none()
            && !self.releasing
            && self.queue.is_empty()
            && !self.in_flight
            && self.asking.is_none()
            && self.not_before.is_none_or(|t| Instant::now() >= t)
            && self.hot.is_none_or(|(t, _)| t.elapsed() >= HOT_WINDOW)
    }
}

/// This client's directory leases.
pub struct DirLeases {
    mds: Arc<MdsClient>,
    on: bool,
    dirs: Mutex<HashMap<u64, Dir>>,
    /// Changes queued or under way, in all directories.
    pending: AtomicUsize,
    /// Signalled whenever `pending` falls or `unreachable` changes.
    drained: tokio::sync::Notify,
    /// Callers of [`DirLeases::drain`] waiting now: no batch lingers.
    draining: AtomicUsize,
    /// Signalled when a drain begins (lingering senders send at once).
    hurry: tokio::sync::Notify,
    /// Directories whose queue cannot reach the MDS now (sent again
    /// until it answers).
    unreachable: AtomicUsize,
    /// The first change the MDS refused after it was answered here, not
    /// yet reported.
    refused: Mutex<Option<FsError>>,
    /// Whether the idle-release task runs.
    ticking: std::sync::atomic::AtomicBool,
    /// Leases granted to this client.
    pub granted: std::sync::atomic::AtomicU64,
    /// Changes this client answered under a lease.
    pub answered: std::sync::atomic::AtomicU64,
    /// Lookups answered by [`DirLeases::lookup_listed`].
    pub looked_up: std::sync::atomic::AtomicU64,
    /// Closes that left their data to be written after ([`DirLeases::defer_close`]).
    pub deferred_closes: std::sync::atomic::AtomicU64,
    flusher: std::sync::OnceLock<Flusher>,
    /// What the MDS answered for files made under leases (layouts and
    /// write capabilities), until their first write takes them.
    made_answers: Mutex<HashMap<u64, (Instant, Found)>>,
}

/// Writes out the data of closed files (the client's, set with
/// [`DirLeases::set_flusher`]): called before a lease goes back.
pub type Flusher = Box<dyn Fn(Vec<u64>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What this client knows of `dir`, made if new — idle directories are
/// forgotten only to make room for a new one.
fn room_for(dirs: &mut HashMap<u64, Dir>, dir: u64) -> &mut Dir {
    if dirs.len() >= MAX_DIRS && !dirs.contains_key(&dir) {
        dirs.retain(|_, d| !d.idle());
    }
    dirs.entry(dir).or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DirLeases {
    /// Leases for a client of `mds`; `on` false: never asks for one.
    pub fn new(mds: Arc<MdsClient>, on: bool) -> Arc<DirLeases> {
        Arc::new(DirLeases {
            mds,
            on,
            dirs: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            draining: AtomicUsize::new(0),
            hurry: tokio::sync::Notify::new(),
            unreachable: AtomicUsize::new(0),
            refused: Mutex::new(None),
            ticking: std::sync::atomic::AtomicBool::new(false),
            granted: std::sync::atomic::AtomicU64::new(0),
            answered: std::sync::atomic::AtomicU64::new(0),
            looked_up: std::sync::atomic::AtomicU64::new(0),
            deferred_closes: std::sync::atomic::AtomicU64::new(0),
            flusher: std::sync::OnceLock::new(),
            made_answers: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a change in `dir` and asks for its lease once it is hot.
    async fn warm(self: &Arc<Self>, c: &Creds, dir: u64) {
        if !self.on {
            return;
        }
        {
            let mut dirs = lock(&self.dirs);
            let d = room_for(&mut dirs, dir);
            if d.lease.is_some()
                || d.asking.is_some()
                || d.releasing
                || d.not_before.is_some_and(|t| Instant::now() < t)
            {
                return;
            }
            let now = Instant::now();
            let (since, n) = match d.hot {
                Some((t, n)) if t.elapsed() < HOT_WINDOW => (t, n + 1),
                _ => (now, 1),
            };
            d.hot = Some((since, n));
            if n < HOT_CHANGES {
                return;
            }
            d.hot = None;
            d.asking = Some(Vec::new());
        }
        let sent = Instant::now();
        let r = self.mds.call_as(c.clone(), Op::DirLease { dir }).await;
        let mut dirs = lock(&self.dirs);
        let d = dirs.entry(dir).or_default();
        let during = d.asking.take().unwrap_or_default();
        match r {
            Ok(MdsReply::Lease(l)) => {
                let mut names: HashMap<String, (u64, FileKind)> =
                    l.names.into_iter().map(|(n, i, k)| (n, (i, k))).collect();
                // A subdirectory made or removed meanwhile: whether the
                // grant's link count holds it is unknown, so the lease
                // goes back unused.
                let mut unsure = false;
                for (name, now) in during {
                    let before = match now {
                        Some(x) => names.insert(name, x),
                        None => names.remove(&name),
                    };
                    unsure |= [before, now]
                        .iter()
                        .flatten()
                        .any(|(_, k)| *k == FileKind::Dir);
                }
                d.lease = Some(Held {
                    attr: l.attr,
                    names,
                    ids: l.ids.into(),
                    until: sent + Duration::from_millis(LEASE_TERM_MS),
                    used: Instant::now(),
                    give_back: unsure,
                    made: HashMap::new(),
                });
                self.granted.fetch_add(1, Ordering::Relaxed);
                if unsure {
                    self.release_if_done(dir, d);
                }
                drop(dirs);
                self.tick_while_held();
            }
            Ok(_) | Err(_) => d.not_before = Some(Instant::now() + BACK_OFF),
        }
    }

    /// `dir` was just made by this client: its first change asks for its
    /// lease (an untar or a build fills a new directory at once, and its
    /// files' attribute changes are then answered here too).
    pub fn made_here(&self, dir: u64) {
        if !self.on {
            return;
        }
        let mut dirs = lock(&self.dirs);
        room_for(&mut dirs, dir).hot = Some((Instant::now(), HOT_CHANGES - 1));
    }

    /// Creates `name` in `parent` under its lease: `None` when the lease
    /// cannot answer (then the MDS must).
    pub async fn create(
        self: &Arc<Self>,
        c: &Creds,
        parent: u64,
        name: &str,
        mode: u32,
        exclusive: bool,
    ) -> Option<Result<(Entry, Attr)>> {
        self.warm(c, parent).await;
        let mut dirs = lock(&self.dirs);
        let d = dirs.get_mut(&parent)?;
        let h = d.lease.as_mut().filter(|h| h.usable())?;
        if h.names.contains_key(name) {
            if exclusive {
                return Some(Err(FsError::new(
                    Errno::Exist,
                    format!("{name:?} exists in {parent:#x}"),
                )));
            }
            return None;
        }
        if let Err(e) = posix::check_name(name) {
            return Some(Err(e.into()));
        }
        if !perm::allowed(&h.attr, c, W | X) {
            return None;
        }
        let ino = h.ids.pop_front()?;
        let now = proto::clock::now_ns();
        let attr = posix::new_attr(ino, FileKind::File, mode, c, &h.attr, now);
        h.names.insert(name.into(), (ino, FileKind::File));
        h.made.insert(ino, (name.to_string(), attr.clone()));
        touch(&mut h.attr, 1, now);
        h.used = Instant::now();
        let dir = h.attr.clone();
        let op = DirOp::Create {
            name: name.into(),
            ino,
            mode,
        };
        self.queue(d, parent, c, op);
        self.answered.fetch_add(1, Ordering::Relaxed);
        Some(Ok((
            Entry {
                parent,
                name: name.into(),
                attr,
                layout: None,
            },
            dir,
        )))
    }

    /// Removes file `name` from `parent` under its lease: the inode it
    /// named and the directory after; `None` when the MDS must answer.
    pub async fn unlink(
        self: &Arc<Self>,
        c: &Creds,
        parent: u64,
        name: &str,
    ) -> Option<Result<(u64, Attr)>> {
        self.warm(c, parent).await;
        let mut dirs = lock(&self.dirs);
        let d = dirs.get_mut(&parent)?;
        let h = d.lease.as_mut().filter(|h| h.usable())?;
        let Some(&(ino, kind)) = h.names.get(name) else {
            return Some(Err(FsError::new(
                Errno::NoEnt,
                format!("{name:?} not found in {parent:#x}"),
            )));
        };
        // The sticky bit asks for the victim's owner, which the lease
        // does not carry; a directory is for rmdir to refuse.
        if kind == FileKind::Dir || h.attr.mode & 0o1000 != 0 || !perm::allowed(&h.attr, c, W | X) {
            return None;
        }
        h.names.remove(name);
        h.made.remove(&ino);
        let now = proto::clock::now_ns();
        touch(&mut h.attr, -1, now);
        h.used = Instant::now();
        let dir = h.attr.clone();
        let op = DirOp::Unlink {
            name: name.into(),
            ino,
        };
        self.queue(d, parent, c, op);
        self.answered.fetch_add(1, Ordering::Relaxed);
        Some(Ok((ino, dir)))
    }

    /// What `parent`'s lease says of `name`: `Some(None)` absent,
    /// `Some(Some((ino, kind)))` present; `None` when there is no usable
    /// lease.
    pub fn lookup(&self, parent: u64, name: &str) -> Option<Option<(u64, FileKind)>> {
        // No lease held or on its way back (the common case): no lock.
        if !self.ticking.load(Ordering::SeqCst) {
            return None;
        }
        let dirs = lock(&self.dirs);
        let h = dirs.get(&parent)?.lease.as_ref().filter(|h| h.usable())?;
        Some(h.names.get(name).copied())
    }

    /// Looks up at the MDS `name`, which `parent`'s lease lists as `ino`
    /// ([`DirLeases::lookup`]), without waiting for the queue: `None` when
    /// the answer cannot be checked against the lease (then the caller
    /// asks after the queue, as for any request). The MDS may not have this client's
    /// queued changes yet, so the answer is taken only where the lease
    /// vouches for it: the entry must name the inode the lease lists, and
    /// a prefetched neighbour is kept only if it is in `parent` and the
    /// lease lists its name with that inode. A directory is not taken (its
    /// own lease's queue may change its size and times), nor an inode with
    /// other names (nlink > 1: a queued removal of another of its names
    /// would change its link count). This
    /// is what keeps an `rm` of files whose cached entries have expired
    /// from waiting for each batch under way (`docs/CLIENT.md`). `absorb`
    /// caches the answer while the lease's names cannot change, so a
    /// removal answered meanwhile is either seen here or removes what
    /// `absorb` cached after it.
    pub async fn lookup_listed(
        &self,
        c: &Creds,
        parent: u64,
        name: &str,
        ino: u64,
        absorb: impl FnOnce(&mut Found),
    ) -> Option<Found> {
        let op = Op::Lookup {
            parent,
            name: name.into(),
        };
        let Ok(MdsReply::Found(mut f)) = self.mds.call_as(c.clone(), op).await else {
            return None;
        };
        let dirs = lock(&self.dirs);
        let h = dirs.get(&parent)?.lease.as_ref()?;
        // Not a directory: its own lease's queue (this client's creates
        // in it) may not be in the MDS's size and times yet.
        let vouched = |e: &Entry| {
            e.parent == parent
                && h.names.get(&e.name).map(|x| x.0) == Some(e.attr.ino)
                && e.attr.kind != FileKind::Dir
                && e.attr.nlink <= 1
        };
        if f.entry.attr.ino != ino || !vouched(&f.entry) {
            return None;
        }
        f.prefetch.retain(|e| vouched(e));
        absorb(&mut f);
        self.looked_up.fetch_add(1, Ordering::Relaxed);
        Some(*f)
    }

    /// A change this client made through the MDS: `name` in `dir` now
    /// names `now` (or nothing), and `dir_attr` is the directory as the
    /// MDS's reply left it (when the reply carried it). The lease's copy
    /// of the directory's attributes follows the change itself: a
    /// subdirectory more or less moves the link count by one, a name more
    /// or less the size, and the times become the later of the reply's
    /// and the lease's (or now, without a reply's). Replies of concurrent
    /// requests may be handled in any order, so the MDS's own link count
    /// is not copied: while the lease is held nothing else moves it.
    pub fn changed(
        &self,
        dir: u64,
        name: &str,
        now: Option<(u64, FileKind)>,
        dir_attr: Option<&Attr>,
    ) {
        let mut dirs = lock(&self.dirs);
        let Some(d) = dirs.get_mut(&dir) else { return };
        if let Some(during) = d.asking.as_mut() {
            during.push((name.into(), now));
        }
        if let Some(h) = d.lease.as_mut() {
            let before = match now {
                Some(x) => h.names.insert(name.into(), x),
                None => h.names.remove(name),
            };
            let count = |x: Option<(u64, FileKind)>, dirs_only: bool| {
                i64::from(x.is_some_and(|(_, k)| !dirs_only || k == FileKind::Dir))
            };
            let names = count(now, false) - count(before, false);
            let subdirs = count(now, true) - count(before, true);
            h.attr.nlink = h.attr.nlink.saturating_add_signed(subdirs as i32);
            match dir_attr {
                Some(a) => {
                    h.attr.mtime = h.attr.mtime.max(a.mtime);
                    h.attr.ctime = h.attr.ctime.max(a.ctime);
                    h.attr.size = h.attr.size.saturating_add_signed(names);
                }
                None => touch(&mut h.attr, names, proto::clock::now_ns()),
            }
        }
    }

    /// A change through the MDS this lease cannot follow (a rename, a
    /// refused change, new permissions): the lease goes back.
    pub fn forget(self: &Arc<Self>, dir: u64) {
        let mut dirs = lock(&self.dirs);
        if let Some(d) = dirs.get_mut(&dir) {
            if let Some(h) = d.lease.as_mut() {
                h.give_back = true;
            }
            if d.asking.is_some() {
                // The listing may predate the change: not to be used.
                d.not_before = Some(Instant::now() + BACK_OFF);
            }
            self.release_if_done(dir, d);
        }
    }

    /// Returns once every change answered under a lease before the call
    /// has been answered by the MDS (every other request waits for this,
    /// so the MDS sees this client's operations in order); EIO at once
    /// while a queue cannot reach the MDS (as the request itself would
    /// fail: a request must not wait for a restart that may wait for it).
    pub async fn drain(&self) -> Result<()> {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        // Lingering senders send now, and none lingers while this waits.
        self.draining.fetch_add(1, Ordering::SeqCst);
        let _done = Draining(&self.draining);
        self.hurry.notify_waiters();
        loop {
            let wait = self.drained.notified();
            let pending = self.pending.load(Ordering::SeqCst);
            if pending == 0 {
                return Ok(());
            }
            if self.unreachable.load(Ordering::SeqCst) > 0 {
                return Err(FsError::new(
                    Errno::Io,
                    format!(
                        "MDS unreachable: {pending} changes answered under directory leases \
                         wait to be sent"
                    ),
                ));
            }
            wait.await;
        }
    }

    /// Sets what writes out closed files' data before a lease goes back.
    pub fn set_flusher(&self, f: Flusher) {
        let _ = self.flusher.set(f);
    }

    /// Keeps `e` for the next `syncfs` or `fsync` of a directory (a
    /// deferred close's write-back failed after the close succeeded).
    pub fn note_failure(&self, e: FsError) {
        lock(&self.refused).get_or_insert(e);
    }

    /// The first change the MDS refused after it was answered here, once.
    pub fn take_refused(&self) -> Option<FsError> {
        lock(&self.refused).take()
    }

    fn queue(self: &Arc<Self>, d: &mut Dir, dir: u64, c: &Creds, op: DirOp) {
        d.queue.push_back((c.clone(), op));
        self.pending.fetch_add(1, Ordering::SeqCst);
        if !d.in_flight {
            d.in_flight = true;
            let me = self.clone();
            tokio::spawn(async move { me.send(dir).await });
        }
    }

    /// Sends `dir`'s queue, a batch at a time, until it is empty. A batch
    /// that is not full waits [`BATCH_LINGER`] for more changes first,
    /// unless a request of this client waits for the queue.
    async fn send(self: Arc<Self>, dir: u64) {
        let mut retry = Duration::from_millis(50);
        let mut unreachable = false;
        loop {
            self.linger(dir).await;
            let (creds, ops) = {
                let mut dirs = lock(&self.dirs);
                let Some(d) = dirs.get_mut(&dir) else { return };
                let Some(creds) = d.queue.front().map(|(c, _)| c.clone()) else {
                    d.in_flight = false;
                    self.release_if_done(dir, d);
                    return;
                };
                let mut ops = Vec::new();
                while ops.len() < DIR_OPS_MAX && d.queue.front().is_some_and(|(c, _)| *c == creds) {
                    if let Some((_, op)) = d.queue.pop_front() {
                        ops.push(op);
                    }
                }
                (creds, ops)
            };
            let n = ops.len();
            let sent = Instant::now();
            let op = Op::DirOps {
                dir,
                ops: ops.clone(),
            };
            let r = self.mds.call_as(creds.clone(), op).await;
            let (failed, contended, ids) = match r {
                Ok(MdsReply::DirDone {
                    failed,
                    contended,
                    ids,
                    made,
                    ..
                }) => (
                    {
                        self.keep_made(made);
                        failed
                    }
                    .into_iter()
                    .map(|(i, e)| (ops.get(i as usize).map(|o| o.name().to_string()), e.into()))
                    .collect::<Vec<(Option<String>, FsError)>>(),
                    contended,
                    ids,
                ),
                Err(CallError::Transport(e)) => {
                    // Not known to have arrived: sent again (the MDS takes
                    // a batch twice as once) when the MDS answers again.
                    // A restarted MDS holds no lease: answer nothing more
                    // under any.
                    tracing::warn!(dir, error = %e, "directory changes not sent; retrying");
                    {
                        let mut dirs = lock(&self.dirs);
                        for h in dirs.values_mut().filter_map(|d| d.lease.as_mut()) {
                            h.give_back = true;
                        }
                        let d = dirs.entry(dir).or_default();
                        for op in ops.into_iter().rev() {
                            d.queue.push_front((creds.clone(), op));
                        }
                    }
                    if !unreachable {
                        unreachable = true;
                        self.unreachable.fetch_add(1, Ordering::SeqCst);
                        self.drained.notify_waiters();
                    }
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_secs(1));
                    continue;
                }
                Ok(other) => (
                    vec![(
                        None,
                        FsError::new(Errno::Io, format!("DIR OPS answered {other:?}")),
                    )],
                    true,
                    Vec::new(),
                ),
                Err(e) => (vec![(None, crate::error::from_call(e))], true, Vec::new()),
            };
            retry = Duration::from_millis(50);
            if unreachable {
                unreachable = false;
                self.unreachable.fetch_sub(1, Ordering::SeqCst);
            }
            {
                let mut dirs = lock(&self.dirs);
                let d = dirs.entry(dir).or_default();
                if let Some(h) = d.lease.as_mut() {
                    h.until = sent + Duration::from_millis(LEASE_TERM_MS);
                    h.ids.extend(ids);
                    h.give_back |= contended || !failed.is_empty();
                }
                if !failed.is_empty() {
                    d.not_before = Some(Instant::now() + BACK_OFF);
                }
            }
            for (name, e) in failed {
                tracing::error!(
                    dir,
                    name = name.as_deref().unwrap_or("(the batch)"),
                    error = %e,
                    "the MDS refused a change this client had answered under a directory lease"
                );
                lock(&self.refused).get_or_insert(e);
            }
            self.pending.fetch_sub(n, Ordering::SeqCst);
            self.drained.notify_waiters();
        }
    }

    /// Waits up to [`BATCH_LINGER`] while `dir`'s queue holds less than a
    /// full batch and no drain waits: changes answered meanwhile go in the
    /// same batch, so the MDS runs one transaction for many of them.
    async fn linger(&self, dir: u64) {
        let hurry = self.hurry.notified();
        tokio::pin!(hurry);
        hurry.as_mut().enable();
        // Not for an empty queue, nor for a lease on its way back
        // (another client may wait for it).
        let short = lock(&self.dirs).get(&dir).is_some_and(|d| {
            !d.queue.is_empty()
                && d.queue.len() < DIR_OPS_MAX
                && d.lease.as_ref().is_some_and(|h| h.usable())
        });
        if short && self.draining.load(Ordering::SeqCst) == 0 {
            tokio::select! {
                _ = tokio::time::sleep(BATCH_LINGER) => {}
                _ = hurry => {}
            }
        }
    }

    /// Gives `dir`'s lease back if it is to go and nothing is queued.
    fn release_if_done(self: &Arc<Self>, dir: u64, d: &mut Dir) {
        let idle = d
            .lease
            .as_ref()
            .is_some_and(|h| h.give_back || h.used.elapsed() >= IDLE || Instant::now() >= h.until);
        if !idle || d.in_flight || !d.queue.is_empty() {
            return;
        }
        if d.lease.take().is_some_and(|h| h.give_back) {
            d.not_before = Some(Instant::now() + BACK_OFF);
        }
        d.releasing = true;
        let deferred: Vec<u64> = std::mem::take(&mut d.deferred).into_iter().collect();
        let me = self.clone();
        tokio::spawn(async move {
            // Closed files' data first: the next client to name them must
            // find it on the OSDs.
            if let (false, Some(flush)) = (deferred.is_empty(), me.flusher.get()) {
                flush(deferred).await;
            }
            // Retried: until it arrives other clients wait for the lease
            // (or for its term to pass).
            for _ in 0..5 {
                match me.mds.call(Op::DirRelease { dir }).await {
                    Ok(_) | Err(CallError::Mds(_)) => break,
                    Err(e) => {
                        tracing::debug!(dir, error = %e, "giving a directory lease back");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            if let Some(d) = lock(&me.dirs).get_mut(&dir) {
                d.releasing = false;
            }
        });
    }

    /// Runs the idle check while leases are held.
    fn tick_while_held(self: &Arc<Self>) {
        if self.ticking.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE / 2).await;
                let Some(me) = me.upgrade() else { return };
                let mut dirs = lock(&me.dirs);
                let keys: Vec<u64> = dirs.keys().copied().collect();
                for k in keys {
                    if let Some(d) = dirs.get_mut(&k) {
                        me.release_if_done(k, d);
                        if d.idle() {
                            dirs.remove(&k);
                        }
                    }
                }
                if !dirs
                    .values()
                    .any(|d| d.lease.is_some() || d.in_flight || d.releasing)
                {
                    me.ticking.store(false, Ordering::SeqCst);
                    return;
                }
            }
        });
    }
}

/// A directory's attributes after a name came (+1) or went (-1).
fn touch(a: &mut Attr, names: i64, now: i64) {
    a.size = a.size.saturating_add_signed(names);
    a.mtime = now;
    a.ctime = now;
}
