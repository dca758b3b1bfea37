//! The object model end to end on an in-memory device, under both
//! allocation policies: data paths, attributes, atomics, listing, reopen.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::sync::Arc;

use store::device::{Device, MemDevice};
use store::{
    DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Policy, Store, StoreError, format,
};

fn fresh(policy: Policy) -> (Arc<MemDevice>, Store) {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let opts = FormatOptions {
        policy,
        large_block: 64 * 1024,
        ..FormatOptions::default()
    };
    format(dev.clone(), &opts).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    (dev, s)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

const POLICIES: [Policy; 2] = [Policy::Extent, Policy::Region];

#[test]
fn write_read_sparse_append_truncate() {
    for policy in POLICIES {
        let (_d, s) = fresh(policy);
        let id = s.create(P, None).unwrap();
        assert_eq!(id, 0x10000);
        // Tiny: inline.
        s.write(P, id, 0, b"hello").unwrap();
        assert!(s.stat(P, id).unwrap().inline);
        assert_eq!(s.read(P, id, 0, 100).unwrap(), b"hello");
        // Sparse growth out of inline: gap reads as zeros.
        s.write(P, id, 10_000, b"tail").unwrap();
        let all = s.read(P, id, 0, 20_000).unwrap();
        assert_eq!(all.len(), 10_004);
        assert_eq!(&all[..5], b"hello");
        assert!(all[5..10_000].iter().all(|&b| b == 0));
        assert_eq!(&all[10_000..], b"tail");
        // Past-end reads are short, never garbage.
        assert_eq!(s.read(P, id, 10_002, 100).unwrap(), b"il");
        assert!(s.read(P, id, 50_000, 10).unwrap().is_empty());
        // A far sparse write to an inline object allocates only what it writes.
        let far = s.create(P, None).unwrap();
        s.write(P, far, 0, b"head").unwrap();
        s.write(P, far, 1 << 40, b"far").unwrap();
        assert_eq!(s.stat(P, far).unwrap().size, (1 << 40) + 3);
        assert_eq!(s.stat(P, far).unwrap().used_bytes, 2 * 4096);
        assert_eq!(s.read(P, far, 0, 8).unwrap(), b"head\0\0\0\0");
        assert_eq!(s.read(P, far, 1 << 40, 8).unwrap(), b"far");
        s.remove(P, far).unwrap();
        // A zero-length write changes nothing, even past the end (POSIX).
        s.write(P, id, 1 << 20, b"").unwrap();
        assert_eq!(s.stat(P, id).unwrap().size, 10_004);
        // Append returns the offset used.
        assert_eq!(s.append(P, id, b"more").unwrap(), 10_004);
        // Large object crossing unit boundaries, then a partial overwrite.
        let big = pattern(300_000, 1);
        let id2 = s.create(P, Some(0x20000)).unwrap();
        s.write(P, id2, 0, &big).unwrap();
        let patch = pattern(5000, 9);
        s.write(P, id2, 65_000, &patch).unwrap();
        let mut want = big.clone();
        want[65_000..70_000].copy_from_slice(&patch);
        assert_eq!(s.read(P, id2, 0, 400_000).unwrap(), want);
        if policy == Policy::Region {
            assert!(
                s.stat(P, id2).unwrap().large,
                "300 KB object should use large blocks"
            );
        }
        // Truncate down mid-block, then grow: the cut-off bytes read as zeros.
        s.truncate(P, id2, 100_001).unwrap();
        s.truncate(P, id2, 200_000).unwrap();
        let r = s.read(P, id2, 0, 200_000).unwrap();
        assert_eq!(&r[..100_001], &want[..100_001]);
        assert!(
            r[100_001..].iter().all(|&b| b == 0),
            "{policy:?}: old bytes resurfaced"
        );
        s.truncate(P, id2, 0).unwrap();
        assert_eq!(s.stat(P, id2).unwrap().used_bytes, 0);
    }
}

#[test]
fn create_and_write_is_one_commit() {
    for policy in POLICIES {
        let (_d, s) = fresh(policy);
        let before = s.commit_stats();
        let data = pattern(100_000, 5);
        s.create_and_write(P, 0x30000, &data).unwrap();
        let after = s.commit_stats();
        assert_eq!(after.records - before.records, 2, "create + data records");
        assert_eq!(after.batches - before.batches, 1, "one batch, one flush");
        assert_eq!(s.read(P, 0x30000, 0, 1 << 20).unwrap(), data);
        assert!(matches!(
            s.create_and_write(P, 0x30000, b"x"),
            Err(StoreError::ObjectExists { .. })
        ));
        s.create_and_write(P, 0x30001, b"tiny").unwrap();
        assert!(s.stat(P, 0x30001).unwrap().inline);
        assert!(matches!(
            s.create_and_write(0x55555, 0x30002, b"x"),
            Err(StoreError::NoPartition(_))
        ));
    }
}

#[test]
fn small_object_grows_into_a_large_block() {
    let (_d, s) = fresh(Policy::Region);
    let id = s.create(P, None).unwrap();
    let a = pattern(20_000, 3);
    s.write(P, id, 0, &a).unwrap();
    assert!(!s.stat(P, id).unwrap().large);
    let b = pattern(40_000, 4);
    s.append(P, id, &b).unwrap();
    let st = s.stat(P, id).unwrap();
    assert!(
        st.large,
        "60 KB of a 64 KB large block should move to a large block"
    );
    assert_eq!(st.extents, 1);
    let mut want = a;
    want.extend_from_slice(&b);
    assert_eq!(s.read(P, id, 0, 1 << 20).unwrap(), want);
}

#[test]
fn a_small_object_stays_in_one_region_as_it_grows() {
    let dev = Arc::new(MemDevice::new(16 << 20));
    let opts = FormatOptions {
        policy: Policy::Region,
        large_block: 64 * 1024,
        region_size: Some(1 << 20),
        ..FormatOptions::default()
    };
    format(dev.clone(), &opts).unwrap();
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    let region_of = |b: u64| b / 256;
    // One small object, then neighbours that fill its region.
    s.create_and_write(P, 0x10000, &pattern(8192, 1)).unwrap();
    for i in 1..40u64 {
        s.create_and_write(P, 0x10000 + i, &pattern(40_000, i as u8))
            .unwrap();
    }
    let first = s.layout(P, 0x10000).unwrap()[0].1;
    // Grow it (still small: below 3/4 of a large block) past what its region has left.
    let mut want = pattern(8192, 1);
    for k in 0..4u8 {
        let more = pattern(9000, 50 + k);
        s.append(P, 0x10000, &more).unwrap();
        want.extend_from_slice(&more);
        let layout = s.layout(P, 0x10000).unwrap();
        let r = region_of(layout[0].1);
        assert!(
            layout
                .iter()
                .all(|&(_, p, n)| region_of(p) == r && region_of(p + n - 1) == r),
            "{layout:?}"
        );
    }
    assert_ne!(
        region_of(s.layout(P, 0x10000).unwrap()[0].1),
        region_of(first),
        "it had to move"
    );
    assert_eq!(s.read(P, 0x10000, 0, 1 << 20).unwrap(), want);
    let r = store::fsck::fsck(s.device().clone(), |_, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn attributes_cas_and_fetch_add() {
    let (_d, s) = fresh(Policy::Extent);
    let id = s.create(P, None).unwrap();
    s.set_attr(P, id, 0x10, 1, b"v1").unwrap();
    assert_eq!(s.get_attr(P, id, 0x10, 1).unwrap().unwrap(), b"v1");
    assert!(matches!(
        s.set_attr(P, id, 0x1, 0x82, b"x"),
        Err(StoreError::ReadOnlyAttribute { .. })
    ));
    assert!(matches!(
        s.set_attr(P, id, 0x10, 2, &vec![0; 65_537]),
        Err(StoreError::Invalid { .. })
    ));
    s.set_attr(P, id, 0x10, 2, &vec![1; 65_536]).unwrap();
    // Standard attributes.
    s.write(P, id, 0, &[1; 8192]).unwrap();
    let len = s.get_attr(P, id, 0x1, 0x82).unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(len.try_into().unwrap()), 8192);
    // CAS: empty compare inserts only if absent.
    let o = s.cas_attr(P, id, 0x20, 1, b"", b"a").unwrap();
    assert!(o.swapped && o.old.is_empty());
    let o = s.cas_attr(P, id, 0x20, 1, b"", b"b").unwrap();
    assert!(!o.swapped && o.old == b"a");
    // Empty swap removes only if the value still holds.
    let o = s.cas_attr(P, id, 0x20, 1, b"zzz", b"").unwrap();
    assert!(!o.swapped);
    let o = s.cas_attr(P, id, 0x20, 1, b"a", b"").unwrap();
    assert!(o.swapped && o.old == b"a");
    assert_eq!(s.get_attr(P, id, 0x20, 1).unwrap(), None);
    // Fetch-and-add.
    assert_eq!(s.fetch_add(P, id, 0x30, 1, 5).unwrap(), 0);
    assert_eq!(s.fetch_add(P, id, 0x30, 1, 2).unwrap(), 5);
    assert!(
        s.fetch_add(P, id, 0x10, 1, 1).is_err(),
        "not an 8-byte counter"
    );
    let names: Vec<_> = s
        .list_attrs(P, id)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(names.contains(&(0x3, 0x1)) && names.contains(&(0x30, 1)));
}

#[test]
fn concurrent_fetch_add_and_cas_are_atomic() {
    let (_d, s) = fresh(Policy::Extent);
    let s = Arc::new(s);
    let id = s.create(P, None).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut wins = 0;
                for i in 0..50 {
                    s.fetch_add(P, id, 0x10, 1, 1).unwrap();
                    let name = format!("n{i}");
                    let o = s.cas_attr(P, id, 0x11, i, b"", name.as_bytes()).unwrap();
                    if o.swapped {
                        wins += 1;
                    }
                    let _ = t;
                }
                wins
            })
        })
        .collect();
    let wins: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wins, 50, "exactly one insert wins per name");
    let v = s.get_attr(P, id, 0x10, 1).unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(v.try_into().unwrap()), 400);
    // Group commit: far fewer batches than commits.
    let st = s.commit_stats();
    assert!(st.records >= 451, "{st:?}");
}

#[test]
fn listing_partitions_and_errors() {
    let (_d, s) = fresh(Policy::Extent);
    for i in 0..25u64 {
        s.create(P, Some(0x10000 + i * 3)).unwrap();
    }
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = s.list(P, 0x10000, u64::MAX, after, 10).unwrap();
        all.extend(page.ids);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(all, (0..25u64).map(|i| 0x10000 + i * 3).collect::<Vec<_>>());
    let range = s.list(P, 0x10003, 0x10009, None, 100).unwrap();
    assert_eq!(range.ids, vec![0x10003, 0x10006, 0x10009]);
    assert!(matches!(
        s.create(P, Some(0x10000)),
        Err(StoreError::ObjectExists { .. })
    ));
    assert!(matches!(
        s.create(P, Some(5)),
        Err(StoreError::Invalid {
            field: "object id",
            ..
        })
    ));
    assert!(matches!(
        s.create(0x99999, None),
        Err(StoreError::NoPartition(_))
    ));
    assert!(matches!(
        s.read(P, 0x77777, 0, 1),
        Err(StoreError::NoObject { .. })
    ));
    assert!(matches!(
        s.write(P, 0x10000, u64::MAX - 2, b"abc"),
        Err(StoreError::Invalid {
            field: "offset",
            ..
        })
    ));
    s.create_partition(0x20000).unwrap();
    assert!(matches!(
        s.create_partition(0x20000),
        Err(StoreError::PartitionExists(_))
    ));
    s.create(0x20000, Some(0x10000)).unwrap();
    assert!(matches!(
        s.remove_partition(0x20000),
        Err(StoreError::PartitionNotEmpty(..))
    ));
    s.remove(0x20000, 0x10000).unwrap();
    s.remove_partition(0x20000).unwrap();
    assert_eq!(s.partitions(), vec![P]);
}

#[test]
fn everything_survives_reopen_and_checkpoints() {
    for policy in POLICIES {
        let (dev, s) = fresh(policy);
        let mut want = Vec::new();
        for i in 0..40u64 {
            let id = s.create(P, None).unwrap();
            let data = pattern((i as usize * 7919) % 200_000, i as u8);
            s.write(P, id, 0, &data).unwrap();
            s.set_attr(P, id, 0x10, 1, &i.to_le_bytes()).unwrap();
            s.set_version(P, id, i * 10).unwrap();
            want.push((id, data));
            if i == 20 {
                s.checkpoint().unwrap();
            }
        }
        // Crash-like: drop without close is still a clean close, so also
        // test a reopen of the current image without the final checkpoint.
        let image = dev.image();
        drop(s);
        for d in [
            dev.clone() as Arc<dyn Device>,
            Arc::new(MemDevice::from_image(image)),
        ] {
            let s = Store::open(d, &OpenOptions::default()).unwrap();
            for (i, (id, data)) in want.iter().enumerate() {
                assert_eq!(&s.read(P, *id, 0, 1 << 20).unwrap(), data);
                assert_eq!(s.stat(P, *id).unwrap().version, i as u64 * 10);
            }
            let r = store::fsck::fsck(s.device().clone(), |_, _| {}).unwrap();
            assert!(r.is_clean(), "{:?}", r.problems);
        }
    }
}

#[test]
fn no_space_is_clean_and_space_comes_back() {
    let (d, s) = fresh(Policy::Extent);
    let chunk = vec![0xAB; 1 << 20];
    let mut ids = Vec::new();
    let err = loop {
        let id = s.create(P, None).unwrap();
        match s.write(P, id, 0, &chunk) {
            Ok(()) => ids.push(id),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err}");
    assert!(ids.len() > 40);
    // A full store still has room for its checkpoint: it reopens after a
    // crash (replay + sealing checkpoint) and after a clean close.
    let crash_dev = Arc::new(MemDevice::from_image(d.image()));
    let crashed = Store::open(crash_dev.clone(), &OpenOptions::default()).unwrap();
    crashed.close().unwrap();
    Store::open(crash_dev, &OpenOptions::default())
        .unwrap()
        .close()
        .unwrap();
    drop(s);
    let s = Store::open(d.clone(), &OpenOptions::default()).unwrap();
    let free_full = s.statfs().free_bytes;
    for id in &ids[..10] {
        s.remove(P, *id).unwrap();
    }
    // Blocks the latest batch released stay reserved until the next commit
    // (replay may still check them); a checkpoint releases everything.
    s.checkpoint().unwrap();
    assert!(s.statfs().free_bytes >= free_full + 10 * (1 << 20));
    let id = s.create(P, None).unwrap();
    s.write(P, id, 0, &chunk).unwrap();
    assert_eq!(s.read(P, ids[11], 0, 1 << 20).unwrap(), chunk);
    let r = store::fsck::fsck(s.device().clone(), |_, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

#[test]
fn full_store_of_small_objects_reopens_after_crash_and_close() {
    // Many small objects make the metadata large next to the data: the
    // space kept for checkpoints must cover two of them (the old one stays
    // allocated while a new one is written, at open after a crash and again
    // at the next close).
    let dev = Arc::new(MemDevice::new(32 << 20));
    format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    let data = vec![7u8; 8192];
    let mut n = 0u64;
    while s.create_and_write(P, 0x10000 + n, &data).is_ok() {
        n += 1;
    }
    assert!(n > 1000, "{n}");
    // Metadata alone (64 KiB attributes, inline objects) cannot eat the
    // checkpoint reserve either: it runs out with NoSpace.
    let big = vec![1u8; 65_536];
    let mut k = 0u64;
    let err = loop {
        match s.set_attr(P, 0x10000 + k % n, 0x10, (k / n) as u32, &big) {
            Ok(()) => k += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err}");
    s.remove(P, 0x10000).unwrap();
    let crash_dev = Arc::new(MemDevice::from_image(dev.image()));
    let reopened = Store::open(crash_dev.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(reopened.statfs().objects, n - 1);
    reopened.close().unwrap();
    let again = Store::open(crash_dev, &OpenOptions::default()).unwrap();
    assert_eq!(
        again.read(P, 0x10000 + n - 1, 0, 10).unwrap(),
        vec![7u8; 10]
    );
    again.close().unwrap();
}

#[test]
fn attribute_pages_batched_sets_and_create_with_attributes() {
    let (dev, s) = fresh(Policy::Extent);
    let id = 0x20000;
    let attrs: Vec<((u32, u32), Vec<u8>)> = (1..=10u32)
        .map(|n| ((0x111, n * 3), vec![n as u8; n as usize]))
        .chain([((0x110, 1), b"header".to_vec())])
        .collect();
    s.create_with_attrs(P, id, &attrs).unwrap();
    assert!(matches!(
        s.create_with_attrs(P, id, &attrs),
        Err(StoreError::ObjectExists { .. })
    ));
    // Pages list in number order, by count and by bytes, never empty.
    let (page, next) = s.page_attrs(P, id, 0x111, None, 4, 1 << 20).unwrap();
    assert_eq!(page.iter().map(|x| x.0).collect::<Vec<_>>(), [3, 6, 9, 12]);
    assert_eq!(next, Some(12));
    let (page, next) = s.page_attrs(P, id, 0x111, Some(12), 100, 1 << 20).unwrap();
    assert_eq!(page.len(), 6);
    assert_eq!(next, None);
    let (page, _) = s.page_attrs(P, id, 0x111, None, 100, 1).unwrap();
    assert_eq!(page.len(), 1, "a byte limit still returns one attribute");
    assert!(s.page_attrs(P, id, 0x1, None, 10, 1 << 20).is_err());
    // A batched set (with a removal) is one commit, and survives reopen.
    s.set_attrs(
        P,
        id,
        &[((0x111, 3), Vec::new()), ((0x112, 1), b"x".to_vec())],
    )
    .unwrap();
    drop(s);
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    assert_eq!(s.get_attr(P, id, 0x111, 3).unwrap(), None);
    assert_eq!(s.get_attr(P, id, 0x112, 1).unwrap(), Some(b"x".to_vec()));
    assert_eq!(
        s.get_attr(P, id, 0x110, 1).unwrap(),
        Some(b"header".to_vec())
    );
}

#[test]
fn punched_ranges_read_zeros_free_their_units_and_survive_reopen() {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    for policy in POLICIES {
        let (dev, s) = fresh(policy);
        let id = s.create(P, None).unwrap();
        let len = 1_000_000usize;
        let mut model = pattern(len, 3);
        s.write(P, id, 0, &model).unwrap();
        let full = s.stat(P, id).unwrap().used_bytes;
        // Deterministic random punches, checked against a model each time.
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        for _ in 0..12 {
            let (off, n) = (0..len as u64, 1..300_000u64)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            s.punch(P, id, off, n).unwrap();
            let end = ((off + n) as usize).min(len);
            model[off as usize..end].fill(0);
            assert_eq!(s.read(P, id, 0, len as u64).unwrap(), model, "{policy:?}");
            assert_eq!(s.stat(P, id).unwrap().size, len as u64, "size unchanged");
            // Every range it reports holds data; every byte outside is zero.
            let ranges = s.data_ranges(P, id).unwrap();
            let mut covered = vec![false; len];
            for (o, l) in &ranges {
                covered[*o as usize..(*o + *l) as usize].fill(true);
            }
            for (i, b) in model.iter().enumerate() {
                assert!(covered[i] || *b == 0, "byte {i} is data outside the ranges");
            }
        }
        let after = s.stat(P, id).unwrap().used_bytes;
        assert!(
            after < full,
            "{policy:?}: punching freed nothing ({after} of {full})"
        );
        // A punch past the end, or of nothing, changes nothing.
        s.punch(P, id, 2 * len as u64, 10).unwrap();
        s.punch(P, id, 5, 0).unwrap();
        assert_eq!(s.stat(P, id).unwrap().size, len as u64);
        // Reopened, the holes are still holes and the data still data.
        drop(s);
        let s = Store::open(dev, &OpenOptions::default()).unwrap();
        assert_eq!(s.read(P, id, 0, len as u64).unwrap(), model);
        assert_eq!(s.stat(P, id).unwrap().used_bytes, after);
        // Inline objects punch too.
        let small = s.create(P, None).unwrap();
        s.write(P, small, 0, b"hello world").unwrap();
        s.punch(P, small, 2, 3).unwrap();
        assert_eq!(s.read(P, small, 0, 100).unwrap(), b"he\0\0\0 world");
        assert_eq!(s.data_ranges(P, small).unwrap(), vec![(0, 11)]);
        assert!(matches!(
            s.punch(P, 0x999_999, 0, 1),
            Err(StoreError::NoObject { .. })
        ));
    }
}

#[test]
fn reserved_ranges_hold_room_for_their_writes_and_survive_reopen() {
    const M: u64 = 1 << 20;
    for policy in POLICIES {
        let (dev, s) = fresh(policy);
        let free0 = s.statfs().free_bytes;
        // A reservation on a missing object creates it, empty.
        let a = 0x20000;
        s.reserve(P, a, 0, 16 * M, true).unwrap();
        assert_eq!(s.stat(P, a).unwrap().size, 0, "{policy:?}: size unchanged");
        assert_eq!(s.stat(P, a).unwrap().used_bytes, 0, "no block written");
        assert!(
            s.data_ranges(P, a).unwrap().is_empty(),
            "reserved reads as a hole"
        );
        let free1 = s.statfs().free_bytes;
        assert!(
            free0 - free1 >= 16 * M && free0 - free1 < 17 * M,
            "{policy:?}: 16 MiB counted as used ({free0} -> {free1})"
        );
        // Reserving again is idempotent.
        s.reserve(P, a, 0, 16 * M, false).unwrap();
        assert_eq!(s.statfs().free_bytes, free1);
        // Too much: refused, nothing changed.
        assert!(matches!(
            s.reserve(P, a, 16 * M, 4 * free1, false),
            Err(StoreError::NoSpace { .. })
        ));
        assert!(matches!(
            s.reserve(P, 0x999_999, 0, M, false),
            Err(StoreError::NoObject { .. })
        ));
        assert!(s.reserve(P, a, 0, 0, false).is_err(), "zero length");
        assert_eq!(s.statfs().free_bytes, free1);
        // Another object fills every block left. (Under the region policy
        // the room is counted, not sorted by block class: a store full of
        // small-block regions can still refuse a large-block write, so the
        // fill is checked under the default extent policy only.)
        let b = s.create(P, None).unwrap();
        let fill = policy == Policy::Extent;
        let chunk = pattern(M as usize, 9);
        let mut at = 0;
        while fill && s.write(P, b, at, &chunk).is_ok() {
            at += M;
        }
        let mut tail = 64 * 1024;
        while fill && tail >= 4096 {
            if s.write(P, b, at, &chunk[..tail]).is_ok() {
                at += tail as u64;
            } else {
                tail /= 2;
            }
        }
        // The reserved object still takes all 16 MiB.
        let mut model = Vec::new();
        for i in 0..16 {
            let d = pattern(M as usize, i as u8);
            s.write(P, a, i * M, &d)
                .unwrap_or_else(|e| panic!("{policy:?}: write {i} into reserved room: {e}"));
            model.extend(d);
        }
        assert_eq!(s.read(P, a, 0, 16 * M).unwrap(), model);
        // KEEP_SIZE past the end, then truncate: the reservation past the
        // new size ends.
        s.remove(P, b).unwrap();
        // Freed blocks return once a later commit is durable.
        s.checkpoint().unwrap();
        let before = s.statfs().free_bytes;
        s.reserve(P, a, 16 * M, 2 * M, false).unwrap();
        assert_eq!(s.stat(P, a).unwrap().size, 16 * M);
        assert!(before - s.statfs().free_bytes >= 2 * M);
        let reserved = s.statfs().free_bytes;
        drop(s);
        let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
        assert_eq!(
            s.statfs().free_bytes,
            reserved,
            "{policy:?}: kept across reopen"
        );
        assert_eq!(s.read(P, a, 0, 16 * M).unwrap(), model);
        s.truncate(P, a, 16 * M).unwrap();
        assert!(
            s.statfs().free_bytes >= reserved + 2 * M,
            "truncate ended it"
        );
        // A punch ends the reservations of the whole units it covers, past
        // the object's size too (a stripe object is often shorter than its
        // file, whose length the client clips a punch to).
        s.reserve(P, a, 20 * M, 2 * M, false).unwrap();
        s.punch(P, a, 0, 16 * M).unwrap();
        s.reserve(P, a, 0, 8 * M, false).unwrap();
        s.checkpoint().unwrap();
        let r = s.statfs().free_bytes;
        s.punch(P, a, 0, 21 * M).unwrap();
        s.checkpoint().unwrap();
        let freed = s.statfs().free_bytes - r;
        assert!(
            (9 * M..9 * M + M / 2).contains(&freed),
            "{policy:?}: the punch ended 9 MiB of room, kept the 1 MiB after it ({freed})"
        );
        // An inline object keeps its bytes when it gets a reservation.
        let small = s.create(P, None).unwrap();
        s.write(P, small, 0, b"tiny").unwrap();
        s.reserve(P, small, 0, 3 * M, false).unwrap();
        assert_eq!(s.read(P, small, 0, 100).unwrap(), b"tiny");
        s.write(P, small, 2, b"ny!").unwrap();
        assert_eq!(s.read(P, small, 0, 100).unwrap(), b"tiny!");
        drop(s);
        let r = store::fsck::fsck(dev, |_, _| {}).unwrap();
        assert!(r.is_clean(), "{policy:?}: {:?}", r.problems);
    }
}

/// REMOVE OBJECTS' store call: what exists goes, absent ids are counted,
/// a missing partition is an error, and the removals survive a reopen
/// (they were waited for once, together).
#[test]
fn remove_many_removes_what_exists_and_counts_the_rest() {
    for policy in POLICIES {
        let (dev, s) = fresh(policy);
        let ids: Vec<u64> = (0..40).map(|_| s.create(P, None).unwrap()).collect();
        for &id in &ids {
            s.write(P, id, 0, &pattern(10_000, id as u8)).unwrap();
        }
        let mut gone: Vec<u64> = ids.iter().copied().step_by(2).collect();
        gone.push(0xdead_beef);
        assert_eq!(s.remove_many(P, &gone).unwrap(), (20, 1));
        assert_eq!(s.remove_many(P, &gone).unwrap(), (0, 21), "a second pass");
        assert!(matches!(
            s.remove_many(0x17777, &[0x10000]),
            Err(StoreError::NoPartition(0x17777))
        ));
        s.close().unwrap();
        let s = Store::open(dev, &OpenOptions::default()).unwrap();
        for (k, &id) in ids.iter().enumerate() {
            let found = s.stat(P, id);
            if k % 2 == 0 {
                assert!(matches!(found, Err(StoreError::NoObject { .. })), "{id:#x}");
            } else {
                assert_eq!(s.read(P, id, 0, 10_000).unwrap(), pattern(10_000, id as u8));
            }
        }
    }
}

#[test]
fn a_moved_object_replaces_its_target_whole_and_survives_a_crash() {
    const ASIDE: u64 = 0x20001;
    for policy in POLICIES {
        let (dev, s) = fresh(policy);
        s.create_partition(ASIDE).unwrap();
        // The target, as it was: bigger, so its blocks come back.
        let old = pattern(300_000, 1);
        s.create_and_write(P, 0x10005, &old).unwrap();
        s.set_attr(P, 0x10005, 0x10, 1, b"old").unwrap();
        // The new copy, built aside.
        let new = pattern(70_000, 2);
        s.create(ASIDE, Some(0x10005)).unwrap();
        s.write(ASIDE, 0x10005, 0, &new).unwrap();
        s.set_attr(ASIDE, 0x10005, 0x10, 1, b"new").unwrap();
        s.set_version(ASIDE, 0x10005, 42).unwrap();
        let free_before = s.statfs().free_bytes;
        s.move_object((ASIDE, 0x10005), (P, 0x10005)).unwrap();
        // A crash right after (the move in the journal only).
        let crashed = dev.image();
        s.checkpoint().unwrap(); // frees are released once durable
        assert!(
            s.statfs().free_bytes > free_before,
            "the old blocks are freed"
        );
        let check = |s: &Store| {
            assert_eq!(s.read(P, 0x10005, 0, 1 << 20).unwrap(), new);
            assert_eq!(s.get_attr(P, 0x10005, 0x10, 1).unwrap().unwrap(), b"new");
            assert_eq!(s.stat(P, 0x10005).unwrap().version, 42);
            assert!(matches!(
                s.stat(ASIDE, 0x10005),
                Err(StoreError::NoObject { .. })
            ));
            assert_eq!(s.list(ASIDE, 0, u64::MAX, None, 10).unwrap().ids.len(), 0);
        };
        check(&s);
        // Bad moves change nothing.
        assert!(matches!(
            s.move_object((ASIDE, 0x10006), (P, 0x10005)),
            Err(StoreError::NoObject { .. })
        ));
        assert!(matches!(
            s.move_object((P, 0x10005), (0x30000, 0x10005)),
            Err(StoreError::NoPartition(0x30000))
        ));
        check(&s);
        // The crash right after the move: replay moves it again.
        drop(s);
        let s = Store::open(
            Arc::new(MemDevice::from_image(crashed)),
            &OpenOptions::default(),
        )
        .unwrap();
        check(&s);
        let r = store::fsck::fsck(s.device().clone(), |_, _| {}).unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
    }
}
