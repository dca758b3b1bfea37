//! Authentication: who a peer is, proved without sending a secret, and the
//! keys that protect every frame after the handshake.
//!
//! - A peer names a **credential** in its Hello: a principal with a
//!   long-term key (a client's key, or an OSD's own key towards the MDS),
//!   or a **ticket** the MDS sealed for one OSD with that OSD's key (the
//!   shape of Kerberos and cephx service tickets).
//! - Both sides prove knowledge of the key with HMAC-SHA256 over a
//!   transcript of the handshake (the Hello's bytes, the server's nonce,
//!   the mode); the same transcript derives one key per direction.
//! - Every later frame carries a 16-byte AES-256-GCM tag over an implicit
//!   sequence number, the frame's fixed fields, header and payload; the
//!   encrypted mode also encrypts header and payload. A frame altered, replayed, dropped or
//!   reordered fails its tag and closes the connection.
//!
//! Only well-known constructions from vetted crates (`hmac`/`sha2`,
//! `aes-gcm`); nothing here is a cipher of our own.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use bytes::{Bytes, BytesMut};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cap::KEY_LEN;

/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of the tag every frame carries after the handshake.
pub const TAG_LEN: usize = 16;
/// A 32-byte secret.
pub type Secret = [u8; KEY_LEN];
/// The principal id of the MDS itself (capabilities it signs for its own use).
pub const MDS_PRINCIPAL: u64 = 0;

/// What a peer presents in its Hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Credential {
    /// Nothing: accepted only by an OSD started with `--insecure`.
    None,
    /// A principal with a long-term key: `client.NAME` (towards the MDS)
    /// or `osd.N` (an OSD towards the MDS, with its own key).
    Key {
        /// Principal name.
        principal: String,
        /// Which of its keys (rotation).
        key_version: u32,
    },
    /// A ticket for one OSD, sealed by the MDS with that OSD's key.
    Ticket(SealedTicket),
}

/// A ticket as it travels: opaque to the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedTicket {
    /// Which of the OSD's keys sealed it.
    pub key_version: u32,
    /// 12-byte nonce, then the AES-256-GCM ciphertext of a [`Ticket`] and its tag.
    pub sealed: Vec<u8>,
}

/// What a ticket says (only the MDS and the OSD can read it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The principal's id: the OSD accepts only capabilities whose
    /// holder is this id.
    pub principal_id: u64,
    /// The principal's name (logs).
    pub principal: String,
    /// The OSD it is for.
    pub osd_id: u32,
    /// Valid until (ms since the epoch); checked at the handshake.
    pub expires_ms: u64,
    /// The key both ends prove in the handshake.
    pub session_key: Secret,
}

/// The client's second handshake frame: its proof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// HMAC-SHA256 with the key over the transcript, labelled "client".
    pub proof: [u8; 32],
}

/// Why a ticket or a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The ticket does not open with the key (forged, altered, another OSD's).
    #[error(
        "ticket does not verify with this OSD's key version {0} (forged, altered, or for another OSD)"
    )]
    BadTicket(u32),
    /// The ticket is for another OSD.
    #[error("ticket is for OSD {ticket}, this is OSD {me}")]
    OtherOsd {
        /// The ticket's OSD.
        ticket: u32,
        /// This OSD.
        me: u32,
    },
    /// The ticket expired.
    #[error(
        "ticket of {principal} expired at {expires_ms} ms (now {now_ms} ms): ask the MDS for a new one"
    )]
    Expired {
        /// Whose.
        principal: String,
        /// When.
        expires_ms: u64,
        /// Now.
        now_ms: u64,
    },
    /// A wrapped key did not open.
    #[error("wrapped session key does not verify (wrong principal key?)")]
    BadWrap,
}

fn ticket_aad(osd_id: u32, key_version: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(b"TSTKT001");
    a[8..12].copy_from_slice(&osd_id.to_le_bytes());
    a[12..16].copy_from_slice(&key_version.to_le_bytes());
    a
}

fn aead_seal(key: &Secret, aad: &[u8], plain: &[u8], nonce: [u8; 12]) -> Vec<u8> {
    let cipher = Aes256Gcm::new(key.into());
    let mut out = Vec::with_capacity(12 + plain.len() + TAG_LEN);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(plain);
    let tag = cipher
        .encrypt_inout_detached(&Nonce::from(nonce), aad, (&mut out[12..]).into())
        .unwrap_or_else(|_| unreachable!("AES-GCM takes messages this short"));
    out.extend_from_slice(&tag);
    out
}

fn aead_open(key: &Secret, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < 12 + TAG_LEN {
        return None;
    }
    let (nonce, rest) = sealed.split_at(12);
    let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
    let nonce: [u8; 12] = nonce.try_into().ok()?;
    let tag: [u8; TAG_LEN] = tag.try_into().ok()?;
    let mut plain = ct.to_vec();
    Aes256Gcm::new(key.into())
        .decrypt_inout_detached(
            &Nonce::from(nonce),
            aad,
            (&mut plain[..]).into(),
            &tag.into(),
        )
        .ok()?;
    Some(plain)
}

impl Ticket {
    /// Seals the ticket with OSD key `key` (version `key_version`);
    /// `nonce` must be random (12 bytes).
    pub fn seal(&self, key: &Secret, key_version: u32, nonce: [u8; 12]) -> SealedTicket {
        let plain = crate::msg::encode(self);
        SealedTicket {
            key_version,
            sealed: aead_seal(key, &ticket_aad(self.osd_id, key_version), &plain, nonce),
        }
    }

    /// Opens a ticket sealed for OSD `osd_id` with `key` and checks it has
    /// not expired at `now_ms`.
    pub fn open(
        t: &SealedTicket,
        key: &Secret,
        osd_id: u32,
        now_ms: u64,
    ) -> Result<Ticket, AuthError> {
        let plain = aead_open(key, &ticket_aad(osd_id, t.key_version), &t.sealed)
            .ok_or(AuthError::BadTicket(t.key_version))?;
        let tk: Ticket =
            crate::msg::decode(&plain).map_err(|_| AuthError::BadTicket(t.key_version))?;
        if tk.osd_id != osd_id {
            return Err(AuthError::OtherOsd {
                ticket: tk.osd_id,
                me: osd_id,
            });
        }
        if tk.expires_ms <= now_ms {
            return Err(AuthError::Expired {
                principal: tk.principal,
                expires_ms: tk.expires_ms,
                now_ms,
            });
        }
        Ok(tk)
    }
}

/// The key that wraps a ticket's session key for its client: derived
/// from the client's long-term key, so the session key never crosses the
/// wire in the clear even on a connection that is only authenticated.
fn wrap_key(principal_key: &Secret) -> Secret {
    hmac(principal_key, &[b"TS-wrap-ticket-key"])
}

/// Encrypts `session_key` for the holder of `principal_key`.
pub fn wrap_session_key(principal_key: &Secret, session_key: &Secret, nonce: [u8; 12]) -> Vec<u8> {
    aead_seal(&wrap_key(principal_key), b"TSWRAP01", session_key, nonce)
}

/// Opens what [`wrap_session_key`] made.
pub fn unwrap_session_key(principal_key: &Secret, wrapped: &[u8]) -> Result<Secret, AuthError> {
    aead_open(&wrap_key(principal_key), b"TSWRAP01", wrapped)
        .and_then(|v| Secret::try_from(v.as_slice()).ok())
        .ok_or(AuthError::BadWrap)
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// What both ends derive from the key and the handshake's transcript.
pub struct HandshakeKeys {
    /// What the server sends to prove it holds the key.
    pub server_proof: [u8; 32],
    /// What the client sends to prove it holds the key.
    pub client_proof: [u8; 32],
    /// Protects frames from client to server.
    pub client_to_server: Secret,
    /// Protects frames from server to client.
    pub server_to_client: Secret,
}

impl HandshakeKeys {
    /// Derives the proofs and frame keys. The transcript binds the exact
    /// Hello bytes (credential, client nonce, asked mode), the server's
    /// nonce and the mode the server chose, so nothing of it can be
    /// changed or downgraded in flight.
    pub fn derive(
        key: &Secret,
        hello: &[u8],
        server_nonce: &[u8; NONCE_LEN],
        encrypt: bool,
    ) -> Self {
        let mut h = Sha256::new();
        h.update(b"TS-handshake-1");
        h.update((hello.len() as u64).to_le_bytes());
        h.update(hello);
        h.update(server_nonce);
        h.update([u8::from(encrypt)]);
        let t: [u8; 32] = h.finalize().into();
        HandshakeKeys {
            server_proof: hmac(key, &[b"TS-server-proof", &t]),
            client_proof: hmac(key, &[b"TS-client-proof", &t]),
            client_to_server: hmac(key, &[b"TS-client-to-server", &t]),
            server_to_client: hmac(key, &[b"TS-server-to-client", &t]),
        }
    }
}

/// Compares two byte strings in constant time.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One direction of a connection after the handshake: tags (and in the
/// encrypted mode encrypts) each frame with the direction's key and the
/// next sequence number. The sender and the receiver each keep one.
///
/// Both modes are AES-256-GCM under the direction's key, nonce = mode ‖
/// sequence number:
/// - authenticated (default): the payload is the associated data and the
///   fixed fields ‖ header the (discarded) plaintext, so the tag covers
///   all of it while the bulk data is only hashed (GHASH), not encrypted;
/// - encrypted: fixed fields are the associated data, header ‖ payload the
///   plaintext.
///
/// Measured here on 512 KiB: HMAC-SHA256 1.7–1.8 GB/s, AES-256-GCM with
/// the data as associated data 4.7–6.0 GB/s, encrypting 2.4–3.5 GB/s.
pub struct FrameSeal {
    cipher: Box<Aes256Gcm>,
    encrypt: bool,
    seq: u64,
}

/// Why a sealed frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("frame {seq} fails its authentication tag: altered, replayed, reordered or forged")]
pub struct Unauthentic {
    /// The frame's sequence number on this connection.
    pub seq: u64,
}

impl FrameSeal {
    /// A seal for one direction with `key`; `encrypt` also encrypts.
    pub fn new(key: &Secret, encrypt: bool) -> FrameSeal {
        FrameSeal {
            cipher: Box::new(Aes256Gcm::new(key.into())),
            encrypt,
            seq: 0,
        }
    }

    /// Whether frames are encrypted.
    pub fn encrypts(&self) -> bool {
        self.encrypt
    }

    fn nonce(&self, seq: u64) -> Nonce<aes_gcm::aead::consts::U12> {
        let mut n = [0u8; 12];
        n[0] = if self.encrypt { 2 } else { 1 };
        n[4..].copy_from_slice(&seq.to_le_bytes());
        Nonce::from(n)
    }

    /// The authenticated mode's tag: payload as associated data, fixed
    /// fields ‖ header as the plaintext (its ciphertext is not sent).
    fn tag(&self, seq: u64, head: &[u8; 24], header: &[u8], payload: &[u8]) -> [u8; TAG_LEN] {
        let mut small = Vec::with_capacity(24 + header.len());
        small.extend_from_slice(head);
        small.extend_from_slice(header);
        self.cipher
            .encrypt_inout_detached(&self.nonce(seq), payload, (&mut small[..]).into())
            .unwrap_or_else(|_| unreachable!("frames are far below AES-GCM's limit"))
            .into()
    }

    /// Seals the next outgoing frame: returns its (possibly encrypted)
    /// header and payload and the tag to send after them. `head` is the
    /// frame's fixed fields ([`crate::frame::Prefix::head_bytes`]), which
    /// encryption does not change.
    pub fn seal(
        &mut self,
        head: &[u8; 24],
        header: Bytes,
        payload: Bytes,
    ) -> (Bytes, Bytes, [u8; TAG_LEN]) {
        let seq = self.seq;
        self.seq += 1;
        if !self.encrypt {
            let tag = self.tag(seq, head, &header, &payload);
            return (header, payload, tag);
        }
        let mut buf = BytesMut::with_capacity(header.len() + payload.len());
        buf.extend_from_slice(&header);
        buf.extend_from_slice(&payload);
        let tag = self
            .cipher
            .encrypt_inout_detached(&self.nonce(seq), head, (&mut buf[..]).into())
            .unwrap_or_else(|_| unreachable!("frames are far below AES-GCM's limit"));
        let mut all = buf.freeze();
        let h = all.split_to(header.len());
        (h, all, tag.into())
    }

    /// Opens the next incoming frame, whose header and payload arrived as
    /// one buffer (`body`, header first) followed by `tag`; returns the
    /// (decrypted) body.
    pub fn open(
        &mut self,
        head: &[u8; 24],
        header_len: usize,
        mut body: BytesMut,
        tag: &[u8; TAG_LEN],
    ) -> Result<BytesMut, Unauthentic> {
        let seq = self.seq;
        self.seq += 1;
        if !self.encrypt {
            let (h, p) = body.split_at(header_len.min(body.len()));
            return if same(&self.tag(seq, head, h, p), tag) {
                Ok(body)
            } else {
                Err(Unauthentic { seq })
            };
        }
        self.cipher
            .decrypt_inout_detached(
                &self.nonce(seq),
                head,
                (&mut body[..]).into(),
                &(*tag).into(),
            )
            .map_err(|_| Unauthentic { seq })?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Secret = [7; 32];

    #[test]
    fn tickets_open_only_with_their_key_osd_and_time() {
        let t = Ticket {
            principal_id: 5,
            principal: "client.a".into(),
            osd_id: 3,
            expires_ms: 1000,
            session_key: [9; 32],
        };
        let s = t.seal(&K, 2, [1; 12]);
        assert_eq!(Ticket::open(&s, &K, 3, 999).unwrap(), t);
        assert_eq!(
            Ticket::open(&s, &[8; 32], 3, 999),
            Err(AuthError::BadTicket(2))
        );
        assert_eq!(Ticket::open(&s, &K, 4, 999), Err(AuthError::BadTicket(2)));
        assert!(matches!(
            Ticket::open(&s, &K, 3, 1000),
            Err(AuthError::Expired { .. })
        ));
        let mut bad = s.clone();
        bad.sealed[20] ^= 1;
        assert_eq!(Ticket::open(&bad, &K, 3, 999), Err(AuthError::BadTicket(2)));
        let mut other_version = s.clone();
        other_version.key_version = 3;
        assert!(Ticket::open(&other_version, &K, 3, 999).is_err());
    }

    #[test]
    fn wrapped_keys_open_only_for_their_principal() {
        let w = wrap_session_key(&K, &[4; 32], [2; 12]);
        assert_eq!(unwrap_session_key(&K, &w).unwrap(), [4; 32]);
        assert_eq!(unwrap_session_key(&[1; 32], &w), Err(AuthError::BadWrap));
        assert_eq!(unwrap_session_key(&K, &w[..10]), Err(AuthError::BadWrap));
    }

    #[test]
    fn handshake_keys_depend_on_every_input() {
        let a = HandshakeKeys::derive(&K, b"hello", &[1; 16], false);
        let b = HandshakeKeys::derive(&K, b"hellp", &[1; 16], false);
        let c = HandshakeKeys::derive(&K, b"hello", &[2; 16], false);
        let d = HandshakeKeys::derive(&K, b"hello", &[1; 16], true);
        let e = HandshakeKeys::derive(&[8; 32], b"hello", &[1; 16], false);
        for o in [&b, &c, &d, &e] {
            assert_ne!(a.server_proof, o.server_proof);
            assert_ne!(a.client_to_server, o.client_to_server);
        }
        assert_ne!(a.server_proof, a.client_proof);
        assert_ne!(a.client_to_server, a.server_to_client);
    }

    fn round_trip(encrypt: bool) {
        let head = [3u8; 24];
        let mut tx = FrameSeal::new(&K, encrypt);
        let mut rx = FrameSeal::new(&K, encrypt);
        let frames: Vec<(Bytes, Bytes)> = (0..3)
            .map(|i| (Bytes::from(vec![i; 10]), Bytes::from(vec![i + 1; 1000])))
            .collect();
        let sealed: Vec<_> = frames
            .iter()
            .map(|(h, p)| tx.seal(&head, h.clone(), p.clone()))
            .collect();
        if encrypt {
            assert_ne!(sealed[0].1, frames[0].1, "encrypted payload differs");
        } else {
            assert_eq!(sealed[0].1, frames[0].1);
        }
        let body = |s: &(Bytes, Bytes, [u8; 16])| {
            let mut b = BytesMut::from(&s.0[..]);
            b.extend_from_slice(&s.1);
            b
        };
        // In order: every frame opens to what was sent.
        let mut rx2 = FrameSeal::new(&K, encrypt);
        for (s, (h, p)) in sealed.iter().zip(&frames) {
            let b = rx2.open(&head, h.len(), body(s), &s.2).unwrap();
            assert_eq!(&b[..h.len()], &h[..]);
            assert_eq!(&b[h.len()..], &p[..]);
        }
        // Out of order (a replay or a dropped frame): refused.
        assert!(rx.open(&head, 10, body(&sealed[1]), &sealed[1].2).is_err());
        // A flipped byte anywhere: refused.
        let mut rx3 = FrameSeal::new(&K, encrypt);
        let mut b = body(&sealed[0]);
        b[500] ^= 1;
        assert!(rx3.open(&head, 10, b, &sealed[0].2).is_err());
        let mut rx4 = FrameSeal::new(&K, encrypt);
        assert!(
            rx4.open(&[4; 24], 10, body(&sealed[0]), &sealed[0].2)
                .is_err()
        );
    }

    #[test]
    fn sealed_frames_refuse_change_replay_and_reorder() {
        round_trip(false);
        round_trip(true);
    }
}
