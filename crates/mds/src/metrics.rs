//! Prometheus metrics of the MDS: requests by operation and by Hendricks et al.
//! class (mandatory / non-mandatory), errors by errno, latency, the KV's
//! group commit, revocations and deletions.

use std::sync::atomic::Ordering;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::kv::KvStats;

/// Label: operation and class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReqLabel {
    /// Operation name.
    pub op: String,
    /// "mandatory" or "non_mandatory".
    pub class: String,
}

/// Label: operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// Operation name.
    pub op: String,
}

/// Label: errno name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrLabel {
    /// Errno.
    pub errno: String,
}

/// Label: a state of stripe objects.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// degraded, misplaced, unfound, inconsistent, recovering, total.
    pub state: String,
}

/// All MDS metrics.
pub struct MdsMetrics {
    registry: Registry,
    /// Requests served.
    pub requests: Family<ReqLabel, Counter>,
    /// Errors returned.
    pub errors: Family<ErrLabel, Counter>,
    /// Latency by operation (seconds).
    pub latency: Family<OpLabel, Histogram>,
    /// Objects whose version was bumped.
    pub revocations: Counter,
    /// Files whose objects the delete queue removed.
    pub objects_deleted: Counter,
    /// Orphans (unlinked inodes no client held open any more) removed.
    pub orphans_reaped: Counter,
    /// Namespace changes answered before they were durable.
    pub early_answers: Counter,
    /// Operations redone from clients' replays after a crash.
    pub replayed: Counter,
    /// Replayed operations that could not be redone.
    pub replay_failed: Counter,
    /// Client sessions a restarted MDS still waits for (0 when serving).
    pub replay_waiting: Gauge,
    /// Directory leases granted.
    pub leases_granted: Counter,
    /// Requests that waited for another client's directory lease.
    pub lease_waits: Counter,
    mandatory: Counter,
    non_mandatory: Counter,
    /// Bytes recovery copied.
    pub recovered_bytes: Counter,
    /// Stripe objects recovery copied.
    pub recovered_objects: Counter,
    /// Copies recorded stale (a write to them failed, or a scrub found them wrong).
    pub copies_marked_stale: Counter,
    /// Copies scrubs found inconsistent.
    pub scrub_inconsistent: Counter,
    redundancy: Family<StateLabel, Gauge>,
    groups: Family<StateLabel, Gauge>,
    kv_batches: Gauge,
    kv_led: Gauge,
    kv_jobs: Gauge,
    kv_checkpoints: Gauge,
    kv_wal_bytes: Gauge,
}

impl Default for MdsMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl MdsMetrics {
    /// A fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera_mds");
        let requests = Family::<ReqLabel, Counter>::default();
        let errors = Family::<ErrLabel, Counter>::default();
        let latency = Family::<OpLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(20e-6, 2.0, 16))
        });
        let revocations = Counter::default();
        let objects_deleted = Counter::default();
        let orphans_reaped = Counter::default();
        let (early_answers, replayed, replay_failed) =
            (Counter::default(), Counter::default(), Counter::default());
        registry.register(
            "early_answers",
            "Namespace changes answered before they were durable",
            early_answers.clone(),
        );
        registry.register(
            "replayed",
            "Operations redone from clients' replays after a crash",
            replayed.clone(),
        );
        registry.register(
            "replay_failed",
            "Replayed operations that could not be redone",
            replay_failed.clone(),
        );
        let (leases_granted, lease_waits) = (Counter::default(), Counter::default());
        registry.register(
            "leases_granted",
            "Directory leases granted",
            leases_granted.clone(),
        );
        registry.register(
            "lease_waits",
            "Requests that waited for another client's directory lease",
            lease_waits.clone(),
        );
        let replay_waiting = Gauge::default();
        registry.register(
            "replay_waiting_sessions",
            "Client sessions a restarted MDS still waits for before it serves the namespace",
            replay_waiting.clone(),
        );
        let mandatory = Counter::default();
        let non_mandatory = Counter::default();
        let (recovered_bytes, recovered_objects) = (Counter::default(), Counter::default());
        let (copies_marked_stale, scrub_inconsistent) = (Counter::default(), Counter::default());
        let redundancy = Family::<StateLabel, Gauge>::default();
        let groups = Family::<StateLabel, Gauge>::default();
        registry.register(
            "recovered_bytes",
            "Bytes copied by recovery",
            recovered_bytes.clone(),
        );
        registry.register(
            "recovered_objects",
            "Stripe objects copied by recovery",
            recovered_objects.clone(),
        );
        registry.register(
            "copies_marked_stale",
            "Copies recorded stale after a failed write or scrub",
            copies_marked_stale.clone(),
        );
        registry.register(
            "scrub_inconsistent",
            "Copies scrubs found inconsistent",
            scrub_inconsistent.clone(),
        );
        registry.register(
            "objects",
            "Stripe objects by redundancy state, as of the last recovery pass",
            redundancy.clone(),
        );
        registry.register(
            "replica_groups",
            "Replica groups of a namespace on the OSDs by state (total, degraded, filling, unavailable, cut: a member cannot reach its successor though both are up)",
            groups.clone(),
        );
        let (kv_batches, kv_led, kv_jobs, kv_checkpoints, kv_wal_bytes) = (
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
        );
        registry.register(
            "requests",
            "Requests by operation and Hendricks et al. class",
            requests.clone(),
        );
        registry.register(
            "mandatory_requests",
            "Requests that change the namespace or a length",
            mandatory.clone(),
        );
        registry.register(
            "non_mandatory_requests",
            "Requests prefetching could avoid",
            non_mandatory.clone(),
        );
        registry.register("errors", "Errors by errno", errors.clone());
        registry.register("latency_seconds", "Request latency", latency.clone());
        registry.register(
            "revocations",
            "Object versions bumped to revoke capabilities",
            revocations.clone(),
        );
        registry.register(
            "files_deleted",
            "Files whose objects were removed from the OSDs",
            objects_deleted.clone(),
        );
        registry.register(
            "orphans_reaped",
            "Unlinked inodes removed once no client held them open",
            orphans_reaped.clone(),
        );
        registry.register("kv_batches", "Group-commit batches", kv_batches.clone());
        registry.register(
            "kv_batches_led",
            "Batches run by a writer that found the committer idle (not by the committer thread)",
            kv_led.clone(),
        );
        registry.register("kv_jobs", "Operations committed", kv_jobs.clone());
        registry.register(
            "kv_checkpoints",
            "Durable KV checkpoints",
            kv_checkpoints.clone(),
        );
        registry.register(
            "kv_log_bytes",
            "Bytes written to the metadata log",
            kv_wal_bytes.clone(),
        );
        MdsMetrics {
            registry,
            requests,
            errors,
            latency,
            revocations,
            objects_deleted,
            orphans_reaped,
            early_answers,
            replayed,
            replay_failed,
            replay_waiting,
            leases_granted,
            lease_waits,
            recovered_bytes,
            recovered_objects,
            copies_marked_stale,
            scrub_inconsistent,
            redundancy,
            groups,
            mandatory,
            non_mandatory,
            kv_batches,
            kv_led,
            kv_jobs,
            kv_checkpoints,
            kv_wal_bytes,
        }
    }

    /// Publishes the counts of a recovery pass.
    pub fn set_redundancy(&self, r: &proto::mds::Redundancy) {
        for (state, n) in [
            ("total", r.objects),
            ("degraded", r.degraded),
            ("misplaced", r.misplaced),
            ("unfound", r.unfound),
            ("inconsistent", r.inconsistent),
            ("recovering", r.objects_left),
        ] {
            self.redundancy
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n as i64);
        }
    }

    /// Publishes the replica groups' counts.
    pub fn set_groups(&self, r: &proto::mds::Redundancy) {
        for (state, n) in [
            ("total", r.groups),
            ("degraded", r.groups_degraded),
            ("filling", r.groups_filling),
            ("unavailable", r.groups_unavailable),
            ("cut", r.groups_cut),
        ] {
            self.groups
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(i64::from(n));
        }
    }

    /// Counts one request.
    pub fn count(&self, op: &str, class: ReqClass, secs: f64, errno: Option<&str>) {
        let label = match class {
            ReqClass::Mandatory => "mandatory",
            ReqClass::NonMandatory => "non_mandatory",
            ReqClass::Other => "other",
        };
        self.requests
            .get_or_create(&ReqLabel {
                op: op.into(),
                class: label.into(),
            })
            .inc();
        match class {
            ReqClass::Mandatory => self.mandatory.inc(),
            ReqClass::NonMandatory => self.non_mandatory.inc(),
            ReqClass::Other => 0,
        };
        self.latency
            .get_or_create(&OpLabel { op: op.into() })
            .observe(secs);
        if let Some(e) = errno {
            self.errors
                .get_or_create(&ErrLabel { errno: e.into() })
                .inc();
        }
    }

    /// Mandatory requests so far.
    pub fn mandatory(&self) -> u64 {
        self.mandatory.get()
    }

    /// Non-mandatory requests so far.
    pub fn non_mandatory(&self) -> u64 {
        self.non_mandatory.get()
    }

    /// The text exposition.
    pub fn render(&self, kv: &KvStats) -> String {
        self.kv_batches
            .set(kv.batches.load(Ordering::Relaxed) as i64);
        self.kv_led.set(kv.led.load(Ordering::Relaxed) as i64);
        self.kv_jobs.set(kv.jobs.load(Ordering::Relaxed) as i64);
        self.kv_checkpoints
            .set(kv.checkpoints.load(Ordering::Relaxed) as i64);
        self.kv_wal_bytes
            .set(kv.wal_bytes.load(Ordering::Relaxed) as i64);
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What a request is, for the `class` label of
/// `tessera_mds_requests_total`: Hendricks et al.'s two classes of
/// metadata access ([`proto::mds::Op::mandatory`],
/// [`proto::mds::Op::is_access`]), or neither (a request about the
/// cluster, a session's report of its open files or locks, a sync, a
/// replay, a directory lease asked for or given back), which neither
/// total counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqClass {
    /// Must reach the MDS at once.
    Mandatory,
    /// A client's cache could have answered it.
    NonMandatory,
    /// Not a metadata access.
    Other,
}

impl ReqClass {
    /// The class of `op`.
    pub fn of(op: &proto::mds::Op) -> ReqClass {
        if op.mandatory() {
            ReqClass::Mandatory
        } else if op.is_access() {
            ReqClass::NonMandatory
        } else {
            ReqClass::Other
        }
    }
}
