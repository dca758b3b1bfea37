//! The `tessera` binary end to end on real files: mkfs, store put/get/ls/
//! rm/stat/attr, fsck (clean and damaged), refusal of foreign signatures,
//! and the 2,000-cut power-loss test CI requires.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::path::Path;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("run tessera")
}

fn ok(args: &[&str]) -> String {
    let o = tessera(args);
    assert!(
        o.status.success(),
        "tessera {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn mkfs_put_get_ls_stat_attr_rm_fsck() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("osd.img");
    let out = ok(&[
        "mkfs",
        s(&img),
        "--size",
        "64M",
        "--policy",
        "region",
        "--large-block",
        "64K",
    ]);
    assert!(out.contains("policy region"), "{out}");
    // mkfs again without --force is refused: it is a store now.
    let o = tessera(&["mkfs", s(&img)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));

    let src = dir.path().join("in.bin");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    ok(&["store", "put", s(&img), "0x10001", s(&src)]);
    let dst = dir.path().join("out.bin");
    ok(&["store", "get", s(&img), "0x10001", s(&dst)]);
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    // Replacing with a shorter file leaves exactly the new contents.
    std::fs::write(&src, b"short").unwrap();
    ok(&["store", "put", s(&img), "65537", s(&src)]);
    ok(&["store", "get", s(&img), "0x10001", s(&dst)]);
    assert_eq!(std::fs::read(&dst).unwrap(), b"short");

    let ls = ok(&["store", "ls", s(&img)]);
    assert!(ls.contains("0x10001\t5"), "{ls}");
    let st = ok(&["store", "stat", s(&img), "0x10001"]);
    assert!(st.contains("size        5"), "{st}");
    let fs = ok(&["store", "stat", s(&img)]);
    assert!(fs.contains("objects     1"), "{fs}");

    ok(&["store", "attr", s(&img), "0x10001", "--set", "0x10:1=hello"]);
    assert_eq!(
        ok(&["store", "attr", s(&img), "0x10001", "--get", "0x10:1"]).trim(),
        "hello"
    );
    let all = ok(&["store", "attr", s(&img), "0x10001"]);
    assert!(
        all.contains("0x1:0x82\t5"),
        "logical length attribute: {all}"
    );
    let o = tessera(&["store", "attr", s(&img), "0x10001", "--set", "0x1:0x82=9"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("read-only"));

    let fsck = ok(&["fsck", s(&img)]);
    assert!(fsck.contains("clean"), "{fsck}");
    // A store in use by another process is refused, not opened twice.
    {
        let _held = store::device::FileDevice::open(&img).unwrap();
        let o = tessera(&["store", "ls", s(&img)]);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("in use by another process"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    ok(&["store", "rm", s(&img), "0x10001"]);
    let o = tessera(&["store", "get", s(&img), "0x10001", s(&dst)]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not found"));
    // Bad input gets specific errors.
    let o = tessera(&["store", "get", s(&img), "12", s(&dst)]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("reserved"));
    let o = tessera(&["mkfs", s(&dir.path().join("x.img")), "--size", "12Q"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown size unit"));
}

#[test]
fn fsck_reports_damage_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("osd.img");
    ok(&["mkfs", s(&img), "--size", "64M"]);
    // Damage both commit slots: nothing can be rebuilt.
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[4096 + 30] ^= 0xff;
    bytes[8192 + 30] ^= 0xff;
    std::fs::write(&img, &bytes).unwrap();
    let o = tessera(&["fsck", s(&img)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("commit slot"));
}

#[test]
fn mkfs_refuses_an_ext4_image_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ext4.img");
    std::fs::write(&img, vec![0u8; 64 << 20]).unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", s(&img)])
        .status();
    if !made.is_ok_and(|st| st.success()) {
        // No mkfs.ext4 here: plant the ext4 magic by hand.
        let mut b = std::fs::read(&img).unwrap();
        b[1080] = 0x53;
        b[1081] = 0xEF;
        std::fs::write(&img, b).unwrap();
    }
    let o = tessera(&["mkfs", s(&img)]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ext2/3/4"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tessera(&["store", "ls", s(&img)]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a Tessera store"));
    ok(&["mkfs", s(&img), "--force"]);
}

#[test]
fn crashtest_2000_cuts_without_violations() {
    let out = ok(&["store", "crashtest", "--cuts", "2000", "--seed", "20261122"]);
    assert!(out.contains("cuts=2000 violations=0"), "{out}");
}

#[test]
fn crashtest_with_concurrent_writers_without_violations() {
    // Four writers share journal batches, so one cut catches several
    // operations in flight.
    let out = ok(&[
        "store",
        "crashtest",
        "--cuts",
        "1000",
        "--seed",
        "11",
        "--threads",
        "4",
    ]);
    assert!(out.contains("cuts=1000 violations=0"), "{out}");
}

/// The file and cluster commands refuse bad input with a message that says
/// what is wrong and what to do, before touching anything.
#[test]
fn file_commands_refuse_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nothing-here");
    let fail = |args: &[&str], want: &str| {
        let o = tessera(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "tessera {args:?} should fail");
        assert!(err.contains(want), "tessera {args:?}: {err}");
    };
    // No cluster in the data directory: say how to start one.
    for cmd in [
        &["ls", "/"][..],
        &["stat", "/x"],
        &["status"],
        &["mkdir", "/a"],
    ] {
        let mut a = cmd.to_vec();
        a.extend_from_slice(&["--data", s(&data)]);
        fail(&a, "start one with `tessera up");
    }
    // A damaged cluster.toml is named.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("cluster.toml"), "mds = 7\nwhat = true\n").unwrap();
    fail(&["ls", "/", "--data", s(&data)], "cluster.toml is damaged");
    std::fs::remove_file(data.join("cluster.toml")).unwrap();
    // The local side of put is checked before the cluster.
    fail(
        &[
            "put",
            s(&dir.path().join("missing")),
            "/x",
            "--data",
            s(&data),
        ],
        "cannot open",
    );
    fail(
        &["put", s(dir.path()), "/x", "--data", s(&data)],
        "is not a regular file",
    );
    // Nothing listens at this MDS address.
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    // No key at all: refused before connecting, saying what to pass.
    fail(&["put", s(&f), "/x", "--mds", &port], "pass --key-file");
    let key = dir.path().join("k.key");
    std::fs::write(
        &key,
        format!(
            "cluster_id = \"tessera\"\nprincipal = \"client.x\"\nkey_version = 1\nsecret = \"{}\"\n",
            "ab".repeat(32)
        ),
    )
    .unwrap();
    fail(
        &["put", s(&f), "/x", "--mds", &port, "--key-file", s(&key)],
        "cannot reach the MDS",
    );
    fail(
        &["up", "--osds", "0", "--data", s(&dir.path().join("up"))],
        "--osds must be at least 1",
    );
    fail(
        &["up", "--size", "lots", "--data", s(&dir.path().join("up"))],
        "unknown size unit",
    );
    // Stores the disk under the data directory cannot hold: refused
    // before anything is made.
    fail(
        &[
            "up",
            "--size",
            "1000T",
            "--data",
            s(&dir.path().join("huge")),
        ],
        "choose a smaller --size",
    );
    assert!(!dir.path().join("huge").exists(), "nothing made");
    // Stores too small to hold a journal: refused before anything is made.
    for tiny in ["1K", "0"] {
        fail(
            &["up", "--size", tiny, "--data", s(&dir.path().join("tiny"))],
            "is too small",
        );
    }
    assert!(!dir.path().join("tiny").exists(), "nothing made");
    // Mount: a missing mount point, a bad window, an MDS that is not there.
    fail(
        &["mount", &port, s(&dir.path().join("nowhere"))],
        "does not exist",
    );
    fail(
        &["mount", &port, s(dir.path()), "--attr-timeout", "nan"],
        "--attr-timeout",
    );
    // A mount point with entries: refused (they would be hidden).
    std::fs::write(dir.path().join("keep.txt"), b"mine").unwrap();
    fail(&["mount", &port, s(dir.path())], "is not empty");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fail(
        &["mount", &port, s(&empty), "--key-file", s(&key)],
        "cannot reach the MDS",
    );
    fail(
        &[
            "mount",
            &port,
            s(dir.path()),
            "--nonempty",
            "--key-file",
            s(&key),
        ],
        "cannot reach the MDS",
    );
}

fn refused(args: &[&str]) -> String {
    let o = tessera(args);
    assert!(!o.status.success(), "tessera {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn sim_commands_run_resume_and_refuse_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("alloc");
    let small = [
        "sim",
        "alloc",
        "--ops",
        "2e5",
        "--disk",
        "4G",
        "--large-max",
        "16M",
        "--policy",
        "extent,region",
        "--out",
        s(&out),
    ];
    let table = ok(&small);
    assert!(
        table.contains("extent-s1-u80") && table.contains("region-u80"),
        "{table}"
    );
    for f in [
        "extent-s1-u80.json",
        "region-u80.checkpoint.json",
        "extents_per_object.svg",
        "multi_extent_size.svg",
        "extent_histogram-region-u80.svg",
        "free_fragmentation.svg",
    ] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let e = refused(&small);
    assert!(e.contains("--resume"), "never overwrites a run: {e}");
    let mut resumed = small.to_vec();
    resumed.push("--resume");
    assert!(ok(&resumed).contains("extent-s1-u80"));
    // A finished run extends to more operations from its checkpoint.
    resumed[3] = "3e5";
    assert!(ok(&resumed).contains("300000"));

    for (args, want) in [
        (
            vec!["sim", "alloc", "--utilization", "1.5", "--out", s(&out)],
            "utilization",
        ),
        (vec!["sim", "alloc", "--ops", "lots"], "not a count"),
        (vec!["sim", "alloc", "--policy", "buddy"], "unknown policy"),
        (
            vec!["sim", "alloc", "--increment", "1000", "--out", s(&out)],
            "increment",
        ),
        (
            vec!["sim", "trace", "/nonexistent/trace.txt"],
            "cannot open trace",
        ),
        (
            vec!["sim", "trace", "--format", "xml", "x"],
            "unknown --format",
        ),
        (
            vec!["sim", "trace", "--policy", "alphabetical", "x"],
            "alphabetical",
        ),
    ] {
        let e = refused(&args);
        assert!(e.contains(want), "{args:?}: {e}");
    }
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "no trace here\nat all\n").unwrap();
    let e = refused(&["sim", "trace", s(&junk)]);
    assert!(e.contains("no metadata operations"), "{e}");

    let gen_trace = dir.path().join("gen.txt");
    ok(&[
        "sim",
        "trace-gen",
        s(&gen_trace),
        "--lines",
        "20000",
        "--dirs",
        "100",
        "--files",
        "2000",
    ]);
    let study = dir.path().join("study");
    let table = ok(&["sim", "trace", s(&gen_trace), "--out", s(&study)]);
    assert!(
        table.contains("child-closest") && table.contains("0 malformed"),
        "{table}"
    );
    for f in ["trace.json", "figure4.svg", "figure5.svg"] {
        assert!(study.join(f).exists(), "{f} written");
    }
}

#[test]
fn up_with_the_namespace_on_the_osds_then_fsck_it() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let http = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    for (args, want) in [
        (vec!["up", "--namespace", "ldap"], "unknown namespace mode"),
        (
            vec!["up", "--namespace", "osd", "--dir-protocol", "cas"],
            "unknown directory protocol",
        ),
        (
            vec!["mds", "format", "--cluster", "c", "--namespace", "ldap"],
            "unknown namespace mode",
        ),
        (
            vec![
                "mds",
                "format",
                "--cluster",
                "c",
                "--namespace",
                "osd",
                "--dir-protocol",
                "cas",
            ],
            "unknown directory protocol",
        ),
        (
            vec!["bench", "dirops", "--quick", "--dir", "/etc/passwd/x"],
            "cannot create /etc/passwd/x",
        ),
        (vec!["fsck"], "or --namespace"),
        (vec!["fsck", "x.img", "--namespace"], "not both"),
        (
            vec!["fsck", "--namespace", "--data", "/nonexistent"],
            "no cluster found",
        ),
    ] {
        let mut full = args.clone();
        full.extend(["--data", s(&data)]);
        if args[0] == "fsck" || args[0] == "bench" {
            full = args.clone();
        }
        let o = tessera(&full);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{full:?}: {e}");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "up",
            "--data",
            s(&data),
            "--osds",
            "2",
            "--size",
            "128M",
            "--listen",
            &listen,
            "--http",
            &http,
            "--namespace",
            "osd",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        seen.push_str(&l);
        seen.push('\n');
        if l.contains("stop with Ctrl-C") {
            break;
        }
    }
    assert!(
        seen.contains("namespace on the OSDs: root directory on OSD"),
        "{seen}"
    );
    assert!(seen.contains("atomic protocol"), "{seen}");
    assert!(
        seen.contains(&format!("dashboard on http://{http}/")),
        "{seen}"
    );
    let out = ok(&["fsck", "--namespace", "--data", s(&data)]);
    assert!(out.contains("namespace is consistent"), "{out}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert!(child.wait().unwrap().success());
}
