//! The web dashboard against live daemons (an MDS process, OSD
//! processes): in a real headless Chromium it logs in with a key file,
//! shows the OSDs and HEALTH_OK, shows a killed OSD down and HEALTH_WARN
//! within seconds without a reload, refuses a wrong key, and hides the
//! principals from a read-only principal; with a simulated map of 100 OSDs
//! over a slow link it stays responsive. Over plain sockets, every way in
//! that must be refused is: no session, forged or expired tokens, another
//! site's Host or Origin, oversized requests, a rotated key, failed-login
//! floods, and one source's idle connections.
#![expect(clippy::unwrap_used, reason = "tests: a panic is the failure report")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::browser::{Browser, shots_dir};
use common::cluster::{CLUSTER, Cluster, runtime};

/// One HTTP request over a fresh connection: (status, head, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Logs in with `token`: the header that carries the session. No cookie
/// is ever set.
fn login(addr: &str, token: &str) -> String {
    let (st, head, body) = http(addr, "POST", "/api/login", &[], token.as_bytes());
    assert_eq!(st, 200, "{head}\n{body}");
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let id = v["session"].as_str().unwrap();
    assert_eq!(id.len(), 64, "{body}");
    format!("Bearer {id}")
}

fn state(addr: &str, auth: &str) -> (u16, Value) {
    let (st, _, body) = http(addr, "GET", "/api/state", &[("Authorization", auth)], b"");
    (st, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn token(c: &Cluster, key: &std::path::Path) -> String {
    let out = std::process::Command::new(common::BIN)
        .args([
            "auth",
            "token",
            "--ttl",
            "1h",
            "--mds",
            &c.mds_addr,
            "--cluster",
            CLUSTER,
            "--key-file",
        ])
        .arg(key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A JavaScript string literal of `s`.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Fills the login form with `text` and submits it.
fn submit_login(b: &mut Browser, text: &str) {
    b.eval(&format!(
        "document.getElementById('key').value = {}; document.getElementById('login-form').requestSubmit(); true",
        js(text)
    ));
}

#[test]
fn the_dashboard_in_a_browser_follows_a_live_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), 3, 3, "");
    let rt = runtime();
    rt.block_on(c.wait_healthy(60));
    let viewer_key = dir.path().join("viewer.key");
    c.cli_ok(&[
        "auth",
        "add",
        "client.viewer",
        "--access",
        "ro",
        "--out",
        viewer_key.to_str().unwrap(),
    ]);
    // Some traffic, so the OSD rows and charts have numbers; the client
    // stays connected, so the page lists it.
    let _client = rt.block_on(async {
        let cl = c.client().await;
        for i in 0..8 {
            common::cluster::write_file_in(
                &cl,
                proto::mds::ROOT_INO,
                &format!("f{i}"),
                &vec![7u8; 1 << 20],
            )
            .await
            .unwrap();
        }
        cl
    });

    let url = format!("http://{}/", c.http_addr);
    let mut b = Browser::launch(1400, 1800);
    b.navigate(&url);
    b.wait_for(
        "!document.getElementById('login').hidden",
        Duration::from_secs(20),
        "the login form",
    );

    // A key file with a wrong secret is refused, and shows nothing.
    let admin = std::fs::read_to_string(c.key_file()).unwrap();
    let secret = admin.lines().find(|l| l.starts_with("secret")).unwrap();
    let wrong = admin.replace(secret, &format!("secret = \"{}\"", "ab".repeat(32)));
    submit_login(&mut b, &wrong);
    b.wait_for(
        "document.getElementById('login-error').textContent.includes('refused')",
        Duration::from_secs(10),
        "the wrong key refused",
    );
    assert_eq!(
        b.eval("document.getElementById('dashboard').hidden"),
        Value::Bool(true)
    );

    // The admin's key file logs in; the page shows three OSDs up and OK.
    submit_login(&mut b, &admin);
    b.wait_for(
        "document.getElementById('health-level').textContent === 'HEALTH_OK' \
         && document.getElementById('osd-count').dataset.up === '3' \
         && document.querySelectorAll('#osds tbody tr').length === 3 \
         && !document.getElementById('principals-section').hidden \
         && document.getElementById('clients').tBodies[0].textContent.includes('client.admin')",
        Duration::from_secs(20),
        "HEALTH_OK with 3 OSDs up, the connected client, and the principals shown to the admin",
    );
    b.wait_for(
        "document.querySelectorAll('#chart-bytes svg text').length > 10",
        Duration::from_secs(20),
        "the charts drawn",
    );
    // The session is this tab's (sessionStorage), never a cookie.
    assert_eq!(b.eval("document.cookie"), Value::String(String::new()));
    assert_eq!(
        b.eval("sessionStorage.getItem('tessera-session').length"),
        serde_json::json!(64)
    );
    let shots = shots_dir();
    b.screenshot(&shots.join("dashboard-healthy.png"));

    // An OSD dies: the page shows it without a reload.
    b.eval("window.notReloaded = true");
    c.kill_osd(2);
    let killed = Instant::now();
    b.wait_for(
        "document.getElementById('health-level').textContent === 'HEALTH_WARN' \
         && document.querySelector('#osds tr[data-id=\"2\"]').dataset.up === 'false'",
        Duration::from_secs(20),
        "OSD 2 down and HEALTH_WARN",
    );
    let seen = killed.elapsed();
    assert_eq!(
        b.eval("window.notReloaded === true"),
        Value::Bool(true),
        "the page reloaded"
    );
    assert!(
        seen < Duration::from_secs(10),
        "the page showed the dead OSD after {seen:?}"
    );
    eprintln!("dashboard: OSD killed -> page shows it down and HEALTH_WARN after {seen:?}");
    b.screenshot(&shots.join("dashboard-osd-down.png"));

    // Log out; a read-only principal sees the cluster but no principals.
    b.eval("document.getElementById('logout-btn').click(); true");
    b.wait_for(
        "!document.getElementById('login').hidden",
        Duration::from_secs(10),
        "logged out",
    );
    submit_login(&mut b, &token(&c, &viewer_key));
    b.wait_for(
        "document.getElementById('me').textContent.includes('client.viewer') \
         && document.querySelectorAll('#osds tbody tr').length === 3",
        Duration::from_secs(20),
        "the read-only view",
    );
    assert_eq!(
        b.eval("document.getElementById('principals-section').hidden"),
        Value::Bool(true)
    );
    eprintln!("dashboard screenshots in {}", shots.display());
}

#[test]
fn the_dashboard_refuses_what_it_must_and_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, 1, "");
    let rt = runtime();
    rt.block_on(c.wait_healthy(60));
    let a = c.http_addr.as_str();
    let viewer_key = dir.path().join("viewer.key");
    c.cli_ok(&[
        "auth",
        "add",
        "client.viewer",
        "--access",
        "ro",
        "--out",
        viewer_key.to_str().unwrap(),
    ]);

    // The page is public; the state is not.
    assert_eq!(http(a, "GET", "/", &[], b"").0, 200);
    assert_eq!(http(a, "GET", "/api/state", &[], b"").0, 401);
    assert_eq!(state(a, &format!("Bearer {}", "0f".repeat(32))).0, 401);
    assert_eq!(state(a, "Basic abc").0, 401);
    assert_eq!(http(a, "DELETE", "/api/state", &[], b"").0, 405);
    assert_eq!(http(a, "GET", "/../../etc/passwd", &[], b"").0, 404);

    // Tokens: malformed, expired, unknown principal and wrong key give
    // errors that never say whether a principal exists.
    let now = proto::clock::now_ms() / 1000;
    let (st, _, body) = http(a, "POST", "/api/login", &[], b"garbage");
    assert_eq!(st, 401, "{body}");
    assert!(body.contains("not a dashboard token"), "{body}");
    let expired = proto::token::make(CLUSTER, "client.admin", 1, now - 1, &[1; 32]);
    assert!(
        http(a, "POST", "/api/login", &[], expired.as_bytes())
            .2
            .contains("expired")
    );
    let ghost = proto::token::make(CLUSTER, "client.nobody", 1, now + 60, &[1; 32]);
    let forged = proto::token::make(CLUSTER, "client.admin", 1, now + 60, &[1; 32]);
    let (g, f) = (
        http(a, "POST", "/api/login", &[], ghost.as_bytes()),
        http(a, "POST", "/api/login", &[], forged.as_bytes()),
    );
    assert_eq!((g.0, f.0), (401, 401));
    assert_eq!(
        g.2, f.2,
        "an unknown principal and a wrong key look the same"
    );

    // Another site: a Host that is not ours (DNS rebinding), an Origin
    // that is not ours (a cross-site login).
    let admin_token = token(&c, &c.key_file());
    let mut s = TcpStream::connect(a).unwrap();
    s.write_all(b"GET /api/state HTTP/1.1\r\nHost: evil.example:80\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let (st, _, _) = http(
        a,
        "POST",
        "/api/login",
        &[("Origin", "http://evil.example")],
        admin_token.as_bytes(),
    );
    assert_eq!(st, 403);
    // Any loopback name on any port is ours (an SSH tunnel's local port).
    for host in ["localhost:9999", "127.0.0.1", "[::1]:7480"] {
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200"), "{host}: {out}");
    }

    // Oversized requests are refused before they are read.
    assert_eq!(
        http(a, "POST", "/api/login", &[], &vec![b'a'; 64 << 10]).0,
        413
    );
    let long = "x".repeat(20 << 10);
    assert_eq!(http(a, "GET", "/", &[("X-Long", &long)], b"").0, 431);

    // The admin sees principals, a read-only principal does not.
    let admin = login(a, &admin_token);
    // The state may be up to a second old (one MDS status a second).
    let t = Instant::now();
    let (st, s) = loop {
        let (st, s) = state(a, &admin);
        if s["health"]["level"] == "HEALTH_OK" || t.elapsed() > Duration::from_secs(5) {
            break (st, s);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(st, 200);
    assert_eq!(s["health"]["level"], "HEALTH_OK", "{s}");
    assert_eq!(s["osds"].as_array().unwrap().len(), 1);
    // Changes answered early and not yet durable: none after a second idle.
    assert_eq!(s["mds"]["early_pending"], 0, "{s}");
    assert!(s["principals"].as_array().unwrap().len() >= 2);
    let viewer = login(a, &token(&c, &viewer_key));
    let (st, s) = state(a, &viewer);
    assert_eq!(st, 200);
    assert!(
        s["principals"].is_null(),
        "a read-only principal saw the principals"
    );
    assert_eq!(s["me"]["admin"], false);
    // ...nor the other clients' names: its own row, the others as totals.
    let _admin_client = rt.block_on(c.client());
    let _viewer_client = rt.block_on(async {
        let id = net::auth::ClientKey::load(&viewer_key)
            .unwrap()
            .identity()
            .unwrap();
        client::Client::connect(client::ClientConfig::new(&c.mds_addr, CLUSTER, id))
            .await
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(1100));
    let (_, s) = state(a, &viewer);
    let rows = s["clients"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["principal"], "client.viewer");
    assert!(rows[0]["connections"].as_u64().unwrap() >= 1, "{rows:?}");
    assert!(
        s["clients"]["others"]["connections"].as_u64().unwrap() >= 1,
        "{s}"
    );
    assert!(
        !s.to_string().contains("client.admin"),
        "the viewer saw the admin's name"
    );

    // Rotating the viewer's key ends its session at the next request.
    c.cli_ok(&[
        "auth",
        "rotate",
        "client.viewer",
        "--out",
        viewer_key.to_str().unwrap(),
    ]);
    assert_eq!(
        state(a, &viewer).0,
        401,
        "a rotated key's session still works"
    );
    assert_eq!(state(a, &admin).0, 200);
    // A principal removed and added again under the same name has key
    // version 1 both times: only its id tells them apart, and the old
    // session must not come back.
    let gone_key = dir.path().join("gone.key");
    let gone_args = [
        "auth",
        "add",
        "client.gone",
        "--access",
        "ro",
        "--out",
        gone_key.to_str().unwrap(),
    ];
    c.cli_ok(&gone_args);
    let gone = login(a, &token(&c, &gone_key));
    assert_eq!(state(a, &gone).0, 200);
    c.cli_ok(&["auth", "rm", "client.gone"]);
    c.cli_ok(&gone_args);
    assert_eq!(
        state(a, &gone).0,
        401,
        "a removed principal's session came back"
    );
    // Logging out ends the session.
    http(a, "POST", "/api/logout", &[("Authorization", &admin)], b"");
    assert_eq!(state(a, &admin).0, 401);

    // A principal holds at most 16 sessions: the 17th ends the least
    // recently used.
    let good = token(&c, &viewer_key);
    let sessions: Vec<String> = (0..17).map(|_| login(a, &good)).collect();
    assert_eq!(state(a, &sessions[16]).0, 200);
    assert_eq!(
        state(a, &sessions[0]).0,
        401,
        "a 17th session for one principal"
    );

    // A flood of bad logins gets 429 for its further bad ones; a good
    // token still logs in, from that source (every tunnelled user is
    // 127.0.0.1) and from any other.
    let codes: Vec<u16> = (0..30)
        .map(|_| http(a, "POST", "/api/login", &[], forged.as_bytes()).0)
        .collect();
    assert!(codes.contains(&429), "{codes:?}");
    assert_eq!(state(a, &sessions[16]).0, 200);
    let again = login(a, &good);
    assert_eq!(state(a, &again).0, 200);
    let mut other = connect_from("127.0.0.3", a.parse().unwrap()).unwrap();
    other
        .write_all(
            format!(
                "POST /api/login HTTP/1.1\r\nHost: {a}\r\nContent-Length: {}\r\n\r\n{good}",
                good.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let mut out = String::new();
    let _ = other.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "another source was locked out: {out}"
    );
}

/// An MDS data directory under `dir`, formatted (not served).
fn formatted_mds(dir: &std::path::Path) -> std::path::PathBuf {
    let data = dir.join("mds");
    let out = std::process::Command::new(common::BIN)
        .args(["mds", "format", "--cluster", "c", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    data
}

/// This machine's address on its default route (none: the test cannot
/// show a non-loopback connection, and says so).
fn outside_address() -> std::net::IpAddr {
    let u = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    u.connect("192.0.2.77:9")
        .or_else(|_| u.connect("198.51.100.1:9"))
        .expect("this test needs a non-loopback IPv4 address (a default route)");
    let ip = u.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}");
    ip
}

#[test]
fn a_wildcard_address_serves_the_dashboard_only_over_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let data = formatted_mds(dir.path());
    let port = common::free_port().rsplit(':').next().unwrap().to_string();
    let mut mds = std::process::Command::new(common::BIN)
        .args([
            "mds",
            "serve",
            "--listen",
            &common::free_port(),
            "--http",
            &format!("0.0.0.0:{port}"),
            "--data",
        ])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_line(&mut mds, "dashboard and /metrics");
    let outside = SocketAddr::new(outside_address(), port.parse().unwrap());
    let inside = format!("127.0.0.1:{port}");
    // From outside: /metrics, but not the dashboard (plain HTTP).
    let o = outside.to_string();
    assert_eq!(http(&o, "GET", "/metrics", &[], b"").0, 200);
    let (st, _, body) = http(&o, "GET", "/", &[], b"");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("--dashboard-plain-http"), "{body}");
    assert_eq!(http(&o, "POST", "/api/login", &[], b"x").0, 403);
    // Through loopback (an SSH tunnel's end), the same daemon serves it.
    assert_eq!(http(&inside, "GET", "/", &[], b"").0, 200);

    // One outside source holding idle connections has 16 of the 64
    // places: a scrape from another address still gets in.
    let idle: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(outside).ok())
        .collect();
    assert_eq!(idle.len(), 40);
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    assert_eq!(http(&inside, "GET", "/metrics", &[], b"").0, 200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "served after {:?}",
        t.elapsed()
    );
    let mut extra = TcpStream::connect(outside).unwrap();
    extra.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = extra.read_to_string(&mut out);
    assert!(
        out.is_empty() || out.starts_with("HTTP/1.1 503"),
        "a 17th connection from one source: {out}"
    );
    drop(idle);
    let _ = mds.kill();
    let _ = mds.wait();
}

/// A TCP connection to `to` from source address `from` (std cannot bind
/// before connecting, so through libc).
fn connect_from(from: &str, to: SocketAddr) -> Option<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else { return None };
    let from: std::net::Ipv4Addr = from.parse().ok()?;
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
    // SAFETY: plain socket calls on a descriptor this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let s = TcpStream::from_raw_fd(fd);
        let src = sin(from, 0);
        if libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) != 0 {
            return None;
        }
        let dst = sin(*to.ip(), to.port());
        if libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) != 0 {
            return None;
        }
        Some(s)
    }
}

#[test]
fn a_map_of_100_osds_over_a_slow_link_stays_responsive() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(
        dir.path(),
        0,
        1,
        "heartbeat_ms = 1000\ndown_after_ms = 6000",
    );
    // 100 OSDs that exist only as keys and heartbeats (the MDS's real
    // report path; nothing stored): the MDS reads their keys at start.
    c.kill_mds();
    let keys = dir.path().join("mds").join("keys");
    let mut files = Vec::new();
    for id in 1..=100u32 {
        let kf = net::keys::KeyFile::generate(CLUSTER, id);
        kf.save(&keys.join(format!("osd-{id}.toml"))).unwrap();
        files.push(kf);
    }
    c.start_mds();
    let rt = runtime();
    let started = Instant::now();
    let _reporters: Vec<_> = files
        .iter()
        .map(|kf| {
            let id = kf.osd_id;
            let (version, key) = kf.newest().unwrap();
            let src = net::heartbeat::ReportSource {
                cluster_id: CLUSTER.into(),
                osd_id: id,
                addr: format!("10.0.{}.{}:7000", id / 200, id % 200 + 1),
                weight: proto::placement::WEIGHT_ONE,
                host: format!("rack{}-host{id}", id % 10),
                key: (version, key),
                space: Box::new(move || (4 << 40, u64::from(id) << 34, u64::from(id) * 1000)),
                store: Box::new(Default::default),
                load: Box::new(move || {
                    let ms = started.elapsed().as_millis() as u64;
                    proto::mds::OsdLoad {
                        requests: ms * 2,
                        writes: ms,
                        reads: ms,
                        bytes_in: ms << 16,
                        bytes_out: ms << 17,
                        busy_us: ms * 500,
                    }
                }),
                chains_epoch: None,
            };
            rt.spawn(net::heartbeat::report_loop(
                c.mds_addr.clone(),
                src,
                Arc::new(net::Lease::default()),
            ))
        })
        .collect();
    rt.block_on(c.wait_for("100 OSDs up", 60, |s| {
        s.osds.iter().filter(|o| o.up).count() == 100
    }));

    let mut b = Browser::launch(1400, 1000);
    b.page("Network.enable", serde_json::json!({}));
    // About 320 kbit/s down, 160 up, 400 ms each way.
    b.page(
        "Network.emulateNetworkConditions",
        serde_json::json!({"offline": false, "latency": 400, "downloadThroughput": 40_000, "uploadThroughput": 20_000}),
    );
    let t = Instant::now();
    b.navigate(&format!("http://{}/", c.http_addr));
    b.wait_for(
        "!document.getElementById('login').hidden",
        Duration::from_secs(30),
        "the login form",
    );
    let page = t.elapsed();
    submit_login(&mut b, &std::fs::read_to_string(c.key_file()).unwrap());
    let shown = b.wait_for(
        "document.querySelectorAll('#osds tbody tr').length === 100 \
         && document.getElementById('osd-count').dataset.up === '100'",
        Duration::from_secs(60),
        "100 OSD rows",
    );
    let bytes = b.eval("fetch('/api/state').then(r => r.text()).then(t => t.length)");
    // Responsiveness: the longest the page's event loop is held up while
    // it keeps refreshing for 10 s.
    let lag = b.eval(
        "new Promise(done => { let max = 0, last = performance.now(); \
           const t = setInterval(() => { const now = performance.now(); max = Math.max(max, now - last - 20); last = now; }, 20); \
           setTimeout(() => { clearInterval(t); done(max); }, 10000); })",
    );
    let lag_ms = lag.as_f64().unwrap();
    let renders = b.eval("document.getElementById('updated').textContent");
    b.screenshot(&shots_dir().join("dashboard-100-osds.png"));
    eprintln!(
        "dashboard, 100 OSDs at 320 kbit/s and 400 ms: page {page:?}, logged in and 100 rows after {shown:?}, \
         state {bytes} bytes, longest event-loop stall over 10 s of refreshes {lag_ms:.0} ms ({renders})"
    );
    assert!(lag_ms < 250.0, "the page stalled {lag_ms} ms");
    assert!(shown < Duration::from_secs(30), "100 rows after {shown:?}");
}

/// The metric names a Prometheus text exposition declares or samples.
fn exported(text: &str, into: &mut std::collections::BTreeSet<String>) {
    for l in text.lines() {
        let name = match l.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if !l.starts_with('#') => l.split(['{', ' ']).next(),
            None => None,
        };
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            into.insert(n.to_string());
        }
    }
}

#[test]
fn the_grafana_dashboard_names_only_metrics_the_daemons_export() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, 1, "");
    let rt = runtime();
    rt.block_on(c.wait_healthy(60));
    let client = rt.block_on(async {
        let cl = c.client().await;
        common::cluster::write_file_in(&cl, proto::mds::ROOT_INO, "f", b"data")
            .await
            .unwrap();
        cl
    });
    let mut names = std::collections::BTreeSet::new();
    for addr in [&c.http_addr, &c.osd_metrics[0]] {
        let (st, _, body) = http(addr, "GET", "/metrics", &[], b"");
        assert_eq!(st, 200, "{addr}");
        exported(&body, &mut names);
    }
    exported(&client.stats().prometheus(), &mut names);
    assert!(names.contains("tessera_cluster_health"), "{names:?}");

    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/tessera.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut ids = std::collections::BTreeSet::new();
    let mut missing = Vec::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id twice");
        assert!(!p["title"].as_str().unwrap().is_empty());
        assert!(
            p["fieldConfig"]["defaults"]["unit"].is_string(),
            "{}: no unit",
            p["title"]
        );
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("tessera_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + name.len()..];
                let base = ["_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name);
                if !names.contains(&name) && !names.contains(base) {
                    missing.push(format!("{}: {name}", p["title"]));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the Grafana dashboard names metrics no daemon exports: {missing:?}\nexported: {names:?}"
    );
    let prom =
        std::fs::read_to_string(path.with_file_name("../prometheus/prometheus.yml")).unwrap();
    for job in ["tessera-mds", "tessera-osd", "tessera-mount"] {
        assert!(prom.contains(&format!("job_name: {job}")), "{job}");
    }
}

#[test]
fn a_taken_http_port_stops_the_mds_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let data = formatted_mds(dir.path());
    // Someone else holds the address the dashboard was to have.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap().to_string();
    let out = std::process::Command::new(common::BIN)
        .args([
            "mds",
            "serve",
            "--listen",
            &common::free_port(),
            "--http",
            &taken,
            "--data",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "served beside a squatter: {err}");
    assert!(
        err.contains(&format!("cannot listen on {taken}")) && err.contains("--no-http"),
        "{err}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("serving"),
        "the MDS started before the port was checked"
    );
}

/// The dashboard's command-line surfaces refuse bad values clearly (a
/// token's lifetime, the HTTP address, --http with --no-http).
#[test]
fn bad_dashboard_arguments_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let data = formatted_mds(dir.path());
    let key = data.join("client.admin.key");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(common::BIN)
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let k = key.to_str().unwrap();
    for (ttl, want) in [
        ("0", "between 1s and 30d"),
        ("31d", "between 1s and 30d"),
        ("8x", "the unit must be s, m, h or d"),
        ("soon", "a number then s, m, h or d"),
    ] {
        let e = run(&[
            "auth",
            "token",
            "--ttl",
            ttl,
            "--key-file",
            k,
            "--mds",
            "127.0.0.1:1",
        ]);
        assert!(e.contains(want), "--ttl {ttl}: {e}");
    }
    let e = run(&[
        "mds",
        "serve",
        "--data",
        data.to_str().unwrap(),
        "--http",
        "nowhere",
    ]);
    assert!(e.contains("--http") && e.contains("nowhere"), "{e}");
    let e = run(&[
        "mds",
        "serve",
        "--data",
        data.to_str().unwrap(),
        "--http",
        "127.0.0.1:1",
        "--no-http",
    ]);
    assert!(e.contains("cannot be used with"), "{e}");
}
