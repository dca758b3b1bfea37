//! `bench small` end to end on a tiny configuration: a real cluster mounted
//! through FUSE and ext4 on a loop device, every point measured. Skipped
//! (with a message) where FUSE mounts and loop devices are not available.

#[test]
fn small_run_measures_every_point_on_both_sides() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: needs root, /dev/fuse and loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rows = bench::small_bench::run(dir.path(), 48).unwrap();
    bench::small_bench::print(&rows, 48);
    // 2 operations × 3 worker counts × 2 directory shapes.
    assert_eq!(rows.len(), 12);
    assert!(
        rows.iter()
            .all(|r| r.mount > 0.0 && r.mount_no_lease > 0.0 && r.mount_sync > 0.0 && r.ext4 > 0.0)
    );
    assert_eq!(rows.iter().filter(|r| r.shared).count(), 6);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "the run cleans up after itself"
    );
}
