//! The one wall clock every layer above the store reads: capability expiry,
//! heartbeat stamps, leases and inode times all come from here, so they
//! agree on units and on what a clock before 1970 reads as (zero).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Nanoseconds since the Unix epoch as POSIX times carry them (0 if the
/// clock is before it).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_agree_and_move_forward() {
        let (ms, ns) = (now_ms(), now_ns());
        assert!(ms > 1_600_000_000_000, "after 2020: {ms}");
        assert!((ns / 1_000_000).abs_diff(ms as i64) < 1_000);
        assert!(now_ns() >= ns);
    }
}
