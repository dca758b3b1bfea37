//! Name checks: path components and extended-attribute names.

use proto::mds::{Errno, MdsError, NAME_MAX, XATTR_NAME_MAX};

fn err(e: Errno, m: impl Into<String>) -> MdsError {
    MdsError::new(e, m)
}

/// Checks one path component: not empty, not `.`/`..`, no `/` or NUL, at
/// most [`NAME_MAX`] bytes.
pub fn check_name(name: &str) -> Result<(), MdsError> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(err(
            Errno::Inval,
            format!("invalid name {name:?}: empty, '.' and '..' cannot be entries"),
        ));
    }
    if name.len() > NAME_MAX {
        return Err(err(
            Errno::NameTooLong,
            format!("name of {} bytes; the limit is {NAME_MAX}", name.len()),
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
