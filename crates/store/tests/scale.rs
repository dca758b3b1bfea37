//! Scale: one million small objects on a file-backed store. Reports index
//! memory per object, clean open time and crash recovery time. Ignored by
//! default (about a minute); run with
//! `cargo test --release -p tessera-store --test scale -- --ignored --nocapture`.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::sync::Arc;
use std::time::Instant;

use store::device::{Device, FileDevice};
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Store, format};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
#[ignore = "a minute of I/O; run by hand for the scale figures"]
fn one_million_small_objects() {
    const N: u64 = 1_000_000;
    let dir = tempfile::tempdir_in(".").unwrap();
    let path = dir.path().join("scale.img");
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(&path, 8 << 30).unwrap());
    format(dev.clone(), &FormatOptions::default()).unwrap();
    let base = rss_bytes();
    let s = Arc::new(Store::open(dev.clone(), &OpenOptions::default()).unwrap());
    let started = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..16u64 {
            let s = s.clone();
            sc.spawn(move || {
                let data = vec![t as u8; 4096];
                for i in (t..N).step_by(16) {
                    s.create_and_write(P, 0x10000 + i, &data).unwrap();
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let per_object = (rss_bytes() - base) as f64 / N as f64;
    println!(
        "created {N} 4 KiB objects in {secs:.1} s ({:.0}/s); memory {per_object:.0} bytes per object",
        N as f64 / secs
    );
    let st = s.commit_stats();
    println!(
        "commits: {} records, {} batches, {} checkpoints",
        st.records, st.batches, st.checkpoints
    );

    // Clean open: close writes a checkpoint; open reads it.
    Arc::try_unwrap(s).ok().unwrap().close().unwrap();
    let t0 = Instant::now();
    let s = Store::open(dev.clone(), &OpenOptions::default()).unwrap();
    let clean_open = t0.elapsed().as_secs_f64();
    assert_eq!(s.statfs().objects, N);
    println!("clean open: {clean_open:.2} s");

    // Crash: more changes after the checkpoint, then the process "dies"
    // (the store is leaked, never closed) and a new one recovers.
    for i in 0..50_000u64 {
        s.set_attr(P, 0x10000 + i, 0x10, 1, b"after the checkpoint")
            .unwrap();
    }
    std::mem::forget(s);
    let dev2: Arc<dyn Device> = Arc::new(FileDevice::open_with(&path, false).unwrap());
    let t0 = Instant::now();
    let s = Store::open(dev2, &OpenOptions::default()).unwrap();
    let recovery = t0.elapsed().as_secs_f64();
    assert_eq!(
        s.get_attr(P, 0x10000 + 49_999, 0x10, 1).unwrap().unwrap(),
        b"after the checkpoint"
    );
    println!(
        "crash recovery (50,000 journaled changes after the last checkpoint): {recovery:.2} s"
    );
    assert!(
        per_object <= 128.0,
        "{per_object:.0} bytes of memory per object"
    );
    assert!(clean_open < 3.0, "clean open took {clean_open:.2} s");
    assert!(recovery < 5.0, "recovery took {recovery:.2} s");
}
