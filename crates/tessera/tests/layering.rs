//! The layers stay layers: reads `cargo metadata` and fails when a crate
//! depends (normally, not for its tests) on a workspace crate its layer may
//! not use, or when the FUSE mount links the MDS's database, the store or a
//! daemon. `docs/ARCHITECTURE.md` draws the same graph.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each workspace crate and the workspace crates it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("tessera-store", &[]),
    ("tessera-proto", &[]),
    ("tessera-posix", &["tessera-proto"]),
    ("tessera-net", &["tessera-proto"]),
    (
        "tessera-osd",
        &["tessera-store", "tessera-proto", "tessera-net"],
    ),
    (
        "tessera-mds",
        &[
            "tessera-store",
            "tessera-proto",
            "tessera-net",
            "tessera-posix",
        ],
    ),
    (
        "tessera-osdns",
        &["tessera-proto", "tessera-net", "tessera-posix"],
    ),
    (
        "tessera-client",
        &[
            "tessera-proto",
            "tessera-net",
            "tessera-posix",
            "tessera-osdns",
        ],
    ),
    (
        "tessera-fuse",
        &["tessera-client", "tessera-proto", "tessera-posix"],
    ),
    (
        "tessera-local",
        &[
            "tessera-store",
            "tessera-proto",
            "tessera-net",
            "tessera-osd",
            "tessera-mds",
        ],
    ),
    (
        "tessera-dash",
        &["tessera-proto", "tessera-net", "tessera-mds"],
    ),
    (
        "tessera-sim",
        &[
            "tessera-store",
            "tessera-proto",
            "tessera-mds",
            "tessera-client",
        ],
    ),
    (
        "tessera-bench",
        &[
            "tessera-store",
            "tessera-proto",
            "tessera-net",
            "tessera-posix",
            "tessera-osd",
            "tessera-mds",
            "tessera-osdns",
            "tessera-client",
            "tessera-fuse",
            "tessera-local",
            "tessera-sim",
        ],
    ),
];

/// Packages the mount must never link, directly or through another crate.
const NEVER_IN_FUSE: &[&str] = &[
    "redb",
    "openraft",
    "tessera-store",
    "tessera-osd",
    "tessera-mds",
    "tessera-local",
];

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Each workspace package's normal (not dev, not build) dependencies by
/// package name, as its manifest declares them. External crates appear as
/// leaves: whatever links them goes through a manifest listed here.
fn graph(meta: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let deps: BTreeSet<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        g.insert(p["name"].as_str().unwrap().to_string(), deps);
    }
    g
}

#[test]
fn workspace_crates_depend_only_on_layers_below() {
    let g = graph(&metadata());
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(c, a)| (*c, a.iter().copied().collect()))
        .collect();
    let mut wrong = Vec::new();
    for (krate, deps) in &g {
        if !krate.starts_with("tessera") || krate == "tessera" {
            continue;
        }
        let Some(ok) = allowed.get(krate.as_str()) else {
            wrong.push(format!(
                "{krate} is not in the layering table; add it with its layer"
            ));
            continue;
        };
        for d in deps.iter().filter(|d| d.starts_with("tessera-")) {
            if !ok.contains(d.as_str()) {
                wrong.push(format!(
                    "{krate} depends on {d}, which its layer may not use"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_mount_links_no_database_store_or_daemon() {
    let g = graph(&metadata());
    let mut seen = BTreeSet::new();
    let mut todo = vec!["tessera-fuse".to_string()];
    while let Some(p) = todo.pop() {
        if seen.insert(p.clone()) {
            todo.extend(g.get(&p).into_iter().flatten().cloned());
        }
    }
    let linked: Vec<&&str> = NEVER_IN_FUSE
        .iter()
        .filter(|n| seen.contains(**n))
        .collect();
    assert!(linked.is_empty(), "tessera-fuse links {linked:?}");
    assert!(seen.contains("tessera-client"), "the walk found the client");
}
