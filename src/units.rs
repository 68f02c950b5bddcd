//! Counts as users write them, for every layer that reads user input (flags, sweep
//! axes, chart fields): `4096`, `4k`, `1m`.

/// Parse a count with an optional binary suffix: `4096`, `4k` (= 4096), `1m`.
pub fn parse_count(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1i64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1i64 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1i64 << 30),
        _ => (t, 1),
    };
    let n: i64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a count (e.g. 4096 or 4k)"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("4k"), Ok(4096));
        assert_eq!(parse_count("32"), Ok(32));
        assert_eq!(parse_count("1M"), Ok(1 << 20));
        assert!(parse_count("4q").is_err());
        assert!(parse_count("9999999999999g").is_err());
    }
}
