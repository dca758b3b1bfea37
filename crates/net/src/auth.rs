//! Who a connection speaks for: the credential a client presents in its
//! Hello and the key it proves ([`Identity`]), where identities come from
//! ([`IdentitySource`]: a principal's key file, the MDS's tickets, or
//! tickets minted with an OSD's own key), and the client key file.
//!
//! ```toml
//! cluster_id = "c0ffee"
//! principal = "client.alice"
//! key_version = 1
//! secret = "64 hex digits"
//! mds = "10.0.0.1:7000"   # optional: where the MDS listens
//! ```

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use proto::KeyRing;
use proto::auth::{Credential, MDS_PRINCIPAL, Secret, Ticket};
use serde::{Deserialize, Serialize};

use crate::connection::ConnError;
use crate::keys::{KeyError, hex, parse_secret, random_key};

/// What a client presents and proves in a handshake.
#[derive(Clone)]
pub struct Identity {
    /// Sent in the Hello.
    pub credential: Credential,
    /// The key proved (never sent); `None` only with [`Credential::None`].
    pub key: Option<Secret>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a key.
        f.debug_struct("Identity")
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// No identity: only an `--insecure` OSD accepts it.
    pub fn anonymous() -> Identity {
        Identity {
            credential: Credential::None,
            key: None,
        }
    }

    /// A principal with its long-term key.
    pub fn principal(name: &str, key_version: u32, key: Secret) -> Identity {
        Identity {
            credential: Credential::Key {
                principal: name.into(),
                key_version,
            },
            key: Some(key),
        }
    }
}

/// A boxed future (identity sources are called through `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a connection gets the identity it presents to server `osd_id`
/// (the MDS's id for the MDS): called at every (re)connect, so tickets
/// can be renewed.
pub trait IdentitySource: Send + Sync {
    /// The identity for a new connection to `osd_id`.
    fn identity(&self, osd_id: u32) -> BoxFuture<'_, Result<Identity, ConnError>>;
}

impl IdentitySource for Identity {
    fn identity(&self, _osd_id: u32) -> BoxFuture<'_, Result<Identity, ConnError>> {
        let me = self.clone();
        Box::pin(async move { Ok(me) })
    }
}

/// How long a minted or issued ticket is accepted at a handshake: 5 min,
/// the capabilities' default lifetime, so a removed or rotated principal
/// opens no new OSD connection, and sends no request on an old one, more
/// than 5 minutes after its removal (clients renew a ticket a minute
/// before it lapses: one MDS request per OSD every 4 min).
pub const TICKET_TTL_MS: u64 = 300_000;

/// Random bytes from the OS.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(32) {
        let k = random_key();
        chunk.copy_from_slice(&k[..chunk.len()]);
    }
    out
}

/// Seals a ticket for `osd_id` with the newest key of `ring`, for
/// principal `principal_id` named `name`, valid [`TICKET_TTL_MS`].
pub fn mint_ticket(
    ring: &KeyRing,
    osd_id: u32,
    principal_id: u64,
    name: &str,
) -> Option<(Identity, u64)> {
    let (kv, key) = ring.newest()?;
    let expires_ms = proto::clock::now_ms() + TICKET_TTL_MS;
    let session_key = random_key();
    let t = Ticket {
        principal_id,
        principal: name.into(),
        osd_id,
        expires_ms,
        session_key,
    };
    let sealed = t.seal(key, kv, random_bytes());
    Some((
        Identity {
            credential: Credential::Ticket(sealed),
            key: Some(session_key),
        },
        expires_ms,
    ))
}

/// Whoever holds OSD keys (the MDS, tools run beside it, benches) connects
/// to those OSDs as the MDS principal with tickets it mints itself.
pub struct MintWithOsdKeys {
    keys: Box<dyn Fn(u32) -> Option<KeyRing> + Send + Sync>,
}

impl MintWithOsdKeys {
    /// Mints with the ring `keys(osd_id)` returns.
    pub fn new(keys: impl Fn(u32) -> Option<KeyRing> + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(MintWithOsdKeys {
            keys: Box::new(keys),
        })
    }

    /// Mints with one OSD's ring.
    pub fn one(ring: KeyRing) -> Arc<Self> {
        Self::new(move |_| Some(ring.clone()))
    }
}

impl IdentitySource for MintWithOsdKeys {
    fn identity(&self, osd_id: u32) -> BoxFuture<'_, Result<Identity, ConnError>> {
        let got = (self.keys)(osd_id)
            .and_then(|ring| mint_ticket(&ring, osd_id, MDS_PRINCIPAL, "mds"))
            .map(|(id, _)| id)
            .ok_or_else(|| ConnError::Connect {
                addr: format!("OSD {osd_id}"),
                why: "no key for this OSD to mint a ticket with".into(),
            });
        Box::pin(async move { got })
    }
}

/// A client's tickets for the OSDs, asked of the MDS as connections need
/// them and kept until a minute before they expire.
pub struct TicketsFromMds {
    mds: Arc<crate::MdsClient>,
    cache: std::sync::Mutex<std::collections::HashMap<u32, (Identity, u64)>>,
}

impl TicketsFromMds {
    /// Tickets asked of `mds` (whose key unwraps their session keys).
    pub fn new(mds: Arc<crate::MdsClient>) -> Arc<Self> {
        Arc::new(TicketsFromMds {
            mds,
            cache: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    async fn ask(&self, osd_id: u32) -> Result<(Identity, u64), ConnError> {
        use proto::mds::{MdsReply, Op};
        let fail = |why: String| ConnError::Connect {
            addr: format!("OSD {osd_id}"),
            why,
        };
        let reply = self
            .mds
            .call(Op::Ticket { osd: osd_id })
            .await
            .map_err(|e| fail(format!("no ticket from the MDS: {e}")))?;
        let MdsReply::Ticket {
            ticket,
            wrapped_key,
            expires_ms,
        } = reply
        else {
            return Err(fail(format!(
                "the MDS answered a ticket request with {reply:?}"
            )));
        };
        let own = self
            .mds
            .identity()
            .key
            .ok_or_else(|| fail("this client has no key to open tickets with".into()))?;
        let session =
            proto::auth::unwrap_session_key(&own, &wrapped_key).map_err(|e| fail(e.to_string()))?;
        Ok((
            Identity {
                credential: Credential::Ticket(ticket),
                key: Some(session),
            },
            expires_ms,
        ))
    }
}

impl IdentitySource for TicketsFromMds {
    fn identity(&self, osd_id: u32) -> BoxFuture<'_, Result<Identity, ConnError>> {
        Box::pin(async move {
            let now = proto::clock::now_ms();
            let cached = self
                .cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&osd_id)
                .filter(|(_, exp)| *exp > now + 60_000)
                .map(|(id, _)| id.clone());
            if let Some(id) = cached {
                return Ok(id);
            }
            let (id, exp) = self.ask(osd_id).await?;
            self.cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(osd_id, (id.clone(), exp));
            Ok(id)
        })
    }
}

/// A client principal's key file.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientKey {
    /// Cluster it belongs to.
    pub cluster_id: String,
    /// `client.NAME`.
    pub principal: String,
    /// Which key of the principal (rotation raises it).
    pub key_version: u32,
    /// 32 bytes as 64 hex digits.
    pub secret: String,
    /// Where the MDS listens (optional; `--mds` overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mds: Option<String>,
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("cluster_id", &self.cluster_id)
            .field("principal", &self.principal)
            .field("key_version", &self.key_version)
            .field("mds", &self.mds)
            .finish_non_exhaustive()
    }
}

impl ClientKey {
    /// A key file for `principal` with `secret`.
    pub fn new(cluster_id: &str, principal: &str, key_version: u32, secret: &Secret) -> ClientKey {
        ClientKey {
            cluster_id: cluster_id.into(),
            principal: principal.into(),
            key_version,
            secret: hex(secret),
            mds: None,
        }
    }

    /// Reads and checks a key file; errors name the file and the problem.
    pub fn load(path: &Path) -> Result<ClientKey, KeyError> {
        let k: ClientKey = crate::keys::read_toml(path)?;
        k.secret().map_err(|e| KeyError::In {
            path: path.into(),
            source: Box::new(e),
        })?;
        Ok(k)
    }

    /// The secret's bytes.
    pub fn secret(&self) -> Result<Secret, KeyError> {
        parse_secret(&self.secret)
    }

    /// The identity it proves.
    pub fn identity(&self) -> Result<Identity, KeyError> {
        Ok(Identity::principal(
            &self.principal,
            self.key_version,
            self.secret()?,
        ))
    }

    /// Writes it owner-only (0600), atomically and durably.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        crate::files::write_private(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_key_files_round_trip_and_refuse_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        let mut k = ClientKey::new("c1", "client.a", 2, &[5; 32]);
        k.mds = Some("127.0.0.1:1".into());
        k.save(&p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let back = ClientKey::load(&p).unwrap();
        assert_eq!(back.secret().unwrap(), [5; 32]);
        assert_eq!(back.mds.as_deref(), Some("127.0.0.1:1"));
        assert!(!format!("{back:?}").contains(&hex(&[5; 32])));
        std::fs::write(
            &p,
            "cluster_id = \"c\"\nprincipal = \"client.a\"\nkey_version = 1\nsecret = \"abc\"\n",
        )
        .unwrap();
        assert!(
            ClientKey::load(&p)
                .unwrap_err()
                .to_string()
                .contains("hex digits")
        );
    }

    #[test]
    fn random_bytes_fill_any_length() {
        let a: [u8; 12] = random_bytes();
        let b: [u8; 40] = random_bytes();
        assert_ne!(a, [0; 12]);
        assert_ne!(&b[32..], &[0; 8]);
    }
}
