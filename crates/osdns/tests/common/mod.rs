//! A real cluster (MDS as authority + OSDs on 127.0.0.1) formatted with the
//! namespace on the OSDs, and namespace clients for it.

#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]
#![allow(
    dead_code,
    reason = "shared by several test binaries; each uses only part of it"
)]

use std::sync::Arc;
use std::time::Duration;

use local::LocalCluster;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use osdns::{DirHash, MdsAuthority, OsdFs, Osds, Protocol};
use proto::layout::LayoutSpec;
use proto::mds::NamespaceMode;

pub struct Cluster {
    pub c: LocalCluster,
    _dir: tempfile::TempDir,
}

pub async fn cluster(osds: u32) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let opts = FormatOptions {
        cluster_id: "nsx".into(),
        policy: IdPolicy::new(PolicyKind::CreateOrder, Geometry::default()).unwrap(),
        layout: LayoutSpec::default(),
        wal_bytes: 8 << 20,
        namespace: NamespaceMode::Osd,
        dir_protocol: String::new(),
    };
    let c = LocalCluster::start(dir.path(), osds, 256 << 20, &opts)
        .await
        .unwrap();
    Cluster { c, _dir: dir }
}

impl Cluster {
    /// A new namespace client (its own connections and lease owner id).
    pub async fn client(&self) -> Arc<OsdFs> {
        let auth = Arc::new(MdsAuthority::new(Arc::new(self.c.mds_client(1).unwrap())));
        let osds = Arc::new(Osds::new("nsx", auth, 1).await.unwrap());
        Arc::new(OsdFs::new(
            osds,
            Duration::from_secs(2),
            LayoutSpec {
                stripe_count: 2,
                ..LayoutSpec::default()
            },
        ))
    }

    /// Makes the root (first call) and returns a client.
    pub async fn formatted(&self, p: Protocol, h: DirHash) -> Arc<OsdFs> {
        let fs = self.client().await;
        fs.format(p, h).await.unwrap();
        fs
    }
}
