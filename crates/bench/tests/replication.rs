//! `bench replication` end to end on a tiny configuration, under both
//! policies (copies in layouts, replica chains): every figure measured,
//! and recovery seen to copy what the lost OSD held. Skipped (with a
//! message) where loop devices are not available.

use bench::replication::{Policies, ReplParams, print, run};

#[test]
fn replication_run_measures_both_policies() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root for loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = ReplParams {
        write: 16 << 20,
        recover: 96 << 20,
        fio_secs: 1,
        policies: Policies::Both,
    };
    let s = run(dir.path(), p).unwrap();
    print(&s, p);
    assert!(s.fio_write_mb_s > 0.0 && s.fio_write_qd16_mb_s > 0.0);
    let names: Vec<&str> = s.runs.iter().map(|r| r.namespace.as_str()).collect();
    assert_eq!(names, ["mds", "osd"]);
    for r in &s.runs {
        assert!(r.write_mb_s.iter().all(|w| *w > 0.0), "{r:?}");
        assert!(
            r.read_healthy_mb_s > 0.0 && r.read_degraded_mb_s > 0.0,
            "{r:?}"
        );
        // The lost OSD held at least the read file's 16 MiB (its preferred
        // copy, or its group's head): recovery copied it again.
        assert!(r.recovered_bytes >= 16 << 20, "{r:?}");
        assert!(r.recovery_mb_s > 0.0 && r.recovery_ratio > 0.0, "{r:?}");
        assert!(r.seconds_to_healthy > 0.0, "{r:?}");
    }
    // Layouts place each stripe object on its own: an added fifth OSD
    // always gets a share (chains move whole groups, or none).
    assert!(s.runs[0].rebalance_bytes > 0, "{:?}", s.runs[0]);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "the run cleans up after itself"
    );
}
