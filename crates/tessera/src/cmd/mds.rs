//! `tessera mds format|serve|join|remove|fsck`: the metadata server's own commands
//! (`tessera status` and `tessera layout` have their own modules).

use std::path::PathBuf;

use anyhow::Context;
use local::LocalMds;
use mds::FormatOptions;
use mds::ids::{Geometry, IdPolicy, PolicyKind};
use proto::layout::LayoutSpec;

/// The metadata server.
#[derive(clap::Subcommand)]
pub enum MdsCmd {
    /// Make an empty file system in a data directory.
    ///
    /// The object-id policy is fixed here: child-closest (default) and
    /// cousin-closest flatten the namespace into ids so related files get
    /// numerically close ids (what prefetching exploits); create-order and
    /// pseudo-random are there for comparison. Put each OSD's key file in
    /// DIR/keys/osd-<id>.toml before the OSD registers.
    ///
    /// With --namespace osd the directories live on the OSDs (Ali et al.)
    /// and this MDS only hands out maps and capabilities; the first client
    /// to connect once OSDs have registered (a mount, `tessera fsck
    /// --namespace`) makes the root directory with --dir-protocol.
    ///
    /// Example: tessera mds format --data /var/lib/tessera/mds --cluster prod
    Format {
        /// Data directory (created).
        #[arg(long)]
        data: PathBuf,
        /// Cluster id (OSD key files must name it).
        #[arg(long)]
        cluster: String,
        /// Object-id policy: child-closest, cousin-closest, create-order, pseudo-random.
        #[arg(long, default_value = "child-closest")]
        policy: String,
        /// Root directory's stripe unit (e.g. 512K).
        #[arg(long, default_value = "512K", value_parser = crate::args::size)]
        stripe_unit: u64,
        /// Root directory's stripe count (capped at the OSDs when a file is made).
        #[arg(long, default_value_t = 1)]
        stripe_count: u32,
        /// Copies of every object, root default (1 to 5; default 3; with
        /// --namespace osd, kept by replica chains); `tessera status` says
        /// "degraded" while fewer OSDs than this are in.
        #[arg(long)]
        replicas: Option<u8>,
        /// Size of the metadata write-ahead log.
        #[arg(long, default_value = "64M", value_parser = crate::args::size)]
        log_size: u64,
        /// Where the namespace lives: mds, or osd (each directory an OSD
        /// object, no MDS in the metadata path).
        #[arg(long, default_value = "mds")]
        namespace: String,
        /// Encrypt every connection's frames (AES-256-GCM), not only
        /// those of clients that ask (`require_encryption` in mds.toml).
        #[arg(long)]
        encrypt: bool,
        /// With --namespace osd: how directory entries are inserted and
        /// removed, atomic (one compare-and-swap) or lock.
        #[arg(long, default_value = "atomic")]
        dir_protocol: String,
        /// Format a replicated MDS group instead: the members' client
        /// addresses (ids 1, 2, … in this order), e.g.
        /// 10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400. --data then gets one
        /// directory per member (member-1, …): copy each to its host and
        /// serve it there with `tessera mds serve --data DIR`.
        #[arg(long)]
        members: Option<String>,
        /// With --members: the members' peer addresses (raft), in the same
        /// order; default: each client port plus 100.
        #[arg(long, requires = "members")]
        peers: Option<String>,
    },
    /// Serve a formatted data directory (stops cleanly on SIGTERM / Ctrl-C).
    ///
    /// Example: tessera mds serve --data /var/lib/tessera/mds --listen 0.0.0.0:7400 --metrics 127.0.0.1:9400
    Serve {
        /// Data directory made by `tessera mds format`.
        #[arg(long)]
        data: PathBuf,
        /// Address for clients and OSDs.
        #[arg(long, default_value = "127.0.0.1:7400")]
        listen: String,
        /// The web dashboard and Prometheus `/metrics`.
        #[command(flatten)]
        http: super::dashboard::HttpArgs,
    },
    /// Make a new member of a replicated MDS group and ask the group to
    /// add it (to grow the group, or to replace a member whose host or
    /// disk was lost: `tessera mds remove` that one first).
    ///
    /// --from is any member's directory, or a copy of one: only its
    /// mds.toml, group.key, client.admin.key and keys/ are read, so the
    /// member may be running. --data is made from it with a raft log of
    /// its own and an empty KV. The leader adds the member as a learner;
    /// start it with `tessera mds serve --data DIR`, it installs the
    /// leader's snapshot and votes once it has caught up (`tessera status`
    /// shows it "joining" until then). Member ids are never reused.
    ///
    /// Example: tessera mds join --from /var/lib/tessera/mds --data /srv/mds-4 --id 4 --addr 10.0.0.4:7400
    Join {
        /// A member's directory (or a copy of one).
        #[arg(long)]
        from: PathBuf,
        /// The new member's directory (created).
        #[arg(long)]
        data: PathBuf,
        /// The new member's id (not used by any member, now or before).
        #[arg(long)]
        id: u64,
        /// Where clients and OSDs reach it while it leads.
        #[arg(long)]
        addr: String,
        /// Where the other members reach it (default: --addr's port plus 100).
        #[arg(long)]
        peer: Option<String>,
        /// The group's client addresses to ask (default: the members
        /// --from's mds.toml lists, which may be out of date).
        #[arg(long)]
        mds: Option<String>,
    },
    /// Remove a member from a replicated MDS group (a host retired or
    /// lost). The group keeps serving if a majority of the members left
    /// is up; stop the removed member's process afterwards.
    ///
    /// Example: tessera mds remove --id 2 --mds 10.0.0.1:7400,10.0.0.3:7400 --key-file admin.key
    Remove {
        /// The member's id.
        #[arg(long)]
        id: u64,
        /// The group to ask.
        #[command(flatten)]
        to: super::cluster::Target,
    },
    /// Check the namespace offline (the MDS must not be running).
    Fsck {
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
    },
}

use super::runtime;

pub fn run(c: MdsCmd) -> anyhow::Result<i32> {
    match c {
        c @ MdsCmd::Format { .. } => format(c),
        MdsCmd::Serve { data, http, .. }
            if mds::MdsConfig::load(&data.join("mds.toml"))
                .map_err(anyhow::Error::msg)?
                .group
                .is_some() =>
        {
            super::mds_group::serve_member(&data, http)
        }
        MdsCmd::Serve { data, listen, http } => runtime()?.block_on(async move {
            let http_listener = super::dashboard::listen(&http).await?;
            let m = LocalMds::start(&data, &listen)
                .await
                .map_err(anyhow::Error::msg)?;
            let h = match http_listener {
                Some(l) => Some(super::dashboard::start(
                    &http,
                    l,
                    m.mds.clone(),
                    &m.addr.to_string(),
                    None,
                )?),
                None => None,
            };
            println!(
                "MDS of cluster {} serving {} on {}",
                m.mds.sb.cluster_id,
                data.display(),
                m.addr
            );
            if let Some(h) = h {
                println!("dashboard and /metrics on http://{h}/");
            }
            super::wait_for_signal().await;
            m.stop().await;
            println!("MDS stopped cleanly");
            Ok(0)
        }),
        MdsCmd::Join {
            from,
            data,
            id,
            addr,
            peer,
            mds,
        } => super::mds_group::join(&from, &data, id, (&addr, peer.as_deref()), mds.as_deref()),
        MdsCmd::Remove { id, to } => super::mds_group::remove(id, &to),
        MdsCmd::Fsck { data } => {
            let member = mds::MdsConfig::load(&data.join("mds.toml"))
                .map_err(anyhow::Error::msg)?
                .group
                .is_some();
            let r = if member {
                // A group member's KV is read as it is: no log replay and
                // no checkpoint, which would change this member alone.
                mds::group::files::check_db(&data, mds::fsck::check).map_err(anyhow::Error::msg)?
            } else {
                let kv = mds::kv::Kv::open(&mds::kv::KvPaths::new(&data), 64 << 20)?;
                let r = mds::fsck::check(&kv.read()?)?;
                kv.close();
                r
            };
            println!(
                "{} inodes, {} entries, {} files waiting for object deletion, \
                 {} unlinked files kept while open",
                r.inodes, r.entries, r.delete_queue, r.orphans
            );
            for p in &r.problems {
                println!("problem: {p}");
            }
            if r.problems.is_empty() {
                println!("clean");
                Ok(0)
            } else {
                Ok(1)
            }
        }
    }
}

/// `tessera mds format`.
fn format(c: MdsCmd) -> anyhow::Result<i32> {
    let MdsCmd::Format {
        data,
        cluster,
        policy,
        stripe_unit,
        stripe_count,
        replicas,
        log_size,
        namespace,
        dir_protocol,
        encrypt,
        members,
        peers,
    } = c
    else {
        unreachable!("format is given a format command")
    };
    let group = members
        .as_deref()
        .map(|m| super::mds_group::parse_members(m, peers.as_deref()))
        .transpose()?;
    let root = data.clone();
    let data = if group.is_some() {
        root.join(".format")
    } else {
        data
    };
    let kind = PolicyKind::parse(&policy).map_err(anyhow::Error::msg)?;
    let namespace = proto::mds::NamespaceMode::parse(&namespace).map_err(anyhow::Error::msg)?;
    osdns::Protocol::parse(&dir_protocol).map_err(anyhow::Error::msg)?;
    let opts = FormatOptions {
        cluster_id: cluster.clone(),
        policy: IdPolicy::new(kind, Geometry::default()).map_err(anyhow::Error::msg)?,
        layout: LayoutSpec {
            stripe_unit: u32::try_from(stripe_unit).context("stripe unit too large")?,
            stripe_count,
            object_size: 0,
            replicas: replicas.unwrap_or(3),
            min_replicas: 0,
        },
        wal_bytes: log_size,
        namespace,
        dir_protocol: dir_protocol.clone(),
    };
    mds::service::format(&data, &opts)?;
    if encrypt {
        let p = data.join("mds.toml");
        let mut cfg = mds::MdsConfig::load(&p).map_err(anyhow::Error::msg)?;
        cfg.require_encryption = true;
        net::files::write_private(&p, toml::to_string_pretty(&cfg)?.as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if group.is_none() {
        println!(
            "formatted {} for cluster {cluster} (id policy {policy}); put OSD keys in {}",
            data.display(),
            data.join("keys").display()
        );
        println!(
            "admin key: {} (add --mds ADDR to it, or pass --mds; `tessera auth add` makes keys for other clients)",
            mds::principals::admin_key_path(&data).display()
        );
    }
    if namespace == proto::mds::NamespaceMode::Osd {
        println!(
            "namespace on the OSDs ({dir_protocol} protocol): the first client to \
             connect after OSDs register makes the root directory"
        );
    }
    if let Some(g) = group {
        let dirs = super::mds_group::make_members(&data, &root, &g, log_size.max(64 << 20))?;
        println!(
            "formatted an MDS group of {} members for cluster {cluster} (id policy {policy}); \
             put each OSD's key file in every member's keys/ directory",
            g.len()
        );
        for (m, d) in g.iter().zip(&dirs) {
            println!(
                "member {}: {} (clients {}, peers {})",
                m.id,
                d.display(),
                m.addr,
                m.peer
            );
        }
        let all: Vec<&str> = g.iter().map(|m| m.addr.as_str()).collect();
        println!("clients and OSDs: --mds {}", all.join(","));
        println!(
            "admin key: {} (the same in every member's directory)",
            mds::principals::admin_key_path(&dirs[0]).display()
        );
    }
    Ok(0)
}
