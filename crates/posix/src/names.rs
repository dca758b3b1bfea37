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

/// Checks an extended attribute name.
pub fn check_xattr_name(name: &str) -> Result<(), MdsError> {
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
}
