//! The lengths this client committed lately, and the order of its
//! questions to the namespace against those commits.
//!
//! A file this client writes is longer here than in the namespace until
//! a close, fsync or write-back commits its length; then the client
//! forgets the open file. An answer the namespace made *before* that
//! commit can arrive *after* it — a stat, a lookup, an open, the
//! `utimensat` and `chmod` tar sends after each file — holding the old
//! length (and perhaps a layout with fewer object sets). Taken as it is,
//! `tar -d` after `tar -x` read a 4,164-byte file as empty, and an append
//! wrote over a file's start.
//!
//! So each commit gets a number in this client's commit order, and each
//! question takes the number it was asked at ([`Commits::ask`]). An answer
//! is *settled* against the commits numbered after its question: it takes
//! their length if longer (a truncate by this client: its length) and
//! their layout if longer. Answers to questions asked after a commit are
//! taken as they are — another client's truncate after it still shows.
//! A commit is remembered while a question asked before it is out, and
//! at least [`KEEP_MIN`] or the cache window (listings kept that long are
//! settled against it when used); at most [`MAX_RECENT`] at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::layout::Layout;
use proto::mds::{Attr, Entry, Grant};

/// How long a commit is remembered at least.
pub const KEEP_MIN: Duration = Duration::from_secs(2);

/// Commits remembered at most (past it, the oldest go first).
pub const MAX_RECENT: usize = 65_536;

/// One remembered commit of a file's length.
#[derive(Clone)]
struct Recent {
    size: u64,
    /// The number of this client's last truncate of the file, if it is
    /// remembered: answers asked before it take this length even if
    /// longer (later commits only grow it from there).
    truncated: Option<u64>,
    /// The layout the data was written under, with its capabilities.
    layout: Option<(Layout, Vec<Grant>)>,
    number: u64,
    at: Instant,
}

#[derive(Default)]
struct State {
    /// The number of the last commit.
    last: u64,
    recent: HashMap<u64, Recent>,
    /// Commit number → inode, oldest first (for forgetting).
    order: BTreeMap<u64, u64>,
    /// Questions out, by the number they were asked at.
    asking: BTreeMap<u64, usize>,
}

/// This client's recent commits and questions.
pub struct Commits {
    keep: Duration,
    state: Mutex<State>,
}

/// A question to the namespace being asked: the commit number it was
/// asked at. While it is held, the commits after that number are kept.
pub struct Asked<'a> {
    commits: &'a Commits,
    since: u64,
}

impl Asked<'_> {
    /// The number of the last commit before the question was asked.
    pub fn since(&self) -> u64 {
        self.since
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        let mut st = self.commits.state();
        if let Some(n) = st.asking.get_mut(&self.since) {
            *n -= 1;
            if *n == 0 {
                st.asking.remove(&self.since);
            }
        }
    }
}

impl Commits {
    /// Commits remembered for at least `window` (and [`KEEP_MIN`]).
    pub fn new(window: Duration) -> Commits {
        Commits {
            keep: window.max(KEEP_MIN),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the number a question is asked at; hold it until the answer
    /// is settled.
    pub fn ask(&self) -> Asked<'_> {
        let mut st = self.state();
        let since = st.last;
        *st.asking.entry(since).or_default() += 1;
        Asked {
            commits: self,
            since,
        }
    }

    /// The number of the last commit (for an answer kept to be used later,
    /// settled then with [`Commits::settle_attr`]).
    pub fn last(&self) -> u64 {
        self.state().last
    }

    /// This client committed `ino`'s length `size`, its data written under
    /// `layout` with `grants`.
    pub fn committed(&self, ino: u64, size: u64, layout: Option<Layout>, grants: Vec<Grant>) {
        let layout = layout.map(|l| (l, grants));
        self.record(ino, size, false, layout);
    }

    /// This client set `ino`'s length to `size` (a truncate).
    pub fn truncated(&self, ino: u64, size: u64) {
        self.record(ino, size, true, None);
    }

    fn record(&self, ino: u64, size: u64, exact: bool, layout: Option<(Layout, Vec<Grant>)>) {
        let mut st = self.state();
        st.last += 1;
        let number = st.last;
        let before = st.recent.get(&ino).cloned();
        let r = Recent {
            size,
            // A truncate not yet forgotten still holds for answers from
            // before it: the length after it is this client's.
            truncated: if exact {
                Some(number)
            } else {
                before.as_ref().and_then(|b| b.truncated)
            },
            layout: layout.or_else(|| before.as_ref().and_then(|b| b.layout.clone())),
            number,
            at: Instant::now(),
        };
        if let Some(b) = before {
            st.order.remove(&b.number);
        }
        st.recent.insert(ino, r);
        st.order.insert(number, ino);
        self.forget_old(&mut st);
    }

    /// Forgets the commits no question out and no kept answer needs.
    fn forget_old(&self, st: &mut State) {
        let oldest_question = st.asking.keys().next().copied().unwrap_or(u64::MAX);
        while let Some((&number, &ino)) = st.order.first_key_value() {
            let needed = number > oldest_question
                || st
                    .recent
                    .get(&ino)
                    .is_some_and(|r| r.at.elapsed() < self.keep);
            if needed && st.order.len() <= MAX_RECENT {
                break;
            }
            st.order.pop_first();
            st.recent.remove(&ino);
        }
    }

    /// `a`, an answer to a question asked at `since`, with the length of
    /// this client's commits of its file after that.
    pub fn settle_attr(&self, a: &mut Attr, since: u64) {
        let st = self.state();
        if let Some(r) = st.recent.get(&a.ino).filter(|r| r.number > since) {
            let before_truncate = r.truncated.is_some_and(|t| since < t);
            a.size = if before_truncate {
                r.size
            } else {
                a.size.max(r.size)
            };
        }
    }

    /// [`Commits::settle_attr`] of an entry with a layout and `grants`
    /// for it: the committed layout (and its capabilities, which name its
    /// OSDs) replaces a shorter one. Answers whether it did.
    pub fn settle_entry(&self, e: &mut Entry, grants: &mut Vec<Grant>, since: u64) -> bool {
        self.settle_attr(&mut e.attr, since);
        let st = self.state();
        let Some((l, g)) = st
            .recent
            .get(&e.attr.ino)
            .filter(|r| r.number > since)
            .and_then(|r| r.layout.as_ref())
        else {
            return false;
        };
        if e.layout
            .as_ref()
            .is_some_and(|x| x.objsets.len() >= l.objsets.len())
        {
            return false;
        }
        e.layout = Some(l.clone());
        *grants = g.clone();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64, size: u64) -> Attr {
        crate::meta::tests::entry(ino, size).attr
    }

    fn layout(sets: Vec<u64>) -> Layout {
        Layout {
            spec: Default::default(),
            map_epoch: 1,
            objsets: sets,
            homes: Vec::new(),
        }
    }

    /// An answer to a question asked before a commit takes the commit's
    /// length and longer layout; one asked after is taken as it is (a
    /// shorter length there is another client's truncate).
    #[test]
    fn answers_asked_before_a_commit_take_its_length_and_layout() {
        let c = Commits::new(Duration::from_secs(1));
        let early = c.ask();
        c.committed(7, 4164, Some(layout(vec![7, 70])), Vec::new());
        let late = c.ask();
        let mut a = attr(7, 0);
        c.settle_attr(&mut a, early.since());
        assert_eq!(a.size, 4164);
        let mut a = attr(7, 0);
        c.settle_attr(&mut a, late.since());
        assert_eq!(
            a.size, 0,
            "asked after the commit: another client's truncate"
        );
        let mut a = attr(7, 9000);
        c.settle_attr(&mut a, early.since());
        assert_eq!(a.size, 9000, "longer answers stay longer");
        let mut e = Entry {
            parent: 1,
            name: "f".into(),
            attr: attr(7, 0),
            layout: Some(layout(vec![7])),
        };
        let mut grants = Vec::new();
        assert!(c.settle_entry(&mut e, &mut grants, early.since()));
        assert_eq!(e.layout.unwrap().objsets, vec![7, 70]);
        // Other inodes are not touched.
        let mut a = attr(8, 5);
        c.settle_attr(&mut a, early.since());
        assert_eq!(a.size, 5);
    }

    /// A truncate by this client is exact for answers from before it,
    /// even after a later commit of the same file.
    #[test]
    fn a_truncate_here_holds_for_answers_from_before_it() {
        let c = Commits::new(Duration::from_secs(1));
        let early = c.ask();
        c.truncated(7, 100);
        let mut a = attr(7, 4164);
        c.settle_attr(&mut a, early.since());
        assert_eq!(a.size, 100);
        let between = c.ask();
        c.committed(7, 300, None, Vec::new());
        let mut a = attr(7, 4164);
        c.settle_attr(&mut a, early.since());
        assert_eq!(a.size, 300);
        // Asked after the truncate: another client's longer length stands.
        let mut a = attr(7, 4164);
        c.settle_attr(&mut a, between.since());
        assert_eq!(a.size, 4164);
    }

    /// Commits are forgotten once no question from before them is out
    /// and the window passed; a question out keeps them.
    #[test]
    fn commits_are_kept_while_a_question_from_before_them_is_out() {
        let c = Commits {
            keep: Duration::ZERO,
            state: Mutex::new(State::default()),
        };
        let q = c.ask();
        c.committed(7, 10, None, Vec::new());
        c.committed(8, 10, None, Vec::new());
        assert_eq!(c.state().recent.len(), 2);
        drop(q);
        c.committed(9, 10, None, Vec::new());
        assert_eq!(c.state().recent.len(), 0, "nothing asked: nothing kept");
        assert!(c.state().asking.is_empty());
    }
}
