//! What a scan keeps of the registry's tags, pure: exclusions, then the latest few.

use crate::policy::goregex;
use crate::store::sort_tags;

/// How many tags `status.lastScanResult.latestTags` shows.
const LATEST: usize = 10;

/// An exclusion pattern Go's `regexp` would refuse; Flux's message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failed to compile regex {pattern}: {cause}")]
pub(crate) struct BadExclusion {
    pattern: String,
    cause: String,
}

/// Drops every tag that any pattern matches (unanchored, as Go's `MatchString`).
pub(crate) fn exclude(tags: Vec<String>, patterns: &[String]) -> Result<Vec<String>, BadExclusion> {
    let compiled = patterns
        .iter()
        .map(|pattern| {
            goregex::compile(pattern).map_err(|cause| BadExclusion {
                pattern: pattern.clone(),
                cause,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(tags
        .into_iter()
        .filter(|tag| !compiled.iter().any(|re| re.is_match(tag)))
        .collect())
}

/// The first tags in descending byte order (not semver: `1.1.0-alpha` before `1.1.0`).
pub(crate) fn latest(tags: &[String]) -> Vec<String> {
    let mut sorted = tags.to_vec();
    sort_tags(&mut sorted);
    sorted.truncate(LATEST);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(tags: &[&str]) -> Vec<String> {
        tags.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn exclusions_drop_any_match() {
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            // Flux's default list drops cosign signatures only.
            (
                &["v1", "sha256-abc.sig", "v1.sig.bak"],
                &[r"^.*\.sig$"],
                &["v1", "v1.sig.bak"],
            ),
            // Unanchored patterns match anywhere.
            (&["v1-rc", "v1", "rc"], &["rc"], &["v1"]),
            (&["a", "b", "c"], &["^a$", "^c$"], &["b"]),
            (&["a", "b"], &[], &["a", "b"]),
        ];
        for (tags, patterns, want) in cases {
            assert_eq!(
                exclude(strings(tags), &strings(patterns)).unwrap(),
                strings(want),
                "{patterns:?}"
            );
        }
    }

    #[test]
    fn a_bad_pattern_is_flux_message() {
        let error = exclude(strings(&["a"]), &strings(&["[="])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "failed to compile regex [=: error parsing regexp: missing closing ]: `[=`"
        );
    }

    #[test]
    fn latest_ten_in_descending_byte_order() {
        // The reference's examples: "1.1.0-alpha" sorts before "1.1.0", "73" before "101".
        assert_eq!(
            latest(&strings(&["1.1.0", "1.1.0-alpha"])),
            strings(&["1.1.0-alpha", "1.1.0"])
        );
        assert_eq!(latest(&strings(&["101", "73"])), strings(&["73", "101"]));
        let many: Vec<String> = (0..15).map(|i| format!("t{i:02}")).collect();
        assert_eq!(
            latest(&many),
            strings(&[
                "t14", "t13", "t12", "t11", "t10", "t09", "t08", "t07", "t06", "t05"
            ])
        );
        assert!(latest(&[]).is_empty());
    }
}
