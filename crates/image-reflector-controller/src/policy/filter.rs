//! `spec.filterTags`: keep the tags a Go RE2 pattern matches (anywhere in the tag, as Go's
//! `MatchString`), optionally replacing each by `extract` expanded as Go's
//! `Regexp.ExpandString` does. The pattern is compiled as Go would (see `goregex`).

use regex::Regex;

use super::PolicyError;
use super::goregex::compile;

#[derive(Debug, Clone)]
pub struct TagFilter {
    regex: Regex,
    extract: String,
}

impl TagFilter {
    /// `spec.filterTags`; the error's reason is Go's `regexp.Compile` text
    /// (`error parsing regexp: <code>: `<expr>``).
    pub fn new(pattern: &str, extract: &str) -> Result<TagFilter, PolicyError> {
        let regex = compile(pattern).map_err(|reason| PolicyError::InvalidFilter {
            pattern: pattern.to_string(),
            reason,
        })?;
        Ok(TagFilter {
            regex,
            extract: extract.to_string(),
        })
    }

    /// The kept tags as (key, original tag) in the order of their first key. Flux keeps a
    /// map, so a key seen twice maps to the later tag; its order is random, ours is not.
    pub(crate) fn apply<'a>(&self, tags: &[&'a str]) -> Vec<(String, &'a str)> {
        let mut kept: Vec<(String, &'a str)> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for &tag in tags {
            let Some(caps) = self.regex.captures(tag) else {
                continue;
            };
            let key = if self.extract.is_empty() {
                tag.to_string()
            } else {
                self.expand(&caps)
            };
            match index.get(&key) {
                Some(&i) => kept[i] = (key, tag),
                None => {
                    index.insert(key.clone(), kept.len());
                    kept.push((key, tag));
                }
            }
        }
        kept
    }

    /// `Regexp.ExpandString`: `$$` is `$`; `$name` takes the longest run of letters, digits
    /// and `_`; `${name}` is braced; an all-digit name without a leading zero is a group
    /// number; an unknown or unmatched group is empty; a malformed `$` stays as it is.
    fn expand(&self, caps: &regex::Captures<'_>) -> String {
        let mut out = String::new();
        let mut rest = self.extract.as_str();
        while let Some((before, after)) = rest.split_once('$') {
            out.push_str(before);
            rest = after;
            if let Some(after) = rest.strip_prefix('$') {
                out.push('$');
                rest = after;
                continue;
            }
            let Some((name, after)) = template_name(rest) else {
                out.push('$');
                continue;
            };
            rest = after;
            let group = match group_number(name) {
                Some(n) => caps.get(n),
                None => caps.name(name),
            };
            out.push_str(group.map_or("", |m| m.as_str()));
        }
        out.push_str(rest);
        out
    }
}

/// The name after a `$` and the text after it, or `None` when there is no valid name.
fn template_name(s: &str) -> Option<(&str, &str)> {
    let (braced, body) = match s.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, s),
    };
    // Go's unicode.IsLetter / IsDigit, approximated by Rust's alphabetic / numeric.
    let len = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if len == 0 {
        return None;
    }
    let (name, after) = body.split_at(len);
    if braced {
        return after.strip_prefix('}').map(|after| (name, after));
    }
    Some((name, after))
}

/// Go reads a name as a group number when it is ASCII digits with no leading zero.
fn group_number(name: &str) -> Option<usize> {
    let digits = name.bytes().all(|b| b.is_ascii_digit());
    if !digits || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    // Go gives up past 1e8, which no pattern has groups for.
    name.parse().ok().filter(|&n| n <= 100_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pattern: &str, extract: &str, tags: &[&'static str]) -> Vec<(String, &'static str)> {
        TagFilter::new(pattern, extract).unwrap().apply(tags)
    }

    fn pairs(list: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        list.iter().map(|(k, t)| (k.to_string(), *t)).collect()
    }

    #[test]
    fn pattern_is_unanchored() {
        let tags = ["main-1", "release-main-2", "dev-3", "MAIN-4"];
        assert_eq!(
            keys("main", "", &tags),
            pairs(&[("main-1", "main-1"), ("release-main-2", "release-main-2")])
        );
        assert_eq!(keys("^main", "", &tags), pairs(&[("main-1", "main-1")]));
        assert_eq!(
            keys("(?i)^main", "", &tags),
            pairs(&[("main-1", "main-1"), ("MAIN-4", "MAIN-4")])
        );
        assert_eq!(
            keys("", "", &["a", "b"]).len(),
            2,
            "the empty pattern keeps everything"
        );
    }

    #[test]
    fn extract_expands_like_go() {
        let p = r"^main-(?P<sha>[a-f0-9]+)-(?P<ts>[0-9]+)$";
        let tag = ["main-845d3a80-1612345678"];
        let cases: &[(&str, &str)] = &[
            ("$ts", "1612345678"),
            ("${ts}", "1612345678"),
            ("$2", "1612345678"),
            ("${1}-${2}", "845d3a80-1612345678"),
            ("$0", "main-845d3a80-1612345678"),
            // `$ts_x` names the group `ts_x`, which does not exist.
            ("$ts_x", ""),
            ("${ts}_x", "1612345678_x"),
            ("$1x", ""),
            // A leading zero makes it a name, not group 1.
            ("$01", ""),
            ("$$ts", "$ts"),
            ("cost: $", "cost: $"),
            ("$-", "$-"),
            ("${ts", "${ts"),
            ("${}", "${}"),
            ("$9", ""),
            ("v$sha.$ts", "v845d3a80.1612345678"),
        ];
        for (extract, want) in cases {
            assert_eq!(
                keys(p, extract, &tag),
                pairs(&[(want, tag[0])]),
                "extract {extract:?}"
            );
        }
        // A group that did not take part is empty.
        assert_eq!(keys("^(a)?b$", "[$1]", &["b"]), pairs(&[("[]", "b")]));
    }

    #[test]
    fn equal_keys_keep_the_later_tag() {
        let got = keys(r"^(\d+)-", "$1", &["1-a", "2-a", "1-b"]);
        assert_eq!(got, pairs(&[("1", "1-b"), ("2", "2-a")]));
    }

    #[test]
    fn unopened_braces_are_literals() {
        let cases = [
            ("a{", "a{", "a{"),
            ("x{,3}", "x{,3}", "x{,3}"),
            ("a{2}{,1}", "aa{,1}", "aa{,1}"),
        ];
        for (pattern, tag, want) in cases {
            assert_eq!(keys(pattern, "$0", &[tag]), pairs(&[(want, tag)]), "{pattern:?}");
        }
        assert!(keys("a{", "", &["ab"]).is_empty());
    }
}
