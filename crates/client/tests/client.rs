//! The client library against a real cluster on 127.0.0.1 (an MDS and
//! three OSDs on file-backed stores, in this process): a seeded fsx-style
//! random sequence on a striped file checked against a reference after
//! every step; close-to-open consistency between two clients; the
//! write-back timer; capability renewal after revocation; prefetch saving
//! MDS requests; an OSD going down mid-read (EIO, never wrong data) and
//! coming back at a new address.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::time::Duration;

use client::{Client, ClientConfig};
use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;
use proto::mds::{Creds, SetAttr};
use rand::{Rng, SeedableRng};

fn opts(policy: PolicyKind, su: u32, sc: u32) -> FormatOptions {
    FormatOptions {
        cluster_id: "clienttest".into(),
        policy: IdPolicy::new(policy, Geometry::default()).unwrap(),
        layout: LayoutSpec {
            stripe_unit: su,
            stripe_count: sc,
            object_size: 0,
            ..LayoutSpec::default()
        },
        wal_bytes: 8 << 20,
        namespace: Default::default(),
        dir_protocol: String::new(),
    }
}

async fn cluster(dir: &tempfile::TempDir, policy: PolicyKind, su: u32, sc: u32) -> LocalCluster {
    LocalCluster::start(dir.path(), 3, 256 << 20, &opts(policy, su, sc))
        .await
        .unwrap()
}

/// Makes the empty file `name` in `d` (`O_CREAT|O_EXCL`) and closes it.
async fn touch(c: &Client, d: u64, name: &str) {
    let (_, fh) = c.create(&root(), d, name, 0o644, true).await.unwrap();
    c.release(fh).await.unwrap();
}

async fn client(c: &LocalCluster, f: impl FnOnce(&mut ClientConfig)) -> Client {
    let mut cfg = ClientConfig::new(&c.mds_addr(), &c.cluster_id, c.admin().unwrap());
    f(&mut cfg);
    Client::connect(cfg).await.unwrap()
}

fn root() -> Creds {
    Creds::root()
}

async fn read_all(c: &Client, fh: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while (out.len() as u64) < len {
        let d = c.read(fh, out.len() as u64, 1 << 20).await.unwrap();
        if d.is_empty() {
            break;
        }
        out.extend_from_slice(&d);
    }
    out
}

/// Random writes across stripe boundaries, truncates up and down, reads,
/// fsyncs, reopens and reads through a second client, on a file larger
/// than stripe unit × stripe count; checked against a reference after
/// every step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsx_random_sequence_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 4096, 3).await;
    // Small write-back chunks so write-behind requests overlap.
    let a = client(&cl, |c| {
        c.flush_chunk = 16 << 10;
        c.readahead_max = 64 << 10;
    })
    .await;
    let b = client(&cl, |c| c.attr_timeout = Duration::ZERO).await;
    let (e, mut fh) = a.create(&root(), 0, "fsx", 0o644, true).await.unwrap();
    let ino = e.attr.ino;
    let mut model: Vec<u8> = Vec::new();
    let seed = 20261122u64;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let max = 200_000u64; // > 4096 × 3
    for step in 0..600 {
        let op = rng.random_range(0..100);
        if op < 45 {
            let off = rng.random_range(0..max);
            let len = rng.random_range(1..20_000u64).min(max - off);
            let byte = rng.random::<u8>();
            let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
            a.write(fh, off, &data).await.unwrap();
            let end = (off + len) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        } else if op < 55 {
            let size = rng.random_range(0..max);
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            a.setattr(&root(), ino, set).await.unwrap();
            model.resize(size as usize, 0);
        } else if op < 85 {
            let off = rng.random_range(0..max);
            let len = rng.random_range(1..30_000u32);
            let got = a.read(fh, off, len).await.unwrap();
            let lo = (off as usize).min(model.len());
            let hi = (off as usize + len as usize).min(model.len());
            assert_eq!(
                &got[..],
                &model[lo..hi],
                "step {step} (seed {seed}): read {off}+{len}"
            );
        } else if op < 92 {
            a.fsync(fh).await.unwrap();
        } else {
            // Close, then another client opens: close-to-open.
            a.release(fh).await.unwrap();
            let bf = b.open(&root(), ino, false).await.unwrap();
            let attr = b.getattr(&root(), ino).await.unwrap();
            assert_eq!(
                attr.size,
                model.len() as u64,
                "step {step}: size after close"
            );
            let got = read_all(&b, bf, model.len() as u64).await;
            assert!(
                got == model,
                "step {step} (seed {seed}): other client's view differs"
            );
            b.release(bf).await.unwrap();
            fh = a.open(&root(), ino, true).await.unwrap();
        }
        // After every step the whole file reads back as the reference.
        let got = read_all(&a, fh, model.len() as u64 + 1).await;
        assert!(
            got == model,
            "step {step} (seed {seed}): file differs from the reference"
        );
    }
    a.release(fh).await.unwrap();
    cl.stop().await.unwrap();
}

/// A writer's close makes data and length visible to a client opening
/// afterwards; the write-back timer commits unclosed writes within about a
/// second; capabilities revoked by a chmod are renewed transparently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_to_open_timer_and_capability_renewal() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 3).await;
    let a = client(&cl, |_| {}).await;
    let b = client(&cl, |c| c.attr_timeout = Duration::ZERO).await;
    let (e, fh) = a.create(&root(), 0, "shared", 0o644, true).await.unwrap();
    let ino = e.attr.ino;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    a.write(fh, 0, &data).await.unwrap();
    // Not closed: the data sits in A's buffer, B sees an empty file...
    // unless the timer already ran; either way never a wrong length.
    let early = b.getattr(&root(), ino).await.unwrap().size;
    assert!(early == 0 || early == data.len() as u64);
    // The timer writes it out and commits the length within ~1 s.
    let mut seen = 0;
    for _ in 0..40 {
        seen = b.getattr(&root(), ino).await.unwrap().size;
        if seen == data.len() as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen,
        data.len() as u64,
        "the write-back timer committed the length"
    );
    let bf = b.open(&root(), ino, false).await.unwrap();
    assert!(read_all(&b, bf, data.len() as u64).await == data);
    // chmod by B revokes A's capabilities at the OSDs; A's next write
    // renews them and succeeds (A is root, still allowed).
    let set = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    b.setattr(&root(), ino, set).await.unwrap();
    let before = a.stats().mds_non_mandatory;
    a.write(fh, 10, b"renewed").await.unwrap();
    a.fsync(fh).await.unwrap();
    assert!(
        a.stats().mds_non_mandatory > before,
        "A renewed its capabilities"
    );
    a.release(fh).await.unwrap();
    b.release(bf).await.unwrap();
    // Capabilities about to expire are renewed before use: with a margin
    // longer than the MDS's lifetime (300 s) every read renews first.
    let c = client(&cl, |c| c.cap_margin = Duration::from_secs(400)).await;
    let cf = c.open(&root(), ino, false).await.unwrap();
    let n0 = c.stats().mds_non_mandatory;
    for _ in 0..3 {
        c.read(cf, 0, 4096).await.unwrap();
    }
    assert!(
        c.stats().mds_non_mandatory >= n0 + 3,
        "each read renewed its capabilities"
    );
    c.release(cf).await.unwrap();
    let bf = b.open(&root(), ino, false).await.unwrap();
    let got = read_all(&b, bf, data.len() as u64).await;
    assert_eq!(&got[10..17], b"renewed");
    assert_eq!(&got[17..], &data[17..]);
    cl.stop().await.unwrap();
}

/// Opening and reading 96 files: with prefetch (N = 32) most opens are
/// answered from the cache; with N = 0 every one asks the MDS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_saves_metadata_requests() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 1).await;
    let w = client(&cl, |_| {}).await;
    let d = w.mkdir(&root(), 0, "tree", 0o755).await.unwrap().attr.ino;
    for i in 0..96 {
        let (_, fh) = w
            .create(&root(), d, &format!("f{i:03}"), 0o644, true)
            .await
            .unwrap();
        w.write(fh, 0, format!("file {i}").as_bytes())
            .await
            .unwrap();
        w.release(fh).await.unwrap();
    }
    let mut requests = Vec::new();
    for n in [32u32, 0] {
        let r = client(&cl, |c| {
            c.prefetch = n;
            c.attr_timeout = Duration::from_secs(60);
        })
        .await;
        let s0 = r.stats();
        for i in 0..96 {
            let e = r.lookup(&root(), d, &format!("f{i:03}")).await.unwrap();
            let fh = r.open(&root(), e.attr.ino, false).await.unwrap();
            let got = r.read(fh, 0, 100).await.unwrap();
            assert_eq!(&got[..], format!("file {i}").as_bytes());
            r.release(fh).await.unwrap();
        }
        let s = r.stats();
        let used = s.mds_non_mandatory - s0.mds_non_mandatory;
        println!(
            "prefetch N={n}: {used} non-mandatory MDS requests, {} cache hits ({} first uses of prefetched entries)",
            s.cache_hits, s.prefetch_hits
        );
        requests.push((used, s.prefetch_hits));
    }
    let (with, hits) = requests[0];
    let (without, _) = requests[1];
    assert!(hits > 0, "prefetched entries were used");
    // A lookup's answer carries the file's own read capability, so the
    // open after it is a cache hit either way; N=0 pays one per file.
    assert!(without >= 96, "N=0 asks once per file ({without})");
    assert!(
        with * 4 <= without,
        "N=32 needs far fewer requests ({with} vs {without})"
    );
    cl.stop().await.unwrap();
}

/// An OSD holding a stripe goes down during reads: the read fails with
/// EIO naming the OSD (never wrong data); after it restarts (at a new
/// address) the same client reads the data back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osd_down_gives_eio_and_data_returns_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 3).await;
    let c = client(&cl, |c| c.readahead_max = 0).await;
    let (e, fh) = c.create(&root(), 0, "striped", 0o644, true).await.unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    c.write(fh, 0, &data).await.unwrap();
    c.release(fh).await.unwrap();
    let fh = c.open(&root(), e.attr.ino, false).await.unwrap();
    assert!(read_all(&c, fh, data.len() as u64).await == data);
    cl.stop_osd(1).await.unwrap();
    let mut failed = 0;
    for off in (0..data.len() as u64).step_by(65536) {
        match c.read(fh, off, 65536).await {
            Ok(d) => assert_eq!(
                &d[..],
                &data[off as usize..off as usize + d.len()],
                "never wrong data"
            ),
            Err(e) => {
                assert_eq!(e.raw(), 5, "EIO: {e}");
                assert!(e.message.contains("OSD 1"), "the error names the OSD: {e}");
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "stripes on the stopped OSD fail");
    cl.start_osd(1).await.unwrap();
    assert!(
        read_all(&c, fh, data.len() as u64).await == data,
        "data back after restart"
    );
    c.release(fh).await.unwrap();
    cl.stop().await.unwrap();
}

/// Data the write-back timer could not write is reported by the next
/// fsync (and close): the timer runs between a program's writes and its
/// fsync, and an error it only logged let that fsync succeed with the
/// bytes nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_timed_write_back_fails_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let mut cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 3).await;
    let c = client(&cl, |c| {
        c.writeback_delay = std::time::Duration::from_millis(50);
    })
    .await;
    let (_, fh) = c.create(&root(), 0, "f", 0o644, true).await.unwrap();
    cl.stop_osd(1).await.unwrap();
    let data = vec![7u8; 3 * 65536];
    c.write(fh, 0, &data).await.unwrap();
    // The timer's pass finds the data due and fails on the stopped OSD.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let e = c.fsync(fh).await.unwrap_err();
    assert_eq!(e.raw(), 5, "EIO: {e}");
    cl.start_osd(1).await.unwrap();
    let _ = c.release(fh).await;
    cl.stop().await.unwrap();
}

/// A setattr that shrinks a file and also asks for a change the caller may
/// not make (chmod by a non-owner with write permission) is refused before
/// any object is cut: the data and the size are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_setattr_with_a_shrink_cuts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 4096, 3).await;
    let c = client(&cl, |c| c.readahead_max = 0).await;
    let owner = Creds {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    };
    let other = Creds {
        uid: 2000,
        gid: 2000,
        groups: Vec::new(),
    };
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (e, fh) = c.create(&root(), 0, "shared", 0o666, true).await.unwrap();
    c.write(fh, 0, &data).await.unwrap();
    c.release(fh).await.unwrap();
    let ino = e.attr.ino;
    c.setattr(
        &root(),
        ino,
        SetAttr {
            uid: Some(owner.uid),
            gid: Some(owner.gid),
            ..SetAttr::default()
        },
    )
    .await
    .unwrap();
    let refused = c
        .setattr(
            &other,
            ino,
            SetAttr {
                size: Some(10),
                mode: Some(0o600),
                ..SetAttr::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refused.errno, proto::mds::Errno::Perm, "{refused}");
    // A second client, so nothing is answered from this one's buffers.
    let d = client(&cl, |c| {
        c.readahead_max = 0;
        c.attr_timeout = Duration::ZERO;
    })
    .await;
    assert_eq!(
        d.getattr(&root(), ino).await.unwrap().size,
        data.len() as u64
    );
    let fh = d.open(&root(), ino, false).await.unwrap();
    assert!(
        read_all(&d, fh, data.len() as u64).await == data,
        "the data is intact"
    );
    cl.stop().await.unwrap();
}

/// Names known absent: after two misses in a directory the client lists it
/// and answers later misses itself (no MDS request), its own creates and
/// removes keep that list right at once, another client's new name shows
/// once the window has passed, and an exclusive create still asks the MDS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_known_absent_save_lookups_and_expire_with_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster(&dir, PolicyKind::ChildClosest, 65536, 1).await;
    let window = Duration::from_millis(400);
    let a = client(&c, |cfg| cfg.attr_timeout = window).await;
    let b = client(&c, |_| {}).await;
    let d = a
        .mkdir(&root(), a.root(), "d", 0o755)
        .await
        .unwrap()
        .attr
        .ino;
    let enoent = |r: client::Result<proto::mds::Entry>| r.unwrap_err().errno;
    for n in ["m1", "m2"] {
        assert_eq!(
            enoent(a.lookup(&root(), d, n).await),
            proto::mds::Errno::NoEnt
        );
    }
    let asked = {
        let s = a.stats();
        s.mds_mandatory + s.mds_non_mandatory
    };
    for i in 0..50 {
        let n = format!("new{i}");
        assert_eq!(
            enoent(a.lookup(&root(), d, &n).await),
            proto::mds::Errno::NoEnt
        );
        touch(&a, d, &n).await;
        a.lookup(&root(), d, &n)
            .await
            .expect("created here: found at once");
        a.unlink(&root(), d, &n).await.unwrap();
        assert_eq!(
            enoent(a.lookup(&root(), d, &n).await),
            proto::mds::Errno::NoEnt
        );
    }
    let s = a.stats();
    assert_eq!(
        s.mds_mandatory + s.mds_non_mandatory - asked,
        100,
        "one create and one unlink each; no lookup reached the MDS"
    );
    // Another client's name: unseen within the window, found after it.
    let (_, fh) = b.create(&root(), d, "theirs", 0o644, true).await.unwrap();
    b.release(fh).await.unwrap();
    let e = a
        .create(&root(), d, "theirs", 0o644, true)
        .await
        .unwrap_err();
    assert_eq!(
        e.errno,
        proto::mds::Errno::Exist,
        "an exclusive create asks the MDS"
    );
    tokio::time::sleep(window).await;
    a.lookup(&root(), d, "theirs")
        .await
        .expect("found once the list is old");
    c.stop().await.unwrap();
}

async fn copy_all(c: &Client, (i, off_in): (u64, u64), (o, off_out): (u64, u64), len: u64) {
    let mut done = 0;
    while done < len {
        let n = c
            .copy_range(i, off_in + done, o, off_out + done, len - done)
            .await
            .unwrap();
        assert!(n > 0, "copy_range stopped at {done} of {len}");
        done += n;
    }
}

/// copy_file_range: exact bytes in every case (striped files, offsets that
/// do not line up, buffered bytes on either side, a hole in the source);
/// on the OSDs when every copy of a destination object shares an OSD with
/// the source's (three replicas on three OSDs), through the client
/// otherwise (one replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_range_copies_exactly_and_on_the_osds_where_copies_meet() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 3).await;
    let a = client(&cl, |_| {}).await;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(20261123);
    for replicas in [3u8, 1] {
        let (d, _) = a
            .mkdir(&root(), 0, &format!("r{replicas}"), 0o755)
            .await
            .map(|e| (e.attr.ino, ()))
            .unwrap();
        let spec = LayoutSpec {
            stripe_unit: 65536,
            stripe_count: 3,
            object_size: 0,
            replicas,
            min_replicas: 1,
        };
        a.set_layout(&root(), d, spec).await.unwrap();
        let before = a.stats().bytes_copied_on_osds;
        let len = 1_500_000usize;
        let src: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let (se, sfh) = a.create(&root(), d, "src", 0o644, true).await.unwrap();
        // Buffered, not yet on the OSDs: the copy must see it.
        a.write(sfh, 0, &src).await.unwrap();
        let (_, dfh) = a.create(&root(), d, "dst", 0o644, true).await.unwrap();
        // Buffered bytes of the destination, inside and outside the range.
        a.write(dfh, 0, &[7u8; 300_000]).await.unwrap();
        copy_all(&a, (sfh, 1000), (dfh, 5000), 1_200_000).await;
        let mut want = vec![7u8; 300_000];
        want.resize(5000 + 1_200_000, 0);
        want[5000..].copy_from_slice(&src[1000..1_201_000]);
        assert_eq!(read_all(&a, dfh, 2_000_000).await, want, "R = {replicas}");
        let on_osds = a.stats().bytes_copied_on_osds - before;
        if replicas == 3 {
            assert_eq!(on_osds, 1_200_000, "every copy shares every OSD");
        }
        // Past the source's end: short; at its end: 0.
        let n = a
            .copy_range(sfh, len as u64 - 10, dfh, 0, 100)
            .await
            .unwrap();
        assert_eq!(n, 10);
        assert_eq!(a.copy_range(sfh, len as u64, dfh, 0, 100).await.unwrap(), 0);
        // Within one file: overlapping is EINVAL, apart is a copy.
        let e = a.copy_range(sfh, 0, sfh, 100, 1000).await.unwrap_err();
        assert!(e.is(client::error::Errno::Inval), "{e}");
        copy_all(&a, (sfh, 0), (sfh, 2_000_000), 70_000).await;
        let got = a.read(sfh, 2_000_000, 70_000).await.unwrap();
        assert_eq!(&got[..], &src[..70_000]);
        // A source with a hole (never written) copies zeros.
        let set = SetAttr {
            size: Some(4_000_000),
            ..SetAttr::default()
        };
        a.setattr(&root(), se.attr.ino, set).await.unwrap();
        copy_all(&a, (sfh, 3_000_000), (dfh, 0), 500_000).await;
        let got = read_all(&a, dfh, 500_000).await;
        let nz = got[..500_000].iter().position(|&b| b != 0);
        assert_eq!(
            nz,
            None,
            "R = {replicas}: the hole copied as zeros ({} bytes)",
            got.len()
        );
        // Another client sees the copy after close.
        a.release(dfh).await.unwrap();
        let b = client(&cl, |_| {}).await;
        let e = b.lookup(&root(), d, "dst").await.unwrap();
        assert_eq!(e.attr.size, 1_205_000);
        a.release(sfh).await.unwrap();
    }
}

/// fallocate mode 0 and KEEP_SIZE reserve room on the OSDs: the space the
/// OSDs report falls by the range times the replicas, the file reads as
/// zeros, and a punch gives the room back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallocate_reserves_room_on_the_osds() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 2).await;
    let a = client(&cl, |_| {}).await;
    // The raw space the OSDs report (statfs gives it through the copies).
    let raw_used = |a: &client::Client| {
        let a = a.clone();
        async move {
            let st = a.status().await.unwrap();
            st.osds.iter().filter(|o| o.up).map(|o| o.used).sum::<u64>()
        }
    };
    let used = || raw_used(&a);
    let base = used().await;
    let wait_for = |pred: Box<dyn Fn(u64) -> bool + Send>| {
        let a = &a;
        async move {
            for _ in 0..100 {
                let u = raw_used(a).await;
                if pred(u) {
                    return u;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let u = raw_used(a).await;
            panic!("the OSDs never reported the expected space: {u:?} (base {base})");
        }
    };
    let (e, fh) = a.create(&root(), 0, "big", 0o644, true).await.unwrap();
    const M: u64 = 1 << 20;
    a.fallocate(&root(), fh, 0, 32 * M, 0).await.unwrap();
    let replicas = u64::from(LayoutSpec::default().replicas.max(1));
    let after = wait_for(Box::new(move |u| u >= base + 32 * M * replicas)).await;
    assert!(after < base + 34 * M * replicas, "about the range reserved");
    assert_eq!(a.getattr(&root(), e.attr.ino).await.unwrap().size, 32 * M);
    assert!(read_all(&a, fh, 32 * M).await.iter().all(|&b| b == 0));
    // KEEP_SIZE past the end: the length stays.
    a.fallocate(&root(), fh, 32 * M, 8 * M, 1).await.unwrap();
    assert_eq!(a.getattr(&root(), e.attr.ino).await.unwrap().size, 32 * M);
    wait_for(Box::new(move |u| u >= after + 8 * M * replicas)).await;
    // A write into the room; a punch hands the room inside the size back.
    a.write(fh, 5 * M, &[1u8; 4096]).await.unwrap();
    a.fsync(fh).await.unwrap();
    a.fallocate(&root(), fh, 0, 32 * M, 3).await.unwrap();
    wait_for(Box::new(move |u| u < base + 12 * M * replicas)).await;
    a.release(fh).await.unwrap();
}

/// Walks `dir` depth first as `find` does (a directory's listing, then
/// its subdirectories in name order), statting every file; returns the
/// files seen.
async fn walk(c: &Client, dir: u64) -> usize {
    let mut files = 0;
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let list = c.readdir(&root(), d).await.unwrap();
        let mut subdirs = Vec::new();
        for e in list {
            if e.kind == proto::mds::FileKind::Dir {
                subdirs.push(e.ino);
            } else {
                c.getattr(&root(), e.ino).await.unwrap();
                files += 1;
            }
        }
        subdirs.reverse();
        stack.extend(subdirs);
    }
    files
}

/// A tree walk (listings and stats of every file, after the cache window
/// has passed for what the walk lists first) costs a small fraction of the
/// MDS requests with prefetch: directory reads carry the listings the
/// walk reads next, and a stat carries its neighbours. A listing is used
/// once and dropped when this client changes its directory; permissions
/// are those of the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_walk_reads_prefetched_listings() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 65536, 1).await;
    let w = client(&cl, |_| {}).await;
    let top = w.mkdir(&root(), 0, "walk", 0o755).await.unwrap().attr.ino;
    // 4 × 4 × 3 directories, 5 files in each leaf.
    let mkdir = |parent: u64, name: String| {
        let w = &w;
        async move {
            w.mkdir(&root(), parent, &name, 0o755)
                .await
                .unwrap()
                .attr
                .ino
        }
    };
    let mut leaves = 0;
    for a in 0..4 {
        let da = mkdir(top, format!("a{a}")).await;
        for b in 0..4 {
            let db = mkdir(da, format!("b{b}")).await;
            for k in 0..3 {
                let dk = mkdir(db, format!("c{k}")).await;
                for f in 0..5 {
                    let (_, fh) = w
                        .create(&root(), dk, &format!("f{f}"), 0o644, true)
                        .await
                        .unwrap();
                    w.release(fh).await.unwrap();
                }
                leaves += 1;
            }
        }
    }
    let dirs = 1 + 4 + 16 + leaves;
    let mut used = Vec::new();
    for n in [32u32, 0] {
        let r = client(&cl, |c| {
            c.prefetch = n;
            c.attr_timeout = Duration::from_secs(60);
        })
        .await;
        let s0 = r.stats();
        assert_eq!(walk(&r, top).await, leaves * 5);
        let s = r.stats();
        used.push(s.mds_non_mandatory - s0.mds_non_mandatory);
    }
    let (with, without) = (used[0], used[1]);
    println!("tree walk of {dirs} directories: {with} MDS requests with N=32, {without} with N=0");
    assert!(
        without >= dirs as u64,
        "N=0 reads every directory ({without})"
    );
    assert!(
        with * 10 <= without,
        "N=32: at most a tenth of the requests ({with} vs {without}, {dirs} directories)"
    );
    // Used once; dropped by a change made here.
    let r = client(&cl, |c| c.attr_timeout = Duration::from_secs(60)).await;
    let list = r.readdir(&root(), top).await.unwrap();
    let a0 = list.iter().find(|e| e.name == "a0").unwrap().ino;
    let (_, fh) = r.create(&root(), a0, "new", 0o644, true).await.unwrap();
    r.release(fh).await.unwrap();
    let names: Vec<_> = r
        .readdir(&root(), a0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"new".to_string()), "{names:?}");
    // A directory its caller may not list is not prefetched for it.
    let closed = w
        .mkdir(&root(), top, "zclosed", 0o700)
        .await
        .unwrap()
        .attr
        .ino;
    let (_, fh) = w
        .create(&root(), closed, "secret", 0o644, true)
        .await
        .unwrap();
    w.release(fh).await.unwrap();
    let user = Creds {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    };
    let u = client(&cl, |c| c.attr_timeout = Duration::from_secs(60)).await;
    u.readdir(&user, top).await.unwrap();
    let e = u.readdir(&user, closed).await.unwrap_err();
    assert!(e.is(client::error::Errno::Access), "{e}");
    cl.stop().await.unwrap();
}

/// A directory this client just made is filled under its lease from the
/// first file (an untar or a build makes a directory and fills it at once):
/// the first create asks for the lease instead of going to the MDS alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_made_here_is_filled_under_its_lease_from_the_first_file() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 64 << 10, 3).await;
    let a = client(&cl, |c| c.early_answers = true).await;
    let b = client(&cl, |c| c.attr_timeout = Duration::ZERO).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let before = a.stats();
    touch(&a, d, "first").await;
    let after = a.stats();
    assert_eq!(after.leases_granted, before.leases_granted + 1, "{after:?}");
    assert_eq!(after.lease_answered, before.lease_answered + 1, "{after:?}");
    // A directory made elsewhere still waits for a second change.
    let e = b.mkdir(&root(), 0, "e", 0o755).await.unwrap().attr.ino;
    touch(&a, e, "one").await;
    assert_eq!(
        a.stats().leases_granted,
        after.leases_granted,
        "{:?}",
        a.stats()
    );
    // What was answered here reaches the MDS.
    a.sync_namespace().await.unwrap();
    assert!(b.lookup(&root(), d, "first").await.is_ok());
    cl.stop().await.unwrap();
}

/// A directory's lease keeps the directory's attributes for the holder's
/// own answers; changes the holder makes through the MDS meanwhile (a
/// subdirectory made, moved out, made and removed) move its link count,
/// and the holder's view is the MDS's once everything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_follows_subdirectories_made_through_the_mds() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 64 << 10, 3).await;
    let a = client(&cl, |c| c.early_answers = true).await;
    let b = client(&cl, |c| c.attr_timeout = Duration::ZERO).await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let mut n = 0;
    let mut create = async |a: &Client| {
        n += 1;
        touch(a, d, &format!("f{n}")).await;
    };
    for _ in 0..6 {
        create(&a).await;
    }
    assert!(a.stats().leases_granted >= 1, "{:?}", a.stats());
    let answered = a.stats().lease_answered;
    assert!(answered >= 1, "{:?}", a.stats());

    a.mkdir(&root(), d, "sub", 0o755).await.unwrap();
    create(&a).await;
    assert!(a.stats().lease_answered > answered, "{:?}", a.stats());
    assert_eq!(a.getattr(&root(), d).await.unwrap().nlink, 3);

    // Moved out: the link count follows without the MDS's attributes.
    a.rename(&root(), d, "sub", 0, "moved", false)
        .await
        .unwrap();
    create(&a).await;
    assert_eq!(a.getattr(&root(), d).await.unwrap().nlink, 2);

    a.mkdir(&root(), d, "sub2", 0o755).await.unwrap();
    create(&a).await;
    assert_eq!(a.getattr(&root(), d).await.unwrap().nlink, 3);
    a.rmdir(&root(), d, "sub2").await.unwrap();
    create(&a).await;
    assert_eq!(a.getattr(&root(), d).await.unwrap().nlink, 2);

    // The creates after each change were answered under the lease (a
    // lease lost would leave the link counts above right but untested).
    assert!(a.stats().lease_answered >= answered + 4, "{:?}", a.stats());

    // Everything sent: the MDS's view (through a second client) and the
    // holder's agree.
    a.sync_namespace().await.unwrap();
    let (mine, mds) = (
        a.getattr(&root(), d).await.unwrap(),
        b.getattr(&root(), d).await.unwrap(),
    );
    assert_eq!((mine.nlink, mine.size), (mds.nlink, mds.size));
    assert_eq!(mds.nlink, 2);
    cl.stop().await.unwrap();
}

/// Under a held lease, a lookup of a name the lease lists whose cached
/// entry has expired goes to the MDS without waiting for the queue; what
/// the MDS answers is cached only where the lease vouches for it, so a
/// neighbour removed under the lease and not yet sent is never cached as
/// present (which would show once the lease is back and the cache answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_vouches_for_what_a_lookup_brings_back() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 64 << 10, 3).await;
    let window = Duration::from_secs(2);
    let a = client(&cl, |c| {
        c.early_answers = true;
        c.attr_timeout = window;
    })
    .await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    for i in 0..200 {
        touch(&a, d, &format!("f{i}")).await;
    }
    a.sync_namespace().await.unwrap();
    // Every cached entry expires, and the lease goes back idle.
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let granted = a.stats().leases_granted;
    // Removals in order, each after a lookup (as the kernel's, once its
    // entries expired): the lease comes back after two, and from then on
    // a lookup's neighbours may include names the queue has removed.
    for i in 0..150 {
        let name = format!("f{i}");
        assert_eq!(a.lookup(&root(), d, &name).await.unwrap().name, name);
        a.unlink(&root(), d, &name).await.unwrap();
    }
    let st = a.stats();
    assert!(st.leases_granted > granted, "{st:?}");
    assert!(st.lease_lookups >= 1, "{st:?}");
    // Sent, and the lease back (idle): the cache answers now, within its
    // window, and must not hold a removed name.
    a.sync_namespace().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..200 {
        let r = a.lookup(&root(), d, &format!("f{i}")).await;
        assert_eq!(r.is_ok(), i >= 150, "f{i}: {r:?}");
    }
    cl.stop().await.unwrap();
}

/// Under a lease, a lookup of a subdirectory's name is one request: the
/// lease lists it as a directory, whose answer a lookup that skips the
/// lease's queue could not take, so it is not tried first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subdirectory_looked_up_under_a_lease_costs_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 64 << 10, 3).await;
    let window = Duration::from_millis(300);
    let a = client(&cl, |c| {
        c.early_answers = true;
        c.attr_timeout = window;
    })
    .await;
    let d = a.mkdir(&root(), 0, "d", 0o755).await.unwrap().attr.ino;
    let sub = a.mkdir(&root(), d, "sub", 0o755).await.unwrap().attr.ino;
    // The cached entry of "sub" expires; two creates bring the lease.
    tokio::time::sleep(window + Duration::from_millis(200)).await;
    let granted = a.stats().leases_granted;
    touch(&a, d, "f0").await;
    touch(&a, d, "f1").await;
    let before = a.stats();
    assert!(before.leases_granted > granted, "{before:?}");
    assert_eq!(a.lookup(&root(), d, "sub").await.unwrap().attr.ino, sub);
    let after = a.stats();
    assert_eq!(
        after.mds_non_mandatory - before.mds_non_mandatory,
        1,
        "one lookup: {before:?} → {after:?}"
    );
    cl.stop().await.unwrap();
}

/// A file rewritten by another client while this one has its length
/// cached (a read-only open within the cache window asks nobody): a read
/// at the end finds the objects disagree, asks for the length and takes
/// it — the new bytes are never cut to the old length, nor padded with
/// zeros to it — and says whether the file grew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_at_the_end_takes_another_clients_new_length() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster(&dir, PolicyKind::ChildClosest, 64 << 10, 3).await;
    let a = client(&cl, |c| c.attr_timeout = Duration::from_secs(30)).await;
    let b = client(&cl, |_| {}).await;
    let long: Vec<u8> = (0..300u32).map(|i| b'a' + (i % 26) as u8).collect();
    for (name, first, then, grows) in [
        ("grows", &b"short\n"[..], &long[..], true),
        ("shrinks", &long[..], &b"tiny\n"[..], false),
    ] {
        let (e, fh) = a.create(&root(), 0, name, 0o644, true).await.unwrap();
        a.write(fh, 0, first).await.unwrap();
        a.release(fh).await.unwrap();
        let ino = e.attr.ino;
        let fh = a.open(&root(), ino, false).await.unwrap();
        assert_eq!(read_all(&a, fh, 4096).await, first, "{name}: first version");
        a.release(fh).await.unwrap();

        let fh = b.open(&root(), ino, true).await.unwrap();
        b.setattr_via(
            &root(),
            ino,
            SetAttr {
                size: Some(0),
                ..Default::default()
            },
            Some(fh),
        )
        .await
        .unwrap();
        b.write(fh, 0, then).await.unwrap();
        b.release(fh).await.unwrap();

        let fh = a.open(&root(), ino, false).await.unwrap();
        let (data, grew) = a.read_checked(fh, 0, 4096).await.unwrap();
        assert_eq!(data, then, "{name}: read after the other client's rewrite");
        assert_eq!(grew, grows, "{name}: whether it grew");
        let (again, grew) = a.read_checked(fh, 0, 4096).await.unwrap();
        assert_eq!((again, grew), (data, false), "{name}: read again");
        a.release(fh).await.unwrap();
        let st = a.getattr(&root(), ino).await.unwrap();
        assert_eq!(st.size, then.len() as u64, "{name}: stat after the read");
    }
    // Rewritten twice within the window, growing then shrinking; and a
    // file whose end falls on a stripe unit's boundary (64 KiB here),
    // grown by a unit: each read whole.
    let unit = vec![b'u'; 128 << 10];
    let more: Vec<u8> = (0..(192u32 << 10)).map(|i| (i % 251) as u8).collect();
    let (big, small) = (vec![b'B'; 3 << 20], vec![b's'; (1 << 20) + 100]);
    for (name, versions) in [
        ("twice", vec![&b"a\n"[..], &long[..], &b"new\n"[..]]),
        ("on a boundary", vec![&unit[..], &more[..]]),
        ("a large file shrunk", vec![&big[..], &small[..]]),
    ] {
        let (e, fh) = a.create(&root(), 0, name, 0o644, true).await.unwrap();
        a.write(fh, 0, versions[0]).await.unwrap();
        a.release(fh).await.unwrap();
        let ino = e.attr.ino;
        for (k, v) in versions.iter().enumerate() {
            if k > 0 {
                let fh = b.open(&root(), ino, true).await.unwrap();
                let cut = SetAttr {
                    size: Some(0),
                    ..Default::default()
                };
                b.setattr_via(&root(), ino, cut, Some(fh)).await.unwrap();
                b.write(fh, 0, v).await.unwrap();
                b.release(fh).await.unwrap();
            }
            let fh = a.open(&root(), ino, false).await.unwrap();
            let mut got = Vec::new();
            loop {
                let (d, _) = a
                    .read_checked(fh, got.len() as u64, 32 << 10)
                    .await
                    .unwrap();
                if d.is_empty() {
                    break;
                }
                got.extend_from_slice(&d);
            }
            a.release(fh).await.unwrap();
            assert!(got == *v, "{name}: version {k} read as {} bytes", got.len());
        }
    }
    cl.stop().await.unwrap();
}
