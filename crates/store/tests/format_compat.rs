//! Old stores keep opening: a small store written by format version 1 (a
//! checkpoint plus journal batches never checkpointed, as after a crash) is
//! kept as a fixture and must open, replay and read back exactly, and pass
//! fsck; version 2 (reservations) and version 3 (an object moved in one
//! record) have their own. When the format changes, keep
//! these fixtures and add one per version.

use std::sync::Arc;

use store::device::MemDevice;
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store, format};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format-v1.img");
const FIXTURE_V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format-v2.img");
const FIXTURE_V3: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format-v3.img");

fn data(i: u64, n: usize) -> Vec<u8> {
    (0..n).map(|k| (k as u64 * 131 + i * 7) as u8).collect()
}

const SIZES: [usize; 4] = [100, 5000, 70_000, 0];

/// The fixtures' geometry: small, so the images stay small.
fn small() -> FormatOptions {
    FormatOptions {
        large_block: 4096,
        journal_len: Some(128 << 10),
        ..FormatOptions::default()
    }
}

#[test]
#[ignore = "writes the fixture; run only when adding a format version"]
fn write_format_v1_fixture() {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let opts = small();
    format(dev.clone(), &opts).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    for (i, n) in SIZES.iter().enumerate() {
        s.create_and_write(P, 0x10000 + i as u64, &data(i as u64, *n))
            .unwrap();
    }
    s.set_attr(P, 0x10000, 0x10, 1, b"fixture").unwrap();
    s.checkpoint().unwrap();
    // After the checkpoint: journal-only changes.
    s.create_partition(0x20000).unwrap();
    s.create_and_write(0x20000, 0x10000, b"in the journal only")
        .unwrap();
    s.write(P, 0x10002, 10, b"patched").unwrap();
    std::fs::write(FIXTURE, dev.image()).unwrap();
    std::mem::forget(s); // a crash: no final checkpoint
}

#[test]
fn format_v1_fixture_opens_and_reads_back() {
    let image = std::fs::read(FIXTURE).expect("fixture present");
    let dev = Arc::new(MemDevice::from_image(image));
    let r = store::fsck::fsck(dev.clone(), |_, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert!(
        r.replayed_batches >= 3,
        "the fixture carries journal batches to replay"
    );
    let read_only = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    assert_eq!(
        Store::open(dev.clone(), &read_only)
            .unwrap()
            .label()
            .version,
        1
    );
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(
        s.label().version,
        store::FORMAT_VERSION,
        "opened read-write: upgraded"
    );
    for (i, n) in SIZES.iter().enumerate() {
        let mut want = data(i as u64, *n);
        if i == 2 {
            want[10..17].copy_from_slice(b"patched");
        }
        assert_eq!(
            s.read(P, 0x10000 + i as u64, 0, 1 << 20).unwrap(),
            want,
            "object {i}"
        );
    }
    assert_eq!(
        s.get_attr(P, 0x10000, 0x10, 1).unwrap().unwrap(),
        b"fixture"
    );
    assert_eq!(
        s.read(0x20000, 0x10000, 0, 100).unwrap(),
        b"in the journal only"
    );
}

#[test]
#[ignore = "writes the fixture; run only when adding a format version"]
fn write_format_v2_fixture() {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let opts = small();
    format(dev.clone(), &opts).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    s.reserve(P, 0x10000, 0, 64 << 10, true).unwrap();
    s.write(P, 0x10000, 4096, b"written").unwrap();
    s.checkpoint().unwrap();
    // After the checkpoint: a reservation in the journal only.
    s.reserve(P, 0x10001, 8192, 32 << 10, true).unwrap();
    std::fs::write(FIXTURE_V2, dev.image()).unwrap();
    std::mem::forget(s); // a crash: no final checkpoint
}

#[test]
fn format_v2_fixture_keeps_its_reservations() {
    let image = std::fs::read(FIXTURE_V2).expect("fixture present");
    let dev = Arc::new(MemDevice::from_image(image));
    let r = store::fsck::fsck(dev.clone(), |_, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert!(r.replayed_batches >= 1);
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    assert_eq!(s.label().version, store::FORMAT_VERSION);
    let mut want = vec![0u8; 4096];
    want.extend_from_slice(b"written");
    assert_eq!(s.read(P, 0x10000, 0, 1 << 20).unwrap(), want);
    assert_eq!(s.stat(P, 0x10001).unwrap().size, 0);
    // 15 + 8 blocks reserved: free space is what the data blocks and the
    // reservations leave.
    let st = s.statfs();
    let used_blocks = s.stat(P, 0x10000).unwrap().used_bytes / 4096;
    let fresh_free = {
        let d = Arc::new(MemDevice::new(2 << 20));
        format(d.clone(), &small()).unwrap();
        Store::open(d, &OpenOptions::default())
            .unwrap()
            .statfs()
            .free_bytes
    };
    assert!(
        st.free_bytes + (used_blocks + 15 + 8) * 4096 <= fresh_free,
        "reservations kept: {} free of {fresh_free}",
        st.free_bytes
    );
}

#[test]
#[ignore = "writes the fixture; run only when adding a format version"]
fn write_format_v3_fixture() {
    let dev = Arc::new(MemDevice::new(2 << 20));
    format(dev.clone(), &small()).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    s.create_and_write(P, 0x10000, b"the old copy").unwrap();
    s.create_partition(0x20001).unwrap();
    s.create_and_write(0x20001, 0x10000, b"the copy built aside")
        .unwrap();
    s.checkpoint().unwrap();
    // After the checkpoint: the move, in the journal only.
    s.move_object((0x20001, 0x10000), (P, 0x10000)).unwrap();
    std::fs::write(FIXTURE_V3, dev.image()).unwrap();
    std::mem::forget(s); // a crash: no final checkpoint
}

#[test]
fn format_v3_fixture_replays_its_move() {
    let image = std::fs::read(FIXTURE_V3).expect("fixture present");
    let dev = Arc::new(MemDevice::from_image(image));
    let r = store::fsck::fsck(dev.clone(), |_, _| {}).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert!(r.replayed_batches >= 1);
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
    assert_eq!(s.label().version, 3);
    assert_eq!(s.read(P, 0x10000, 0, 100).unwrap(), b"the copy built aside");
    assert!(s.stat(0x20001, 0x10000).is_err());
}
