//! Dashboard login tokens: a principal's proof, made with its key, that
//! whoever holds the token may see the cluster as that principal until
//! the token expires. `tessera auth token` prints one; the dashboard's
//! login page makes a short-lived one in the browser from a pasted key
//! file (the key itself never leaves the browser).
//!
//! `tsdash1:<principal>:<key version>:<expiry, s since the epoch>:<mac>`
//! where mac is 64 hex digits of HMAC-SHA256 under the principal's key
//! over `TSDASH1\n<cluster id>\n<principal>\n<key version>\n<expiry>`.

use crate::cap::{KEY_LEN, mac, mac_ok};

/// The prefix every token starts with.
pub const PREFIX: &str = "tsdash1";
/// Longest token accepted (a principal name is at most 71 bytes).
pub const MAX_LEN: usize = 200;
/// Longest a token may live: 30 days.
pub const MAX_LIFETIME_S: u64 = 30 * 24 * 3600;

/// A parsed token (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Who it speaks for.
    pub principal: String,
    /// The key version it was made with.
    pub key_version: u32,
    /// When it stops working (s since the epoch).
    pub expiry_s: u64,
    mac: [u8; 32],
}

/// Why a token is refused (as shown to whoever offered it: it names no
/// principal or key that exists).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not of the token's shape.
    #[error("not a dashboard token (tsdash1:PRINCIPAL:VERSION:EXPIRY:MAC)")]
    Malformed,
    /// Past its expiry.
    #[error("the token has expired; make a new one with `tessera auth token`")]
    Expired,
    /// Expires further ahead than tokens may live.
    #[error("the token lives longer than 30 days")]
    TooLong,
}

fn signed(cluster_id: &str, principal: &str, key_version: u32, expiry_s: u64) -> Vec<u8> {
    format!("TSDASH1\n{cluster_id}\n{principal}\n{key_version}\n{expiry_s}").into_bytes()
}

/// A token for `principal` (key `key` of version `key_version`) that
/// expires at `expiry_s`.
pub fn make(
    cluster_id: &str,
    principal: &str,
    key_version: u32,
    expiry_s: u64,
    key: &[u8; KEY_LEN],
) -> String {
    let m = mac(key, &signed(cluster_id, principal, key_version, expiry_s));
    let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}:{principal}:{key_version}:{expiry_s}:{hex}")
}

impl Token {
    /// Parses `s` and checks its lifetime against `now_s`.
    pub fn parse(s: &str, now_s: u64) -> Result<Token, TokenError> {
        let s = s.trim();
        if s.len() > MAX_LEN {
            return Err(TokenError::Malformed);
        }
        let mut parts = s.split(':');
        let (Some(PREFIX), Some(principal), Some(version), Some(expiry), Some(hex), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(TokenError::Malformed);
        };
        // One spelling per token: plain digits, no sign, no leading zero.
        let number = |n: &str| {
            let plain = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'));
            plain.then(|| n.parse::<u64>().ok()).flatten()
        };
        let key_version = number(version)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(TokenError::Malformed)?;
        let expiry_s = number(expiry).ok_or(TokenError::Malformed)?;
        if principal.is_empty() || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(TokenError::Malformed);
        }
        let mut mac = [0u8; 32];
        for (i, b) in mac.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| TokenError::Malformed)?;
        }
        if expiry_s <= now_s {
            return Err(TokenError::Expired);
        }
        if expiry_s - now_s > MAX_LIFETIME_S {
            return Err(TokenError::TooLong);
        }
        Ok(Token {
            principal: principal.into(),
            key_version,
            expiry_s,
            mac,
        })
    }

    /// Whether the token was made with `key` for this cluster (constant
    /// time).
    pub fn verify(&self, cluster_id: &str, key: &[u8; KEY_LEN]) -> bool {
        mac_ok(
            key,
            &signed(cluster_id, &self.principal, self.key_version, self.expiry_s),
            &self.mac,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; KEY_LEN] = [7; KEY_LEN];

    #[test]
    fn a_token_verifies_with_its_key_only_and_until_it_expires() {
        let t = make("c", "client.admin", 2, 1_000, &KEY);
        let p = Token::parse(&t, 500).expect("parses");
        assert_eq!(
            (p.principal.as_str(), p.key_version, p.expiry_s),
            ("client.admin", 2, 1_000)
        );
        assert!(p.verify("c", &KEY));
        assert!(!p.verify("other", &KEY), "another cluster's");
        assert!(!p.verify("c", &[8; KEY_LEN]), "another key");
        assert_eq!(Token::parse(&t, 1_000), Err(TokenError::Expired));
        assert_eq!(
            Token::parse(&make("c", "client.a", 1, MAX_LIFETIME_S + 10, &KEY), 5),
            Err(TokenError::TooLong)
        );
    }

    #[test]
    fn changing_any_field_breaks_the_mac() {
        let t = make("c", "client.a", 1, 1_000, &KEY);
        for changed in [
            t.replace("client.a", "client.b"),
            t.replace(":1:", ":2:"),
            t.replace(":1000:", ":999:"),
        ] {
            let p = Token::parse(&changed, 10).expect("still parses");
            assert!(!p.verify("c", &KEY), "{changed}");
        }
    }

    #[test]
    fn malformed_tokens_are_refused_without_panicking() {
        for bad in [
            "",
            "tsdash1",
            "tsdash1:a:1:2",
            "tsdash2:a:1:2:00",
            "tsdash1:a:x:2:00",
            "tsdash1::1:2000:0000000000000000000000000000000000000000000000000000000000000000",
            "tsdash1:a:1:2000:00000000000000000000000000000000000000000000000000000000000000zz",
            "tsdash1:a:1:2000:ééééééééééééééééééééééééééééééé00",
            "tsdash1:a:1:2000:00:extra",
            "tsdash1:a:1:2000:+f00000000000000000000000000000000000000000000000000000000000000",
            "tsdash1:a:+1:2000:0000000000000000000000000000000000000000000000000000000000000000",
            "tsdash1:a:01:2000:0000000000000000000000000000000000000000000000000000000000000000",
            "tsdash1:a:1:02000:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(Token::parse(bad, 10), Err(TokenError::Malformed), "{bad}");
        }
        assert_eq!(
            Token::parse(&"x".repeat(10_000), 10),
            Err(TokenError::Malformed)
        );
    }
}
