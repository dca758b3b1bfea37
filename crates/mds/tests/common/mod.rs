//! A small cluster on 127.0.0.1 for the MDS tests: one MDS, N OSDs on
//! file-backed stores, all in this process, over real sockets.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]
#![allow(
    dead_code,
    reason = "shared by several test binaries; each uses only part of it"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use local::{LocalMds, LocalOsd, operator_cap, osd_dir, provision_osd};
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use net::MdsClient;
use net::{ConnConfig, OsdClient};
use proto::Capability;
use proto::layout::{DATA_PARTITION, LayoutSpec};
use proto::mds::{MdsReply, Op};

pub const CLUSTER: &str = "test";

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub mds: Option<LocalMds>,
    pub osds: Vec<Option<LocalOsd>>,
    pub mds_addr: String,
}

impl Cluster {
    pub fn mds_dir(&self) -> PathBuf {
        self.dir.path().join("mds")
    }

    /// A cluster of `n` OSDs whose MDS frees an unlinked file at once
    /// (no client is counted as holding it).
    pub async fn start(n: u32, layout: LayoutSpec, policy: PolicyKind) -> Cluster {
        Cluster::start_with(n, layout, policy, false, "").await
    }

    /// As [`Cluster::start`], with `settings` (TOML lines) added to `mds.toml`.
    #[allow(dead_code, reason = "used by some of the test binaries")]
    pub async fn start_set(
        n: u32,
        layout: LayoutSpec,
        policy: PolicyKind,
        settings: &str,
    ) -> Cluster {
        Cluster::start_with(n, layout, policy, false, settings).await
    }

    /// As [`Cluster::start`], but sessions hold the files they make or
    /// open, as in production: an unlinked file held stays an orphan.
    #[allow(dead_code, reason = "used by some of the test binaries")]
    pub async fn start_holding(n: u32, layout: LayoutSpec, policy: PolicyKind) -> Cluster {
        Cluster::start_with(n, layout, policy, true, "").await
    }

    async fn start_with(
        n: u32,
        layout: LayoutSpec,
        policy: PolicyKind,
        holds: bool,
        settings: &str,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mds_dir = dir.path().join("mds");
        let opts = FormatOptions {
            cluster_id: CLUSTER.into(),
            policy: IdPolicy::new(policy, Geometry::default()).unwrap(),
            layout,
            wal_bytes: 8 << 20,
            namespace: Default::default(),
            dir_protocol: String::new(),
        };
        mds::service::format(&mds_dir, &opts).unwrap();
        // Most tests see an unlinked file go at once (no client holds it).
        let cfg = mds_dir.join("mds.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        let line = format!("hold_expiry_ms = {}", proto::mds::HOLD_EXPIRY_MS);
        assert!(text.contains(&line), "{text}");
        let mut text = if holds {
            text
        } else {
            text.replace(&line, "hold_expiry_ms = 0")
        };
        for l in settings.lines() {
            let key = l.split('=').next().unwrap().trim();
            let old = text
                .lines()
                .find(|x| x.starts_with(key))
                .unwrap()
                .to_string();
            text = text.replace(&old, l);
        }
        std::fs::write(&cfg, text).unwrap();
        for i in 0..n {
            provision_osd(
                &osd_dir(dir.path(), i),
                i,
                CLUSTER,
                256 << 20,
                &mds_dir.join("keys"),
            )
            .unwrap();
        }
        let m = LocalMds::start(&mds_dir, "127.0.0.1:0").await.unwrap();
        let mds_addr = m.addr.to_string();
        let mut c = Cluster {
            dir,
            mds: Some(m),
            osds: Vec::new(),
            mds_addr,
        };
        for i in 0..n {
            let o = LocalOsd::start(
                &osd_dir(c.dir.path(), i),
                "127.0.0.1:0",
                Some(c.mds_addr.clone()),
            )
            .await
            .unwrap();
            c.osds.push(Some(o));
        }
        c.wait_up(n as usize).await;
        c
    }

    pub async fn wait_up(&self, n: usize) {
        let cl = self.client();
        for _ in 0..200 {
            if let Ok(MdsReply::Status(s)) = cl.call(Op::Status).await
                && s.osds.iter().filter(|o| o.up).count() >= n
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("OSDs did not come up");
    }

    /// The admin principal's identity.
    pub fn admin(&self) -> net::auth::Identity {
        local::admin_identity(&self.dir.path().join("mds")).unwrap()
    }

    pub fn client(&self) -> MdsClient {
        MdsClient::new(
            &self.mds_addr,
            CLUSTER,
            local::admin_identity(&self.dir.path().join("mds")).unwrap(),
            2,
        )
    }

    /// OSD `osd`'s newest key (what it signs its reports with).
    pub fn osd_key(&self, osd: u32) -> [u8; 32] {
        let kf = net::keys::KeyFile::load(&osd_dir(self.dir.path(), osd).join("key.toml")).unwrap();
        kf.newest().unwrap().1
    }

    /// An unsigned report from OSD 0 at `addr`, sent at `at_ms`, from `host`.
    pub fn report(&self, addr: &str, at_ms: u64, host: &str) -> proto::mds::OsdReport {
        proto::mds::OsdReport {
            osd_id: 0,
            addr: addr.into(),
            weight: proto::placement::WEIGHT_ONE,
            capacity: 1,
            used: 0,
            objects: 0,
            key_version: 1,
            at_ms,
            // The store OSD 0 runs on (its own reports name it too).
            store: self
                .osds
                .first()
                .and_then(|o| o.as_ref())
                .map(|o| o.store.mark())
                .unwrap_or_default(),
            mac: [0; 32],
            load: Default::default(),
            host: host.into(),
        }
    }

    /// An MDS client authenticated as OSD `osd` (what its heartbeat uses).
    pub fn osd_mds_client(&self, osd: u32) -> MdsClient {
        let id = net::auth::Identity::principal(&format!("osd.{osd}"), 1, self.osd_key(osd));
        MdsClient::new(&self.mds_addr, CLUSTER, id, 1)
    }

    /// A client of OSD `osd` authenticated as the admin principal (with
    /// tickets from the MDS): what uses the capabilities the admin's
    /// requests are granted.
    pub fn admin_osd_client(&self, osd: u32) -> OsdClient {
        let o = self.osds[osd as usize].as_ref().unwrap();
        let tickets = net::auth::TicketsFromMds::new(Arc::new(self.client()));
        OsdClient::new(&o.addr.to_string(), ConnConfig::new(CLUSTER, osd, tickets))
    }

    /// OSD 0's address.
    pub fn osd0_addr(&self) -> String {
        self.osds[0].as_ref().unwrap().addr.to_string()
    }

    /// An OSD client and an all-powerful capability for it (as an operator would have).
    pub fn osd_client(&self, osd: u32) -> (OsdClient, Capability) {
        let o = self.osds[osd as usize].as_ref().unwrap();
        let dir = osd_dir(self.dir.path(), osd);
        let c = OsdClient::new(
            &o.addr.to_string(),
            ConnConfig::new(CLUSTER, osd, local::operator_identity(&dir).unwrap()),
        );
        (
            c,
            operator_cap(&osd_dir(self.dir.path(), osd), 600_000).unwrap(),
        )
    }

    /// Every object id stored on every OSD.
    pub async fn all_objects(&self) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for i in 0..self.osds.len() as u32 {
            let (c, cap) = self.osd_client(i);
            let ids = c
                .list_all(Some(&cap), DATA_PARTITION, 0, u64::MAX)
                .await
                .unwrap();
            out.extend(ids.into_iter().map(|x| (i, x)));
        }
        out
    }

    pub async fn stop(mut self) {
        for o in self.osds.iter_mut() {
            if let Some(o) = o.take() {
                o.stop().await.unwrap();
            }
        }
        if let Some(m) = self.mds.take() {
            m.stop().await;
        }
    }
}

pub fn spec(su: u32, sc: u32) -> LayoutSpec {
    LayoutSpec {
        stripe_unit: su,
        stripe_count: sc,
        object_size: 0,
        ..LayoutSpec::default()
    }
}

/// Whether the delete queue empties within `tries` × 20 ms.
pub async fn drained(m: &Arc<mds::Mds>, tries: u32) -> bool {
    for _ in 0..tries {
        if m.delete_queue().unwrap().is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m.delete_queue().unwrap().is_empty()
}

pub fn check_clean(mds: &Arc<mds::Mds>) -> mds::fsck::Report {
    let r = mds::fsck::check(&mds.kv.read().unwrap()).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:#?}", r.problems);
    r
}

/// Makes directory `name` in `parent` (mode 0755) as `c`: its inode.
pub async fn mkdir(c: &MdsClient, parent: u64, name: &str) -> u64 {
    match c
        .call(Op::Mkdir {
            parent,
            name: name.into(),
            mode: 0o755,
        })
        .await
        .unwrap()
    {
        MdsReply::Found(f) => f.entry.attr.ino,
        other => panic!("mkdir {name:?}: {other:?}"),
    }
}

/// Inode `ino`'s attributes (GETATTR) as `c` sees them.
pub async fn getattr(c: &MdsClient, ino: u64) -> proto::mds::Attr {
    match c.call(Op::GetAttr { ino }).await.unwrap() {
        MdsReply::Attr(a) => a,
        other => panic!("getattr {ino:#x}: {other:?}"),
    }
}
