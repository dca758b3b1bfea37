//! Old stores keep opening: a small store written by format version 1 (a
//! checkpoint plus journal batches never checkpointed, as after a crash) is
//! kept as a fixture and must open, replay and read back exactly, and pass
//! fsck. When the format changes, keep this fixture and add one per version.

use std::sync::Arc;

use store::device::MemDevice;
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store, format};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format-v1.img");

fn data(i: u64, n: usize) -> Vec<u8> {
    (0..n).map(|k| (k as u64 * 131 + i * 7) as u8).collect()
}

const SIZES: [usize; 4] = [100, 5000, 70_000, 0];

#[test]
#[ignore = "writes the fixture; run only when adding a format version"]
fn write_format_v1_fixture() {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let opts = FormatOptions {
        large_block: 4096,
        journal_len: Some(128 << 10),
        ..FormatOptions::default()
    };
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
    let s = Store::open(dev, &OpenOptions::default()).unwrap();
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
