//! `bench programs` end to end on a small tree: ext4 on a loop device,
//! bindfs over it when installed, and a real cluster through FUSE; every
//! workload's result is checked inside the run (`tar -d`, `git fsck`).
//! Skipped (with a message) where FUSE mounts and loop devices are not
//! available.

#[test]
fn programs_run_measures_and_checks_every_workload() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: needs root, /dev/fuse and loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = bench::programs_bench::Tree {
        dirs: 6,
        files: 10,
        seed: 3,
    };
    let rows = bench::programs_bench::run_bench(dir.path(), t).unwrap();
    bench::programs_bench::print(&rows, t);
    let names: Vec<_> = rows.iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(names, ["untar", "git clone", "rm -rf"]);
    assert!(rows.iter().all(|r| r.ext4 > 0.0 && r.tessera > 0.0));
    assert!(rows.iter().all(|r| r.fuse_floor.is_none_or(|f| f > 0.0)));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "the run cleans up after itself"
    );
}
