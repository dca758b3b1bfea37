//! Error codes on the wire: one per distinct failure, stable numbers
//! (documented in `docs/PROTOCOL.md`), plus a human message.

use serde::{Deserialize, Serialize};

use crate::cap::CapError;

/// A failure a request can end with. Numbers are part of the protocol:
/// each code travels as its number (a postcard varint), never as its
/// position in the enum (`error_code_numbers_are_pinned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The object does not exist.
    NoObject = 1,
    /// The partition does not exist.
    NoPartition = 2,
    /// The object or partition already exists.
    Exists = 3,
    /// Not enough space on the OSD.
    NoSpace = 4,
    /// A bound on what a store may hold (attributes on one object, or the
    /// bytes of attributes in all) would be passed: nothing was changed.
    Bound = 6,
    /// Stored data failed its checksum.
    Checksum = 5,
    /// No capability where one is required.
    CapMissing = 10,
    /// The capability's MAC does not verify.
    CapForged = 11,
    /// The capability has expired.
    CapExpired = 12,
    /// The object is outside the capability's id range (or partition).
    CapOutOfRange = 13,
    /// The capability lacks a right the command needs.
    CapRights = 14,
    /// The object's version is at or above the capability's: revoked.
    CapRevoked = 15,
    /// The capability names a key version the OSD does not hold.
    CapKeyVersion = 16,
    /// A field of the request is invalid; the message names it.
    BadRequest = 20,
    /// The partition still holds objects.
    NotEmpty = 21,
    /// The attribute is maintained by the OSD and read-only.
    ReadOnly = 22,
    /// The OSD is overloaded or shutting down; retry later.
    Busy = 30,
    /// A device I/O error.
    Io = 31,
    /// The OSD's store is damaged or failed; an operator must look.
    Failed = 32,
    /// The peer speaks another protocol version or cluster.
    Handshake = 40,
    /// The OSD has no current lease from the MDS (starting, or cut off
    /// from it): it serves only the MDS until a report is accepted, so a
    /// copy the MDS recorded as stale is never read. Retry, or use
    /// another copy.
    NotReady = 41,
    /// The peer is not who it claims, its key or ticket is unknown,
    /// rotated or expired, or a frame failed its authentication tag.
    Unauthenticated = 42,
    /// The OSD is not the head of the object's replica chain (or its
    /// chain has changed): fetch the chains again and send to the head.
    NotHead = 43,
    /// A chain member refused an effect sent under another chain epoch
    /// than its own, or by an OSD that is not the member before it.
    StaleChain = 44,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: [ErrorCode; 24] = [
        ErrorCode::NoObject,
        ErrorCode::NoPartition,
        ErrorCode::Exists,
        ErrorCode::NoSpace,
        ErrorCode::Bound,
        ErrorCode::Checksum,
        ErrorCode::CapMissing,
        ErrorCode::CapForged,
        ErrorCode::CapExpired,
        ErrorCode::CapOutOfRange,
        ErrorCode::CapRights,
        ErrorCode::CapRevoked,
        ErrorCode::CapKeyVersion,
        ErrorCode::BadRequest,
        ErrorCode::NotEmpty,
        ErrorCode::ReadOnly,
        ErrorCode::Busy,
        ErrorCode::Io,
        ErrorCode::Failed,
        ErrorCode::Handshake,
        ErrorCode::NotReady,
        ErrorCode::Unauthenticated,
        ErrorCode::NotHead,
        ErrorCode::StaleChain,
    ];

    /// The code numbered `n`.
    pub fn from_number(n: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| *c as u16 == n)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(*self as u16)
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let n = u16::deserialize(d)?;
        // A newer peer's code reads as a failure; its message still says
        // what failed (a refusal of an older protocol version included).
        Ok(ErrorCode::from_number(n).unwrap_or(ErrorCode::Failed))
    }
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct WireError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// Details for people (object, field, reason).
    pub message: String,
}

impl WireError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }

    /// A bad-request error naming the field.
    pub fn bad(field: &str, why: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::BadRequest, format!("{field}: {why}"))
    }
}

impl From<CapError> for WireError {
    fn from(e: CapError) -> Self {
        let code = match e {
            CapError::Missing => ErrorCode::CapMissing,
            CapError::UnknownKeyVersion(_) => ErrorCode::CapKeyVersion,
            CapError::Forged | CapError::WrongHolder { .. } => ErrorCode::CapForged,
            CapError::Expired { .. } => ErrorCode::CapExpired,
            CapError::WrongPartition { .. } | CapError::OutOfRange { .. } => {
                ErrorCode::CapOutOfRange
            }
            CapError::Rights { .. } => ErrorCode::CapRights,
            CapError::Revoked { .. } => ErrorCode::CapRevoked,
        };
        WireError::new(code, e.to_string())
    }
}

/// A name that is not one of the choices (a mode, a protocol, a policy).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {got:?}: use {expected}")]
pub struct UnknownName {
    /// What was being named ("namespace mode", "directory protocol", …).
    pub what: &'static str,
    /// The name given.
    pub got: String,
    /// The names accepted, for people.
    pub expected: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_numbers_are_pinned() {
        let pinned: [(ErrorCode, u16); 24] = [
            (ErrorCode::NoObject, 1),
            (ErrorCode::NoPartition, 2),
            (ErrorCode::Exists, 3),
            (ErrorCode::NoSpace, 4),
            (ErrorCode::Bound, 6),
            (ErrorCode::Checksum, 5),
            (ErrorCode::CapMissing, 10),
            (ErrorCode::CapForged, 11),
            (ErrorCode::CapExpired, 12),
            (ErrorCode::CapOutOfRange, 13),
            (ErrorCode::CapRights, 14),
            (ErrorCode::CapRevoked, 15),
            (ErrorCode::CapKeyVersion, 16),
            (ErrorCode::BadRequest, 20),
            (ErrorCode::NotEmpty, 21),
            (ErrorCode::ReadOnly, 22),
            (ErrorCode::Busy, 30),
            (ErrorCode::Io, 31),
            (ErrorCode::Failed, 32),
            (ErrorCode::Handshake, 40),
            (ErrorCode::NotReady, 41),
            (ErrorCode::Unauthenticated, 42),
            (ErrorCode::NotHead, 43),
            (ErrorCode::StaleChain, 44),
        ];
        assert_eq!(
            pinned.len(),
            ErrorCode::ALL.len(),
            "a new code needs its pin"
        );
        for (c, n) in pinned {
            let bytes = postcard::to_allocvec(&c).expect("encodes");
            assert_eq!(bytes, postcard::to_allocvec(&n).expect("encodes"), "{c:?}");
            assert_eq!(
                postcard::from_bytes::<ErrorCode>(&bytes).expect("decodes"),
                c
            );
        }
        let bytes = postcard::to_allocvec(&7u16).expect("encodes");
        assert_eq!(
            postcard::from_bytes::<ErrorCode>(&bytes).expect("decodes"),
            ErrorCode::Failed,
            "7 is no code: read as a failure, message kept"
        );
    }
}
