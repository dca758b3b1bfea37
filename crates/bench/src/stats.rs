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
