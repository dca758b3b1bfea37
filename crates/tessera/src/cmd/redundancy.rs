//! `tessera osd out|in ID` and `tessera scrub [PATH] [--deep]`: the
//! operator's handles on redundancy.

use anyhow::bail;
use net::MdsClient;
use proto::mds::{MdsReply, Op, ROOT_INO};

use super::runtime;
use super::status::ClusterArgs;

/// Operator actions on an OSD.
#[derive(clap::Subcommand)]
pub enum OsdAction {
    /// Mark an OSD out: it takes no placements and recovery re-makes its
    /// copies on the others (refused while it holds the only fresh copy of
    /// an object on an up OSD, unless --force).
    ///
    /// Example: tessera osd out 3
    Out {
        /// OSD id.
        id: u32,
        /// Even if objects would have no fresh copy left on an up OSD.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        to: ClusterArgs,
    },
    /// Mark an OSD back in: it takes placements again.
    ///
    /// Example: tessera osd in 3
    In {
        /// OSD id.
        id: u32,
        #[command(flatten)]
        to: ClusterArgs,
    },
}

/// Runs `tessera osd out|in`.
pub fn osd_action(a: OsdAction) -> anyhow::Result<i32> {
    let (id, out, force, to) = match a {
        OsdAction::Out { id, force, to } => (id, true, force, to),
        OsdAction::In { id, to } => (id, false, false, to),
    };
    runtime()?.block_on(async move {
        let r = to.to.resolve()?;
        let c = MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        match c
            .call(Op::SetOsdOut {
                osd: id,
                out,
                force,
            })
            .await?
        {
            MdsReply::Done => {
                println!(
                    "OSD {id} marked {}; `tessera status --watch` follows recovery",
                    if out { "out" } else { "in" }
                );
                Ok(0)
            }
            r => bail!("unexpected reply {r:?}"),
        }
    })
}

/// Compare every copy of the objects under PATH (default: everything) and
/// repair the copies that differ from the majority.
///
/// A light scrub compares sizes; --deep reads every byte of every copy
/// (through each OSD's block checksums) and compares digests. Exit status:
/// 0 when every copy agreed or was repaired, 2 otherwise — including when
/// something could not be checked (a copy unreachable, no copy up, a
/// replica group's head down): the summary then says INCOMPLETE, and
/// `status` warns until a later scrub checks everything.
///
/// Example: tessera scrub /data --deep
#[derive(clap::Args)]
pub struct ScrubArgs {
    /// Path in the file system (absolute; a file or a directory's subtree).
    path: Option<String>,
    /// Compare content, not only sizes.
    #[arg(long)]
    deep: bool,
    #[command(flatten)]
    to: ClusterArgs,
}

/// Runs `tessera scrub`.
pub fn scrub(a: ScrubArgs) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let r = a.to.to.resolve()?;
        let c = MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        let ino = match &a.path {
            Some(p) if p != "/" => c.resolve(p).await?.attr.ino,
            _ => ROOT_INO,
        };
        let r = match c.call(Op::Scrub { ino, deep: a.deep }).await? {
            MdsReply::Scrubbed(r) => r,
            r => bail!("unexpected reply {r:?}"),
        };
        if a.to.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            for p in &r.problems {
                println!("{p}");
            }
            println!(
                "{} scrub: {} objects, {} copies compared{}; {} inconsistent, {} repaired{}",
                if a.deep { "deep" } else { "light" },
                r.objects,
                r.copies,
                if a.deep {
                    format!(", {} read", super::human(r.bytes))
                } else {
                    String::new()
                },
                r.inconsistent,
                r.repaired,
                if r.unchecked > 0 {
                    format!("; INCOMPLETE: {} could not be checked", r.unchecked)
                } else {
                    String::new()
                }
            );
        }
        // Anything found and left, or anything not looked at, is not a
        // clean bill of health.
        Ok(if r.inconsistent == r.repaired && r.unchecked == 0 {
            0
        } else {
            2
        })
    })
}
