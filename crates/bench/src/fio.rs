//! fio's ceilings on the raw device: what the hardware gives with no file
//! system at all, for the ratios.

use serde::Serialize;

use crate::loopdev::run;
use crate::stats::PhaseResult;

/// One fio job.
#[derive(Debug, Clone, Serialize)]
pub struct FioJob {
    /// Short name.
    pub name: &'static str,
    /// fio `rw=`.
    pub rw: &'static str,
    /// Block size.
    pub bs: &'static str,
    /// Queue depth.
    pub iodepth: u32,
    /// fdatasync after every write.
    pub fdatasync: bool,
}

/// The ceiling jobs the store benchmark compares with.
pub const JOBS: [FioJob; 4] = [
    FioJob {
        name: "write-512k-qd1",
        rw: "write",
        bs: "512k",
        iodepth: 1,
        fdatasync: false,
    },
    FioJob {
        name: "write-512k-qd16",
        rw: "write",
        bs: "512k",
        iodepth: 16,
        fdatasync: false,
    },
    FioJob {
        name: "randread-512k-qd16",
        rw: "randread",
        bs: "512k",
        iodepth: 16,
        fdatasync: false,
    },
    FioJob {
        name: "write-4k-fdatasync",
        rw: "randwrite",
        bs: "4k",
        iodepth: 1,
        fdatasync: true,
    },
];

/// Runs one job on `dev` for `seconds`; returns throughput and completion latency.
pub fn run_job(dev: &str, job: &FioJob, seconds: u32, size: &str) -> anyhow::Result<PhaseResult> {
    let mut args = vec![
        "--name=ceiling".to_string(),
        format!("--filename={dev}"),
        "--direct=1".into(),
        "--ioengine=libaio".into(),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.iodepth),
        format!("--size={size}"),
        format!("--runtime={seconds}"),
        "--time_based".into(),
        "--output-format=json".into(),
    ];
    if job.fdatasync {
        args.push("--fdatasync=1".into());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("fio", &refs)?;
    let start = out.find('{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_str(&out[start..])?;
    let j = &v["jobs"][0];
    let side = if job.rw.contains("read") {
        &j["read"]
    } else {
        &j["write"]
    };
    let bytes = side["io_bytes"].as_u64().unwrap_or(0);
    let secs = side["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    let ops = side["total_ios"].as_u64().unwrap_or(0);
    // With fdatasync the latency that matters is write + sync.
    let lat = if job.fdatasync {
        &j["sync"]["lat_ns"]
    } else {
        &side["clat_ns"]
    };
    let p = |k: &str| lat["percentile"][k].as_f64().unwrap_or(0.0) / 1e3;
    let mut p50 = p("50.000000");
    let p99 = p("99.000000");
    if job.fdatasync {
        // fio reports the sync separately: add the write's median.
        p50 += side["clat_ns"]["percentile"]["50.000000"]
            .as_f64()
            .unwrap_or(0.0)
            / 1e3;
        if p50 == 0.0 {
            p50 = lat["mean"].as_f64().unwrap_or(0.0) / 1e3
                + side["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1e3;
        }
    }
    Ok(PhaseResult {
        target: "fio".into(),
        phase: job.name.into(),
        workers: job.iodepth as usize,
        ops,
        bytes,
        seconds: secs,
        mb_per_s: bytes as f64 / 1e6 / secs.max(1e-9),
        ops_per_s: ops as f64 / secs.max(1e-9),
        p50_us: p50,
        p99_us: p99,
        max_us: lat["max"].as_f64().unwrap_or(0.0) / 1e3,
    })
}
