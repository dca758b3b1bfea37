//! `docs/ARCHITECTURE.md` stays a map of the code: every source file of a
//! library or the command appears in its crate's section (by its path
//! under `src/`, or by its name in the row of its directory), and every
//! `tessera` subcommand is named. Fails when a file or command lands
//! without its line.

mod source_tree;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of every `## ` section whose title names `` `krate` ``.
fn section(doc: &str, krate: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for l in doc.lines() {
        if let Some(title) = l.strip_prefix("## ") {
            inside = title.contains(&format!("`{krate}`"));
        }
        if inside {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

#[test]
fn every_source_file_is_on_the_map() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let krate_dir = e.unwrap().path();
        let krate = krate_dir.file_name().unwrap().to_str().unwrap().to_string();
        let src = krate_dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let text = section(&doc, &krate);
        assert!(
            !text.is_empty(),
            "docs/ARCHITECTURE.md has no section for `{krate}`"
        );
        let files = source_tree::rust_files(&src);
        for f in files {
            let rel = f.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
            if ["lib.rs", "main.rs"].contains(&rel.as_str()) {
                continue;
            }
            let name = f.file_name().unwrap().to_str().unwrap();
            let dir = rel.rsplit_once('/').map(|(d, _)| format!("{d}/"));
            let on_map = text.contains(&format!("`{rel}`"))
                || text.contains(&rel)
                || dir.as_ref().is_some_and(|d| {
                    text.lines().any(|l| {
                        l.contains(&format!("`{d}")) && (name == "mod.rs" || l.contains(name))
                    })
                });
            if !on_map {
                missing.push(format!("crates/{krate}/src/{rel}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "source files docs/ARCHITECTURE.md does not map (add a row to their crate's table): {missing:#?}"
    );
}

#[test]
fn every_command_is_on_the_map() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let text = section(&doc, "tessera");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 15, "{help}");
    let missing: Vec<&str> = commands
        .into_iter()
        .filter(|c| !text.contains(&format!("tessera {c}")) && !text.contains(&format!("`{c}")))
        .collect();
    assert!(
        missing.is_empty(),
        "commands the `tessera` section of docs/ARCHITECTURE.md does not name: {missing:?}"
    );
}
