//! The dirops benchmark end to end on a small configuration: three real
//! clusters, every phase, the charts and the JSON; and the structural
//! figures that do not drift with the machine (OSD commands per insert).

#[test]
fn dirops_small_run_reports_every_point_and_one_command_per_atomic_insert() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = bench::dirops::Config {
        levels: vec![50, 200],
        samples: 10,
        clients: vec![1, 4],
        per_phase: 40,
        dir: dir.path().to_path_buf(),
    };
    let r = bench::dirops::run(&cfg).unwrap();
    bench::dirops::print(&r);
    // 3 modes × 6 ops × 2 levels, and × 2 client counts.
    assert_eq!(r.latency.len(), 36);
    assert_eq!(r.throughput.len(), 36);
    assert!(
        r.latency
            .iter()
            .all(|l| l.p50_us > 0.0 && l.p99_us >= l.p50_us)
    );
    assert!(r.throughput.iter().all(|t| t.ops_per_sec > 0.0));
    // An insert of a fresh name: one compare-and-swap (atomic); lock,
    // look up, write, unlock (lock).
    assert_eq!(r.atomic_insert_round_trips, 1.0);
    assert_eq!(r.lock_insert_round_trips, 4.0);
    // A create: the object with its attributes, then the entry (plus one
    // fetch-and-add per 1,024 inode numbers).
    assert!(
        (2.0..2.1).contains(&r.atomic_create_round_trips),
        "{}",
        r.atomic_create_round_trips
    );
    assert_eq!(r.charts.len(), 12);
    for c in &r.charts {
        let svg = std::fs::read_to_string(c).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("atomic"),
            "{}",
            c.display()
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("dirops.json")).unwrap())
            .unwrap();
    assert_eq!(json["latency"].as_array().unwrap().len(), 36);
}
