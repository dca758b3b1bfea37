//! Name checks: path components and extended-attribute names.

use std::borrow::Cow;

use proto::mds::{Errno, MdsError, NAME_MAX, XATTR_NAME_MAX};

use proto::mds::err;

/// The first of the 128 code points (U+10FE80..=U+10FEFF, in the private
/// use plane 16) that stand for the bytes 0x80..=0xFF of a name that is not
/// UTF-8: Linux names are bytes, Tessera's are strings, and this mapping
/// (the idea of Python's `surrogateescape`, with code points a Rust string
/// may hold) carries any byte string through unchanged.
const ESCAPE_BASE: u32 = 0x10_FE00;

fn escaped_byte(c: char) -> Option<u8> {
    let v = c as u32;
    (ESCAPE_BASE + 0x80..=ESCAPE_BASE + 0xFF)
        .contains(&v)
        .then(|| (v - ESCAPE_BASE) as u8)
}

/// A name (or symlink target) as Tessera keeps it, from the bytes a
/// program gave: UTF-8 as it is; each byte of a sequence that is not UTF-8
/// as one escape code point. A UTF-8 name that itself holds an escape code
/// point is refused (EINVAL): it could not be told from an escaped one.
pub fn name_from_bytes(b: &[u8]) -> Result<Cow<'_, str>, MdsError> {
    let mut chunks = b.utf8_chunks().peekable();
    let mut out = String::new();
    while let Some(c) = chunks.next() {
        if has_escape(c.valid()) {
            return Err(err(
                Errno::Inval,
                "the name holds a code point of U+10FE80..U+10FEFF, which Tessera \
                 uses to carry bytes that are not UTF-8",
            ));
        }
        if c.invalid().is_empty() && out.is_empty() && chunks.peek().is_none() {
            // All of it is UTF-8: kept as it is.
            return Ok(Cow::Borrowed(c.valid()));
        }
        out.push_str(c.valid());
        out.extend(
            c.invalid()
                .iter()
                .filter_map(|&byte| char::from_u32(ESCAPE_BASE + u32::from(byte))),
        );
    }
    Ok(Cow::Owned(out))
}

/// Whether `s` holds an escape code point.
fn has_escape(s: &str) -> bool {
    s.chars().any(|c| escaped_byte(c).is_some())
}

/// The bytes a name stands for (the inverse of [`name_from_bytes`]).
pub fn name_to_bytes(name: &str) -> Cow<'_, [u8]> {
    if !has_escape(name) {
        return Cow::Borrowed(name.as_bytes());
    }
    let mut out = Vec::with_capacity(name.len());
    for c in name.chars() {
        match escaped_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// The length in bytes of what a name stands for (each escape code point,
/// four bytes of UTF-8, is one byte).
pub fn raw_len(name: &str) -> usize {
    name.len() - 3 * name.chars().filter(|&c| escaped_byte(c).is_some()).count()
}

/// Whether a name is in the one form [`name_from_bytes`] gives: escape
/// code points only where the bytes are not UTF-8 (so no two names stand
/// for the same bytes).
pub fn canonical(name: &str) -> bool {
    !has_escape(name) || name_from_bytes(&name_to_bytes(name)).is_ok_and(|n| n == name)
}

/// Checks one path component: not empty, not `.`/`..`, no `/` or NUL, at
/// most [`NAME_MAX`] bytes (as the bytes it stands for, see
/// [`name_from_bytes`]), escapes in their one form.
pub fn check_name(name: &str) -> Result<(), MdsError> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(err(
            Errno::Inval,
            format!("invalid name {name:?}: empty, '.' and '..' cannot be entries"),
        ));
    }
    let len = raw_len(name);
    if len > NAME_MAX {
        return Err(err(
            Errno::NameTooLong,
            format!("name of {len} bytes; the limit is {NAME_MAX}"),
        ));
    }
    if !canonical(name) {
        return Err(err(
            Errno::Inval,
            format!("invalid name {name:?}: escapes UTF-8 bytes that need none"),
        ));
    }
    if let Some(c) = name.chars().find(|&c| c == '/' || c == '\0') {
        return Err(err(
            Errno::Inval,
            format!("invalid name {name:?}: contains {c:?}"),
        ));
    }
    Ok(())
}

/// The extended attributes through which Linux programs read and set
/// POSIX ACLs. Tessera does not enforce ACLs, so it refuses them with
/// EOPNOTSUPP (as a local file system mounted `noacl` does): `setfacl`
/// says so, and `cp -a`, `rsync -A` and coreutils' `install` fall back to
/// the permission bits instead of leaving an ACL that nothing applies.
pub const ACL_XATTRS: [&str; 2] = ["system.posix_acl_access", "system.posix_acl_default"];

/// Checks an extended attribute name (POSIX ACLs are refused, see
/// [`ACL_XATTRS`]).
pub fn check_xattr_name(name: &str) -> Result<(), MdsError> {
    if ACL_XATTRS.contains(&name) {
        return Err(err(
            Errno::OpNotSupp,
            format!("{name}: POSIX ACLs are not supported; use the permission bits"),
        ));
    }
    if name.is_empty() || name.len() > XATTR_NAME_MAX || name.contains('\0') {
        return Err(err(
            if name.len() > XATTR_NAME_MAX {
                Errno::Range
            } else {
                Errno::Inval
            },
            format!(
                "xattr name of {} bytes: must be 1..={XATTR_NAME_MAX} without NUL",
                name.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(check_name("ok.txt"), Ok(()));
        for (bad, want) in [
            ("", Errno::Inval),
            (".", Errno::Inval),
            ("..", Errno::Inval),
            ("a/b", Errno::Inval),
            ("a\0", Errno::Inval),
        ] {
            assert_eq!(check_name(bad).unwrap_err().errno, want, "{bad:?}");
        }
        assert_eq!(
            check_name(&"x".repeat(256)).unwrap_err().errno,
            Errno::NameTooLong
        );
        assert!(check_name(&"x".repeat(255)).is_ok());
    }

    #[test]
    fn any_bytes_survive_the_escape_and_only_one_form_is_taken() {
        for b in [
            &b"plain.txt"[..],
            b"caf\xc3\xa9",
            b"latin1 caf\xe9",
            b"\xff\xfe\x80",
            b"trunc \xe2\x82",
            b"mix \xe9 \xc3\xa9 \xf0\x9f\x98\x80 \xc0\xaf",
        ] {
            let n = name_from_bytes(b).unwrap();
            assert_eq!(&*name_to_bytes(&n), b, "{n:?}");
            assert_eq!(raw_len(&n), b.len());
            assert!(canonical(&n));
        }
        let latin = name_from_bytes(&[b'x'; 255]).unwrap();
        assert!(check_name(&latin).is_ok());
        let long = name_from_bytes(&[0xe9; 255]).unwrap();
        assert!(check_name(&long).is_ok(), "255 bytes, 1,020 as escapes");
        let too_long = name_from_bytes(&[0xe9; 256]).unwrap();
        assert_eq!(check_name(&too_long).unwrap_err().errno, Errno::NameTooLong);
        // "é" escaped byte by byte stands for the bytes "é" is: refused,
        // as is a UTF-8 name holding an escape code point itself.
        let forged: String = [0x10_FEC3u32, 0x10_FEA9]
            .iter()
            .filter_map(|&v| char::from_u32(v))
            .collect();
        assert!(!canonical(&forged));
        assert_eq!(check_name(&forged).unwrap_err().errno, Errno::Inval);
        assert!(name_from_bytes(forged.as_bytes()).is_err());
    }

    /// Seeded random byte strings (biased toward bytes ≥ 0x80 and UTF-8
    /// lead bytes): every one comes back unchanged, in canonical form,
    /// with its own length.
    #[test]
    fn random_bytes_round_trip() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let b: Vec<u8> = (0..len)
                .map(|_| match next() % 4 {
                    0 => b'a' + (next() % 26) as u8,
                    1 => 0x80 + (next() % 0x40) as u8,
                    2 => 0xc2 + (next() % 0x33) as u8,
                    _ => next() as u8,
                })
                .collect();
            let Ok(n) = name_from_bytes(&b) else {
                // Only valid UTF-8 holding an escape code point is refused.
                let s = std::str::from_utf8(&b).expect("refused bytes that are not UTF-8");
                assert!(s.chars().any(|c| escaped_byte(c).is_some()));
                continue;
            };
            assert_eq!(&*name_to_bytes(&n), &b[..]);
            assert_eq!(raw_len(&n), b.len());
            assert!(canonical(&n));
        }
    }

    #[test]
    fn acls_are_refused_so_tools_fall_back_to_the_mode() {
        for n in ACL_XATTRS {
            assert_eq!(check_xattr_name(n).unwrap_err().errno, Errno::OpNotSupp);
        }
        assert!(check_xattr_name("system.posix_acl_accessx").is_ok());
        assert!(check_xattr_name("user.mime_type").is_ok());
        assert_eq!(
            check_xattr_name(&"u".repeat(256)).unwrap_err().errno,
            Errno::Range
        );
    }
}
