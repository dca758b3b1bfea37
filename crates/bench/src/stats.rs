//! Throughput and latency summaries of one measured phase.

use serde::Serialize;

/// Results of one phase (e.g. create-write with 16 writers) on one target.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PhaseResult {
    /// Target name (tessera-extent, ext4, xfs, fio).
    pub target: String,
    /// Phase name.
    pub phase: String,
    /// Concurrent workers.
    pub workers: usize,
    /// Operations done.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Throughput, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Latency percentiles in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency.
    pub p99_us: f64,
    /// Worst latency.
    pub max_us: f64,
}

impl PhaseResult {
    /// Summarises per-operation latencies (seconds) measured over `seconds` of wall time.
    pub fn from_latencies(
        target: &str,
        phase: &str,
        workers: usize,
        mut lat: Vec<f64>,
        bytes: u64,
        seconds: f64,
    ) -> Self {
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if lat.is_empty() {
                return 0.0;
            }
            let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
            lat[i.min(lat.len() - 1)] * 1e6
        };
        PhaseResult {
            target: target.into(),
            phase: phase.into(),
            workers,
            ops: lat.len() as u64,
            bytes,
            seconds,
            mb_per_s: bytes as f64 / 1e6 / seconds.max(1e-9),
            ops_per_s: lat.len() as f64 / seconds.max(1e-9),
            p50_us: pct(0.5),
            p99_us: pct(0.99),
            max_us: pct(1.0),
        }
    }
}

/// Runs `op` on every id with `workers` threads pulling from one queue;
/// returns every operation's latency (seconds), the bytes `op` reported and
/// the wall time. The first error stops that worker and is returned.
pub fn run_workers(
    workers: usize,
    ids: &[u64],
    op: impl Fn(u64) -> anyhow::Result<u64> + Sync,
) -> anyhow::Result<(Vec<f64>, u64, f64)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let parts: Vec<anyhow::Result<(Vec<f64>, u64)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..workers.max(1))
            .map(|_| {
                sc.spawn(|| {
                    let (mut lat, mut bytes) = (Vec::new(), 0);
                    while let Some(&id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t = std::time::Instant::now();
                        bytes += op(id)?;
                        lat.push(t.elapsed().as_secs_f64());
                    }
                    Ok((lat, bytes))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("worker panicked")))
            })
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let (mut lat, mut bytes) = (Vec::new(), 0);
    for p in parts {
        let (l, b) = p?;
        lat.extend(l);
        bytes += b;
    }
    Ok((lat, bytes, secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let lat: Vec<f64> = (1..=100).map(|i| i as f64 * 1e-6).collect();
        let r = PhaseResult::from_latencies("t", "p", 1, lat, 1_000_000, 1.0);
        assert_eq!(r.ops, 100);
        assert!((r.p50_us - 51.0).abs() < 1.01);
        assert!((r.p99_us - 99.0).abs() < 1.01);
        assert!((r.mb_per_s - 1.0).abs() < 1e-9);
    }
}
