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

/// The setting `name` among `choices`, the first the default: the index of its value; unset or empty means 0,
/// any other value is logged and means 0.
pub(crate) fn env_choice(name: &str, choices: &[&str]) -> usize {
    choice_value(name, std::env::var(name).ok().as_deref(), choices)
}

/// [`env_choice`] for a value of `name` (`None`: unset).
pub(crate) fn choice_value(name: &str, value: Option<&str>, choices: &[&str]) -> usize {
    match value.map(str::trim) {
        None | Some("") => 0,
        Some(v) => choices.iter().position(|c| *c == v).unwrap_or_else(|| {
            tracing::warn!(value = %v, "{name}: expected one of {}; using {}", choices.join(", "), choices[0]);
            0
        }),
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
    use super::{choice_value, switch_value};

    #[test]
    fn choices_read_their_index_and_default_the_rest_to_the_first() {
        let c = |v| choice_value("X", v, &["auto", "host", "device"]);
        assert_eq!(c(Some(" host ")), 1);
        assert_eq!(c(Some("device")), 2);
        assert_eq!(c(Some("auto")), 0);
        assert_eq!(c(Some("")), 0);
        assert_eq!(c(None), 0);
        assert_eq!(c(Some("bogus")), 0);
    }

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
