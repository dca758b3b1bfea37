//! No cycle between modules inside a crate, beyond the ones listed here
//! (which may only shrink): a module that reaches into a sibling (through
//! `crate::`, `super::` or `self::` paths, `use` lists included) depends
//! on it, and two siblings that depend on each other, directly or round a
//! longer loop, cannot be read, tested or changed apart. A child using
//! its parent, or a parent its child, is no such dependency.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

mod source_tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Cycles found when this test was written (crate, the modules in it),
/// to be broken one by one; none may grow and no new one may appear.
const KNOWN: &[(&str, &[&str])] = &[
    (
        "client",
        &[
            // An open file's capabilities, split out of `file` (the same
            // hub: both reach the client's shared state).
            "caps",
            "client",
            // Closed files are written out with `file`'s commit, from the
            // client's timer and namespace calls: the hub's cycle.
            "closed",
            "file",
            "locks",
            "open_file",
            "privs",
            "state",
            "targets",
            "xattrs",
        ],
    ),
    ("net", &["auth", "connection", "files", "keys"]),
    ("proto", &["auth", "chain", "msg"]),
    ("proto", &["mds", "replay", "space", "status"]),
    ("store", &["journal", "meta", "onode", "store", "table"]),
];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The module a source file defines (`a/mod.rs` and `a.rs` are `a`).
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// The code of a file without comments and without its tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `crate::`/`super::`/`self::` path in `code`, with the entries of
/// a `{...}` list after one as paths of their own (one level).
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts = [&b"crate::"[..], b"super::", b"self::"]
            .iter()
            .any(|p| b[i..].starts_with(p));
        if !starts || (i > 0 && is_ident(b[i - 1] as char)) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (is_ident(b[j] as char) || b[j] == b':') {
            j += 1;
        }
        let base = code[i..j].trim_end_matches(':').to_string();
        if code[j..].starts_with('{')
            && let Some(end) = code[j..].find('}')
        {
            for part in code[j + 1..j + end].split(',') {
                let name: String = part.trim().chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    out.push(format!("{base}::{name}"));
                }
            }
        }
        out.push(base);
        i = j.max(i + 1);
    }
    out
}

/// `path` as a module path from the crate root, seen from module `here`.
fn resolve(here: &Module, path: &str) -> Module {
    let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut cur = here.clone();
    if segs.peek() == Some(&"crate") {
        cur.clear();
        segs.next();
    }
    while let Some(&s) = segs.peek() {
        match s {
            "super" => {
                cur.pop();
            }
            "self" => {}
            _ => break,
        }
        segs.next();
    }
    cur.extend(
        segs.filter(|s| *s != "self" && *s != "*")
            .map(str::to_string),
    );
    cur
}

/// The sibling-to-sibling dependencies of one crate's modules.
fn edges(src: &Path) -> BTreeSet<(Module, Module)> {
    let files = source_tree::rust_files(src);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut e = BTreeSet::new();
    for f in &files {
        let here = module_of(src, f);
        for p in paths(&code(&std::fs::read_to_string(f).unwrap())) {
            let mut to = resolve(&here, &p);
            while !to.is_empty() && !modules.contains(&to) {
                to.pop();
            }
            let common = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < here.len() && common < to.len() {
                e.insert((here[..=common].to_vec(), to[..=common].to_vec()));
            }
        }
    }
    e
}

/// The strongly connected groups of more than one module (Tarjan).
fn cycles(edges: &BTreeSet<(Module, Module)>) -> Vec<BTreeSet<String>> {
    let mut g: BTreeMap<&Module, Vec<&Module>> = BTreeMap::new();
    for (a, b) in edges {
        g.entry(a).or_default().push(b);
        g.entry(b).or_default();
    }
    struct T<'a> {
        g: BTreeMap<&'a Module, Vec<&'a Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g[v].clone() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = BTreeSet::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                group.insert(w.join("::"));
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                t.out.push(group);
            }
        }
    }
    let keys: Vec<&Module> = g.keys().copied().collect();
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in keys {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_finder_sees_a_cycle_and_no_false_one() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("svc")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a; mod b; mod svc;").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::thing;").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::{a, b};\n// crate::svc").unwrap();
    std::fs::write(src.join("svc/mod.rs"), "use super::a::x;").unwrap();
    std::fs::write(src.join("svc/x.rs"), "use super::y::z; use crate::svc::Q;").unwrap();
    std::fs::write(src.join("svc/y.rs"), "use super::{x::W, Q};").unwrap();
    let found = cycles(&edges(src));
    let names: Vec<Vec<&str>> = found
        .iter()
        .map(|g| g.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&vec!["a", "b"]), "{names:?}");
    assert!(names.contains(&vec!["svc::x", "svc::y"]), "{names:?}");
}

#[test]
fn no_new_cycle_between_modules_of_a_crate() {
    let mut problems = Vec::new();
    let mut known: Vec<(String, BTreeSet<String>)> = KNOWN
        .iter()
        .map(|(c, m)| (c.to_string(), m.iter().map(|s| s.to_string()).collect()))
        .collect();
    let root = crates_dir();
    let mut crates: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    for c in crates {
        let name = c.file_name().unwrap().to_string_lossy().into_owned();
        for group in cycles(&edges(&c.join("src"))) {
            let within = known
                .iter()
                .position(|(k, m)| *k == name && group.is_subset(m));
            match within {
                Some(i) if known[i].1 == group => {
                    known.remove(i);
                }
                Some(i) => {
                    let (_, m) = known.remove(i);
                    problems.push(format!(
                        "{name}: the known cycle {m:?} is down to {group:?}: list that instead"
                    ));
                }
                None => problems.push(format!(
                    "{name}: a cycle between modules: {group:?} (each depends on the next; break it)"
                )),
            }
        }
    }
    for (c, m) in known {
        problems.push(format!(
            "{c}: the known cycle {m:?} is gone: take it off KNOWN"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
