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
    /// Serve a lost replica group again (namespace on the OSDs) from one
    /// OSD's copy as it is, accepting the loss of anything newer.
    ///
    /// A group is lost when every member's store came back new (a
    /// replaced disk) or older (a restored copy): `status` says "N replica
    /// groups lost every full copy", and the group stays unavailable —
    /// its files and any new file placed in it fail — rather than be
    /// refilled from a copy that may be missing acknowledged changes.
    /// This makes OSD --from the group's only member, as its copy is now
    /// (older, or empty if its disk was replaced), and fills the others
    /// from it (a former member's better copy is overwritten). Objects in
    /// the group read back as they were in that copy, or not at all;
    /// objects in other groups are as they are, so run `tessera fsck
    /// --namespace` afterwards. Refused for a group that still has a
    /// member, and for the root directory's group (its inode counter
    /// would go back).
    ///
    /// Example: tessera osd adopt-group 2 --from 3 --accept-loss
    AdoptGroup {
        /// The replica group (the id of the OSD it was made for).
        group: u32,
        /// The OSD whose copy the group adopts (up and in).
        #[arg(long)]
        from: u32,
        /// Confirms that changes newer than that copy are given up.
        #[arg(long)]
        accept_loss: bool,
        #[command(flatten)]
        to: ClusterArgs,
    },
}

/// Runs `tessera osd out|in|adopt-group`.
pub fn osd_action(a: OsdAction) -> anyhow::Result<i32> {
    let (id, out, force, to) = match a {
        OsdAction::Out { id, force, to } => (id, true, force, to),
        OsdAction::In { id, to } => (id, false, false, to),
        OsdAction::AdoptGroup {
            group,
            from,
            accept_loss,
            to,
        } => return adopt_group(group, from, accept_loss, to),
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

/// Runs `tessera osd adopt-group`.
fn adopt_group(group: u32, osd: u32, accept_loss: bool, to: ClusterArgs) -> anyhow::Result<i32> {
    if !accept_loss {
        bail!(
            "adopting group {group} from OSD {osd} gives up every change newer than that OSD's \
             copy of it; say so with --accept-loss"
        );
    }
    runtime()?.block_on(async move {
        let r = to.to.resolve()?;
        let c = MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        match c.call(Op::AdoptGroup { group, osd }).await? {
            MdsReply::Done => {
                println!(
                    "replica group {group} is served from OSD {osd}'s copy; the other members \
                     are filled from it (`tessera status --watch` follows)"
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
