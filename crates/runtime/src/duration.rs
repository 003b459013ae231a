//! Go `time.Duration` strings, as Flux writes them in specs and messages.
//!
//! Specs accept the subset the CRD pattern allows (`ms`, `s`, `m`, `h`, decimals); messages print
//! durations the way Go's `Duration.String()` does (`4m30s`, `1h0m0s`, `1.5s`) so that users'
//! alerts matching Flux's text keep working.

use std::time::Duration;

/// The CRD validation pattern for every duration field.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Parses a duration in the CRD's grammar. `None` for anything else (including the empty string).
pub fn parse(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty()
            || number.starts_with('.')
            || number.ends_with('.')
            || number.matches('.').count() > 1
        {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let (unit_seconds, unit_len) = if tail.starts_with("ms") {
            (0.001, 2)
        } else if tail.starts_with('s') {
            (1.0, 1)
        } else if tail.starts_with('m') {
            (60.0, 1)
        } else if tail.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += value * unit_seconds;
        rest = &tail[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

/// Formats like Go's `time.Duration.String()`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        // Sub-second values use the largest fitting unit, as Go does.
        let (unit, scale) = if nanos < 1_000 {
            ("ns", 1u128)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", trim_fraction(nanos, scale));
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = (nanos / 60_000_000_000) % 60;
    let seconds = trim_fraction(nanos % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / scale` as a decimal without trailing zeros (Go prints `1.5s`, never `1.500s`).
fn trim_fraction(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = scale.to_string().len() - 1;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_crd_grammar() {
        assert_eq!(parse("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "10x", "10", "1d", "m", ".5s", "1..5s", "-1s", "1s "] {
            assert_eq!(parse(bad), None, "{bad:?} must be rejected");
        }
    }

    #[test]
    fn formats_like_go() {
        // Expected strings are what Go's time.Duration.String() prints for these values.
        assert_eq!(format(Duration::from_secs(270)), "4m30s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format(Duration::from_secs(30)), "30s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(5)), "5ms");
        assert_eq!(format(Duration::from_nanos(5_012_345_678)), "5.012345678s");
        assert_eq!(format(Duration::ZERO), "0s");
    }
}
