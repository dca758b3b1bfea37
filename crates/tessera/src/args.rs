//! Parsers for command-line values: sizes with units and object ids.

/// Parses a byte size such as `8G`, `512K`, `256M`, `4096` (binary units).
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let m: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("unknown size unit in '{s}' (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 8G, 512K, 4096)"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("'{s}' is not a size"));
    }
    Ok((n * mult as f64) as u64)
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
}
