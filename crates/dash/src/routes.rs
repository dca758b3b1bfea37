//! What each path of the dashboard answers. Public: the page and its
//! assets (they hold no data), `/metrics` (as before the dashboard) and
//! the login. Everything under `/api/` but the login needs a session.
//! Every answer carries a strict Content-Security-Policy (scripts and
//! styles from this server only, no frames), and a loopback-bound
//! dashboard answers only requests naming a loopback host (`/metrics`
//! excepted).

use net::http::{Request, Response};

use crate::Dashboard;
use crate::sessions::{COOKIE, LoginError, Viewer};

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

fn route(d: &Dashboard, req: &Request) -> Response {
    // Scrapers name whatever host they were configured with; /metrics
    // was public before the dashboard and holds no secret.
    if let (Some(hosts), Some(host)) = (&d.hosts, req.header("host"))
        && req.path != "/metrics"
        && !hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    {
        return Response::text(
            403,
            "this dashboard answers only requests for its loopback address\n",
        );
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") | ("GET", "/index.html") => {
            Response::ok("text/html; charset=utf-8", INDEX.as_bytes())
        }
        ("GET", "/app.js") => Response::ok("text/javascript; charset=utf-8", APP_JS.as_bytes()),
        ("GET", "/style.css") => Response::ok("text/css; charset=utf-8", STYLE.as_bytes()),
        ("GET", "/metrics") => {
            let mut s = d.mds.metrics.render(&d.mds.kv.stats);
            s = s.trim_end().trim_end_matches("# EOF").to_string();
            if let Ok(status) = d.mds.status() {
                s.push_str(&crate::cluster_metrics::render(&status));
            }
            if let Some(extra) = &d.extra_metrics {
                s.push_str(&extra());
            }
            s.push_str("# EOF\n");
            Response::ok("text/plain; version=0.0.4; charset=utf-8", s)
        }
        ("POST", "/api/login") => login(d, req),
        ("POST", "/api/logout") => {
            if let Some(id) = req.cookie(COOKIE) {
                d.sessions.logout(id);
            }
            Response::text(204, "").with("Set-Cookie", expired_cookie())
        }
        ("GET", "/api/state") => match viewer(d, req) {
            Some(v) => json(&crate::view::state(&d.mds, &d.facts, &v)),
            None => unauthorized(),
        },
        ("GET", "/api/history") => match viewer(d, req) {
            Some(_) => {
                let since = req.param("since").and_then(|s| s.parse().ok()).unwrap_or(0);
                json(&serde_json::json!({
                    "interval_s": crate::history::INTERVAL.as_secs(),
                    "points": d.history.since(since),
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

fn viewer(d: &Dashboard, req: &Request) -> Option<Viewer> {
    d.sessions.check(&d.mds.principals, req.cookie(COOKIE)?)
}

fn login(d: &Dashboard, req: &Request) -> Response {
    // A form on another site may not log a browser in here.
    if let (Some(origin), Some(host)) = (req.header("origin"), req.header("host")) {
        let o = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or(origin);
        if !o.eq_ignore_ascii_case(host) {
            return error(403, "a login must come from this dashboard's own page");
        }
    }
    let Ok(token) = std::str::from_utf8(&req.body) else {
        return error(400, "the token is not text");
    };
    match d.sessions.login(&d.mds.principals, token) {
        Ok((id, lasts)) => {
            let who = d
                .sessions
                .check(&d.mds.principals, &id)
                .map(|v| serde_json::json!({"principal": v.principal, "admin": v.admin}))
                .unwrap_or_default();
            json(&who).with(
                "Set-Cookie",
                format!(
                    "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                    lasts.as_secs()
                ),
            )
        }
        Err(e) => {
            let status = match e {
                LoginError::Busy => 429,
                _ => 401,
            };
            tracing::info!(peer = ?req.peer, error = %e, "dashboard login refused");
            error(status, &e.to_string())
        }
    }
}

fn expired_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

fn json(v: &serde_json::Value) -> Response {
    Response::ok("application/json", v.to_string())
}

fn error(status: u16, message: &str) -> Response {
    let mut r = json(&serde_json::json!({ "error": message }));
    r.status = status;
    r
}

fn unauthorized() -> Response {
    error(401, "log in first").with("Set-Cookie", expired_cookie())
}
