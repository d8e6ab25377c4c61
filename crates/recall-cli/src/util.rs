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

pub fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

pub const COMMIT: &str = env!("RECALL_GIT_COMMIT");

/// Plain numbers that `.npy` files hold, with their NumPy type strings.
pub trait NpyScalar: Copy {
    const DESCR: &'static str;
    fn write_le(self, out: &mut Vec<u8>);
}

impl NpyScalar for f32 {
    const DESCR: &'static str = "<f4";
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl NpyScalar for u32 {
    const DESCR: &'static str = "<u4";
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl NpyScalar for u64 {
    const DESCR: &'static str = "<u8";
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// Write a one-dimensional `.npy` file (format 1.0) that NumPy reads as it is.
pub fn write_npy<T: NpyScalar>(path: &str, values: &[T]) -> Result<(), String> {
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}",
        T::DESCR,
        values.len()
    );
    // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in \n.
    let unpadded = 10 + dict.len() + 1;
    let header = format!(
        "{dict}{}\n",
        " ".repeat(unpadded.next_multiple_of(64) - unpadded)
    );
    let mut out = Vec::with_capacity(10 + header.len() + std::mem::size_of_val(values));
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        v.write_le(&mut out);
    }
    std::fs::write(path, out).map_err(|e| format!("{path}: {e}"))
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
    fn npy_files_have_numpys_layout() {
        let path = std::env::temp_dir().join(format!("recall-npy-{}.npy", std::process::id()));
        let p = path.to_string_lossy().into_owned();
        write_npy(&p, &[1.5f32, -2.0]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!(
            (10 + header_len) % 64,
            0,
            "data starts on a 64-byte boundary"
        );
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(
            header.contains("'descr': '<f4'")
                && header.contains("'shape': (2,)")
                && header.ends_with('\n')
        );
        assert_eq!(
            &bytes[10 + header_len..],
            &[1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat()[..]
        );
    }

    #[test]
    fn date_shape() {
        let d = utc_date();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
