//! The KV's early answers: a session's first change is answered durably
//! and records the session; its later changes are answered once visible,
//! with increasing transnos, before the (held back) log flush; `sync`
//! waits for the flush; a clean close forgets the sessions, and the
//! durable transno survives a reopen.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::time::{Duration, Instant};

use mds::kv::{Kv, KvOptions, KvPaths, T, View, create};

fn open(paths: &KvPaths, delay_ms: u64) -> Kv {
    Kv::open_with(
        paths,
        KvOptions {
            cache_bytes: 4 << 20,
            flush_delay: Duration::from_millis(delay_ms),
            ..KvOptions::default()
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_answers_come_before_the_flush_and_sync_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = KvPaths::new(dir.path());
    create(&paths, 4 << 20).unwrap();
    let kv = open(&paths, 300);
    assert!(
        kv.recovered_sessions().is_empty(),
        "a new KV has no sessions"
    );
    let put = |k: &'static [u8]| move |tx: &mut mds::kv::Tx| tx.put(T::Xattrs, k, b"v").map(|_| ());
    // First change of session 7: durable (it records the session).
    let t = Instant::now();
    let ((), ack) = kv.write_early(7, put(b"a")).await.unwrap();
    assert_eq!(
        ack.transno, 0,
        "the first change records the session durably"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "it waited for the flush"
    );
    // The next ones are answered before the flush, in order.
    let t = Instant::now();
    let ((), a1) = kv.write_early(7, put(b"b")).await.unwrap();
    let ((), a2) = kv.write_early(7, put(b"c")).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "early answers do not wait for the held-back flush ({:?})",
        t.elapsed()
    );
    assert!(
        a1.transno > 0 && a2.transno == a1.transno + 1,
        "{a1:?} {a2:?}"
    );
    assert!(a2.durable < a2.transno, "not durable when answered");
    assert!(
        kv.read().unwrap().get(T::Xattrs, b"c").unwrap().is_some(),
        "visible at once"
    );
    // A change nothing was written for gets no transno.
    let (r, a3) = kv
        .write_early(7, |tx: &mut mds::kv::Tx| tx.get(T::Xattrs, b"zz"))
        .await
        .unwrap();
    assert!(r.is_none());
    assert_eq!(a3.transno, 0);
    // A failed change neither.
    let e = kv
        .write_early(7, |_: &mut mds::kv::Tx| -> Result<(), _> {
            Err(proto::mds::MdsError::new(proto::mds::Errno::Exist, "no"))
        })
        .await
        .unwrap_err();
    assert_eq!(e.errno, proto::mds::Errno::Exist);
    // Sync returns once the flush has them.
    let durable = kv.sync().await.unwrap();
    assert!(durable >= a2.transno, "{durable} < {}", a2.transno);
    assert_eq!(kv.durable_transno(), durable);
    // Another session's first change is durable again.
    let ((), b) = kv.write_early(8, put(b"d")).await.unwrap();
    assert_eq!(b.transno, 0);
    kv.close();
    drop(kv);
    // A clean close: no session is waited for; the transno is kept.
    let kv = open(&paths, 0);
    assert!(
        kv.recovered_sessions().is_empty(),
        "{:?}",
        kv.recovered_sessions()
    );
    assert_eq!(kv.recovered_transno(), a2.transno);
    for k in [b"a", b"b", b"c", b"d"] {
        assert!(kv.read().unwrap().get(T::Xattrs, k).unwrap().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_loses_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let paths = KvPaths::new(dir.path());
    create(&paths, 4 << 20).unwrap();
    let kv = open(&paths, 0);
    let ((), a) = kv
        .write_early(9, |tx: &mut mds::kv::Tx| tx.put(T::Xattrs, b"x", b"1"))
        .await
        .unwrap();
    assert_eq!(a.transno, 0);
    let recorded = || {
        kv.read()
            .unwrap()
            .get(T::Sessions, &9u64.to_be_bytes())
            .unwrap()
            .is_some()
    };
    assert!(recorded(), "the session is recorded");
    let t = Instant::now();
    while recorded() {
        assert!(
            t.elapsed() < mds::kv::SESSION_IDLE * 5,
            "an idle session's record goes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its next change records it again, durably.
    let ((), a) = kv
        .write_early(9, |tx: &mut mds::kv::Tx| tx.put(T::Xattrs, b"y", b"1"))
        .await
        .unwrap();
    assert_eq!(a.transno, 0);
    assert!(recorded());
}

/// A writer on a tokio worker runs its batch itself when writes come one
/// at a time; concurrent writers and writers elsewhere (a plain thread)
/// hand theirs to the committer thread. Either way every job runs exactly
/// once, in one order (each sees the counter the one before left), is
/// answered, and survives a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_once_in_one_order_whoever_runs_them() {
    const TASKS: u64 = 16;
    const EACH: u64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let paths = KvPaths::new(dir.path());
    create(&paths, 4 << 20).unwrap();
    let kv = std::sync::Arc::new(open(&paths, 0));
    let bump = |tx: &mut mds::kv::Tx| {
        let n = tx
            .get(T::Meta, b"counter")?
            .map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()));
        tx.put(T::Meta, b"counter", &(n + 1).to_le_bytes())?;
        Ok(n)
    };
    // One at a time, after a quiet spell: the writer runs its batch.
    tokio::time::sleep(mds::kv::QUIET_BEFORE_LEADING * 2).await;
    let mut all = Vec::new();
    for _ in 0..EACH {
        all.push(kv.write(bump).await.unwrap());
    }
    let led = kv.stats.led.load(std::sync::atomic::Ordering::Relaxed);
    assert!(led > 0, "writes one at a time are run by their writers");
    // Many at once, and from a plain thread.
    let plain = {
        let kv = kv.clone();
        std::thread::spawn(move || {
            (0..EACH)
                .map(|_| kv.write_blocking(bump).unwrap())
                .collect::<Vec<u64>>()
        })
    };
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..EACH {
                let n = if t % 2 == 0 {
                    kv.write_early(100 + t, bump).await.unwrap().0
                } else {
                    kv.write(bump).await.unwrap()
                };
                seen.push(n);
            }
            seen
        }));
    }
    all.extend(plain.join().unwrap());
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    let total = (TASKS + 2) * EACH;
    assert_eq!(
        all,
        (0..total).collect::<Vec<u64>>(),
        "each job saw the one before"
    );
    kv.close();
    drop(kv);
    let kv = open(&paths, 0);
    let v = kv
        .read()
        .unwrap()
        .get(T::Meta, b"counter")
        .unwrap()
        .unwrap();
    assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), total);
}

/// A job that panics (here run by its own writer, the committer being
/// idle) fails its writer and the KV instead of hanging them: later writes
/// are refused at once, the KV closes, and a reopen has what was committed
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_job_fails_the_kv_instead_of_hanging_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = KvPaths::new(dir.path());
    create(&paths, 4 << 20).unwrap();
    let kv = std::sync::Arc::new(open(&paths, 0));
    let put = |k: &'static [u8]| move |tx: &mut mds::kv::Tx| tx.put(T::Xattrs, k, b"v").map(|_| ());
    kv.write(put(b"a")).await.unwrap();
    tokio::time::sleep(mds::kv::QUIET_BEFORE_LEADING * 2).await;
    let limit = Duration::from_secs(10);
    let r = tokio::time::timeout(
        limit,
        kv.write(|_: &mut mds::kv::Tx| -> Result<(), proto::mds::MdsError> {
            panic!("a job that panics (expected by this test)")
        }),
    )
    .await
    .expect("the writer is answered, not left waiting");
    assert!(r.is_err());
    let r = tokio::time::timeout(limit, kv.write(put(b"b")))
        .await
        .expect("a later writer is answered");
    assert!(r.is_err(), "a failed KV refuses changes");
    let k2 = kv.clone();
    tokio::time::timeout(limit, tokio::task::spawn_blocking(move || k2.close()))
        .await
        .expect("the KV closes")
        .unwrap();
    drop(kv);
    let kv = open(&paths, 0);
    let snap = kv.read().unwrap();
    assert!(snap.get(T::Xattrs, b"a").unwrap().is_some());
    assert!(snap.get(T::Xattrs, b"b").unwrap().is_none());
}
