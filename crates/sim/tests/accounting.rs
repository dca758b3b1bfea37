//! `sim trace`'s accounting, worked out by hand on a build-like trace: a
//! program that lists its sources, probes for outputs that do not exist,
//! writes temporary files and renames them over, removes one, and touches
//! a handle the trace never places.

use mds::ids::PolicyKind;
use sim::trace::namespace::Namespace;
use sim::trace::nfsdump;
use sim::trace::replay::{ReplayConfig, Requests, replay};

/// nfsdump lines for one request: `call` keys, `reply` status and keys.
struct Script {
    text: String,
    xid: u32,
}

impl Script {
    fn new() -> Script {
        Script {
            text: String::new(),
            xid: 0,
        }
    }

    fn req(&mut self, t: f64, proc: u32, name: &str, call: &str, reply: &str) -> &mut Self {
        self.xid += 1;
        let x = self.xid;
        self.text.push_str(&format!(
            "{t:.6} 31.0300 30.0801 U C3 {x:x} {proc:x} {name} {call} con = 82 len = 1\n\
             {t:.6} 30.0801 31.0300 U R3 {x:x} {proc:x} {name} {reply} status=0 pl = 0 con = 82 len = 1\n"
        ));
        self
    }
}

fn sum(v: Vec<Requests>) -> Requests {
    v.into_iter().sum()
}

fn run(text: &str, prefetch: usize, timeout_ms: Option<u64>) -> Requests {
    let t = nfsdump::parse(text);
    assert_eq!(t.stats.malformed, 0, "{:?}", t.stats.examples);
    let ns = Namespace::build(&t);
    let ids = ns
        .assign_ids(&t, PolicyKind::ChildClosest)
        .expect("the test setup");
    let cfg = ReplayConfig {
        prefetch,
        demand_entries: 2000,
        prefetch_entries: 1000,
        attr_timeout_ms: timeout_ms,
    };
    sum(replay(&t, &ns, &ids, &cfg))
}

/// The tree: root 01 holds directories lib (07) and src (02); src holds
/// a.c (03) and b.c (04); lib holds x.c (08).
fn build_like() -> String {
    let mut s = Script::new();
    s.req(1.0, 0x11, "readdirp", "fh 01",
        "OK name-0 \"lib\" fh-0 07 ftype-0 2 name-1 \"src\" fh-1 02 ftype-1 2")
        // 1: non-mandatory (a listing); with prefetch it sends lib's and src's ahead.
        .req(1.0, 3, "lookup", "fh 01 name \"src\"", "OK fh 02 ftype 2")
        // hit: the listing's entry
        .req(1.0, 0x11, "readdirp", "fh 02",
            "OK name-0 \"a.c\" fh-0 03 ftype-0 1 name-1 \"b.c\" fh-1 04 ftype-1 1")
        // 2 without prefetch; sent ahead with it
        .req(1.0, 3, "lookup", "fh 02 name \"a.c\"", "OK fh 03 ftype 1") // hit
        .req(1.0, 1, "getattr", "fh 03", "OK ftype 1") // hit
        .req(1.0, 3, "lookup", "fh 02 name \"a.o\"", "2") // ignored 1: no such name
        .req(1.0, 3, "lookup", "fh 02 name \"a.o.tmp\"", "2") // ignored 2
        .req(1.0, 8, "create", "fh 02 name \"a.o.tmp\"", "OK fh 05 ftype 1") // mandatory 1
        .req(1.0, 1, "getattr", "fh 05", "OK ftype 1") // hit: the create's reply
        .req(1.0, 2, "setattr", "fh 05", "OK") // non-mandatory access, a hit
        .req(1.0, 0xe, "rename", "fh 02 name \"a.o.tmp\" fh2 02 name2 \"a.o\"", "OK") // mandatory 2
        .req(1.0, 1, "getattr", "fh 05", "OK ftype 1") // hit: the entry moved with the rename
        .req(1.0, 3, "lookup", "fh 02 name \"b.o\"", "2") // ignored 3
        .req(1.0, 3, "lookup", "fh 02 name \"b.c\"", "OK fh 04 ftype 1") // hit
        .req(1.0, 8, "create", "fh 02 name \"b.o\"", "OK fh 06 ftype 1") // mandatory 3
        .req(1.0, 0xc, "remove", "fh 02 name \"a.o\"", "OK") // mandatory 4
        .req(1.0, 3, "lookup", "fh 02 name \"a.o\"", "2") // ignored 4
        .req(1.0, 1, "getattr", "fh 99", "OK ftype 1") // ignored 5: never placed
        .req(1.0, 0x11, "readdirp", "fh 02",
            "OK name-0 \"a.c\" fh-0 03 ftype-0 1 name-1 \"b.c\" fh-1 04 ftype-1 1 name-2 \"b.o\" fh-2 06 ftype-2 1")
        // non-mandatory in both: a listing sent ahead answers one read
        .req(1.0, 0x11, "readdirp", "fh 07", "OK name-0 \"x.c\" fh-0 08 ftype-0 1")
        // non-mandatory without prefetch; sent ahead with it
        .req(1.0, 3, "lookup", "fh 07 name \"x.c\"", "OK fh 08 ftype 1"); // hit
    s.text.clone()
}

#[test]
fn a_build_like_trace_counts_as_worked_out_by_hand() {
    let text = build_like();
    let without = run(&text, 0, None);
    assert_eq!(
        (without.mandatory, without.non_mandatory, without.ignored),
        (4, 4, 5),
        "{without:?}"
    );
    let with = run(&text, 32, None);
    assert_eq!(
        (with.mandatory, with.non_mandatory, with.ignored),
        (4, 2, 5),
        "{with:?}"
    );
    // The two listings sent ahead were used, plus the prefetched neighbours.
    assert!(with.prefetch_hits >= 2, "{with:?}");
}

#[test]
fn entries_and_listings_expire_with_the_attribute_timeout() {
    let mut s = Script::new();
    s.req(
        0.0,
        0x11,
        "readdirp",
        "fh 01",
        "OK name-0 \"d\" fh-0 02 ftype-0 2 name-1 \"f\" fh-1 03 ftype-1 1",
    )
    .req(0.5, 3, "lookup", "fh 01 name \"f\"", "OK fh 03 ftype 1") // hit: 0.5 s old
    .req(
        0.5,
        0x11,
        "readdirp",
        "fh 02",
        "OK name-0 \"g\" fh-0 04 ftype-0 1",
    )
    .req(3.0, 1, "getattr", "fh 04", "OK ftype 1") // 2.5 s old: a miss with a 1 s timeout
    .req(3.0, 3, "lookup", "fh 01 name \"f\"", "OK fh 03 ftype 1"); // 3 s old
    let text = s.text.clone();
    let forever = run(&text, 0, None);
    assert_eq!(
        (forever.non_mandatory, forever.ignored),
        (2, 0),
        "{forever:?}"
    );
    let live = run(&text, 0, Some(1000));
    assert_eq!(live.non_mandatory, 4, "{live:?}");
    // With prefetch, the listing of d was sent ahead at 0 s and used at
    // 0.5 s; the miss on g at 3 s brings f back as its neighbour.
    let ahead = run(&text, 32, Some(1000));
    assert_eq!(ahead.non_mandatory, 2, "{ahead:?}");
    // A listing sent ahead is refused once older than the window.
    let mut late = Script::new();
    late.req(
        0.0,
        0x11,
        "readdirp",
        "fh 01",
        "OK name-0 \"d\" fh-0 02 ftype-0 2",
    )
    .req(
        5.0,
        0x11,
        "readdirp",
        "fh 02",
        "OK name-0 \"g\" fh-0 04 ftype-0 1",
    );
    let stale = run(&late.text, 32, Some(1000));
    assert_eq!(stale.non_mandatory, 2, "{stale:?}");
    let kept = run(&late.text, 32, None);
    assert_eq!(kept.non_mandatory, 1, "{kept:?}");
}

/// The build's usual save: a temporary file renamed *over* an output that
/// is already there (src 02 holds a.c 03 and a.o 05). Worked out by hand:
///
/// | request | without prefetch | with 32 |
/// |---|---|---|
/// | listing of the root | non-mandatory 1 | non-mandatory 1 (sends src's ahead) |
/// | listing of src | non-mandatory 2 | sent ahead: free |
/// | lookup a.o.tmp (no such name) | ignored 1 | ignored 1 |
/// | create a.o.tmp (06) | mandatory 1 | mandatory 1 |
/// | rename a.o.tmp over a.o | mandatory 2 | mandatory 2 |
/// | lookup a.o, now 06 | hit: the entry moved with the rename | hit |
/// | read a.c (03): a listing carries no layout | non-mandatory 3 | non-mandatory 2 |
/// | write 06: the create's answer carried its layout | hit | hit |
#[test]
fn a_temporary_file_renamed_over_an_existing_output_counts_as_worked_out_by_hand() {
    let mut s = Script::new();
    s.req(
        1.0,
        0x11,
        "readdirp",
        "fh 01",
        "OK name-0 \"src\" fh-0 02 ftype-0 2",
    )
    .req(
        1.0,
        0x11,
        "readdirp",
        "fh 02",
        "OK name-0 \"a.c\" fh-0 03 ftype-0 1 name-1 \"a.o\" fh-1 05 ftype-1 1",
    )
    .req(1.0, 3, "lookup", "fh 02 name \"a.o.tmp\"", "2")
    .req(
        1.0,
        8,
        "create",
        "fh 02 name \"a.o.tmp\"",
        "OK fh 06 ftype 1",
    )
    .req(
        1.0,
        0xe,
        "rename",
        "fh 02 name \"a.o.tmp\" fh2 02 name2 \"a.o\"",
        "OK",
    )
    .req(1.0, 3, "lookup", "fh 02 name \"a.o\"", "OK fh 06 ftype 1")
    .req(1.0, 6, "read", "fh 03", "OK")
    .req(1.0, 7, "write", "fh 06", "OK");
    let without = run(&s.text, 0, None);
    assert_eq!(
        (without.mandatory, without.non_mandatory, without.ignored),
        (2, 3, 1),
        "{without:?}"
    );
    let with = run(&s.text, 32, None);
    assert_eq!(
        (with.mandatory, with.non_mandatory, with.ignored),
        (2, 2, 1),
        "{with:?}"
    );
}
