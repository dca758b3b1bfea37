//! The group's raft storage on its own: openraft's storage test suite
//! against the real files, and the log's crash cases (a truncation that
//! must not come back, space freed by a purge and reused across the
//! ring's wrap, the bounds surviving a reopen).

use mds::raft::log_store::LogStore;
use mds::raft::state_machine::KvMachine;
use mds::raft::{Batch, StoreError, Tc, open_member};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};

struct Builder;

impl StoreBuilder<Tc, LogStore, KvMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, KvMachine), StoreError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, sm) = open_member(dir.path(), 4 << 20).expect("open member");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_real_files() {
    Suite::test_all(Builder).expect("suite");
}

/// Opens the log again. Another test of this binary forks a child, which
/// holds a copy of every descriptor (and so the log's lock) until it
/// executes: a reopen right after a close may find the lock briefly held.
fn reopen(dir: &std::path::Path) -> LogStore {
    for _ in 0..500 {
        match LogStore::open(dir) {
            Ok(l) => return l,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
    panic!("the log stayed locked for 5 s")
}

fn entry(term: u64, index: u64, fill: u8, len: usize) -> Entry<Tc> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Batch {
            origin: 1,
            seq: index,
            writes: vec![fill; len],
        }),
    }
}

async fn append(log: &mut LogStore, entries: Vec<Entry<Tc>>) {
    log.blocking_append(entries).await.expect("append");
}

async fn indices(log: &mut LogStore) -> Vec<(u64, u64, u8)> {
    log.try_get_log_entries(0..u64::MAX)
        .await
        .expect("read")
        .into_iter()
        .map(|e| match e.payload {
            EntryPayload::Normal(b) => (e.log_id.index, e.log_id.leader_id.term, b.writes[0]),
            _ => (e.log_id.index, e.log_id.leader_id.term, 0),
        })
        .collect()
}

#[tokio::test]
async fn a_truncation_never_comes_back_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open_member(dir.path(), 1 << 20).unwrap();
        // Term 5 wrote 1..=10; a term-4 leader then replaces 4.. with one
        // entry of the same size: the stale 5 right after the new 4 would
        // pass the replay's consecutive-lsn check were it not zeroed.
        append(&mut log, (1..=10).map(|i| entry(5, i, 5, 9000)).collect()).await;
        log.truncate(LogId::new(CommittedLeaderId::new(5, 1), 4))
            .await
            .unwrap();
        append(&mut log, vec![entry(4, 4, 4, 9000)]).await;
    }
    let mut log = reopen(dir.path());
    let got = indices(&mut log).await;
    assert_eq!(
        got,
        vec![(1, 5, 5), (2, 5, 5), (3, 5, 5), (4, 4, 4)],
        "nothing after the replacement survives"
    );
}

#[tokio::test]
async fn purged_space_is_reused_across_the_wrap_and_the_bounds_survive() {
    let dir = tempfile::tempdir().unwrap();
    let mut next = 1u64;
    let mut purged = 0u64;
    {
        let (mut log, _sm) = open_member(dir.path(), 1 << 20).unwrap();
        // 1 MiB ring, 40 KiB entries: many laps, purging to keep 8 live.
        for round in 0..200u64 {
            append(
                &mut log,
                vec![entry(1, next, (round % 250) as u8 + 1, 40_000)],
            )
            .await;
            next += 1;
            if next - purged > 9 {
                purged = next - 9;
                log.purge(LogId::new(CommittedLeaderId::new(1, 1), purged))
                    .await
                    .unwrap();
            }
            assert!(log.live_bytes() < log.capacity());
        }
    }
    let mut log = reopen(dir.path());
    let got = indices(&mut log).await;
    let want: Vec<u64> = (purged + 1..next).collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), want);
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(purged));
    assert_eq!(state.last_log_id.map(|l| l.index), Some(next - 1));
    // And it goes on where it stopped.
    append(&mut log, vec![entry(1, next, 9, 100)]).await;
}

#[tokio::test]
async fn a_full_ring_refuses_the_append_instead_of_overwriting() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _sm) = open_member(dir.path(), 1 << 20).unwrap();
    let mut i = 1;
    loop {
        if log
            .blocking_append(vec![entry(1, i, 1, 60_000)])
            .await
            .is_err()
        {
            break;
        }
        i += 1;
        assert!(i < 100, "a 1 MiB ring took 100 records of 60 KB");
    }
    // What was written is all still there.
    drop(log);
    let mut log = reopen(dir.path());
    assert_eq!(indices(&mut log).await.len() as u64, i - 1);
}

/// The crash-only step-down rests on this: a KV batch committed without
/// a sync (a leader's speculative batch) is gone after the process ends
/// without running destructors, and a durable commit before it stays.
/// The child half runs in a copy of this test binary.
#[test]
fn an_unsynced_kv_commit_does_not_survive_an_exit_without_destructors() {
    let dir = std::env::var("TESSERA_CHILD_DIR");
    if let Ok(dir) = dir {
        let dir = std::path::PathBuf::from(dir);
        let (_log, sm) = open_member(&dir, 1 << 20).unwrap();
        let db = sm.db().clone();
        let put = |k: &[u8], durable: bool| {
            let w = vec![mds::kv::Write::Put(0, k.to_vec(), b"v".to_vec())];
            let b = postcard::to_allocvec(&w).unwrap();
            let state = mds::raft::state_machine::AppliedState::default().encode();
            mds::kv::image::apply_logged(&db, [&b[..]], &state, durable).unwrap();
        };
        put(b"durable", true);
        put(b"visible-only", false);
        // SAFETY: ends the process at once, as a member's step-down does.
        unsafe { libc::_exit(0) };
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_unsynced_kv_commit_does_not_survive_an_exit_without_destructors",
        ])
        .env("TESSERA_CHILD_DIR", tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (_log, sm) = open_member(tmp.path(), 1 << 20).unwrap();
    let r = mds::kv::read_db(&**sm.db()).unwrap();
    use mds::kv::View;
    assert!(r.get(mds::kv::T::Inodes, b"durable").unwrap().is_some());
    assert!(
        r.get(mds::kv::T::Inodes, b"visible-only")
            .unwrap()
            .is_none(),
        "a commit without a sync survived the process"
    );
}

fn blank(index: u64) -> Entry<Tc> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Blank,
    }
}

/// A member made by `tessera mds join` holds an empty KV: it refuses
/// entries until it has installed the leader's snapshot (else it would
/// build a state the group never had), then applies them; a restart
/// after the install (even one that left the marker) does not refuse.
#[tokio::test]
async fn a_joining_member_refuses_entries_until_it_installs_a_snapshot() {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    let leader_dir = tempfile::tempdir().unwrap();
    let (_l, mut leader) = open_member(leader_dir.path(), 1 << 20).unwrap();
    leader.apply((1..=5).map(blank)).await.unwrap();
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let joiner_dir = tempfile::tempdir().unwrap();
    let marker = mds::raft::state_machine::awaiting_snapshot_path(joiner_dir.path());
    std::fs::write(&marker, b"waiting\n").unwrap();
    let (log, mut joiner) = open_member(joiner_dir.path(), 1 << 20).unwrap();
    let e = joiner.apply([blank(1)]).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("must start from the leader's snapshot"),
        "{e}"
    );
    let into = joiner.begin_receiving_snapshot().await.unwrap();
    std::fs::copy(&snap.snapshot.path, &into.path).unwrap();
    joiner.install_snapshot(&snap.meta, into).await.unwrap();
    assert!(!marker.exists(), "the install removes the marker");
    joiner.apply([blank(6)]).await.unwrap();
    drop(joiner);
    drop(log);
    // A marker left by an install that ended early: the applied state
    // says the snapshot is in.
    std::fs::write(&marker, b"waiting\n").unwrap();
    let (_log, mut joiner) = open_member(joiner_dir.path(), 1 << 20).unwrap();
    joiner.apply([blank(7)]).await.unwrap();
}
