//! One module per subcommand.

pub mod auth;
pub mod bench;
pub mod cluster;
pub mod dashboard;
pub mod demo;
pub mod files;
pub mod fsck;
pub mod layout;
pub mod mds;
pub mod mds_group;
pub mod mkfs;
pub mod mount;
pub mod osd;
pub mod redundancy;
pub mod sim;
pub mod sim_record;
pub mod status;
pub mod store_ops;
pub mod thrash;
pub mod up;
pub mod up_group;

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use store::device::{Device, FileDevice};

/// Opens a store's device (block device or file) for direct I/O.
pub fn open_device(path: &Path) -> anyhow::Result<Arc<dyn Device>> {
    let dev = FileDevice::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Ok(Arc::new(dev))
}

/// The multi-threaded tokio runtime every networked command runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// A progress bar of `len` steps drawn with `template` (indicatif's syntax;
/// a bad template falls back to the plain bar).
pub fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    b.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}

/// Reads until `buf` is full or the input ends; returns the bytes read
/// (fewer than `buf.len()` only at the end). Retries interrupted reads.
pub fn read_full(r: &mut dyn std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Human-readable byte count.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Waits for SIGTERM or Ctrl-C.
pub async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// A namespace-on-OSDs client of the cluster whose MDS (acting as map and
/// capability authority) is at `mds`.
pub async fn namespace_client(r: &cluster::Resolved) -> anyhow::Result<osdns::OsdFs> {
    let mds = std::sync::Arc::new(net::MdsClient::new(
        &r.mds,
        &r.cluster,
        r.identity.clone(),
        1,
    ));
    let auth = std::sync::Arc::new(osdns::MdsAuthority::new(mds));
    let osds = osdns::Osds::new(&r.cluster, auth, 2).await.map_err(|e| {
        // The MDS answers, and refuses the namespace's grant: it keeps
        // the namespace itself.
        if e.is(proto::mds::Errno::Inval) {
            anyhow::anyhow!(
                "the file system at {} keeps its namespace in the MDS, not on the OSDs (this \
                 command is for --namespace osd): check it with the MDS stopped, with `tessera \
                 mds fsck --data DIR` on the MDS's directory (DATA/mds under `tessera up`)",
                r.mds
            )
        } else {
            anyhow::anyhow!("cannot reach the MDS at {}: {e}", r.mds)
        }
    })?;
    let layout = osds.creds().layout;
    Ok(osdns::OsdFs::new(
        std::sync::Arc::new(osds),
        std::time::Duration::from_secs(10),
        layout,
    ))
}
