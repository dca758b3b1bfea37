//! Who is logged in to the dashboard. A login trades a token (see
//! `proto::token`) for a random session id kept in an HttpOnly cookie;
//! every request checks the session again against the principals now, so
//! removing a principal or rotating its key ends its sessions at their
//! next request. Sessions, and failed logins, are bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mds::principals::Principals;
use proto::mds::Access;
use proto::token::{Token, TokenError};

/// Name of the session cookie.
pub const COOKIE: &str = "tessera_session";
/// Sessions held at once; a new one beyond it ends the oldest.
pub const MAX_SESSIONS: usize = 256;
/// Longest a session lasts (shorter when its token expires sooner).
pub const MAX_SESSION: Duration = Duration::from_secs(12 * 3600);
/// Failed logins allowed per [`FAIL_WINDOW`]; beyond that logins are
/// refused with 429 until the window ends.
pub const MAX_FAILURES: u32 = 20;
/// See [`MAX_FAILURES`].
pub const FAIL_WINDOW: Duration = Duration::from_secs(10);

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
    key_version: u32,
    until: Instant,
    made: Instant,
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

/// The sessions and the failed-login window.
#[derive(Debug)]
pub struct Sessions {
    cluster_id: String,
    by_id: Mutex<HashMap<String, Session>>,
    failures: Mutex<(Instant, u32)>,
}

impl Sessions {
    /// No sessions yet, for cluster `cluster_id`.
    pub fn new(cluster_id: &str) -> Sessions {
        Sessions {
            cluster_id: cluster_id.into(),
            by_id: Mutex::default(),
            failures: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Logs in with `token`: the new session's id and how long it lasts.
    pub fn login(
        &self,
        principals: &Principals,
        token: &str,
    ) -> Result<(String, Duration), LoginError> {
        {
            let f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if f.1 >= MAX_FAILURES && f.0.elapsed() < FAIL_WINDOW {
                return Err(LoginError::Busy);
            }
        }
        let r = self.verify(principals, token);
        if r.is_err() {
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if f.0.elapsed() >= FAIL_WINDOW {
                *f = (Instant::now(), 0);
            }
            f.1 += 1;
        }
        let (t, now_s) = r?;
        let lasts = Duration::from_secs(t.expiry_s - now_s).min(MAX_SESSION);
        let id: String = net::auth::random_bytes::<32>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let now = Instant::now();
        let mut m = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, s| s.until > now);
        while m.len() >= MAX_SESSIONS {
            let Some(oldest) = m.iter().min_by_key(|(_, s)| s.made).map(|(k, _)| k.clone()) else {
                break;
            };
            m.remove(&oldest);
        }
        m.insert(
            id.clone(),
            Session {
                principal: t.principal,
                key_version: t.key_version,
                until: now + lasts,
                made: now,
            },
        );
        Ok((id, lasts))
    }

    fn verify(&self, principals: &Principals, token: &str) -> Result<(Token, u64), LoginError> {
        let now_s = proto::clock::now_ms() / 1000;
        let t = Token::parse(token, now_s).map_err(LoginError::Token)?;
        let rec = principals.get(&t.principal).ok_or(LoginError::Refused)?;
        if rec.info.key_version != t.key_version || !t.verify(&self.cluster_id, &rec.secret) {
            return Err(LoginError::Refused);
        }
        Ok((t, now_s))
    }

    /// Who session `id` speaks for, if it is current and its principal
    /// still has the key it logged in with.
    pub fn check(&self, principals: &Principals, id: &str) -> Option<Viewer> {
        let mut m = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let s = m.get(id)?;
        let rec = principals.get(&s.principal);
        let live = s.until > Instant::now()
            && rec
                .as_ref()
                .is_some_and(|r| r.info.key_version == s.key_version);
        let Some(rec) = rec.filter(|_| live) else {
            m.remove(id);
            return None;
        };
        let spec = &rec.info.spec;
        Some(Viewer {
            principal: spec.name.clone(),
            admin: spec.admin && spec.access == Access::ReadWrite && spec.path == "/",
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
