//! `tessera layout get|set PATH`: a file's layout or a directory's default
//! layout (stripe unit, stripe count, object size, replicas).

use anyhow::{Context, bail};
use net::MdsClient;
use proto::layout::LayoutSpec;
use proto::mds::{MdsReply, Op};

use super::runtime;
use super::status::ClusterArgs;

/// Show or set a file's layout or a directory's default layout.
#[derive(clap::Subcommand)]
pub enum LayoutCmd {
    /// Print the layout of PATH.
    Get {
        /// Path in the file system (absolute).
        path: String,
        #[command(flatten)]
        to: ClusterArgs,
    },
    /// Set PATH's layout (directories: the default for new files and
    /// subdirectories; files: only while empty).
    Set {
        /// Path in the file system (absolute).
        path: String,
        /// Stripe unit (multiple of 4K).
        #[arg(long, value_parser = crate::args::size)]
        stripe_unit: Option<u64>,
        /// Stripe count.
        #[arg(long)]
        stripe_count: Option<u32>,
        /// Largest object (0 = unbounded).
        #[arg(long, value_parser = crate::args::size)]
        object_size: Option<u64>,
        /// Copies of every object, on distinct OSDs (and hosts when there
        /// are enough): 1 to 5.
        #[arg(long)]
        replicas: Option<u8>,
        /// Fewest copies a write may be acknowledged with (default: replicas - 1, at least 1).
        #[arg(long)]
        min_replicas: Option<u8>,
        #[command(flatten)]
        to: ClusterArgs,
    },
}

/// Runs `tessera layout`.
pub fn layout(c: LayoutCmd) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let (path, to, set) = match c {
            LayoutCmd::Get { path, to } => (path, to, None),
            LayoutCmd::Set {
                path,
                stripe_unit,
                stripe_count,
                object_size,
                replicas,
                min_replicas,
                to,
            } => (
                path,
                to,
                Some((stripe_unit, stripe_count, object_size, replicas, min_replicas)),
            ),
        };
        let r = to.to.resolve()?;
        let cl = MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        let e = cl.resolve(&path).await?;
        let ino = e.attr.ino;
        let current = match cl.call(Op::GetLayout { ino }).await? {
            MdsReply::Layout { spec, .. } => spec,
            r => bail!("unexpected reply {r:?}"),
        };
        let reply = match set {
            None => cl.call(Op::GetLayout { ino }).await?,
            Some((su, sc, os, r, mr)) => {
                let spec = LayoutSpec {
                    stripe_unit: match su {
                        Some(v) => u32::try_from(v).context("stripe unit too large")?,
                        None => current.stripe_unit,
                    },
                    stripe_count: sc.unwrap_or(current.stripe_count),
                    object_size: os.unwrap_or(current.object_size),
                    replicas: r.unwrap_or(current.replicas),
                    // A new replica count resets the quorum to its default.
                    min_replicas: mr.unwrap_or(if r.is_some() { 0 } else { current.min_replicas }),
                };
                if let Err(e) = spec.validate() {
                    bail!("{path}: {e}");
                }
                cl.call(Op::SetLayout { ino, spec }).await?
            }
        };
        match reply {
            MdsReply::Layout { spec, layout } => {
                println!(
                    "{path}: stripe unit {} B, stripe count {}, object size {}, replicas {} (writes need {})",
                    spec.stripe_unit,
                    spec.stripe_count,
                    if spec.object_size == 0 {
                        "unbounded".to_string()
                    } else {
                        format!("{} B", spec.object_size)
                    },
                    spec.replicas,
                    spec.min_copies()
                );
                if let Some(l) = layout {
                    println!(
                        "  placed with OSD map epoch {}, object sets {:x?}",
                        l.map_epoch, l.objsets
                    );
                }
                Ok(0)
            }
            r => bail!("unexpected reply {r:?}"),
        }
    })
}
