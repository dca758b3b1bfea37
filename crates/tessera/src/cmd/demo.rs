//! `tessera demo`: the README's first command. Makes a store in a file,
//! writes a mix of objects, reads them back, verifies, and prints figures.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use store::device::{Device, FileDevice};
use store::{DEFAULT_PARTITION as P, FormatOptions, OpenOptions, Policy, Store};

use crate::args;

/// Make a store in a file, write the OBFS object mix (80 % 512 KiB, 20 %
/// 1 KiB–512 KiB) from several threads, read everything back, verify, fsck,
/// and print throughput.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the store file.
    #[arg(long, default_value = "./tessera-data")]
    data: PathBuf,
    /// Store file size.
    #[arg(long, value_parser = args::size, default_value = "1G")]
    size: u64,
    /// Number of objects.
    #[arg(long, default_value_t = 400)]
    objects: u64,
    /// Concurrent writers.
    #[arg(long, default_value_t = 8)]
    writers: u64,
    /// Allocation policy.
    #[arg(long, default_value = "region")]
    policy: Policy,
}

fn object(id: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(id);
    let len = if rng.random_bool(0.8) {
        512 << 10
    } else {
        rng.random_range(1024..=512 << 10)
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    std::fs::create_dir_all(&a.data)
        .with_context(|| format!("cannot create {}", a.data.display()))?;
    let path = a.data.join("demo-store.img");
    let dev: Arc<dyn Device> = Arc::new(
        FileDevice::create(&path, a.size)
            .with_context(|| format!("cannot create {}", path.display()))?,
    );
    let opts = FormatOptions {
        policy: a.policy,
        force: true,
        ..FormatOptions::default()
    };
    store::format(dev.clone(), &opts)?;
    let s = Arc::new(Store::open(dev.clone(), &OpenOptions::default())?);
    println!(
        "store: {} ({}, policy {})",
        path.display(),
        super::human(s.label().data_len),
        a.policy.name()
    );

    let ids: Vec<u64> = (0..a.objects).map(|i| 0x10000 + i).collect();
    let pb = super::progress_bar(a.objects, "{msg:6} {bar:40} {pos}/{len} objects");
    pb.set_message("write");
    let started = Instant::now();
    let bytes: u64 = std::thread::scope(|sc| -> anyhow::Result<u64> {
        let handles: Vec<_> = (0..a.writers)
            .map(|w| {
                let s = s.clone();
                let ids = &ids;
                let pb = &pb;
                sc.spawn(move || -> anyhow::Result<u64> {
                    let mut total = 0;
                    for id in ids.iter().skip(w as usize).step_by(a.writers as usize) {
                        let data = object(*id);
                        s.create_and_write(P, *id, &data)?;
                        total += data.len() as u64;
                        pb.inc(1);
                    }
                    Ok(total)
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
        }
        Ok(sum)
    })?;
    let write_s = started.elapsed().as_secs_f64();
    pb.set_position(0);
    pb.set_message("read");
    let started = Instant::now();
    let mut bad = 0;
    for id in &ids {
        let want = object(*id);
        let got = s.read(P, *id, 0, want.len() as u64 + 1)?;
        if got != want {
            bad += 1;
        }
        pb.inc(1);
    }
    let read_s = started.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let stats = s.commit_stats();
    let space = s.statfs();
    drop(s);
    let report = store::fsck::fsck(dev, |_, _| {})?;
    let mb = bytes as f64 / 1e6;
    println!(
        "wrote   {} objects, {:.1} MB in {:.2} s: {:.1} MB/s, {:.0} objects/s ({} writers, each write durable)",
        a.objects,
        mb,
        write_s,
        mb / write_s,
        a.objects as f64 / write_s,
        a.writers
    );
    println!(
        "read    {:.1} MB in {:.2} s: {:.1} MB/s, checksums verified on every block",
        mb,
        read_s,
        mb / read_s
    );
    println!(
        "commits {} records in {} journal batches, {} checkpoints, {} device flushes (group commit)",
        stats.records, stats.batches, stats.checkpoints, stats.flushes
    );
    println!(
        "space   {} used of {}, {} free runs",
        super::human(space.total_bytes - space.free_bytes),
        super::human(space.total_bytes),
        space.free_extents
    );
    println!(
        "verify  {} of {} objects wrong; fsck: {}",
        bad,
        a.objects,
        if report.is_clean() {
            "clean".to_string()
        } else {
            report.problems.join("; ")
        }
    );
    Ok(if bad == 0 && report.is_clean() { 0 } else { 1 })
}
