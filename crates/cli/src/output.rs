//! Formatting for people: byte sizes and counts the way `ceph -s` prints them.

/// `1.5 KiB`, `12 MiB`, `0 B`.
pub fn bytes(count: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `999`, `1.00k`, `12.3M`.
pub fn count(value: u64) -> String {
    match value {
        0..=999 => value.to_string(),
        1_000..=999_999 => format!("{:.2}k", value as f64 / 1e3),
        _ => format!("{:.2}M", value as f64 / 1e6),
    }
}

/// Nanoseconds since the epoch as a UTC timestamp (`2026-11-21T23:59:01.123Z`).
pub fn timestamp(ns: u64) -> String {
    let seconds = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1000;
    let days = seconds / 86_400;
    let (h, m, s) = (seconds % 86_400 / 3600, seconds % 3600 / 60, seconds % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_sizes_and_times() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(200 * 1024 * 1024), "200 MiB");
        assert_eq!(count(1234), "1.23k");
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            timestamp(1_700_000_000_123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
    }
}
