//! `sim alloc` checkpoints: a run stopped and resumed gives exactly the
//! samples of a run never stopped; damaged checkpoints are refused clearly.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sim::alloc::files::{self, Start};
use sim::alloc::{AgingSim, AllocParams, Checkpoint, Outcome, SimPolicy};

fn params(policy: SimPolicy) -> AllocParams {
    AllocParams {
        ops: 1_200_000,
        policy,
        disk: 4 << 30,
        large_max: 16 << 20,
        temp_life: 20_000,
        seed: 9,
        ..AllocParams::default()
    }
}

#[test]
fn stop_and_resume_gives_the_samples_of_an_unbroken_run() {
    for policy in [SimPolicy::Extent, SimPolicy::Region] {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = params(policy);
        let mut whole = AgingSim::new(p.clone()).expect("valid");
        let done = whole
            .run(&AtomicBool::new(false), Duration::MAX, |_| {}, |_| Ok(()))
            .expect("runs");
        assert_eq!(done, Outcome::Finished);

        // Stop at the first epoch boundary, save, then resume from the file.
        let Start::Fresh(mut first) = files::start(dir.path(), &p, false).expect("start") else {
            panic!("an empty directory starts fresh");
        };
        let cp = files::checkpoint_path(dir.path(), &p.label());
        let outcome = first
            .run(
                &AtomicBool::new(true),
                Duration::MAX,
                |_| {},
                |s| s.checkpoint().save(&cp),
            )
            .expect("runs");
        assert_eq!(outcome, Outcome::Stopped);
        assert!(first.ops_done() < p.ops);
        assert!(
            files::start(dir.path(), &p, false).is_err(),
            "without --resume an existing checkpoint is never overwritten"
        );
        let Start::Resumed(mut second) = files::start(dir.path(), &p, true).expect("resume") else {
            panic!("the checkpoint is picked up");
        };
        assert_eq!(second.ops_done(), first.ops_done());
        second
            .run(&AtomicBool::new(false), Duration::MAX, |_| {}, |_| Ok(()))
            .expect("runs");
        second.check().expect("consistent after resume");
        assert!(
            second.samples() == whole.samples(),
            "{policy}: samples differ after resume"
        );
        assert_eq!(second.counters(), whole.counters(), "{policy}");
    }
}

#[test]
fn damaged_or_mismatched_checkpoints_are_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = params(SimPolicy::Extent);
    let cp = files::checkpoint_path(dir.path(), &p.label());
    std::fs::write(&cp, b"{ not json").expect("write");
    let err = format!(
        "{:#}",
        files::start(dir.path(), &p, true).err().expect("refused")
    );
    assert!(err.contains("not a readable aging checkpoint"), "{err}");

    let mut sim = AgingSim::new(p.clone()).expect("valid");
    sim.run(
        &AtomicBool::new(true),
        Duration::MAX,
        |_| {},
        |s| s.checkpoint().save(&cp),
    )
    .expect("runs");
    let other = AllocParams {
        streams: 4,
        ..p.clone()
    };
    let other_cp = files::checkpoint_path(dir.path(), &other.label());
    assert_eq!(cp, other_cp, "same label, different workload");
    let err = format!(
        "{:#}",
        files::start(dir.path(), &other, true)
            .err()
            .expect("refused")
    );
    assert!(err.contains("other parameters"), "{err}");

    let mut bad = Checkpoint::load(&cp).expect("loads");
    bad.version = 99;
    bad.save(&cp).expect("save");
    let err = format!("{:#}", Checkpoint::load(&cp).expect_err("refused"));
    assert!(err.contains("format 99"), "{err}");
}
