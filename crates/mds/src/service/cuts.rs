//! Links between two members of a replica chain that are cut while both
//! still reach the MDS: a member asks that its successor be dropped
//! (CHAIN DROP, not refused), the successor's lease never runs out, so
//! it stays — and every write to the group fails while the link is cut.
//! The MDS cannot tell which end is cut off (dropping the successor
//! would leave a head that reaches nobody alone with the writes), so it
//! keeps the chain and says so: the health line reports each such group
//! as unable to take writes until the member stops asking.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most cut links the status names (the count covers them all).
pub const CUTS_NAMED: usize = 8;

/// Recently reported cut links, per group: (member, its successor, when).
#[derive(Default)]
pub struct Cuts {
    seen: Mutex<HashMap<u32, (u32, u32, Instant)>>,
    /// When each OSD last said it restarted (CHAIN RESTARTED).
    restarts: Mutex<HashMap<u32, Instant>>,
}

impl Cuts {
    /// `from`, a member of `group`, could not reach `to`, its successor,
    /// which is up.
    pub fn note(&self, group: u32, from: u32, to: u32) {
        self.lock().insert(group, (from, to, Instant::now()));
    }

    /// The cuts reported within `fresh` whose two ends are still members
    /// of the group in that order (`still(group, from, to)`), by group;
    /// the others are forgotten.
    pub fn current(
        &self,
        fresh: Duration,
        still: impl Fn(u32, u32, u32) -> bool,
    ) -> Vec<(u32, u32, u32)> {
        let mut seen = self.lock();
        seen.retain(|&g, &mut (a, b, at)| at.elapsed() < fresh && still(g, a, b));
        let mut out: Vec<_> = seen.iter().map(|(&g, &(a, b, _))| (g, a, b)).collect();
        out.sort_unstable();
        out
    }

    /// OSD `osd` restarted now.
    pub fn restarted(&self, osd: u32) {
        self.restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(osd, Instant::now());
    }

    /// Whether OSD `osd` restarted at or after `t`.
    pub fn restarted_since(&self, osd: u32, t: Instant) -> bool {
        self.restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&osd)
            .is_some_and(|&at| at >= t)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (u32, u32, Instant)>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_counts_while_fresh_and_while_both_ends_are_members() {
        let c = Cuts::default();
        c.note(4, 1, 2);
        c.note(7, 3, 1);
        let all = |_, _, _| true;
        assert_eq!(
            c.current(Duration::from_secs(10), all),
            vec![(4, 1, 2), (7, 3, 1)]
        );
        // The successor left group 7's chain (dropped, or the chain changed).
        assert_eq!(
            c.current(Duration::from_secs(10), |g, _, _| g != 7),
            vec![(4, 1, 2)]
        );
        // A restart is told apart by its time.
        let before = Instant::now();
        assert!(!c.restarted_since(5, before));
        c.restarted(5);
        assert!(c.restarted_since(5, before) && !c.restarted_since(6, before));
        // Gone for good, not only hidden.
        assert_eq!(c.current(Duration::from_secs(10), all), vec![(4, 1, 2)]);
        // A newer report of the group replaces the older pair.
        c.note(4, 2, 3);
        assert_eq!(c.current(Duration::from_secs(10), all), vec![(4, 2, 3)]);
        // Not asked again within the window: healed.
        std::thread::sleep(Duration::from_millis(30));
        assert!(c.current(Duration::from_millis(20), all).is_empty());
    }
}
