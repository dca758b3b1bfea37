//! `sim trace` on small hand-made traces whose answers are worked out by
//! hand in the comments.

use mds::ids::PolicyKind;
use sim::trace::replay::ReplayConfig;
use sim::trace::report::study;
use sim::trace::{nfsdump, pathfmt};

fn cfg(prefetch: usize) -> ReplayConfig {
    ReplayConfig {
        prefetch,
        ..ReplayConfig::default()
    }
}

/// Tree /a/{x,y}, /b/{z}; create order numbers it depth-first:
/// a=1, x=2, y=3, b=4, z=5 (root 0).
///
/// Without prefetch client c1 asks the MDS for a, x, y, b, z: 5 requests
/// (every repeated lookup of a or b is a cache hit).
///
/// With one neighbour per answer (ties go to the higher id):
/// - lookup a (id 1): miss; neighbours 0 and 2 are equally near, x (2) comes along;
/// - lookup x: prefetched (hit); stat x: hit;
/// - lookup y (3): miss; 2 and 4 equally near: b (4) comes along;
/// - lookup b: prefetched (hit); lookup z: miss.
///
/// So 3 requests (60 %), 2 of them prefetch hits.
/// Client c2 then creates and removes /a/new: lookup a (miss, its own
/// cache is empty), create (mandatory), lookup a (hit), unlink (mandatory).
const TREE: &str = "\
# time client op path
0.1 c1 stat /a/x
0.2 c1 stat /a/y
0.3 c1 stat /b/z
0.4 c2 create /a/new
0.5 c2 unlink /a/new
";

#[test]
fn create_order_with_one_neighbour_matches_the_hand_count() {
    let t = pathfmt::parse(TREE);
    assert_eq!(t.stats.malformed, 0);
    let s = study(&t, &cfg(1), &[PolicyKind::CreateOrder]).expect("study");
    let c1 = &s.policies[0].clients[0];
    assert_eq!(c1.client, "c1");
    assert_eq!(c1.baseline.total(), 5);
    assert_eq!(c1.baseline.mandatory, 0);
    assert_eq!(c1.with_prefetch.non_mandatory, 3);
    assert_eq!(c1.with_prefetch.prefetch_hits, 2);
    assert!((c1.percent - 60.0).abs() < 1e-9);
    let c2 = &s.policies[0].clients[1];
    assert_eq!((c2.baseline.mandatory, c2.baseline.non_mandatory), (2, 1));
    assert_eq!(s.namespace.preexisting, 6, "root, a, x, y, b, z");
    assert_eq!(s.namespace.created, 1);
}

/// With 32 neighbours every node comes with the first answer, whatever the
/// policy: c1 needs 1 request instead of 5.
#[test]
fn a_big_prefetch_brings_the_whole_small_tree_under_every_policy() {
    let t = pathfmt::parse(TREE);
    let s = study(&t, &cfg(32), &PolicyKind::ALL).expect("study");
    assert_eq!(s.policies.len(), 4);
    for p in &s.policies {
        let c1 = &p.clients[0];
        assert_eq!(c1.with_prefetch.total(), 1, "{}", p.policy);
        assert_eq!(c1.with_prefetch.prefetch_hits, 4, "{}", p.policy);
    }
    assert_eq!(s.baseline.total(), 5 + 3);
}

/// An nfsdump trace: client 32 looks up "src" in directory aa01 and reads
/// its attributes twice (1 request: the lookup; the getattrs hit). Client
/// 33's lookup fails with ENOENT, twice (ignored, not counted). A reply
/// without a call, a garbage line and a call with no reply are counted.
#[test]
fn an_nfsdump_trace_with_oddities() {
    // nfsdump's line endings (connection and packet lengths).
    let c = "con = 82 len = 160";
    let r = "status=0 pl = 120 con = 82 len = 204";
    let text = format!(
        "1.000001 32.03ff 30.0801 U C3 10 3 lookup fh aa01 name \"src\" euid 0 egid 0 {c}\n\
         1.000002 30.0801 32.03ff U R3 10 3 lookup OK fh bb02 ftype 2 mode 1ed {r}\n\
         1.000003 32.03ff 30.0801 U C3 11 1 getattr fh bb02 {c}\n\
         1.000004 30.0801 32.03ff U R3 11 1 getattr OK ftype 2 mode 1ed {r}\n\
         1.000005 32.03ff 30.0801 U C3 12 1 getattr fh bb02 {c}\n\
         1.000006 30.0801 32.03ff U R3 12 1 getattr OK ftype 2 {r}\n\
         1.000007 33.0320 30.0801 U C3 10 3 lookup fh aa01 name \"gone\" {c}\n\
         1.000008 30.0801 33.0320 U R3 10 3 lookup 2  {r}\n\
         1.000009 33.0320 30.0801 U C3 13 3 lookup fh aa01 name \"gone\" {c}\n\
         1.000010 30.0801 33.0320 U R3 13 3 lookup 2  {r}\n\
         1.000011 30.0801 32.03ff U R3 99 1 getattr OK ftype 1 {r}\n\
         this is not a trace line\n\
         1.000012 32.03ff 30.0801 U C3 14 1 getattr fh bb02 {c}\n"
    );
    let t = nfsdump::parse(&text);
    assert_eq!(t.stats.orphan_replies, 1);
    assert_eq!(t.stats.malformed, 1);
    assert_eq!(t.stats.unanswered_calls, 1);
    let s = study(&t, &cfg(8), &[PolicyKind::ChildClosest]).expect("study");
    let p = &s.policies[0];
    assert_eq!(p.clients[0].baseline.total(), 1);
    // Names that do not exist are outside the namespace: ignored (§4.2).
    assert_eq!(p.clients[1].baseline.total(), 0);
    assert_eq!(p.clients[1].baseline.ignored, 2);
    assert_eq!(p.clients[1].with_prefetch.ignored, 2);
    assert_eq!(s.namespace.orphans, 1, "aa01's parent is never seen");
}

#[test]
fn garbage_never_crashes_the_parsers() {
    let junk = "\u{0}\u{1}garbage\n1 2 3 4 5 6 7 8 9\n0 c rename /a\n0 c stat /a/%zz\n0 c mkdir /\n\
                1.0 32.1 30.1 U R3 ffffffffff 1 getattr OK\n1.0 32.1 30.1 X C3 1 1 getattr fh zz\n";
    for t in [pathfmt::parse(junk), nfsdump::parse(junk)] {
        assert!(t.stats.malformed >= 3, "{:?}", t.stats);
        study(&t, &cfg(4), &PolicyKind::ALL).expect("a study of what is left");
    }
}

/// A read-only search (Hendricks et al.'s Search benchmark in miniature):
/// listings and lookups only, so nothing is mandatory, as the paper counts
/// it; without prefetch each listing is a non-mandatory request.
#[test]
fn a_read_only_trace_has_no_mandatory_requests() {
    let t = pathfmt::parse(
        "\
0.1 c1 readdir /
0.2 c1 readdir /a
0.3 c1 stat /a/x
0.4 c1 readdir /a
",
    );
    assert_eq!(t.stats.malformed, 0);
    let s = study(&t, &cfg(0), &[PolicyKind::ChildClosest]).expect("study");
    let c1 = &s.policies[0].clients[0];
    assert_eq!(c1.baseline.mandatory, 0, "a listing changes nothing");
    assert_eq!(
        c1.baseline.non_mandatory, 3,
        "three listings; a and x come with the listings' entries (READDIRPLUS)"
    );
}
