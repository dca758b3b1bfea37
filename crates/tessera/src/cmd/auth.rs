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
    /// Print a token that logs in to the web dashboard as the principal
    /// whose key this command uses (made here with the key; nothing is
    /// sent). It stops working when it expires, when the principal is
    /// removed or when its key is rotated.
    ///
    /// Example: `tessera auth token --data ./tessera-data --ttl 1h`.
    Token {
        /// How long it works: a number with s, m, h or d (at most 30d).
        #[arg(long, default_value = "8h", value_parser = parse_ttl)]
        ttl: u64,
        #[command(flatten)]
        to: ClusterArgs,
    },
}

/// Parses a token lifetime (`90s`, `15m`, `8h`, `7d`) into seconds.
fn parse_ttl(s: &str) -> Result<u64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: a number then s, m, h or d"))?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d")),
    };
    if secs == 0 || secs > proto::token::MAX_LIFETIME_S {
        return Err(format!("{s:?}: between 1s and 30d"));
    }
    Ok(secs)
}

/// Prints a dashboard token for the principal `to` resolves to.
fn print_token(to: &ClusterArgs, ttl: u64) -> anyhow::Result<i32> {
    let r = to.to.resolve()?;
    let (
        proto::auth::Credential::Key {
            principal,
            key_version,
        },
        Some(key),
    ) = (&r.identity.credential, r.identity.key)
    else {
        bail!(
            "a dashboard token needs a principal's key file (--key-file, or --data of a `tessera up` cluster)"
        );
    };
    let expiry = proto::clock::now_ms() / 1000 + ttl;
    let t = proto::token::make(&r.cluster, principal, *key_version, expiry, &key);
    if to.json {
        println!(
            "{}",
            serde_json::json!({"token": t, "principal": principal, "expiry_s": expiry})
        );
    } else {
        println!("{t}");
    }
    Ok(0)
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
    if let AuthCmd::Token { ttl, to } = &cmd {
        return print_token(to, *ttl);
    }
    runtime()?.block_on(async move {
        let to = match &cmd {
            AuthCmd::Add { to, .. }
            | AuthCmd::Ls { to }
            | AuthCmd::Rm { to, .. }
            | AuthCmd::Rotate { to, .. }
            | AuthCmd::Token { to, .. } => to,
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
            AuthCmd::Token { .. } => unreachable!("answered above without the MDS"),
        }
        Ok(0)
    })
}
