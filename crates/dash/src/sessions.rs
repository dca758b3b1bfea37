//! Who is logged in to the dashboard. A login trades a token (see
//! `proto::token`) for a random session id, which the page keeps in its
//! tab's `sessionStorage` (scoped to the dashboard's exact origin, port
//! included) and sends as `Authorization: Bearer ID` — never a cookie, so
//! no other page or local service is ever sent it and no other site can
//! make the browser use it. Every request checks the session again
//! against the principals now (id, never reused, and key version), so
//! removing a principal, re-adding one of the same name or rotating its
//! key ends its sessions at their next request. Sessions (in all and per
//! principal) and failed logins (per source) are bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mds::principals::Principals;
use proto::token::{Token, TokenError};

/// Sessions held at once; a new one beyond it ends the oldest.
pub const MAX_SESSIONS: usize = 256;
/// Sessions one principal holds at once; a new one ends its least
/// recently used (so no principal pushes the others' sessions out, and a
/// script logging in again and again ends only its own idle ones).
pub const MAX_SESSIONS_PER_PRINCIPAL: usize = 16;
/// Longest a session lasts; it ends sooner when its token expires.
pub const SESSION: Duration = Duration::from_secs(12 * 3600);
/// Failed logins one source address may make per [`FAIL_WINDOW`]; beyond
/// that its logins are refused with 429 until the window ends.
pub const MAX_FAILURES: u32 = 20;
/// See [`MAX_FAILURES`].
pub const FAIL_WINDOW: Duration = Duration::from_secs(10);
/// Source addresses whose failures are remembered (the oldest window is
/// forgotten first).
pub const MAX_FAILING_SOURCES: usize = 4096;

/// Who a session speaks for, as checked just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    /// `client.NAME`.
    pub principal: String,
    /// An unconfined, read-write admin: sees the principals too.
    pub admin: bool,
}

#[derive(Debug, Clone)]
struct Session {
    principal: String,
    principal_id: u64,
    key_version: u32,
    until: Instant,
    used: Instant,
}

/// Why a login failed. The message never says whether a principal exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// The token is malformed or expired.
    Token(TokenError),
    /// The token does not verify (unknown principal, old key, wrong MAC):
    /// one answer for all.
    Refused,
    /// Too many failed logins lately.
    Busy,
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginError::Token(e) => write!(f, "{e}"),
            LoginError::Refused => write!(
                f,
                "the key or token was refused (unknown principal, old key version, or wrong key)"
            ),
            LoginError::Busy => write!(f, "too many failed logins; wait a few seconds"),
        }
    }
}

/// The sessions and the failed-login windows.
#[derive(Debug)]
pub struct Sessions {
    cluster_id: String,
    by_id: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<std::net::IpAddr, (Instant, u32)>>,
}

impl Sessions {
    /// No sessions yet, for cluster `cluster_id`.
    pub fn new(cluster_id: &str) -> Sessions {
        Sessions {
            cluster_id: cluster_id.into(),
            by_id: Mutex::default(),
            failures: Mutex::default(),
        }
    }

    /// Logs in from `source` with `token`: the new session's id and how
    /// long it lasts. A good token always logs in; a source that has sent
    /// too many bad ones lately gets `Busy` for the next bad one (so a
    /// local flood, where every user is 127.0.0.1, locks nobody out).
    pub fn login(
        &self,
        principals: &Principals,
        source: Option<std::net::IpAddr>,
        token: &str,
    ) -> Result<(String, Duration), LoginError> {
        let (t, principal_id, lasts) = match self.verify(principals, token) {
            Ok(v) => v,
            Err(e) => {
                let Some(ip) = source.map(net::handshakes::source_of) else {
                    return Err(e);
                };
                return Err(if self.failed(ip) { LoginError::Busy } else { e });
            }
        };
        let id = net::keys::hex(&net::auth::random_bytes::<32>());
        let now = Instant::now();
        let mut m = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, s| s.until > now);
        let idlest = |m: &HashMap<String, Session>, of: Option<u64>| {
            m.iter()
                .filter(|(_, s)| of.is_none_or(|p| s.principal_id == p))
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        };
        while m
            .values()
            .filter(|s| s.principal_id == principal_id)
            .count()
            >= MAX_SESSIONS_PER_PRINCIPAL
        {
            let Some(k) = idlest(&m, Some(principal_id)) else {
                break;
            };
            m.remove(&k);
        }
        while m.len() >= MAX_SESSIONS {
            let Some(k) = idlest(&m, None) else { break };
            m.remove(&k);
        }
        m.insert(
            id.clone(),
            Session {
                principal: t.principal,
                principal_id,
                key_version: t.key_version,
                until: now + lasts,
                used: now,
            },
        );
        Ok((id, lasts))
    }

    /// Counts a failed login from `ip`: whether it is over the bound.
    fn failed(&self, ip: std::net::IpAddr) -> bool {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|_, (at, _)| at.elapsed() < FAIL_WINDOW);
        if f.len() >= MAX_FAILING_SOURCES
            && !f.contains_key(&ip)
            && let Some(old) = f.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k)
        {
            f.remove(&old);
        }
        let e = f.entry(ip).or_insert((Instant::now(), 0));
        e.1 = e.1.saturating_add(1);
        if e.1 == MAX_FAILURES {
            tracing::warn!(source = %ip, "too many failed dashboard logins from one source");
        }
        e.1 > MAX_FAILURES
    }

    /// The token checked: it and its principal's id. An unknown principal
    /// or key version costs the same MAC as a wrong key, so the answer's
    /// time does not tell which principals exist.
    fn verify(
        &self,
        principals: &Principals,
        token: &str,
    ) -> Result<(Token, u64, Duration), LoginError> {
        let now_s = proto::clock::now_ms() / 1000;
        let t = Token::parse(token, now_s).map_err(LoginError::Token)?;
        let rec = principals
            .get(&t.principal)
            .filter(|r| r.info.key_version == t.key_version);
        let key = rec.as_ref().map_or([0u8; 32], |r| r.secret);
        let good = t.verify(&self.cluster_id, &key);
        match rec {
            Some(r) if good => {
                let lasts = Duration::from_secs(t.expiry_s.saturating_sub(now_s)).min(SESSION);
                Ok((t, r.info.id, lasts))
            }
            _ => Err(LoginError::Refused),
        }
    }

    /// Who session `id` speaks for, if it is current and its principal
    /// still has the key it logged in with.
    pub fn check(&self, principals: &Principals, id: &str) -> Option<Viewer> {
        let mut m = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let s = m.get_mut(id)?;
        s.used = Instant::now();
        let rec = principals.get(&s.principal);
        let live = s.until > Instant::now()
            && rec.as_ref().is_some_and(|r| {
                r.info.key_version == s.key_version && r.info.id == s.principal_id
            });
        let Some(rec) = rec.filter(|_| live) else {
            m.remove(id);
            return None;
        };
        let spec = &rec.info.spec;
        Some(Viewer {
            principal: spec.name.clone(),
            admin: mds::principals::full_admin(spec),
        })
    }

    /// Ends session `id`.
    pub fn logout(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
