//! Versions as Masterminds/semver v3 reads them (`NewVersion`, lenient: `v` prefix, missing
//! minor/patch, leading zeros in the core) and as Flux reads image tags on top of that
//! (`fluxcd/pkg/version.ParseVersion`: at least two dots).

use std::cmp::Ordering;

/// Masterminds' limit on a version string.
const MAX_VERSION_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u64,
    pub(crate) minor: u64,
    pub(crate) patch: u64,
    /// Dot-separated prerelease identifiers without the `-`; empty for a release.
    pub(crate) pre: String,
}

/// An image tag as Flux's semver policy reads it, or `None` when the policy skips the tag.
pub(crate) fn parse_tag(tag: &str) -> Option<Version> {
    // `strings.SplitN(v, ".", 3)` must give three parts: `1.2` is skipped, `1.2-rc.1` is not.
    if tag.split('.').count() < 3 {
        return None;
    }
    parse_lenient(tag)
}

/// Masterminds' `NewVersion` (with its default `CoerceNewVersion`): the grammar
/// `v?N(.N)?(.N)?(-ids)?(+ids)?` where a prerelease identifier may not be a number with a
/// leading zero and each core number must fit in a u64.
pub(crate) fn parse_lenient(s: &str) -> Option<Version> {
    if s.len() > MAX_VERSION_LEN {
        return None;
    }
    let rest = s.strip_prefix('v').unwrap_or(s);
    let (core, pre, meta) = split_suffixes(rest)?;
    let mut nums = core.split('.');
    let mut next = |required: bool| match nums.next() {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n.parse::<u64>().ok(),
        None if !required => Some(0),
        _ => None,
    };
    let (major, minor, patch) = (next(true)?, next(false)?, next(false)?);
    if nums.next().is_some() {
        return None;
    }
    if let Some(pre) = pre {
        let ok = identifiers_ok(pre)
            && pre
                .split('.')
                .all(|p| !(p.len() > 1 && p.starts_with('0') && p.bytes().all(|b| b.is_ascii_digit())));
        if !ok {
            return None;
        }
    }
    if meta.is_some_and(|m| !identifiers_ok(m)) {
        return None;
    }
    Some(Version {
        major,
        minor,
        patch,
        pre: pre.unwrap_or_default().to_string(),
    })
}

/// Splits `core[-pre][+meta]`; the prerelease starts at the first `-` before any `+`.
fn split_suffixes(s: &str) -> Option<(&str, Option<&str>, Option<&str>)> {
    let (head, meta) = match s.split_once('+') {
        Some((h, m)) => (h, Some(m)),
        None => (s, None),
    };
    let (core, pre) = match head.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (head, None),
    };
    Some((core, pre, meta))
}

/// Non-empty dot-separated identifiers of `[0-9A-Za-z-]`.
fn identifiers_ok(s: &str) -> bool {
    s.split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

impl Version {
    /// Precedence: the core numerically, then a release above any of its prereleases, then
    /// the prereleases identifier by identifier. Build metadata never counts.
    pub(crate) fn compare(&self, o: &Version) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), o.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => compare_prerelease(&self.pre, &o.pre),
        }
    }
}

/// Identifier by identifier; a missing identifier sorts first. Also used by `!=` with
/// wildcards, where either side may be empty.
pub(crate) fn compare_prerelease(a: &str, b: &str) -> Ordering {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or("");
        let y = b.get(i).copied().unwrap_or("");
        let d = compare_identifier(x, y);
        if d != Ordering::Equal {
            return d;
        }
    }
    Ordering::Equal
}

/// Numbers (that fit in a u64) compare numerically and below words; words compare by bytes,
/// which is why `rc9` is above `rc10`.
fn compare_identifier(s: &str, o: &str) -> Ordering {
    if s == o {
        return Ordering::Equal;
    }
    if s.is_empty() {
        return Ordering::Less;
    }
    if o.is_empty() {
        return Ordering::Greater;
    }
    let number = |x: &str| {
        x.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| x.parse::<u64>().ok())
            .flatten()
    };
    match (number(s), number(o)) {
        (None, None) => s.cmp(o),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        // Equal numbers with different spelling cannot reach here (leading zeros are
        // rejected), and Masterminds calls them "less" anyway.
        (Some(x), Some(y)) if x > y => Ordering::Greater,
        _ => Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u64, minor: u64, patch: u64, pre: &str) -> Option<Version> {
        Some(Version {
            major,
            minor,
            patch,
            pre: pre.to_string(),
        })
    }

    #[test]
    fn lenient_parsing_follows_new_version() {
        let cases: &[(&str, Option<Version>)] = &[
            ("1.2.3", v(1, 2, 3, "")),
            ("v1.2.3", v(1, 2, 3, "")),
            ("1.2", v(1, 2, 0, "")),
            ("1", v(1, 0, 0, "")),
            ("v2", v(2, 0, 0, "")),
            ("01.002.03", v(1, 2, 3, "")),
            ("1.2.3-rc.1+build.5", v(1, 2, 3, "rc.1")),
            ("1.2.3+build-7", v(1, 2, 3, "")),
            ("1.2.3-0abc", v(1, 2, 3, "0abc")),
            ("1.2.3-alpha-beta", v(1, 2, 3, "alpha-beta")),
            ("1.2-rc.1", v(1, 2, 0, "rc.1")),
            ("18446744073709551615.0.0", v(u64::MAX, 0, 0, "")),
            ("18446744073709551616.0.0", None),
            ("1.2.3-beta.01", None),
            ("1.2.3-", None),
            ("1.2.3-a..b", None),
            ("1.2.3+", None),
            ("1.2.3+a_b", None),
            ("1.2.3.4", None),
            ("1..3", None),
            ("V1.2.3", None),
            ("vv1.2.3", None),
            (" 1.2.3", None),
            ("latest", None),
            ("", None),
            ("1.2.x", None),
        ];
        for (input, want) in cases {
            assert_eq!(&parse_lenient(input), want, "{input}");
        }
        assert_eq!(
            parse_lenient(&format!("1.2.3-{}", "a".repeat(251))),
            None,
            "257 bytes"
        );
        assert!(
            parse_lenient(&format!("1.2.3-{}", "a".repeat(250))).is_some(),
            "256 bytes"
        );
    }

    #[test]
    fn tags_need_two_dots() {
        let cases: &[(&str, Option<Version>)] = &[
            ("1.2.3", v(1, 2, 3, "")),
            ("v1.2.3", v(1, 2, 3, "")),
            ("v2025.02.03-rc.1", v(2025, 2, 3, "rc.1")),
            ("1.2", None),
            ("v1", None),
            ("1.2-rc.1", v(1, 2, 0, "rc.1")),
            ("1-rc.1.2", v(1, 0, 0, "rc.1.2")),
            ("latest", None),
            ("main.abc.def", None),
            ("1.2.3.4", None),
        ];
        for (input, want) in cases {
            assert_eq!(&parse_tag(input), want, "{input}");
        }
    }

    #[test]
    fn precedence() {
        // Each list is strictly increasing.
        let chains: &[&[&str]] = &[
            &[
                "1.0.0-alpha",
                "1.0.0-alpha.1",
                "1.0.0-alpha.beta",
                "1.0.0-beta",
                "1.0.0-beta.2",
            ],
            &[
                "1.0.0-beta.2",
                "1.0.0-beta.11",
                "1.0.0-rc.1",
                "1.0.0",
                "1.0.1",
                "1.1.0",
                "2.0.0",
            ],
            // Whole identifiers compare as words: the flux2#4599 surprise.
            &["1.0.0-rc10", "1.0.0-rc9", "1.0.0"],
            &["1.0.0-rc.9", "1.0.0-rc.10"],
            &["1.0.0-1", "1.0.0-2", "1.0.0-10", "1.0.0-a"],
            // Too big for a u64, so a word, which sorts above numbers.
            &["1.0.0-9", "1.0.0-18446744073709551616"],
            &["1.0.0-Z", "1.0.0-a"],
            &["1.9.0", "1.10.0", "10.0.0"],
        ];
        for chain in chains {
            for pair in chain.windows(2) {
                let (a, b) = (parse_lenient(pair[0]).unwrap(), parse_lenient(pair[1]).unwrap());
                assert_eq!(a.compare(&b), Ordering::Less, "{} < {}", pair[0], pair[1]);
                assert_eq!(b.compare(&a), Ordering::Greater, "{} > {}", pair[1], pair[0]);
            }
        }
        let same = [
            ("1.2.3", "v1.2.3"),
            ("1.2.3+a", "1.2.3+b"),
            ("1.2", "1.2.0"),
            ("01.2.3", "1.2.3"),
        ];
        for (a, b) in same {
            assert_eq!(
                parse_lenient(a).unwrap().compare(&parse_lenient(b).unwrap()),
                Ordering::Equal,
                "{a} = {b}"
            );
        }
    }
}
