//! The code stays in small pieces: no library file (`crates/*/src`) over
//! 800 lines and no function over 150, except the ones listed below, which
//! were over when this test was written and may only shrink (each entry is
//! its size then: growing past it fails, and so does a new file or
//! function over the limit). Splitting one is issue work; taking it off the
//! list once it fits is part of that work (the test says when it can go).
//! A function's length is counted from its `fn` line to the closing brace
//! at the same indentation, as rustfmt lays code out.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod source_tree;

use std::path::{Path, PathBuf};

const FILE_MAX: usize = 800;
const FN_MAX: usize = 150;

/// Files over [`FILE_MAX`] lines, and their size when this list was made.
const BIG_FILES: &[(&str, usize)] = &[];

/// Functions over [`FN_MAX`] lines (file, name), and their length then.
const LONG_FNS: &[(&str, &str, usize)] = &[
    ("crates/mds/src/fsck.rs", "check", 161),
    ("crates/mds/src/kv/commit.rs", "run_batch", 195),
    ("crates/mds/src/metrics.rs", "new", 165),
    ("crates/mds/src/service/auth.rs", "serve_checked", 176),
    ("crates/mds/src/service/dispatch.rs", "handle", 164),
    ("crates/net/src/serve.rs", "connection", 237),
    ("crates/osdns/src/fsck.rs", "fsck", 186),
    ("crates/store/src/crashtest.rs", "run", 161),
    ("crates/store/src/meta.rs", "apply", 156),
    ("crates/tessera/src/cmd/store_ops.rs", "run", 221),
    ("crates/tessera/src/cmd/up.rs", "run", 194),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file under `crates/*/src`, relative to the workspace.
fn library_files(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .flat_map(|src| source_tree::rust_files(&src))
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap();
            rel.to_str().unwrap().replace('\\', "/")
        })
        .collect();
    out.sort();
    out
}

/// The name of the function a line starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for q in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// (name, length in lines) of every function with a body in `text`.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = fn_name(l) else { continue };
        let indent = &l[..l.len() - l.trim_start().len()];
        // The line that opens the body (a declaration ends with ';').
        let Some(open) = (i..lines.len()).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';') || t.ends_with('}')
        }) else {
            continue;
        };
        let t = lines[open].trim_end();
        if !t.ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&k| lines[k] == close) {
            out.push((name.to_string(), end - i + 1));
        }
    }
    out
}

#[test]
fn files_and_functions_stay_small() {
    let root = workspace();
    let mut problems = Vec::new();
    let mut shrunk = Vec::new();
    for f in library_files(&root) {
        let text = std::fs::read_to_string(root.join(&f)).unwrap();
        let n = text.lines().count();
        let allowed = BIG_FILES.iter().find(|(p, _)| *p == f).map(|x| x.1);
        match allowed {
            Some(max) if n > max => problems.push(format!("{f}: {n} lines (was {max}; split it)")),
            Some(_) if n <= FILE_MAX => shrunk.push(format!("{f} fits now: take it off BIG_FILES")),
            None if n > FILE_MAX => problems.push(format!("{f}: {n} lines, over {FILE_MAX}")),
            _ => {}
        }
        for (name, len) in functions(&text) {
            let allowed = LONG_FNS
                .iter()
                .find(|(p, fname, _)| *p == f && *fname == name)
                .map(|x| x.2);
            match allowed {
                Some(max) if len > max => {
                    problems.push(format!("{f}: fn {name} is {len} lines (was {max})"))
                }
                None if len > FN_MAX => {
                    problems.push(format!("{f}: fn {name} is {len} lines, over {FN_MAX}"))
                }
                _ => {}
            }
        }
    }
    if !shrunk.is_empty() {
        println!("{}", shrunk.join("\n"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_counter_finds_functions_and_their_ends() {
    let text = "impl X {\n    pub(super) async fn a(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n\n    fn b();\n}\nfn c() {}\nconst fn d() -> u8 {\n    1\n}\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 5), ("d".to_string(), 3)]
    );
}
