//! What `status` and `scrub` answer: the cluster's OSDs, the state of its
//! copies, the one-line health summary, and a scrub's report.

use serde::{Deserialize, Serialize};

/// One OSD in a status report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdStatus {
    /// Id.
    pub id: u32,
    /// Address.
    pub addr: String,
    /// Weight (16.16).
    pub weight: u32,
    /// Heartbeating.
    pub up: bool,
    /// Taking placements (not marked out).
    pub is_in: bool,
    /// Failure domain.
    pub host: String,
    /// Ms since the last report (None: never, since this MDS started).
    pub last_seen_ms: Option<u64>,
    /// Capacity in bytes.
    pub capacity: u64,
    /// Used bytes.
    pub used: u64,
    /// Objects.
    pub objects: u64,
    /// What it served between its last two reports (zero until two).
    pub rates: OsdRates,
}

/// An OSD's service rates between its last two reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdRates {
    /// Requests per second.
    pub requests: u64,
    /// Reads (requests carrying data out) per second.
    pub reads: u64,
    /// Writes (requests carrying data in) per second.
    pub writes: u64,
    /// Object data bytes in per second.
    pub bytes_in: u64,
    /// Object data bytes out per second.
    pub bytes_out: u64,
    /// Mean service time of those requests, microseconds.
    pub latency_us: u64,
}

/// Cluster status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// Cluster id.
    pub cluster_id: String,
    /// Map epoch.
    pub epoch: u64,
    /// OSDs.
    pub osds: Vec<OsdStatus>,
    /// Inodes.
    pub inodes: u64,
    /// Object-id policy.
    pub id_policy: String,
    /// Requests served, mandatory.
    pub mandatory: u64,
    /// Requests served, non-mandatory.
    pub non_mandatory: u64,
    /// Objects waiting in the delete queue.
    pub delete_queue: u64,
    /// Unlinked files kept while a client may hold them open (reaped once
    /// none does).
    pub orphans: u64,
    /// Copies and recovery, as of the last recovery pass.
    pub redundancy: Redundancy,
    /// After a crash: client sessions whose replays the MDS still waits
    /// for (it serves no namespace request until they are in or its
    /// window ends), and the ms left of that window.
    pub replay_wait: Option<(u32, u64)>,
    /// A replicated MDS group, as its leader sees it (None: a single MDS).
    pub mds_group: Option<GroupStatus>,
}

/// A replicated MDS group, seen from its leader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// The leader's member id.
    pub leader: u64,
    /// The raft term.
    pub term: u64,
    /// The leader's last log index.
    pub last_log: u64,
    /// The last index the leader applied.
    pub applied: u64,
    /// Every member.
    pub members: Vec<GroupMemberStatus>,
}

/// One member of an MDS group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMemberStatus {
    /// Its id.
    pub id: u64,
    /// Its client address.
    pub addr: String,
    /// Whether it votes (false: a learner, still catching up, that the
    /// leader makes a voter once it has).
    pub voter: bool,
    /// The highest log index the leader knows it holds (None: unknown).
    pub matched: Option<u64>,
    /// Milliseconds since it last answered the leader (None: never since
    /// this leader took over); the leader itself is 0.
    pub heard_ms: Option<u64>,
}

/// A member not heard from for this long counts as down.
pub const MEMBER_DOWN_MS: u64 = 2000;
/// A member this many entries behind the leader counts as behind.
pub const MEMBER_BEHIND: u64 = 1000;

impl GroupStatus {
    /// Members down (not heard for [`MEMBER_DOWN_MS`]), joining (not yet
    /// voting) and behind (more than [`MEMBER_BEHIND`] entries), as
    /// warnings.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        for m in &self.members {
            if m.heard_ms.is_none_or(|ms| ms > MEMBER_DOWN_MS) {
                w.push(format!("MDS member {} ({}) down", m.id, m.addr));
            } else if !m.voter {
                w.push(format!(
                    "MDS member {} ({}) is joining: not yet voting",
                    m.id, m.addr
                ));
            } else if let Some(lag) = m.matched.map(|i| self.last_log.saturating_sub(i))
                && lag > MEMBER_BEHIND
            {
                w.push(format!("MDS member {} is {lag} entries behind", m.id));
            }
        }
        w
    }
}

/// The state of the copies, counted in stripe objects, from the MDS's
/// last recovery pass, and recovery's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redundancy {
    /// Stripe objects checked.
    pub objects: u64,
    /// Fewer fresh copies on up OSDs than the layout asks for.
    pub degraded: u64,
    /// A copy on an OSD that is out (to be moved).
    pub misplaced: u64,
    /// No fresh copy on any up OSD: reads of it wait or fail.
    pub unfound: u64,
    /// Copies found to differ by a scrub and not yet repaired.
    pub inconsistent: u64,
    /// Objects recovery still has to copy.
    pub objects_left: u64,
    /// Bytes recovery still has to copy (an estimate: the fresh copies' sizes).
    pub bytes_left: u64,
    /// Bytes copied by recovery since the MDS started.
    pub bytes_recovered: u64,
    /// Recent recovery rate in bytes per second.
    pub rate_bps: u64,
    /// Whether a recovery pass has finished since the MDS started (before
    /// that the counts are not known).
    pub checked: bool,
    /// OSDs in the map.
    pub osds: u32,
    /// Most copies any layout asks for (the root default included).
    pub max_replicas: u32,
    /// Replica groups (namespace on the OSDs with copies; 0 otherwise).
    pub groups: u32,
    /// Groups with fewer full members up than copies asked for.
    pub groups_degraded: u32,
    /// Groups with no member up: their objects cannot be reached.
    pub groups_unavailable: u32,
    /// Groups filling a new member.
    pub groups_filling: u32,
    /// Groups with no full member left at all: every full copy was on a
    /// store that came back new or older. They stay unavailable.
    pub groups_lost: u32,
    /// Groups whose member could not pass a change to its successor
    /// though both are up (a link between two OSDs cut while both reach
    /// the MDS): their writes fail until it heals.
    pub groups_cut: u32,
    /// Some of those cut links, as (group, member, successor).
    pub cut_links: Vec<(u32, u32, u32)>,
    /// What the last scrub could not check (see [`ScrubReport::unchecked`]).
    pub scrub_unchecked: u64,
}

/// How healthy the cluster is, with the reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    pub level: &'static str,
    /// Why it is not OK.
    pub reasons: Vec<String>,
}

impl ClusterStatus {
    /// The one-line health summary: ERR when objects are unfound (no fresh
    /// copy reachable) or an OSD is 95 % full, WARN when degraded,
    /// misplaced, inconsistent, OSDs down, an OSD 85 % full or fewer OSDs
    /// than copies asked for.
    pub fn health(&self) -> Health {
        let r = &self.redundancy;
        let mut err = Vec::new();
        let mut warn = Vec::new();
        if r.unfound > 0 {
            err.push(format!(
                "{} objects unfound (no fresh copy on an up OSD)",
                r.unfound
            ));
        }
        if r.inconsistent > 0 {
            err.push(format!("{} objects inconsistent", r.inconsistent));
        }
        if r.groups_lost > 0 {
            err.push(format!(
                "{} replica groups lost every full copy (their members' stores came back \
                 new or older)",
                r.groups_lost
            ));
        }
        if r.groups_cut > 0 {
            let named: Vec<String> = r
                .cut_links
                .iter()
                .map(|(g, a, b)| format!("group {g}: OSD {a} cannot reach OSD {b}"))
                .collect();
            err.push(format!(
                "{} replica groups cannot take writes: a member cannot reach its successor \
                 though both are up ({})",
                r.groups_cut,
                named.join("; ")
            ));
        }
        if r.groups_unavailable > r.groups_lost {
            err.push(format!(
                "{} replica groups unavailable (no member up)",
                r.groups_unavailable - r.groups_lost
            ));
        }
        if r.groups_degraded > 0 {
            warn.push(format!(
                "{} replica groups degraded ({} filling a new member)",
                r.groups_degraded, r.groups_filling
            ));
        }
        // An OSD that is out holds nothing placement counts on: down is
        // its normal state, not a warning.
        let down: Vec<String> = self
            .osds
            .iter()
            .filter(|o| !o.up && o.is_in)
            .map(|o| o.id.to_string())
            .collect();
        if !down.is_empty() {
            warn.push(format!("{} OSDs down ({})", down.len(), down.join(", ")));
        }
        if r.degraded > 0 {
            warn.push(format!("{} objects degraded", r.degraded));
        }
        if r.misplaced > 0 {
            warn.push(format!("{} objects misplaced", r.misplaced));
        }
        let placeable = self.osds.iter().filter(|o| o.is_in).count() as u32;
        if r.max_replicas > placeable {
            warn.push(format!(
                "degraded: layouts ask for {} copies but only {placeable} OSDs are in",
                r.max_replicas
            ));
        }
        for o in self.osds.iter().filter(|o| o.up && o.is_in) {
            let f = crate::space::fill_ratio(o);
            if f >= crate::space::FULL {
                err.push(format!("OSD {} is full ({:.0} % used)", o.id, f * 100.0));
            } else if f >= crate::space::NEARFULL {
                warn.push(format!(
                    "OSD {} is nearly full ({:.0} % used)",
                    o.id,
                    f * 100.0
                ));
            }
        }
        if r.scrub_unchecked > 0 {
            warn.push(format!(
                "the last scrub could not check {} objects or groups (run it again)",
                r.scrub_unchecked
            ));
        }
        if !r.checked && !self.osds.is_empty() {
            warn.push("copies not checked yet (first recovery pass running)".into());
        }
        if self.osds.is_empty() {
            err.push("no OSDs".into());
        }
        if let Some(g) = &self.mds_group {
            warn.extend(g.warnings());
        }
        if let Some((sessions, ms)) = self.replay_wait {
            warn.push(format!(
                "recovering: waiting for {sessions} client sessions to replay \
                 (namespace requests held, at most {:.1} s more)",
                ms as f64 / 1000.0
            ));
        }
        let level = if !err.is_empty() {
            "HEALTH_ERR"
        } else if !warn.is_empty() {
            "HEALTH_WARN"
        } else {
            "HEALTH_OK"
        };
        err.extend(warn);
        Health {
            level,
            reasons: err,
        }
    }
}

/// What a scrub compared and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Stripe objects compared.
    pub objects: u64,
    /// Copies compared.
    pub copies: u64,
    /// Bytes read to compare (deep scrub).
    pub bytes: u64,
    /// Copies that differed from the chosen good copy (or failed to read).
    pub inconsistent: u64,
    /// Of those, repaired.
    pub repaired: u64,
    /// One line per problem found.
    pub problems: Vec<String>,
    /// Objects (MDS mode) or replica groups (OSD-namespace mode) the scrub
    /// could not check — a copy that could not be asked, no copy up, a
    /// head down: the scrub was incomplete, and says so.
    pub unchecked: u64,
}
