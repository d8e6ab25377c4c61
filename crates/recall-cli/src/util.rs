//! Small helpers for the CLI's output.

use std::time::{SystemTime, UNIX_EPOCH};

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no time-zone database needed).
pub fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The CPU's model name (Linux), or the architecture.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `1234567` -> `"1,234,567"`.
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `Err` naming `flags` when `counts` multiplied together, as 4-byte values, would not fit one allocation: the
/// product overflowed (a wrong size in a release build, a panic in a debug one) or `Vec` panicked with "capacity
/// overflow", where a one-line error is due.
pub fn check_size(flags: &str, counts: &[usize]) -> Result<(), String> {
    let bytes = counts.iter().try_fold(4usize, |a, &c| a.checked_mul(c));
    match bytes {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(format!("{flags}: {counts:?} is too large")),
    }
}

pub fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

pub const COMMIT: &str = env!("RECALL_GIT_COMMIT");

/// The longest run a `--seconds`/`--duration` flag may ask for (about 31 years). Longer values do not fit the
/// clock's arithmetic (`Instant + Duration` panics, or `Duration::from_secs_f64` does), and a panic inside the
/// scope of the caller threads left them running: the run hung instead of ending.
pub const MAX_SECONDS: f64 = 1e9;

/// `Err` naming `flag` unless `seconds` is a run length above 0 and at most [`MAX_SECONDS`].
pub fn check_seconds(flag: &str, seconds: f64) -> Result<(), String> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS {
        Ok(())
    } else {
        Err(format!(
            "{flag} {seconds}: expected seconds above 0 and at most {MAX_SECONDS:e}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_000_000), "1,000,000");
    }

    #[test]
    fn date_shape() {
        let d = utc_date();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
