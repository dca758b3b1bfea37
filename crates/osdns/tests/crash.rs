//! Client crash injection at every step of create, unlink, mkdir, rmdir
//! and rename (within a directory, across directories over an existing
//! name, and a directory to another parent), for both protocols, on a real
//! cluster. The client "dies" before its k-th OSD command, for every k
//! from 0 to the operation's length (deterministic, so a failure names the
//! step that broke). Then `fsck` repairs, a second `fsck` must find
//! nothing, and the operation must have happened wholly or not at all.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::sync::Arc;

use osdns::fs::Owner;
use osdns::{DirHash, DirRef, Kind, OsdFs, Protocol};

const OWNER: Owner = Owner {
    uid: 0,
    gid: 0,
    mode: 0o644,
    rdev: 0,
};

#[derive(Debug, Clone, Copy)]
enum Op {
    Create,
    Unlink,
    Mkdir,
    Rmdir,
    RenameSameDir,
    RenameReplaceAcross,
    RenameDirAcross,
}

/// The trial's directories: `a` and `b` under a fresh directory.
struct Trial {
    a: DirRef,
    b: DirRef,
}

async fn mkdir(fs: &OsdFs, d: &DirRef, name: &str) -> DirRef {
    let (e, _, _) = fs
        .make(d, name, Kind::Dir, OWNER, None, true)
        .await
        .unwrap();
    fs.dir(e.ino, e.osd).await.unwrap()
}

async fn file(fs: &OsdFs, d: &DirRef, name: &str) -> u64 {
    fs.make(d, name, Kind::File, OWNER, None, true)
        .await
        .unwrap()
        .0
        .ino
}

async fn setup(fs: &OsdFs, op: Op, tag: &str) -> Trial {
    let root = fs.root().await.unwrap();
    let top = mkdir(fs, &root, tag).await;
    let a = mkdir(fs, &top, "a").await;
    let b = mkdir(fs, &top, "b").await;
    match op {
        Op::Create | Op::Mkdir => {}
        Op::Unlink | Op::RenameSameDir => {
            file(fs, &a, "f").await;
        }
        Op::Rmdir | Op::RenameDirAcross => {
            mkdir(fs, &a, "s").await;
        }
        Op::RenameReplaceAcross => {
            file(fs, &a, "f").await;
            file(fs, &b, "t").await;
        }
    }
    Trial { a, b }
}

async fn run(fs: &OsdFs, op: Op, t: &Trial) -> osdns::Result<()> {
    match op {
        Op::Create => fs
            .make(&t.a, "f", Kind::File, OWNER, None, true)
            .await
            .map(|_| ()),
        Op::Mkdir => fs
            .make(&t.a, "s", Kind::Dir, OWNER, None, true)
            .await
            .map(|_| ()),
        Op::Unlink => {
            let (e, last) = fs.unlink(&t.a, "f").await?;
            match last {
                Some(i) => fs.destroy(e.ino, e.osd, &i).await,
                None => Ok(()),
            }
        }
        Op::Rmdir => fs.rmdir(&t.a, "s").await.map(|_| ()),
        Op::RenameSameDir => rename(fs, &t.a, "f", &t.a, "g").await,
        Op::RenameReplaceAcross => rename(fs, &t.a, "f", &t.b, "t").await,
        Op::RenameDirAcross => rename(fs, &t.a, "s", &t.b, "s2").await,
    }
}

/// A rename as a client runs it: then the replaced file's objects go.
async fn rename(fs: &OsdFs, a: &DirRef, n: &str, b: &DirRef, m: &str) -> osdns::Result<()> {
    if let Some((ino, osd, i)) = fs.rename(a, n, b, m, false).await?.replaced {
        fs.destroy(ino, osd, &i).await?;
    }
    Ok(())
}

async fn present(fs: &OsdFs, d: &DirRef, name: &str) -> Option<u64> {
    match fs.lookup(d, name).await {
        Ok(e) => {
            // Whatever an entry names exists, with its metadata.
            fs.stat(e.ino, e.osd).await.unwrap();
            if e.kind == Kind::Dir {
                fs.dir(e.ino, e.osd).await.unwrap();
            }
            Some(e.ino)
        }
        Err(e) if e.raw() == libc::ENOENT => None,
        Err(e) => panic!("lookup {name}: {e}"),
    }
}

/// The operation happened wholly or not at all.
async fn check(fs: &OsdFs, op: Op, t: &Trial, before: (Option<u64>, Option<u64>), step: u64) {
    let ctx = format!("{op:?} crashed before command {step}");
    match op {
        Op::Create | Op::Unlink => {
            present(fs, &t.a, "f").await;
        }
        Op::Mkdir | Op::Rmdir => {
            present(fs, &t.a, "s").await;
        }
        Op::RenameSameDir => {
            let (f, g) = (present(fs, &t.a, "f").await, present(fs, &t.a, "g").await);
            assert!(
                (f == before.0 && g.is_none()) || (f.is_none() && g == before.0),
                "{ctx}: f={f:?} g={g:?}"
            );
        }
        Op::RenameReplaceAcross => {
            let (f, tt) = (present(fs, &t.a, "f").await, present(fs, &t.b, "t").await);
            assert!(
                (f == before.0 && tt == before.1) || (f.is_none() && tt == before.0),
                "{ctx}: f={f:?} t={tt:?} before={before:?}"
            );
        }
        Op::RenameDirAcross => {
            let (s, s2) = (present(fs, &t.a, "s").await, present(fs, &t.b, "s2").await);
            assert!(
                (s == before.0 && s2.is_none()) || (s.is_none() && s2 == before.0),
                "{ctx}: s={s:?} s2={s2:?}"
            );
        }
    }
}

async fn ids(fs: &OsdFs, op: Op, t: &Trial) -> (Option<u64>, Option<u64>) {
    match op {
        Op::RenameSameDir | Op::RenameReplaceAcross | Op::Unlink | Op::Create => {
            (present(fs, &t.a, "f").await, present(fs, &t.b, "t").await)
        }
        _ => (present(fs, &t.a, "s").await, None),
    }
}

async fn every_step(p: Protocol) {
    let c = common::cluster(3).await;
    let fs = c.formatted(p, DirHash::V1).await;
    let ops = [
        Op::Create,
        Op::Unlink,
        Op::Mkdir,
        Op::Rmdir,
        Op::RenameSameDir,
        Op::RenameReplaceAcross,
        Op::RenameDirAcross,
    ];
    let mut trials = 0;
    let mut repaired = osdns::fsck::Report::default();
    for op in ops {
        // Length of the operation, uninterrupted.
        let t = setup(&fs, op, &format!("{op:?}-len")).await;
        let victim = c.client().await;
        let before = victim.round_trips();
        run(&victim, op, &t).await.unwrap();
        let len = victim.round_trips() - before;
        assert!(len >= 1);
        for step in 0..len {
            let t = setup(&fs, op, &format!("{op:?}-{step}")).await;
            let before = ids(&fs, op, &t).await;
            let victim: Arc<OsdFs> = c.client().await;
            victim.osds.crash_after(step);
            let r = run(&victim, op, &t).await;
            assert!(
                r.is_err() && victim.osds.crashed(),
                "{op:?} step {step}: {r:?}"
            );
            let rep = osdns::fsck::fsck(&fs, true, 0).await.unwrap();
            let again = osdns::fsck::fsck(&fs, false, 0).await.unwrap();
            assert!(
                again.clean(),
                "{p:?} {op:?} crashed before command {step}: after repair ({:?}) fsck still finds {:?}",
                rep.lines(),
                again.lines()
            );
            check(&fs, op, &t, before, step).await;
            trials += 1;
            repaired.orphans.extend(rep.orphans);
            repaired.renames_finished += rep.renames_finished;
            repaired.renames_undone += rep.renames_undone;
            repaired.locks += rep.locks;
            repaired.dying += rep.dying;
        }
    }
    assert!(trials > 20, "{trials} trials");
    // The crashes did leave work for fsck, of every kind these operations can.
    assert!(
        !repaired.orphans.is_empty()
            && repaired.renames_finished > 0
            && repaired.renames_undone > 0
            && repaired.locks > 0
            && repaired.dying > 0,
        "{p:?}: {trials} trials repaired {:?}",
        repaired.lines()
    );
    eprintln!(
        "{p:?}: {trials} crash points; fsck repaired {:?}",
        repaired.lines()
    );
    c.c.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_protocol_survives_a_client_crash_at_every_step() {
    every_step(Protocol::Atomic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_protocol_survives_a_client_crash_at_every_step() {
    every_step(Protocol::Lock).await;
}
