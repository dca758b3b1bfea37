//! Bad media and bad input: flipped bits, device errors, damaged metadata,
//! foreign signatures, newer formats.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]
#![expect(
    clippy::single_range_in_vec_init,
    reason = "fault ranges are lists of one range on purpose"
)]

use std::sync::Arc;

use store::device::{BLOCK, Device, FaultConfig, FaultDevice, MemDevice};
use store::format::label::Label;
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store, StoreError, format};

fn fresh_fault() -> (Arc<FaultDevice>, Store) {
    let dev = Arc::new(FaultDevice::new(32 << 20));
    format(dev.clone(), &FormatOptions::default()).unwrap();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    (dev, s)
}

/// Device byte offset of the first data block of an object.
fn data_offset_of(s: &Store, dev: &dyn Device, id: u64, want: &[u8]) -> u64 {
    let label = s.label().clone();
    let mut buf = store::device::AlignedBuf::zeroed(label.data_len as usize);
    dev.read_at(&mut buf, label.data_off).unwrap();
    let pos = buf
        .windows(want.len())
        .position(|w| w == want)
        .expect("data on device");
    let _ = id;
    label.data_off + pos as u64
}

#[test]
fn flipped_bit_is_a_checksum_error_naming_object_and_offset() {
    let (dev, s) = fresh_fault();
    let id = s.create(P, None).unwrap();
    let data: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    s.write(P, id, 0, &data).unwrap();
    // Checkpoint so fsck reads the object from the checkpoint: rot under the
    // very last journal batch is indistinguishable from a torn commit, and
    // recovery drops that batch (see docs/FORMAT.md, "Journal").
    s.checkpoint().unwrap();
    let at = data_offset_of(&s, dev.as_ref(), id, &data[8192..8192 + 64]);
    dev.corrupt(at + 10, 0x40);
    let err = s.read(P, id, 0, 20_000).unwrap_err();
    match &err {
        StoreError::Checksum { what, offset, .. } => {
            assert!(what.contains("0x10000"), "{what}");
            assert_eq!(*offset, 8192);
        }
        e => panic!("expected a checksum error, got {e}"),
    }
    // The intact blocks still read.
    assert_eq!(s.read(P, id, 0, 8192).unwrap(), &data[..8192]);
    let r = store::fsck::fsck(dev.clone(), |_, _| {}).unwrap();
    assert_eq!(r.problems.len(), 1);
    assert!(
        r.problems[0].contains("byte offset 8192"),
        "{}",
        r.problems[0]
    );
}

#[test]
fn device_errors_name_the_object_and_keep_the_store_consistent() {
    let (dev, s) = fresh_fault();
    let id = s.create(P, None).unwrap();
    let data = vec![0x5A; 100_000];
    s.write(P, id, 0, &data).unwrap();
    let label = s.label().clone();
    // Every data write fails: the write errors, naming the object.
    dev.set_faults(FaultConfig {
        write_errors: vec![label.data_off..label.device_len],
        ..Default::default()
    });
    let err = s.write(P, id, 0, &[1; 50_000]).unwrap_err();
    assert!(
        matches!(err, StoreError::Io { .. }) && err.to_string().contains("0x10000"),
        "{err}"
    );
    // Reads fail with EIO naming the object.
    dev.set_faults(FaultConfig {
        read_errors: vec![label.data_off..label.device_len],
        ..Default::default()
    });
    let err = s.read(P, id, 0, 10).unwrap_err();
    assert!(err.to_string().contains("object 0x10000/0x10000"), "{err}");
    dev.set_faults(FaultConfig::default());
    assert_eq!(s.read(P, id, 0, 200_000).unwrap(), data);
    // A failing journal flush fails the store; a reopen recovers.
    dev.set_faults(FaultConfig {
        fail_flush: true,
        ..Default::default()
    });
    assert!(s.set_attr(P, id, 0x10, 1, b"x").is_err());
    assert!(matches!(s.create(P, None), Err(StoreError::Failed(_))));
    drop(s);
    dev.set_faults(FaultConfig::default());
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    assert_eq!(s.read(P, id, 0, 200_000).unwrap(), data);
    assert!(
        store::fsck::fsck(dev.clone(), |_, _| {})
            .unwrap()
            .is_clean()
    );
}

#[test]
fn damaged_metadata_is_refused_with_a_clear_message() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    format(dev.clone(), &FormatOptions::default()).unwrap();
    {
        let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
        s.create(P, None).unwrap();
    }
    // Both commit slots damaged.
    let mut img = dev.image();
    img[BLOCK as usize + 40] ^= 1;
    img[2 * BLOCK as usize + 40] ^= 1;
    let d = Arc::new(MemDevice::from_image(img));
    let err = Store::open(d.clone(), &OpenOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("no valid commit slot"), "{err}");
    assert!(store::fsck::fsck(d, |_, _| {}).is_err());
    // Label damaged.
    let mut img = dev.image();
    img[30] ^= 1;
    let err = Store::open(
        Arc::new(MemDevice::from_image(img)),
        &OpenOptions::default(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("label"), "{err}");
    // One slot damaged: the other one carries on.
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    let label = s.label().clone();
    drop(s);
    let mut img = dev.image();
    img[BLOCK as usize + 40] ^= 1;
    let s = Store::open(
        Arc::new(MemDevice::from_image(img)),
        &OpenOptions::default(),
    );
    let _ = label;
    assert!(s.is_ok() || s.err().unwrap().to_string().contains("checkpoint"));
}

#[test]
fn foreign_signatures_and_newer_versions_are_refused() {
    let dev = Arc::new(MemDevice::new(32 << 20));
    let mut sb = store::device::AlignedBuf::zeroed(4096);
    sb[1080] = 0x53;
    sb[1081] = 0xEF;
    dev.write_at(&sb, 0).unwrap();
    let err = format(dev.clone(), &FormatOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("ext2/3/4") && err.to_string().contains("--force"),
        "{err}"
    );
    let err = Store::open(dev.clone(), &OpenOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a Tessera store"), "{err}");
    format(
        dev.clone(),
        &FormatOptions {
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    let err = format(dev.clone(), &FormatOptions::default()).unwrap_err();
    assert!(err.to_string().contains("a Tessera store"), "{err}");
    // A label from the future.
    let mut block = store::device::AlignedBuf::zeroed(4096);
    dev.read_at(&mut block, 0).unwrap();
    let mut l = Label::decode(&block).unwrap().unwrap();
    l.version = 99;
    dev.write_at(&store::device::AlignedBuf::from_slice(&l.encode()), 0)
        .unwrap();
    let err = Store::open(dev, &OpenOptions::default()).err().unwrap();
    assert!(
        matches!(err, StoreError::NewerFormat { found: 99, .. }),
        "{err}"
    );
}

#[test]
fn crash_test_short_run_has_no_violations() {
    let cfg = store::crashtest::CrashConfig {
        cuts: 60,
        seed: 7,
        reformat_every: 30,
        ..Default::default()
    };
    let r = store::crashtest::run(&cfg, |_| {}).unwrap();
    assert_eq!(r.cuts, 60);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert!(r.acknowledged > 100);
    let concurrent = store::crashtest::CrashConfig { threads: 4, ..cfg };
    let r = store::crashtest::run(&concurrent, |_| {}).unwrap();
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert!(
        r.in_flight > r.cuts / 2,
        "cuts should catch operations in flight"
    );
}

#[test]
fn an_ordered_attribute_is_never_lost_while_a_change_logged_after_it_survives() {
    use store::device::CrashMode;
    for seed in 0..40u64 {
        let (dev, s) = fresh_fault();
        let id = s.create(P, None).unwrap();
        s.write(P, id, 0, b"before").unwrap();
        assert!(
            s.set_attr_ordered(P, id, (0x7c00, 1), &seed.to_le_bytes())
                .unwrap()
        );
        s.write(P, id, 0, b"after!").unwrap();
        // Anything later is free to be lost.
        s.set_attr_ordered(P, id, (0x7c00, 2), b"x").unwrap();
        for mode in [CrashMode::DropAll, CrashMode::TearLast, CrashMode::Reorder] {
            let img = dev.crash_image(mode, seed);
            let back = Arc::new(MemDevice::from_image(img));
            let r = Store::open(back, &OpenOptions::default()).unwrap();
            assert_eq!(r.read(P, id, 0, 6).unwrap(), b"after!", "{mode:?} {seed}");
            assert_eq!(
                r.get_attr(P, id, 0x7c00, 1).unwrap(),
                Some(seed.to_le_bytes().to_vec()),
                "{mode:?} {seed}: the write survived without the attribute before it"
            );
        }
    }
    let (_, s) = fresh_fault();
    assert!(!s.set_attr_ordered(P, 0x9_9999, (0x7c00, 1), b"x").unwrap());
    assert!(matches!(
        s.set_attr_ordered(P, 0x9_9999, (0x3, 1), b"x"),
        Err(StoreError::ReadOnlyAttribute { .. })
    ));
}
