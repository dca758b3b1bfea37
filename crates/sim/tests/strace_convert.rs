//! strace output to nfsdump: what each system call becomes.

use sim::trace::strace::Converter;
use sim::trace::{Kind, Op, nfsdump};

fn convert(log: &str) -> (String, sim::trace::strace::ConvertStats) {
    let mut c = Converter::new("/m/t", "/m/t", Vec::new());
    for l in log.lines() {
        c.line(l).expect("the test setup");
    }
    let stats = c.stats.clone();
    (
        String::from_utf8(c.finish().expect("the test setup")).expect("the test setup"),
        stats,
    )
}

const LOG: &str = r#"100 1.000000 newfstatat(AT_FDCWD, ".", {st_mode=S_IFDIR|0755, st_size=4096}, 0) = 0
100 1.000001 openat(AT_FDCWD, "/usr/lib/libc.so.6", O_RDONLY|O_CLOEXEC) = 3</usr/lib/libc.so.6>
100 1.000002 openat(AT_FDCWD, ".", O_RDONLY|O_DIRECTORY) = 4</m/t>
100 1.000003 getdents64(4</m/t>, [{d_ino=1, d_off=1, d_reclen=24, d_type=DT_DIR, d_name="."}, {d_ino=2, d_off=2, d_reclen=24, d_type=DT_DIR, d_name="src"}, {d_ino=3, d_off=3, d_reclen=24, d_type=DT_REG, d_name="a b"}], 32768) = 72
100 1.000004 getdents64(4</m/t>, [], 32768) = 0
100 1.000005 clone(child_stack=NULL, flags=SIGCHLD <unfinished ...>
100 1.000006 <... clone resumed>) = 101
101 1.000007 chdir("src") = 0
101 1.000008 openat(AT_FDCWD, "main.o", O_RDONLY) = -1 ENOENT (No such file or directory)
101 1.000009 openat(AT_FDCWD, "main.o.tmp", O_WRONLY|O_CREAT|O_EXCL, 0644) = 5</m/t/src/main.o.tmp>
101 1.000010 fsync(5</m/t/src/main.o.tmp>) = 0
101 1.000011 close(5</m/t/src/main.o.tmp>) = 0
101 1.000012 rename("main.o.tmp", "main.o") = 0
101 1.000013 newfstatat(AT_FDCWD, "/m/t/src/main.o", {st_mode=S_IFREG|0644, st_size=10}, 0) = 0
101 1.000014 mkdirat(AT_FDCWD, "obj", 0777) = 0
101 1.000015 unlinkat(AT_FDCWD, "/m/t/src/main.o", 0) = 0
101 1.000016 stat("/m/t/src/main.o", 0x7ffd) = -1 ENOENT (No such file or directory)
100 1.000017 openat(4</m/t>, "a b", O_RDONLY|O_TRUNC) = 6</m/t/a b>
100 1.000018 +++ exited with 0 +++
"#;

#[test]
fn system_calls_become_the_requests_an_nfs_client_makes() {
    let (nfs, stats) = convert(LOG);
    assert_eq!(stats.outside, 1, "the library open is outside the root");
    let t = nfsdump::parse(&nfs);
    assert_eq!(t.stats.malformed, 0, "{:?}\n{nfs}", t.stats.examples);
    let h = |name: &str| {
        t.handles
            .iter()
            .position(|x| x == name)
            .expect("the test setup") as u32
    };
    let (root, src) = (h("00000001"), h("00000002"));
    let ops: Vec<&Op> = t.events.iter().map(|e| &e.op).collect();
    let want_prefix = [
        // The stat of the root, then the listing with handles and types.
        Op::Use {
            node: root,
            kind: Some(Kind::Dir),
        },
        Op::Readdir {
            dir: root,
            entries: vec![
                ("src".into(), Some((src, Kind::Dir))),
                ("a b".into(), Some((h("00000003"), Kind::File))),
            ],
        },
        // The child's chdir looks src up; its probe fails there.
        Op::Lookup {
            dir: root,
            name: "src".into(),
            child: Some((src, Kind::Dir)),
        },
        Op::Lookup {
            dir: src,
            name: "main.o".into(),
            child: None,
        },
        // An exclusive create: the kernel's lookup of the new name first.
        Op::Lookup {
            dir: src,
            name: "main.o.tmp".into(),
            child: None,
        },
    ];
    assert_eq!(
        &ops[..want_prefix.len()],
        &want_prefix.iter().collect::<Vec<_>>()[..],
        "{nfs}"
    );
    let tmp = match ops[5] {
        Op::Create {
            dir,
            name,
            child,
            kind,
        } => {
            assert_eq!(
                (*dir, name.as_str(), *kind),
                (src, "main.o.tmp", Kind::File)
            );
            *child
        }
        o => panic!("expected the create, got {o:?}"),
    };
    // fsync is a commit (a use of the file's data), then the rename.
    assert_eq!(ops[6], &Op::Data { node: tmp });
    assert!(ops[7..].iter().any(|o| **o
        == Op::Rename {
            from_dir: src,
            from: "main.o.tmp".into(),
            to_dir: src,
            to: "main.o".into()
        }));
    // The renamed file keeps its handle; the stat finds it there.
    assert!(ops.iter().any(|o| **o
        == Op::Use {
            node: tmp,
            kind: Some(Kind::File)
        }));
    assert!(
        ops.iter()
            .any(|o| matches!(o, Op::Create { name, kind: Kind::Dir, .. } if name == "obj"))
    );
    assert!(ops.iter().any(|o| **o
        == Op::Remove {
            dir: src,
            name: "main.o".into()
        }));
    // After the remove, the stat is a failed lookup again.
    let last_probe = ops
        .iter()
        .rposition(|o| matches!(o, Op::Lookup { name, child: None, .. } if name == "main.o"))
        .expect("the test setup");
    let removed = ops
        .iter()
        .position(|o| matches!(o, Op::Remove { .. }))
        .expect("the test setup");
    assert!(last_probe > removed);
    // The truncating open of an existing file through a directory
    // descriptor: a lookup in the root, a setattr, then its data.
    let n = ops.len();
    assert_eq!(
        ops[n - 3],
        &Op::Lookup {
            dir: root,
            name: "a b".into(),
            child: Some((h("00000003"), Kind::File))
        }
    );
    assert_eq!(
        ops[n - 2],
        &Op::Modify {
            node: h("00000003")
        }
    );
    assert_eq!(
        ops[n - 1],
        &Op::Data {
            node: h("00000003")
        }
    );
    // Times come from strace's timestamps.
    assert!((t.events[0].time - 1.0).abs() < 1e-9);
}

#[test]
fn garbage_and_cut_lines_are_skipped() {
    let (nfs, stats) = convert(
        "garbage\n\
         100 openat(AT_FDCWD, \"x\", O_RDONLY <unfinished ...>\n\
         101 <... close resumed>) = 0\n\
         100 openat(AT_FDCWD, \"unterminated, O_RDONLY) = 3\n\
         100 stat(\"/m/t\", {st_mode=S_IFDIR|0755}) = 0\n",
    );
    assert_eq!(stats.calls, 1, "{nfs}");
    assert_eq!(nfsdump::parse(&nfs).events.len(), 1);
}

/// The traced root made, removed, probed and renamed around; names moved
/// out of the tree and in; a child reported before its fork; an exit.
#[test]
fn the_root_and_the_tree_edges_never_break_the_converter() {
    let log = r#"1 1.0 mkdir("/m/t", 0777) = 0
1 1.1 mkdir("/m/t/d", 0777) = 0
2 1.15 chdir("/m/t/d") = 0
1 1.2 clone(child_stack=NULL, flags=SIGCHLD) = 2
2 1.25 openat(AT_FDCWD, "x", O_WRONLY|O_CREAT|O_EXCL, 0644) = 3</m/t/d/x>
1 1.3 rename("/m/t/d/x", "/tmp/out") = 0
1 1.4 rename("/tmp/in", "/m/t/d/y") = 0
1 1.45 rename("/m/t/d/y", "/m/t/d/y") = 0
1 1.5 rmdir("/m/t/d") = -1 ENOTEMPTY (Directory not empty)
1 1.6 unlink("/m/t/d/y") = 0
1 1.7 rmdir("/m/t/d") = 0
1 1.8 rmdir("/m/t") = 0
1 1.9 stat("/m/t", 0x7ff) = -1 ENOENT (No such file or directory)
1 2.0 stat("/m/t/gone/deeper", 0x7ff) = -1 ENOENT (No such file or directory)
1 2.1 mkdir("/m/t", 0777) = 0
1 2.2 openat(AT_FDCWD, "/m/t/z", O_WRONLY|O_CREAT, 0644) = 4</m/t/z>
2 2.3 +++ exited with 0 +++
1 2.4 mkdir("/m/t/q", 0777) = ? ERESTARTSYS (To be restarted if SA_RESTART is set)
"#;
    let (nfs, _) = convert(log);
    let t = nfsdump::parse(&nfs);
    assert_eq!(t.stats.malformed, 0, "{:?}\n{nfs}", t.stats.examples);
    let creates: Vec<&str> = t
        .events
        .iter()
        .filter_map(|e| match &e.op {
            Op::Create { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    // d, the child's x (in d: the child's own chdir holds), y moved in, z;
    // never the root, never the interrupted mkdir.
    assert_eq!(creates, vec!["d", "x", "y", "z"], "{nfs}");
    let removes: Vec<&str> = t
        .events
        .iter()
        .filter_map(|e| match &e.op {
            Op::Remove { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    // x moved out, y, then d.
    assert_eq!(removes, vec!["x", "y", "d"], "{nfs}");
    assert!(
        !t.events.iter().any(|e| matches!(&e.op, Op::Rename { .. })),
        "renames across the tree's edge or onto themselves are not renames"
    );
}
