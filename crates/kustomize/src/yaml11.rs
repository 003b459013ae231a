//! Plain scalars that a YAML 1.1 reader (goyaml v2, which prints kustomize's output and
//! reads it back after Flux's substitution) takes for something other than a string, beyond
//! the booleans, nulls and numbers the printer already quotes: timestamps with short date
//! fields or a time of day, and base-60 numbers (`1:20`).

use std::sync::LazyLock;

use regex::Regex;

/// goyaml v2's base-60 float form.
static BASE60: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$").expect("valid"));

/// goyaml v2's timestamp forms: `2006-1-2`, then optionally `T`/`t` and a time with a `Z` or
/// `±hh:mm` zone, or a space and a time without zone.
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"^[0-9]{4}-([0-9]{1,2})-([0-9]{1,2})",
        r"(?:[Tt][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})",
        r"| [0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]+)?)?$"
    ))
    .expect("valid")
});

/// Whether goyaml v2 reads the plain scalar `s` as a timestamp or a base-60 number.
pub(crate) fn reads_as_other(s: &str) -> bool {
    let first = s.as_bytes().first().copied().unwrap_or(b' ');
    if !(first.is_ascii_digit() || first == b'-' || first == b'+') {
        return false;
    }
    if s.contains(':') && BASE60.is_match(s) {
        return true;
    }
    TIMESTAMP.captures(s).is_some_and(|c| {
        let field = |i: usize| c[i].parse::<u32>().unwrap_or(0);
        (1..=12).contains(&field(1)) && (1..=31).contains(&field(2))
    })
}

#[cfg(test)]
mod tests {
    use super::reads_as_other;

    #[test]
    fn timestamps_and_base60_numbers_read_as_other_types() {
        for s in [
            "2024-01-01T10:00:00Z",
            "2024-1-1",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43",
            "1:20",
            "190:20:30",
        ] {
            assert!(reads_as_other(s), "{s}");
        }
        for s in [
            "2024-13-01",
            "1:60",
            "v1:20",
            "12:30pm",
            "2024-01-01T10:00",
            "a=b",
        ] {
            assert!(!reads_as_other(s), "{s}");
        }
    }
}
