//! A replicated MDS group from the command line: formatting the members'
//! directories (`tessera mds format --members`), serving one member
//! (`tessera mds serve` on a directory whose `mds.toml` has `[group]`),
//! and adding or removing members (`tessera mds join`, `remove`).
//! A member that stops leading re-executes itself: the process image is
//! replaced without running any destructor, so its KV keeps nothing the
//! group did not commit (`docs/HA.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use mds::GroupMember;

/// Parses `--members` (client addresses, ids 1, 2, … in order) and
/// `--peers` (the members' peer addresses in the same order; default: the
/// client port plus 100).
pub fn parse_members(members: &str, peers: Option<&str>) -> anyhow::Result<Vec<GroupMember>> {
    let addrs: Vec<&str> = members
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if !(1..=9).contains(&addrs.len()) {
        anyhow::bail!(
            "--members lists {} addresses: a group has 1 to 9 (3 or 5 to survive failures)",
            addrs.len()
        );
    }
    let peers: Vec<String> = match peers {
        Some(p) => p.split(',').map(|s| s.trim().to_string()).collect(),
        None => addrs
            .iter()
            .map(|a| {
                let (host, port) = host_port(a)?;
                let peer = port.checked_add(100).with_context(|| {
                    format!("{a}: no room for a peer port (port + 100); give --peers")
                })?;
                Ok(format!("{host}:{peer}"))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    if peers.len() != addrs.len() {
        anyhow::bail!(
            "--peers lists {} addresses for {} members",
            peers.len(),
            addrs.len()
        );
    }
    let mut seen = std::collections::HashSet::new();
    for a in addrs
        .iter()
        .copied()
        .chain(peers.iter().map(String::as_str))
    {
        host_port(a)?;
        if !seen.insert(a.to_string()) {
            anyhow::bail!("address {a} is given twice");
        }
    }
    Ok(addrs
        .iter()
        .zip(peers)
        .enumerate()
        .map(|(i, (a, p))| GroupMember {
            id: i as u64 + 1,
            addr: a.to_string(),
            peer: p,
        })
        .collect())
}

/// `host:port` (a name or an address; port 1 to 65535).
fn host_port(a: &str) -> anyhow::Result<(&str, u16)> {
    let (host, port) = a
        .rsplit_once(':')
        .with_context(|| format!("{a:?} is not host:port"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .with_context(|| format!("{a:?}: the port must be 1 to 65535"))?;
    if host.is_empty() {
        anyhow::bail!("{a:?} names no host");
    }
    Ok((host, port))
}

/// After `mds::service::format` made a single MDS in `formatted`: one
/// directory per member under `out`, then `formatted` removed.
pub fn make_members(
    formatted: &Path,
    out: &Path,
    members: &[GroupMember],
    log_bytes: u64,
) -> anyhow::Result<Vec<PathBuf>> {
    let made = mds::group::files::make_members(formatted, out, members, log_bytes)
        .map_err(anyhow::Error::msg);
    // Nothing half made is left behind: a second try starts clean.
    let _ = std::fs::remove_dir_all(formatted);
    made
}

/// Runs `tessera mds join`: makes the member's directory, then asks the
/// group's leader (through `--from`'s members and admin key) to add it.
pub fn join(
    from: &Path,
    data: &Path,
    id: u64,
    (addr, peer): (&str, Option<&str>),
    mds: Option<&str>,
) -> anyhow::Result<i32> {
    let (host, port) = host_port(addr)?;
    let peer = match peer {
        Some(p) => {
            host_port(p)?;
            p.to_string()
        }
        None => format!(
            "{host}:{}",
            port.checked_add(100)
                .with_context(|| format!("{addr}: no room for a peer port; give --peer"))?
        ),
    };
    if peer == addr {
        anyhow::bail!("--addr and --peer must differ (clients and members use separate ports)");
    }
    if id == 0 || id == u64::MAX {
        anyhow::bail!("--id {id} is reserved: give another");
    }
    if !from.join("mds.toml").is_file() {
        anyhow::bail!(
            "{}: no mds.toml: --from must be a member's directory (or a copy of one)",
            from.display()
        );
    }
    if data.exists() {
        anyhow::bail!(
            "{} exists: refusing to make a member over it",
            data.display()
        );
    }
    let me = GroupMember {
        id,
        addr: addr.to_string(),
        peer: peer.clone(),
    };
    // Made aside and put in place only once the group took it: a member
    // started on DIR meanwhile cannot lose its files to a failed join.
    let mut aside = data.as_os_str().to_owned();
    aside.push(".joining");
    let aside = PathBuf::from(aside);
    let _ = std::fs::remove_dir_all(&aside);
    let j = mds::group::files::make_joiner(from, &aside, &me).map_err(anyhow::Error::msg)?;
    let asked = ask_to_add(&aside, &j, &me, mds);
    let members = match asked {
        Ok(members) => members,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&aside);
            return Err(e.context("the group did not add the member"));
        }
    };
    std::fs::rename(&aside, data)
        .with_context(|| format!("cannot move {} to {}", aside.display(), data.display()))?;
    println!(
        "member {id} made in {} and added to the group as a learner (clients {addr}, peers {peer})",
        data.display()
    );
    println!(
        "start it: tessera mds serve --data {} (it installs the leader's snapshot and votes \
         once caught up; `tessera status` shows it joining until then)",
        data.display()
    );
    println!("clients and OSDs: --mds {}", members.join(","));
    Ok(0)
}

/// Asks the group (`mds`, else the members `--from` named) to add `me`;
/// answers every member's client address as the leader lists them.
fn ask_to_add(
    dir: &Path,
    j: &mds::group::files::Joiner,
    me: &GroupMember,
    mds: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let key = net::auth::ClientKey::load(&dir.join("client.admin.key"))?;
    let others: Vec<&str> = j
        .members
        .iter()
        .filter(|m| m.id != me.id)
        .map(|m| m.addr.as_str())
        .collect();
    let list = mds.map_or_else(|| others.join(","), str::to_string);
    super::runtime()?.block_on(async {
        let c = net::MdsClient::new(&list, &j.cluster_id, key.identity()?, 1);
        let op = proto::mds::Op::GroupAdd {
            id: me.id,
            addr: me.addr.clone(),
            peer: me.peer.clone(),
        };
        match c.call(op).await? {
            proto::mds::MdsReply::Done => {}
            r => anyhow::bail!("unexpected reply {r:?}"),
        }
        // The group's own list (the one --from knew may be older).
        let listed = match c.call(proto::mds::Op::Status).await {
            Ok(proto::mds::MdsReply::Status(s)) => s
                .mds_group
                .as_ref()
                .map(|g| g.members.iter().map(|m| m.addr.clone()).collect()),
            _ => None,
        };
        Ok(listed.unwrap_or_else(|| j.members.iter().map(|m| m.addr.clone()).collect()))
    })
}

/// Runs `tessera mds remove`.
pub fn remove(id: u64, to: &super::cluster::Target) -> anyhow::Result<i32> {
    super::runtime()?.block_on(async move {
        let r = to.resolve()?;
        let c = net::MdsClient::new(&r.mds, &r.cluster, r.identity, 1);
        match c.call(proto::mds::Op::GroupRemove { id }).await? {
            proto::mds::MdsReply::Done => {
                println!(
                    "member {id} removed from the group; stop its process and take its address \
                     out of the clients' and OSDs' --mds lists"
                );
                Ok(0)
            }
            r => anyhow::bail!("unexpected reply {r:?}"),
        }
    })
}

/// Set once the member was asked to stop: a step-down then ends the
/// process instead of restarting it.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Replaces this process with a fresh run of the same command (the
/// member's step-down), or ends it when it was asked to stop. Never
/// returns.
fn reexec(why: &str) {
    use std::os::unix::process::CommandExt;
    if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        eprintln!("tessera mds: {why}; stopping without it");
        // SAFETY: _exit ends the process at once, running nothing (no
        // destructor may make the KV's uncommitted batches durable).
        unsafe { libc::_exit(1) }
    }
    eprintln!("tessera mds: {why}; restarting as a follower");
    tracing::warn!(%why, "stepping down: restarting");
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let e = std::process::Command::new("/proc/self/exe")
        .args(args)
        .exec();
    eprintln!("tessera mds: cannot restart: {e}");
    // SAFETY: _exit ends the process at once, running nothing (no
    // destructor may make the KV's uncommitted batches durable).
    unsafe { libc::_exit(75) }
}

/// Serves the group member in `data` until SIGTERM / Ctrl-C; while it
/// leads, the dashboard and `/metrics` too, on `http`'s address.
pub fn serve_member(data: &Path, http: super::dashboard::HttpArgs) -> anyhow::Result<i32> {
    super::runtime()?.block_on(async move {
        let (stop, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            super::wait_for_signal().await;
            STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = stop.send(true);
        });
        let step_down: mds::group::member::StepDown = Arc::new(reexec);
        let cfg = mds::MdsConfig::load(&data.join("mds.toml")).map_err(anyhow::Error::msg)?;
        let g = cfg.group.context("not a group member")?;
        let me = g
            .me()
            .context("this member is not among the members")?
            .clone();
        println!(
            "MDS group member {} of {} (peers on {}; serves clients on {} while it leads)",
            g.id,
            g.members.len(),
            me.peer,
            me.addr
        );
        let addr = me.addr.clone();
        mds::group::run(data, rx, step_down, move |running| {
            tokio::spawn(dashboard_while_leading(http, running.mds, addr));
        })
        .await
        .map_err(anyhow::Error::msg)?;
        println!("MDS group member stopped cleanly");
        Ok(0)
    })
}

/// Once this member leads, the dashboard and `/metrics` of its MDS on
/// `http`'s address (none with `--no-http`). A member that stops leading
/// re-executes itself, which closes the port; the next leader — another
/// process, maybe on this host — binds it, trying again for a while in
/// case the old one has not let go yet. Followers serve nothing there: a
/// scrape of a follower fails, and the leader's gauges
/// (`tessera_mds_group_*`) say who leads.
async fn dashboard_while_leading(
    http: super::dashboard::HttpArgs,
    mut mds: tokio::sync::watch::Receiver<Option<Arc<mds::Mds>>>,
    addr: String,
) {
    if http.no_http {
        return;
    }
    let Ok(m) = mds.wait_for(Option::is_some).await.map(|m| m.clone()) else {
        return;
    };
    let Some(m) = m else { return };
    for attempt in 0..60 {
        match super::dashboard::listen(&http).await {
            Ok(Some(l)) => {
                match super::dashboard::start(&http, l, m, &addr, None) {
                    Ok(at) => println!("leading: dashboard and /metrics on http://{at}/"),
                    Err(e) => eprintln!("leading, but the dashboard could not start: {e:#}"),
                }
                return;
            }
            Ok(None) => return,
            Err(e) if attempt == 59 => {
                eprintln!("leading, but no dashboard or /metrics: {e:#}");
                return;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
        }
    }
}
