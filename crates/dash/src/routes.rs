//! What each path of the dashboard answers. Public: the page and its
//! assets (they hold no data), `/metrics` (as before the dashboard) and
//! the login. Everything under `/api/` but the login needs a session id
//! in `Authorization: Bearer ID`.
//! Every answer carries a strict Content-Security-Policy (scripts and
//! styles from this server only, no frames); a loopback-bound dashboard
//! answers only requests naming a loopback host, and one on another
//! address serves the pages only when told to (`/metrics` always).

use net::http::{Request, Response};

use crate::Dashboard;
use crate::sessions::{LoginError, Viewer};

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/style.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Answers one request.
pub fn answer(d: &Dashboard, req: Request) -> Response {
    let r = route(d, &req);
    r.with("Content-Security-Policy", CSP)
        .with("X-Content-Type-Options", "nosniff")
        .with("X-Frame-Options", "DENY")
        .with("Referrer-Policy", "no-referrer")
        .with("Cache-Control", "no-store")
}

/// Whether `host` (a Host header: name or address, maybe a port) names
/// this machine's loopback.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a login or logout comes from this dashboard's own page: its
/// Origin, when sent, names the host it asked (the session id travels in
/// a header no other site can make a browser send, so this guards only
/// against a form that logs a browser in with someone else's token).
fn same_origin(req: &Request) -> bool {
    match (req.header("origin"), req.header("host")) {
        (Some(origin), Some(host)) => origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host)),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

fn route(d: &Dashboard, req: &Request) -> Response {
    if (req.method.as_str(), req.path.as_str()) == ("GET", "/metrics") {
        return metrics(d);
    }
    // Scrapers name whatever host they were configured with, so /metrics
    // (public before the dashboard, no secret in it) is not checked. A
    // connection to a loopback address (whatever the bind: a wildcard
    // serves both) gets the dashboard for a loopback Host only.
    let loopback = req
        .local
        .is_some_and(|l| l.ip().to_canonical().is_loopback());
    if loopback && !req.header("host").is_some_and(loopback_host) {
        return error(
            403,
            "this dashboard is bound to loopback and answers only requests for a loopback host \
             (open it as http://127.0.0.1:PORT/ or http://localhost:PORT/, or through an SSH tunnel)",
        );
    }
    if !loopback && !d.remote {
        return error(
            403,
            "the dashboard is served on this address only with --dashboard-plain-http \
             (its tokens would cross the network in the clear); /metrics is served",
        );
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") | ("GET", "/index.html") => {
            Response::ok("text/html; charset=utf-8", INDEX.as_bytes())
        }
        ("GET", "/app.js") => Response::ok("text/javascript; charset=utf-8", APP_JS.as_bytes()),
        ("GET", "/style.css") => Response::ok("text/css; charset=utf-8", STYLE.as_bytes()),
        ("POST", "/api/login") => login(d, req),
        ("POST", "/api/logout") => {
            if !same_origin(req) {
                return error(403, "a logout must come from this dashboard's own page");
            }
            if let Some(id) = bearer(req) {
                d.sessions.logout(id);
            }
            Response::text(204, "")
        }
        ("GET", "/api/state") => match viewer(d, req) {
            Some(v) => json(&match d.status() {
                Ok(s) => crate::view::state(&d.mds, &s, &d.facts, &v),
                Err(e) => crate::view::unreadable(&e),
            }),
            None => unauthorized(),
        },
        ("GET", "/api/history") => match viewer(d, req) {
            Some(_) => {
                let after = req.param("after").and_then(|s| s.parse().ok()).unwrap_or(0);
                json(&serde_json::json!({
                    "now_ms": proto::clock::now_ms(),
                    "interval_s": crate::history::INTERVAL.as_secs(),
                    "points": d.history.after(after),
                }))
            }
            None => unauthorized(),
        },
        (_, "/" | "/index.html" | "/app.js" | "/style.css" | "/metrics" | "/api/state")
        | (_, "/api/history" | "/api/login" | "/api/logout") => {
            Response::text(405, "method not allowed\n")
        }
        _ => Response::text(404, "not found\n"),
    }
}

fn metrics(d: &Dashboard) -> Response {
    let mut s = d.mds.metrics.render(&d.mds.kv.stats);
    s = s.trim_end().trim_end_matches("# EOF").to_string();
    s.push_str(&crate::cluster_metrics::render(d.status().as_deref().ok()));
    if let Some(extra) = &d.extra_metrics {
        s.push_str(&extra());
    }
    s.push_str("# EOF\n");
    Response::ok("text/plain; version=0.0.4; charset=utf-8", s)
}

/// The session id a request carries (`Authorization: Bearer ID`).
fn bearer(req: &Request) -> Option<&str> {
    req.header("authorization")?.strip_prefix("Bearer ")
}

fn viewer(d: &Dashboard, req: &Request) -> Option<Viewer> {
    d.sessions.check(&d.mds.principals, bearer(req)?)
}

fn login(d: &Dashboard, req: &Request) -> Response {
    // A form on another site may not log a browser in here.
    if !same_origin(req) {
        return error(403, "a login must come from this dashboard's own page");
    }
    let Ok(token) = std::str::from_utf8(&req.body) else {
        return error(400, "the token is not text");
    };
    match d
        .sessions
        .login(&d.mds.principals, req.peer.map(|p| p.ip()), token)
    {
        Ok((id, lasts)) => {
            let (principal, admin) = d
                .sessions
                .check(&d.mds.principals, &id)
                .map(|v| (v.principal, v.admin))
                .unwrap_or_default();
            json(&serde_json::json!({
                "principal": principal,
                "admin": admin,
                "session": id,
                "expires_in_s": lasts.as_secs(),
            }))
        }
        Err(e) => {
            let status = match e {
                LoginError::Busy => 429,
                _ => 401,
            };
            tracing::debug!(peer = ?req.peer, error = %e, "dashboard login refused");
            error(status, &e.to_string())
        }
    }
}

fn json(v: &serde_json::Value) -> Response {
    Response::ok("application/json", v.to_string())
}

fn error(status: u16, message: &str) -> Response {
    let mut r = json(&serde_json::json!({ "error": message }));
    r.status = status;
    r
}

/// 401: the page drops its session id and shows the login form.
fn unauthorized() -> Response {
    error(401, "log in first")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_any_loopback_name_on_any_port() {
        for h in [
            "127.0.0.1:7480",
            "localhost:9000",
            "LOCALHOST",
            "127.0.0.1",
            "[::1]:80",
            "127.1.2.3:1",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:7480",
            "10.0.0.1:7480",
            "localhost.evil.example:1",
            "[::2]:80",
            "",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
    }

    #[test]
    fn an_origin_must_name_the_host_asked() {
        let req = |o: Option<&str>, h: Option<&str>| Request {
            headers: o
                .map(|o| ("origin".to_string(), o.to_string()))
                .into_iter()
                .chain(h.map(|h| ("host".to_string(), h.to_string())))
                .collect(),
            ..Request::default()
        };
        assert!(same_origin(&req(None, Some("localhost:1"))));
        assert!(same_origin(&req(
            Some("http://localhost:9000"),
            Some("localhost:9000")
        )));
        assert!(!same_origin(&req(
            Some("http://evil.example"),
            Some("localhost:9000")
        )));
        assert!(!same_origin(&req(Some("null"), Some("localhost:9000"))));
        assert!(!same_origin(&req(Some("http://localhost:9000"), None)));
    }
}
