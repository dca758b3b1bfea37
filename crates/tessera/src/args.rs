//! Parsers for command-line values: sizes with units and object ids.

/// Parses a byte size such as `8G`, `512K`, `1.5M`, `4096` (binary units).
/// Exact: a fraction must come to a whole number of bytes (`1.5M` yes,
/// `0.3K` no), and a size past 2^64 - 1 bytes is refused, not clamped.
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let m: u128 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("unknown size unit in '{s}' (use K, M, G or T)")),
            };
            (t[..i].trim(), m)
        }
        None => (t, 1),
    };
    let not_a_size = || format!("'{s}' is not a size (examples: 8G, 512K, 1.5M, 4096)");
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let dotted = num.contains('.');
    if !digits(whole) || (dotted && !digits(frac)) || frac.len() > 18 {
        return Err(not_a_size());
    }
    let too_big = || format!("'{s}' is more than {} bytes", u64::MAX);
    let whole: u128 = whole.parse().map_err(|_| too_big())?;
    let scale = 10u128.pow(frac.len() as u32);
    let frac_part: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| not_a_size())?
    };
    let frac_bytes = frac_part * mult;
    if !frac_bytes.is_multiple_of(scale) {
        return Err(format!(
            "'{s}' is not a whole number of bytes ({} + {frac_bytes}/{scale})",
            whole * mult
        ));
    }
    let total = whole
        .checked_mul(mult)
        .and_then(|b| b.checked_add(frac_bytes / scale))
        .ok_or_else(too_big)?;
    u64::try_from(total).map_err(|_| too_big())
}

/// Parses an object or partition id: decimal or `0x` hex.
pub fn id(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("'{s}' is not an id (decimal, or hex with 0x)"))
}

/// Parses `PAGE:NUMBER` (each decimal or 0x hex).
pub fn attr_key(s: &str) -> Result<(u32, u32), String> {
    let (p, n) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not PAGE:NUMBER (example: 0x10:1)"))?;
    let p = id(p)?;
    let n = id(n)?;
    if p > u64::from(u32::MAX) || n > u64::from(u32::MAX) {
        return Err(format!("'{s}': page and number are 32-bit"));
    }
    Ok((p as u32, n as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ids() {
        assert_eq!(size("8G").unwrap(), 8 << 30);
        assert_eq!(size("512K").unwrap(), 512 << 10);
        assert_eq!(size("1.5M").unwrap(), 3 << 19);
        assert_eq!(size("4096").unwrap(), 4096);
        assert_eq!(size("2GiB").unwrap(), 2 << 30);
        assert!(size("12Q").is_err());
        assert!(size("lots").is_err());
        assert_eq!(id("0x10000").unwrap(), 65536);
        assert_eq!(id("70000").unwrap(), 70000);
        assert!(id("-1").is_err());
        assert_eq!(attr_key("0x10:1").unwrap(), (16, 1));
        assert!(attr_key("16").is_err());
    }

    #[test]
    fn sizes_are_exact_and_never_clamped() {
        assert!(size("99999999T").unwrap_err().contains("more than"));
        assert!(
            size("18446744073709551616")
                .unwrap_err()
                .contains("more than")
        );
        assert_eq!(size("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(size("16777215T").unwrap(), 16_777_215 << 40);
        assert!(size("0.5").unwrap_err().contains("whole number of bytes"));
        assert!(size("0.3K").unwrap_err().contains("whole number of bytes"));
        assert_eq!(size("0.5K").unwrap(), 512);
        assert_eq!(size(" 2 M ").unwrap(), 2 << 20);
        for bad in [
            "", ".", "1.", ".5K", "-1K", "1e3", "inf", "NaN", "1..2K", "+4",
        ] {
            assert!(size(bad).is_err(), "{bad:?} accepted");
        }
    }
}
