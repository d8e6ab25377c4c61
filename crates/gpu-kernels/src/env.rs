//! Settings read from the environment: a bad value is logged and the default used.

/// The two-way setting `name`: `false` for `off`, `true` for `on`, unset or empty; any other value is logged and
/// means `true`.
pub(crate) fn env_switch(name: &str, on: &str, off: &str) -> bool {
    switch_value(name, std::env::var(name).ok().as_deref(), on, off)
}

/// [`env_switch`] for a value of `name` (`None`: unset).
fn switch_value(name: &str, value: Option<&str>, on: &str, off: &str) -> bool {
    match value.map(str::trim) {
        Some(v) if v == off => false,
        None => true,
        Some(v) if v == on || v.is_empty() => true,
        Some(v) => {
            tracing::warn!(value = %v, "{name}: expected {on} or {off}; using {on}");
            true
        }
    }
}

/// A number from `range` in the environment variable `name`, if set (a bad value is logged and ignored).
pub(crate) fn env_number(name: &str, range: std::ops::RangeInclusive<u32>) -> Option<u32> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<u32>() {
        Ok(w) if range.contains(&w) => Some(w),
        _ => {
            tracing::warn!(value = %v, "{name}: not a number from {} to {}; ignored", range.start(), range.end());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::switch_value;

    #[test]
    fn switches_read_off_on_unset_and_default_the_rest_to_on() {
        let s = |v| switch_value("X", v, "spin", "sync");
        assert!(!s(Some("sync")));
        assert!(!s(Some(" sync ")));
        assert!(s(Some("spin")));
        assert!(s(Some("")));
        assert!(s(None));
        assert!(s(Some("bogus")));
    }
}
