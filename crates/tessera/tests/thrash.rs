//! `tessera thrash` end to end, as an operator runs it: a few rounds in
//! each namespace mode pass (every acknowledged file reads back, every
//! removed one stays gone, every store is clean), and a run where a file
//! is overwritten behind the oracle's back fails with the schedule and the
//! command that replays it — so a pass means something.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod common;

use std::process::Command;

fn thrash(args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::BIN)
        .arg("thrash")
        .arg("--dir")
        .arg(dir.path().join("c"))
        .args(args)
        .env("TESSERA_LOG", "error")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_few_rounds_in_each_mode_lose_nothing() {
    // Seeds whose five rounds draw every kind of fault between them (a
    // unit test in `cmd/thrash/faults.rs` holds them to it): a flipped
    // bit, a snapshot and the older store put back, kills of some OSDs,
    // of the MDS, of every OSD (once with a store lost), an OSD's clock
    // stepped back 215 s while it serves, and in each mode the disks
    // filled to ENOSPC and freed.
    for (mode, seed) in [("osd", "112"), ("mds", "294")] {
        let (ok, text) = thrash(&["--seed", seed, "--rounds", "5", "--namespace", mode]);
        assert!(ok, "{mode}: {text}");
        assert!(text.contains("thrash passed: 5 rounds"), "{mode}: {text}");
        assert_eq!(text.matches("files read back").count(), 5, "{text}");
    }
}

#[test]
fn a_change_behind_the_oracles_back_is_reported_with_the_command_that_replays_it() {
    let (ok, text) = thrash(&[
        "--seed",
        "5",
        "--rounds",
        "2",
        "--namespace",
        "osd",
        "--heal-secs",
        "20",
        "--sabotage",
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("FAILED (seed 5): round 1"), "{text}");
    assert!(text.contains("do not read back"), "{text}");
    assert!(text.contains("schedule so far:"), "{text}");
    assert!(
        text.contains("replay with: tessera thrash --seed 5 --rounds 2"),
        "{text}"
    );
}

#[test]
fn impossible_settings_are_refused() {
    let (ok, text) = thrash(&["--osds", "2", "--replicas", "3"]);
    assert!(!ok);
    assert!(text.contains("needs at least as many OSDs"), "{text}");
}
