//! Counts and sizes as users write them, for every layer that reads user input (flags,
//! sweep axes, chart fields, Python arguments): `4096`, `4k`, `1m`; `64KiB`, `1.5MB`.

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

/// Parse one size: `4096`, `4K`, `4KiB`, `1.5MB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mul: f64 = match unit.trim() {
        "" | "B" | "b" => 1.0,
        "K" | "k" | "KiB" | "kiB" => 1024.0,
        "M" | "m" | "MiB" => 1024.0 * 1024.0,
        "G" | "g" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TiB" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 4096, 64KiB, 1GiB)"))?;
    let bytes = v * mul;
    if !bytes.is_finite() || bytes > (1u64 << 60) as f64 {
        return Err(format!("`{s}` is larger than 2^60 bytes"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("`{s}` is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Sizes as nccl-tests takes them: `MIN:MAX` (MIN, MIN·factor, … up to MAX) or a
/// comma-separated list.
pub fn parse_sizes(s: &str, factor: u64) -> Result<Vec<u64>, String> {
    if let Some((a, b)) = s.split_once(':') {
        let (lo, hi) = (parse_size(a)?, parse_size(b)?);
        if factor < 2 {
            return Err(format!("--factor must be at least 2, got {factor}"));
        }
        if lo == 0 || lo > hi {
            return Err(format!(
                "`{s}`: a range needs 0 < MIN ≤ MAX (got {lo} and {hi} bytes)"
            ));
        }
        let mut out = vec![lo];
        while let Some(next) = out.last().and_then(|x| x.checked_mul(factor)) {
            if next > hi {
                break;
            }
            out.push(next);
        }
        Ok(out)
    } else {
        s.split(',').map(parse_size).collect()
    }
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

    #[test]
    fn sizes_parse_like_nccl_tests() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1.5KB"), Ok(1500));
        assert!(parse_size("1XB").is_err());
        assert!(parse_size("0.5").is_err());
        assert!(parse_size("2048GiB").is_ok());
        assert!(parse_size("9999999TiB").is_err());
        assert_eq!(
            parse_sizes("1KiB:8KiB", 2),
            Ok(vec![1024, 2048, 4096, 8192])
        );
        assert_eq!(parse_sizes("1K,3K", 2), Ok(vec![1024, 3072]));
        assert!(parse_sizes("8K:1K", 2).is_err());
        assert!(parse_sizes("1K:8K", 1).is_err());
    }
}
