//! `spec.filterTags`: keep the tags a Go RE2 pattern matches (anywhere in the tag, as Go's
//! `MatchString`), optionally replacing each by `extract` expanded as Go's
//! `Regexp.ExpandString` does. The `regex` crate has RE2's syntax and leftmost-first
//! semantics; a pattern it rejects gets Go's error text where the two agree on the cause.

use std::borrow::Cow;

use regex::Regex;
use regex_syntax::ast::{self, Ast, ErrorKind};

use super::PolicyError;

/// Go's limit on a `{n,m}` count.
const MAX_REPEAT: u32 = 1000;

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

fn compile(pattern: &str) -> Result<Regex, String> {
    let pattern = literal_braces(pattern);
    go_syntax_check(&pattern)?;
    Regex::new(&pattern).map_err(|e| match e {
        regex::Error::CompiledTooBig(_) => go_error("expression too large", &pattern),
        other => other.to_string(),
    })
}

/// Go reads a `{` that does not open `{n}`, `{n,}` or `{n,m}` as a literal (`a{`, `{,3}`);
/// the `regex` crate rejects it, so it is escaped first.
fn literal_braces(pattern: &str) -> Cow<'_, str> {
    let repeat = |s: &str| {
        let Some(body) = s
            .strip_prefix('{')
            .and_then(|b| b.split_once('}'))
            .map(|(b, _)| b)
        else {
            return false;
        };
        let (min, max) = body.split_once(',').unwrap_or((body, "0"));
        let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        !min.is_empty() && digits(min) && digits(max)
    };
    let mut out = String::new();
    // `escaping`: the previous character is an escaping `\`; `braced`: `{` belongs to the
    // escape before it (`\p{Greek}`, `\x{41}`) or is escaped itself.
    let (mut escaping, mut braced) = (false, false);
    for (i, c) in pattern.char_indices() {
        if c == '{' && !braced && !repeat(&pattern[i..]) {
            out.push('\\');
        }
        braced = escaping && matches!(c, 'p' | 'P' | 'x');
        escaping = c == '\\' && !escaping;
        braced |= escaping;
        out.push(c);
    }
    if out.len() == pattern.len() {
        Cow::Borrowed(pattern)
    } else {
        Cow::Owned(out)
    }
}

fn go_error(code: &str, expr: &str) -> String {
    format!("error parsing regexp: {code}: `{expr}`")
}

/// Parses with regex-syntax to name the error as Go would, and rejects what Go rejects
/// but the `regex` crate accepts: counts over 1000, a repetition of a repetition and
/// group names with `.`, `[` or `]`.
fn go_syntax_check(pattern: &str) -> Result<(), String> {
    let ast = ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| go_parse_error(pattern, &e))?;
    check_go_rules(pattern, &ast)
}

fn go_parse_error(pattern: &str, e: &ast::Error) -> String {
    let span = e.span();
    let text = &pattern[span.start.offset..span.end.offset.max(span.start.offset)];
    let from_start = &pattern[span.start.offset..];
    match e.kind() {
        ErrorKind::GroupUnclosed => go_error("missing closing )", pattern),
        ErrorKind::GroupUnopened => go_error("unexpected )", pattern),
        ErrorKind::ClassUnclosed => go_error("missing closing ]", from_start),
        ErrorKind::RepetitionMissing => {
            go_error("missing argument to repetition operator", repeat_op(from_start))
        }
        ErrorKind::RepetitionCountInvalid => go_error("invalid repeat count", text),
        ErrorKind::EscapeUnexpectedEof => go_error("trailing backslash at end of expression", ""),
        ErrorKind::EscapeUnrecognized | ErrorKind::UnsupportedBackreference => {
            go_error("invalid escape sequence", text)
        }
        ErrorKind::ClassRangeInvalid => go_error("invalid character class range", text),
        // `[a-\d]`: Go objects to the escape.
        ErrorKind::ClassRangeLiteral => go_error("invalid escape sequence", text),
        ErrorKind::GroupNameEmpty | ErrorKind::GroupNameInvalid | ErrorKind::GroupNameUnexpectedEof => {
            let open = pattern[..span.start.offset].rfind("(?").unwrap_or(0);
            named_capture_error(&pattern[open..])
        }
        // Go reads `(?<=` and `(?<!` as a badly named group.
        ErrorKind::UnsupportedLookAround if from_start.starts_with("(?<") => named_capture_error(from_start),
        ErrorKind::UnsupportedLookAround => go_error("invalid or unsupported Perl syntax", text),
        // Go quotes from the group's `(?` through the bad flag.
        ErrorKind::FlagUnrecognized => {
            let open = pattern[..span.start.offset].rfind("(?").unwrap_or(0);
            go_error(
                "invalid or unsupported Perl syntax",
                &pattern[open..span.end.offset],
            )
        }
        ErrorKind::NestLimitExceeded(_) => go_error("expression nests too deeply", pattern),
        _ => e.to_string(),
    }
}

/// Go quotes a named group from `(?` through `>`, or to the end when there is no `>`.
fn named_capture_error(group: &str) -> String {
    go_error(
        "invalid named capture",
        group.find('>').map_or(group, |i| &group[..=i]),
    )
}

/// The repetition operator at the start of `s` as Go quotes it: `*`, `+?`, `{2,3}`.
fn repeat_op(s: &str) -> &str {
    let len = match s.as_bytes().first() {
        Some(b'{') => s.find('}').map_or(s.len(), |i| i + 1),
        Some(_) => 1,
        None => 0,
    };
    let lazy = usize::from(s[len..].starts_with('?'));
    &s[..len + lazy]
}

fn check_go_rules(pattern: &str, node: &Ast) -> Result<(), String> {
    match node {
        Ast::Repetition(rep) => {
            if let ast::RepetitionKind::Range(range) = &rep.op.kind {
                let (min, max) = match *range {
                    ast::RepetitionRange::Exactly(n) | ast::RepetitionRange::AtLeast(n) => (n, n),
                    ast::RepetitionRange::Bounded(m, n) => (m, n),
                };
                if min.max(max) > MAX_REPEAT {
                    let op = &pattern[rep.op.span.start.offset..rep.op.span.end.offset];
                    return Err(go_error("invalid repeat count", op));
                }
            }
            if let Ast::Repetition(inner) = &*rep.ast {
                let ops = &pattern[inner.op.span.start.offset..rep.op.span.end.offset];
                return Err(go_error("invalid nested repetition operator", ops));
            }
            check_go_rules(pattern, &rep.ast)
        }
        Ast::Group(group) => {
            // Go allows only letters, digits and `_` in a name; the crate also `.[]`.
            if let ast::GroupKind::CaptureName { name, .. } = &group.kind
                && !name.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(named_capture_error(&pattern[group.span.start.offset..]));
            }
            check_go_rules(pattern, &group.ast)
        }
        Ast::Alternation(alt) => alt.asts.iter().try_for_each(|a| check_go_rules(pattern, a)),
        Ast::Concat(concat) => concat.asts.iter().try_for_each(|a| check_go_rules(pattern, a)),
        _ => Ok(()),
    }
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

    #[test]
    fn invalid_patterns_get_go_texts() {
        let cases: &[(&str, &str)] = &[
            ("(abc", "error parsing regexp: missing closing ): `(abc`"),
            ("abc)", "error parsing regexp: unexpected ): `abc)`"),
            ("a[bc", "error parsing regexp: missing closing ]: `[bc`"),
            (
                "*a",
                "error parsing regexp: missing argument to repetition operator: `*`",
            ),
            (
                "a**",
                "error parsing regexp: invalid nested repetition operator: `**`",
            ),
            ("a{1001}", "error parsing regexp: invalid repeat count: `{1001}`"),
            ("a{2,1}", "error parsing regexp: invalid repeat count: `{2,1}`"),
            (r"\q", "error parsing regexp: invalid escape sequence: `\\q`"),
            (r"(a)\1", "error parsing regexp: invalid escape sequence: `\\1`"),
            (
                "a\\",
                "error parsing regexp: trailing backslash at end of expression: ``",
            ),
            (
                "[z-a]",
                "error parsing regexp: invalid character class range: `z-a`",
            ),
            (
                "(?P<a-b>x)",
                "error parsing regexp: invalid named capture: `(?P<a-b>`",
            ),
            ("a(?<>x)", "error parsing regexp: invalid named capture: `(?<>`"),
            (
                "(?P<name",
                "error parsing regexp: invalid named capture: `(?P<name`",
            ),
            ("(?<=a)", "error parsing regexp: invalid named capture: `(?<=a)`"),
            (
                "(?=a)",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
            ),
            (
                "(?i-z)",
                "error parsing regexp: invalid or unsupported Perl syntax: `(?i-z`",
            ),
            (
                "a+*?",
                "error parsing regexp: invalid nested repetition operator: `+*?`",
            ),
            (
                "a|?",
                "error parsing regexp: missing argument to repetition operator: `?`",
            ),
            (
                "(a|{2}?)",
                "error parsing regexp: missing argument to repetition operator: `{2}?`",
            ),
            (r"[a-\d]", "error parsing regexp: invalid escape sequence: `\\d`"),
        ];
        for (pattern, want) in cases {
            assert_eq!(compile(pattern).unwrap_err(), *want, "pattern {pattern:?}");
        }
    }
}
