//! `tessera auth add|ls|rm|rotate`: the principals that may use the file
//! system. An admin principal (`client.admin`, made at format time) asks
//! the MDS; a new or rotated key comes back wrapped with the admin's key
//! and is written to a key file (0600, atomically).

use std::path::PathBuf;

use anyhow::{Context, bail};
use net::MdsClient;
use proto::mds::{Access, MdsReply, Op, PrincipalInfo, PrincipalSpec, UidMap};

use super::runtime;
use super::status::ClusterArgs;

/// Manage principals: who may mount, where, with which rights.
#[derive(clap::Subcommand)]
pub enum AuthCmd {
    /// Add a principal and write its key file.
    ///
    /// Example: `tessera auth add client.lab --path /projects/lab
    /// --access rw --uids squash-root --out lab.key`, then on the client
    /// `tessera mount MDS /mnt/lab --key-file lab.key`.
    Add {
        /// `client.NAME`.
        name: String,
        /// The subtree it is confined to (it sees this directory as its root).
        #[arg(long, default_value = "/")]
        path: String,
        /// `rw` or `ro` (every change refused with EROFS).
        #[arg(long, default_value = "rw")]
        access: String,
        /// How its claimed uids are treated: `trusted` (as claimed),
        /// `squash-root` (root becomes nobody) or `fixed:UID:GID`.
        /// Default: `squash-root`, or `trusted` with `--admin`.
        #[arg(long)]
        uids: Option<String>,
        /// May manage principals and OSDs: every right, so only with the
        /// whole tree (`--path /`), `--access rw` and trusted uids.
        #[arg(long)]
        admin: bool,
        /// Where to write the key file (default: ./NAME.key).
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        to: ClusterArgs,
    },
    /// List principals (never their keys).
    Ls {
        #[command(flatten)]
        to: ClusterArgs,
    },
    /// Remove a principal: its connections to the MDS stop at once, those
    /// to the OSDs when their tickets and capabilities expire.
    Rm {
        /// `client.NAME`.
        name: String,
        #[command(flatten)]
        to: ClusterArgs,
    },
    /// Give a principal a new key and write its key file; the old key
    /// stops working at once at the MDS.
    Rotate {
        /// `client.NAME`.
        name: String,
        /// Where to write the new key file (default: ./NAME.key).
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        to: ClusterArgs,
    },
}

fn parse_access(s: &str) -> anyhow::Result<Access> {
    match s {
        "rw" => Ok(Access::ReadWrite),
        "ro" => Ok(Access::ReadOnly),
        _ => bail!("--access {s:?}: use rw or ro"),
    }
}

fn access_name(a: Access) -> &'static str {
    match a {
        Access::ReadWrite => "rw",
        Access::ReadOnly => "ro",
    }
}

/// Writes the key that came back wrapped, for `info`'s principal.
fn write_key(
    c: &MdsClient,
    r: &super::cluster::Resolved,
    info: &PrincipalInfo,
    wrapped: &[u8],
    out: Option<PathBuf>,
) -> anyhow::Result<PathBuf> {
    let own = c
        .identity()
        .key
        .context("this client has no key to open the new key with")?;
    let secret = proto::auth::unwrap_session_key(&own, wrapped)?;
    let mut key = net::auth::ClientKey::new(&r.cluster, &info.spec.name, info.key_version, &secret);
    key.mds = Some(r.mds.clone());
    let path = out.unwrap_or_else(|| PathBuf::from(format!("{}.key", info.spec.name)));
    key.save(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn print_info(p: &PrincipalInfo) {
    println!(
        "{:<24} id {:<4} path {:<20} access {:<2} uids {:<16} key v{}{}",
        p.spec.name,
        p.id,
        p.spec.path,
        access_name(p.spec.access),
        p.spec.uids.to_string(),
        p.key_version,
        if p.spec.admin { "  admin" } else { "" }
    );
}

/// Runs `tessera auth`.
pub fn auth(cmd: AuthCmd) -> anyhow::Result<i32> {
    runtime()?.block_on(async move {
        let to = match &cmd {
            AuthCmd::Add { to, .. }
            | AuthCmd::Ls { to }
            | AuthCmd::Rm { to, .. }
            | AuthCmd::Rotate { to, .. } => to,
        };
        let json = to.json;
        let r = to.to.resolve()?;
        let c = MdsClient::new(&r.mds, &r.cluster, r.identity.clone(), 1);
        match cmd {
            AuthCmd::Add {
                name,
                path,
                access,
                uids,
                admin,
                out,
                ..
            } => {
                let default_uids = if admin { "trusted" } else { "squash-root" };
                let uids = uids.as_deref().unwrap_or(default_uids);
                if admin && (path != "/" || access != "rw" || uids != "trusted") {
                    bail!(
                        "--admin may mint any principal, so it has every right: \
                         drop --path, --access ro and --uids (asked: --path {path} \
                         --access {access} --uids {uids})"
                    );
                }
                let spec = PrincipalSpec {
                    name,
                    path,
                    access: parse_access(&access)?,
                    uids: UidMap::parse(uids).map_err(anyhow::Error::msg)?,
                    admin,
                };
                match c.call(Op::AuthAdd(spec)).await? {
                    MdsReply::PrincipalKey { info, wrapped_key } => {
                        let p = write_key(&c, &r, &info, &wrapped_key, out)?;
                        if json {
                            println!("{}", serde_json::to_string_pretty(&*info)?);
                        } else {
                            print_info(&info);
                            println!(
                                "key written to {} (mode 0600): give it to the client only",
                                p.display()
                            );
                        }
                    }
                    other => bail!("unexpected reply {other:?}"),
                }
            }
            AuthCmd::Ls { .. } => match c.call(Op::AuthList).await? {
                MdsReply::Principals(v) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&v)?);
                    } else {
                        for p in &v {
                            print_info(p);
                        }
                    }
                }
                other => bail!("unexpected reply {other:?}"),
            },
            AuthCmd::Rm { name, .. } => {
                c.call(Op::AuthRemove { name: name.clone() }).await?;
                println!("removed {name}");
            }
            AuthCmd::Rotate { name, out, .. } => match c.call(Op::AuthRotate { name }).await? {
                MdsReply::PrincipalKey { info, wrapped_key } => {
                    let p = write_key(&c, &r, &info, &wrapped_key, out)?;
                    print_info(&info);
                    println!(
                        "new key written to {} (mode 0600); the old one no longer works",
                        p.display()
                    );
                }
                other => bail!("unexpected reply {other:?}"),
            },
        }
        Ok(0)
    })
}
