//! The bounds on what attributes may cost: a count per object and the
//! store's metadata in bytes (all of it lives in memory). Hitting either
//! refuses that change alone and changes nothing; replacing and removing
//! always go through, and the bounds hold across a reopen.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::sync::Arc;

use store::device::MemDevice;
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store, StoreError, format};

fn open(dev: &Arc<MemDevice>, opts: &OpenOptions) -> Store {
    Store::open(dev.clone(), opts).unwrap()
}

fn fresh(opts: &OpenOptions) -> (Arc<MemDevice>, Store) {
    let dev = Arc::new(MemDevice::new(64 << 20));
    format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = open(&dev, opts);
    (dev, s)
}

fn full(e: StoreError) -> String {
    assert!(matches!(e, StoreError::MetadataFull { .. }), "{e}");
    e.to_string()
}

#[test]
fn an_object_holds_at_most_its_bound_of_attributes_by_every_path() {
    let opts = OpenOptions {
        max_attrs_per_object: 8,
        ..OpenOptions::default()
    };
    let (dev, s) = fresh(&opts);
    let id = s.create(P, None).unwrap();
    let eight: Vec<_> = (0..8u32).map(|n| ((0x100, n), vec![n as u8 + 1])).collect();
    s.set_attrs(P, id, &eight).unwrap();
    // A ninth, by each way in, is refused and changes nothing.
    let msg = full(s.set_attr(P, id, 0x100, 8, b"x").unwrap_err());
    assert!(msg.contains("8 held, 1 more"), "{msg}");
    full(
        s.set_attrs(P, id, &[((0x100, 9), b"y".to_vec())])
            .unwrap_err(),
    );
    full(s.cas_attr(P, id, 0x100, 10, b"", b"z").unwrap_err());
    full(s.fetch_add(P, id, 0x100, 11, 1).unwrap_err());
    assert_eq!(
        s.list_attrs(P, id)
            .unwrap()
            .iter()
            .filter(|((p, _), _)| *p == 0x100)
            .count(),
        8
    );
    // A swap in one list (one key in, another out) fits at the bound.
    s.set_attrs(
        P,
        id,
        &[((0x100, 30), b"in".to_vec()), ((0x100, 7), Vec::new())],
    )
    .unwrap();
    s.set_attrs(
        P,
        id,
        &[((0x100, 7), b"back".to_vec()), ((0x100, 30), Vec::new())],
    )
    .unwrap();
    // A key set and removed in one list adds nothing.
    s.set_attrs(
        P,
        id,
        &[((0x100, 31), b"x".to_vec()), ((0x100, 31), Vec::new())],
    )
    .unwrap();
    // Replacing one it has, and the same key twice in one list, still fit.
    s.set_attr(P, id, 0x100, 3, b"new").unwrap();
    s.set_attrs(
        P,
        id,
        &[((0x100, 4), b"a".to_vec()), ((0x100, 4), b"b".to_vec())],
    )
    .unwrap();
    assert!(
        s.cas_attr(P, id, 0x100, 5, &[6], b"swapped")
            .unwrap()
            .swapped
    );
    // A removal makes room for exactly one.
    s.set_attr(P, id, 0x100, 0, b"").unwrap();
    s.set_attr(P, id, 0x100, 20, b"in").unwrap();
    full(s.set_attr(P, id, 0x100, 21, b"out").unwrap_err());
    // An object made with more than the bound is not made at all.
    let nine: Vec<_> = (0..9u32).map(|n| ((0x100, n), vec![1])).collect();
    full(s.create_with_attrs(P, 0x9_0000, &nine).unwrap_err());
    assert!(matches!(
        s.stat(P, 0x9_0000),
        Err(StoreError::NoObject { .. })
    ));
    // The bound is the open's, not the disk's: reopened with a larger
    // one, the object grows; with the smaller again, it only shrinks.
    s.close().unwrap();
    let s = open(&dev, &OpenOptions::default());
    s.set_attr(P, id, 0x100, 21, b"now").unwrap();
    s.close().unwrap();
    let s = open(&dev, &opts);
    full(s.set_attr(P, id, 0x100, 22, b"no").unwrap_err());
    s.set_attr(P, id, 0x100, 21, b"").unwrap();
    assert_eq!(s.open_options().max_attrs_per_object, 8);
}

#[test]
fn metadata_past_its_bound_is_refused_and_removals_make_room() {
    let (dev, s) = fresh(&OpenOptions::default());
    let id = s.create(P, None).unwrap();
    s.close().unwrap();
    let opts = OpenOptions {
        max_attr_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    let s = open(&dev, &opts);
    let value = vec![7u8; 60 << 10];
    let mut n = 0u32;
    let err = loop {
        match s.set_attr(P, id, 0x100, n, &value) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(
            n < 64,
            "1 MiB of metadata held more than 64 values of 60 KiB"
        );
    };
    let msg = full(err);
    assert!(msg.contains("1048576"), "{msg}");
    assert!((14..=17).contains(&n), "{n} values of 60 KiB fit in 1 MiB");
    // Other ways of adding metadata are refused too; nothing half made.
    full(
        s.create_with_attrs(P, 0x9_0000, &[((0x100, 1), value.clone())])
            .unwrap_err(),
    );
    assert!(matches!(
        s.stat(P, 0x9_0000),
        Err(StoreError::NoObject { .. })
    ));
    // At the bound: a value replaced by one no larger, and data of any
    // size (its block map is not an attribute), still go through.
    s.set_attr(P, id, 0x100, 1, &vec![9u8; 60 << 10]).unwrap();
    s.set_attr(P, id, 0x100, 2, b"smaller").unwrap();
    let data = s.create(P, None).unwrap();
    s.write(P, data, 0, &vec![5u8; 4 << 20]).unwrap();
    // What the smaller value freed is room for one more, not two.
    let extra = (100..103).take_while(|n| s.set_attr(P, id, 0x100, *n, &value).is_ok());
    assert!(extra.count() <= 2);
    full(s.set_attr(P, id, 0x100, 103, &value).unwrap_err());
    for n in 100..103 {
        s.set_attr(P, id, 0x100, n, b"").unwrap();
    }
    // Removing goes through, and makes room again.
    s.set_attr(P, id, 0x100, 0, b"").unwrap();
    s.set_attr(P, id, 0x100, n, &value).unwrap();
    // A listing of all of them over a bound is refused before a copy.
    let e = s.list_attrs_within(P, id, 256 << 10).unwrap_err();
    assert!(e.to_string().contains("list them by page"), "{e}");
    assert!(s.list_attrs_within(P, id, 2 << 20).unwrap().len() > 14);
    // What was accepted survives a reopen.
    s.close().unwrap();
    let s = open(&dev, &opts);
    assert_eq!(s.get_attr(P, id, 0x100, n).unwrap().unwrap(), value);
    assert!(s.get_attr(P, id, 0x100, 0).unwrap().is_none());
}

#[test]
fn a_listing_counts_every_attribute_not_only_its_value() {
    let (_dev, s) = fresh(&OpenOptions::default());
    let id = s.create(P, None).unwrap();
    let tiny: Vec<_> = (0..4096u32).map(|n| ((0x100, n), vec![1u8])).collect();
    s.set_attrs(P, id, &tiny).unwrap();
    // 4,096 one-byte values: 4 KiB of values, but 68 KiB as listed.
    let e = s.list_attrs_within(P, id, 64 << 10).unwrap_err();
    assert!(e.to_string().contains("list them by page"), "{e}");
    assert!(s.list_attrs_within(P, id, 80 << 10).is_ok());
}

#[test]
fn a_check_before_a_change_refuses_what_the_change_would_and_makes_nothing() {
    let opts = OpenOptions {
        max_attrs_per_object: 2,
        ..OpenOptions::default()
    };
    let (_dev, s) = fresh(&opts);
    let id = s.create(P, None).unwrap();
    s.set_attrs(
        P,
        id,
        &[((0x100, 1), b"a".to_vec()), ((0x100, 2), b"b".to_vec())],
    )
    .unwrap();
    full(
        s.check_attrs_fit(P, id, &[((0x100, 3), b"c".to_vec())])
            .unwrap_err(),
    );
    s.check_attrs_fit(P, id, &[((0x100, 1), b"again".to_vec())])
        .unwrap();
    // An object not made yet counts from nothing.
    s.check_attrs_fit(P, 0x7_0000, &[((0x100, 1), b"a".to_vec())])
        .unwrap();
    full(
        s.check_attrs_fit(
            P,
            0x7_0000,
            &[
                ((0x100, 1), b"a".to_vec()),
                ((0x100, 2), b"b".to_vec()),
                ((0x100, 3), b"c".to_vec()),
            ],
        )
        .unwrap_err(),
    );
    assert!(s.get_attr(P, id, 0x100, 3).unwrap().is_none());
}
