//! The shell patterns of `${v#p}`, `${v##p}`, `${v%p}` and `${v%%p}`, as envsubst's own
//! `path.Match` reads them: `*` and `?` (both also match `/`), `[...]` classes with ranges
//! and `^`, `\` escapes; a malformed pattern matches nothing.
//!
//! envsubst tries the pattern on every prefix (or suffix) of the value in turn, which is
//! quadratic in the value. Here the pattern is split at its stars into segments of
//! one-character elements, and every prefix is decided in one pass: the first segment must
//! match at the start, the middle ones are placed leftmost (which leaves the most room, so
//! it fits whenever any placement does), and the ends of the last segment's matches after
//! them are the matching prefixes. A segment of plain characters is found with the standard
//! library's linear substring search; one with `?` or a class is tried at each position
//! its first element matches, which may be quadratic and is charged, step by step, to the
//! caller's allowance.

/// Steps for each character decoded on its own (to be tested, or reversed) or match found:
/// several times what a byte costs to a substring search, which reads memory at full speed.
pub(super) const CHAR_COST: usize = 4;

/// The allowance given to a trim ran out.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct OutOfSteps;

fn spend(steps: &mut usize, n: usize) -> Result<(), OutOfSteps> {
    *steps = steps.checked_sub(n).ok_or(OutOfSteps)?;
    Ok(())
}

/// `value` without its shortest (or, `longest`, its longest) non-empty prefix that matches
/// `pattern`; the value itself when none does.
pub(super) fn trim_prefix<'v>(
    value: &'v str,
    pattern: &str,
    longest: bool,
    steps: &mut usize,
) -> Result<&'v str, OutOfSteps> {
    let Some(pattern) = Pattern::parse(pattern) else {
        return Ok(value);
    };
    let end = pattern.prefix_end(value, longest, steps)?;
    Ok(end.map_or(value, |end| &value[end..]))
}

/// `value` without its shortest (or longest) non-empty suffix that matches `pattern`: the
/// prefix rule on the value and the pattern reversed.
pub(super) fn trim_suffix<'v>(
    value: &'v str,
    pattern: &str,
    longest: bool,
    steps: &mut usize,
) -> Result<&'v str, OutOfSteps> {
    let Some(pattern) = Pattern::parse(pattern) else {
        return Ok(value);
    };
    spend(steps, value.len().saturating_mul(CHAR_COST))?;
    let reversed: String = value.chars().rev().collect();
    // A reversed prefix of `len` bytes is a suffix of as many bytes, in whole characters.
    let len = pattern.reversed().prefix_end(&reversed, longest, steps)?;
    Ok(len.map_or(value, |len| &value[..value.len() - len]))
}

/// One element that matches exactly one character.
#[derive(Clone, Debug, PartialEq)]
enum One {
    Any,
    Char(char),
    /// `[...]`, `[^...]`: single characters are ranges of one.
    Class {
        negate: bool,
        ranges: Vec<(char, char)>,
    },
}

impl One {
    fn matches(&self, c: char) -> bool {
        match self {
            One::Any => true,
            One::Char(x) => *x == c,
            One::Class { negate, ranges } => ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negate,
        }
    }

    /// Steps one test costs: a class is as long as its ranges.
    fn cost(&self) -> usize {
        CHAR_COST.saturating_mul(match self {
            One::Class { ranges, .. } => ranges.len().max(1),
            _ => 1,
        })
    }
}

/// The elements between two stars, or between a star and an end of the pattern.
#[derive(Debug, Default, PartialEq)]
struct Segment(Vec<One>);

impl Segment {
    /// The text the segment matches when it holds only plain characters.
    fn literal(&self) -> Option<String> {
        self.0
            .iter()
            .map(|one| match one {
                One::Char(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// Where the segment ends when it matches `value` from byte `start`.
    fn match_at(&self, value: &str, start: usize, steps: &mut usize) -> Result<Option<usize>, OutOfSteps> {
        let mut chars = value[start..].char_indices();
        for one in &self.0 {
            spend(steps, one.cost())?;
            match chars.next() {
                Some((_, c)) if one.matches(c) => {}
                _ => return Ok(None),
            }
        }
        Ok(Some(chars.offset() + start))
    }

    /// The first match starting at or after byte `from` (or, `last`, the last one): its
    /// start and end.
    fn find(
        &self,
        value: &str,
        from: usize,
        last: bool,
        steps: &mut usize,
    ) -> Result<Option<(usize, usize)>, OutOfSteps> {
        let rest = &value[from..];
        if let Some(text) = self.literal() {
            // Linear searches: charged as one step per byte of the value they may read.
            spend(steps, rest.len() + text.len())?;
            let at = if last { rest.rfind(&text) } else { rest.find(&text) };
            return Ok(at.map(|i| (from + i, from + i + text.len())));
        }
        // The first element is tested at every position in one pass, the whole segment only
        // where it matched.
        let first = &self.0[0];
        spend(steps, rest.len().saturating_mul(first.cost()))?;
        let starts = rest
            .char_indices()
            .filter(|&(_, c)| first.matches(c))
            .map(|(i, _)| from + i);
        let mut try_at = |start: usize| Ok(self.match_at(value, start, steps)?.map(|end| (start, end)));
        if last {
            for start in starts.rev() {
                if let Some(found) = try_at(start)? {
                    return Ok(Some(found));
                }
            }
        } else {
            for start in starts {
                if let Some(found) = try_at(start)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }
}

/// A pattern as segments: one more than it has (runs of) stars.
#[derive(Debug, PartialEq)]
struct Pattern(Vec<Segment>);

impl Pattern {
    /// `None` for a malformed pattern: a `[` with no `]` after its first member, or a
    /// trailing `\`.
    fn parse(pattern: &str) -> Option<Pattern> {
        let p: Vec<char> = pattern.chars().collect();
        let mut segments = vec![Segment::default()];
        let mut i = 0;
        while i < p.len() {
            let current = segments.last_mut().expect("never empty");
            let (one, next) = match p[i] {
                '*' => {
                    // A run of stars is one star.
                    if !(current.0.is_empty() && segments.len() > 1) {
                        segments.push(Segment::default());
                    }
                    i += 1;
                    continue;
                }
                '?' => (One::Any, i + 1),
                '[' => {
                    let close = p.iter().skip(i + 2).position(|&c| c == ']')? + i + 2;
                    let (negate, members) = match p[i + 1] {
                        '^' => (true, &p[i + 2..close]),
                        _ => (false, &p[i + 1..close]),
                    };
                    (
                        One::Class {
                            negate,
                            ranges: class_ranges(members),
                        },
                        close + 1,
                    )
                }
                '\\' => (One::Char(*p.get(i + 1)?), i + 2),
                c => (One::Char(c), i + 1),
            };
            current.0.push(one);
            i = next;
        }
        Some(Pattern(segments))
    }

    /// The pattern that matches the reversed texts.
    fn reversed(mut self) -> Pattern {
        self.0.reverse();
        for segment in &mut self.0 {
            segment.0.reverse();
        }
        self
    }

    /// The end of the shortest (or longest) non-empty prefix of `value` the pattern matches.
    fn prefix_end(&self, value: &str, longest: bool, steps: &mut usize) -> Result<Option<usize>, OutOfSteps> {
        let (first, rest) = self.0.split_first().expect("never empty");
        let Some(mut placed) = first.match_at(value, 0, steps)? else {
            return Ok(None);
        };
        let Some((last, middle)) = rest.split_last() else {
            // No star: the one prefix the first segment covers.
            return Ok(Some(placed).filter(|&end| end > 0));
        };
        for segment in middle {
            match segment.find(value, placed, false, steps)? {
                Some((_, end)) => placed = end,
                None => return Ok(None),
            }
        }
        if last.0.is_empty() {
            // A trailing star: any end from `placed` on, but not the empty prefix.
            let shortest = match placed {
                0 => value.chars().next().map(char::len_utf8),
                _ => Some(placed),
            };
            return Ok(if longest {
                Some(value.len()).filter(|&end| end > 0)
            } else {
                shortest
            });
        }
        Ok(last.find(value, placed, longest, steps)?.map(|(_, end)| end))
    }
}

/// The members of a class: `a-z` is a range when a member follows the `-`.
fn class_ranges(members: &[char]) -> Vec<(char, char)> {
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < members.len() {
        if i + 2 < members.len() && members[i + 1] == '-' {
            ranges.push((members[i], members[i + 2]));
            i += 3;
        } else {
            ranges.push((members[i], members[i]));
            i += 1;
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough steps for any test here that is not about running out.
    const PLENTY: usize = 1 << 30;

    fn prefix(value: &str, pattern: &str, longest: bool) -> String {
        trim_prefix(value, pattern, longest, &mut PLENTY.clone())
            .unwrap()
            .to_string()
    }

    fn suffix(value: &str, pattern: &str, longest: bool) -> String {
        trim_suffix(value, pattern, longest, &mut PLENTY.clone())
            .unwrap()
            .to_string()
    }

    /// Expected values are bash 5's `${v#p}`, `${v##p}`, `${v%p}`, `${v%%p}` (`[!a]` for
    /// `[^a]`) except where envsubst differs: it never removes an empty prefix or suffix, so
    /// `*` alone removes one character.
    #[test]
    fn trims_as_the_shell_does() {
        let cases = [
            // value, pattern, #, ##, %, %%
            (
                "a/b/c.tar.gz",
                "*/",
                "b/c.tar.gz",
                "c.tar.gz",
                "a/b/c.tar.gz",
                "a/b/c.tar.gz",
            ),
            (
                "a/b/c.tar.gz",
                ".*",
                "a/b/c.tar.gz",
                "a/b/c.tar.gz",
                "a/b/c.tar",
                "a/b/c",
            ),
            ("a/b/c.tar.gz", "a*", "/b/c.tar.gz", "", "a/b/c.t", ""),
            ("abcabc", "a?c", "abc", "abc", "abc", "abc"),
            ("abcabc", "*b?", "abc", "", "abca", ""),
            ("abcabc", "[ab]*[bc]", "cabc", "", "abca", ""),
            ("abcabc", "[^a]*", "abcabc", "abcabc", "abcab", "a"),
            ("x*y*", "*\\*", "y*", "", "x*y", ""),
            ("x*y*", "\\**", "x*y*", "x*y*", "x*y", "x"),
            ("üñï.côdé", "*.", "côdé", "côdé", "üñï.côdé", "üñï.côdé"),
            ("üñï.côdé", "?ñ", "ï.côdé", "ï.côdé", "üñï.côdé", "üñï.côdé"),
            ("üñï.côdé", "[à-ü]", "ñï.côdé", "ñï.côdé", "üñï.côd", "üñï.côd"),
            // bash: "abc", "", "abc", "".
            ("abc", "*", "bc", "", "ab", ""),
            ("abc", "**b**", "c", "", "a", ""),
            ("abc", "", "abc", "abc", "abc", "abc"),
            ("", "*", "", "", "", ""),
        ];
        for (value, pattern, short_prefix, long_prefix, short_suffix, long_suffix) in cases {
            let got = [
                prefix(value, pattern, false),
                prefix(value, pattern, true),
                suffix(value, pattern, false),
                suffix(value, pattern, true),
            ];
            assert_eq!(
                got,
                [short_prefix, long_prefix, short_suffix, long_suffix],
                "{value:?} with {pattern:?}"
            );
        }
    }

    #[test]
    fn a_malformed_pattern_leaves_the_value() {
        for pattern in ["[ab", "a\\", "[]", "*[a"] {
            assert_eq!(prefix("ab[ab", pattern, true), "ab[ab", "{pattern}");
            assert_eq!(suffix("ab[ab", pattern, true), "ab[ab", "{pattern}");
        }
        // A `]` right after `[` is a member; after `[^` it closes an empty class, which,
        // negated, matches any character.
        assert_eq!(prefix("]x", "[]]", false), "x");
        assert_eq!(prefix("a]x", "[^]]", false), "x");
    }

    #[test]
    fn long_values_are_trimmed_in_steps_linear_in_the_value() {
        // Before: every prefix was matched on its own; 80,000 characters took 9 s.
        let value = format!("{}.end", "a/".repeat(500_000));
        let cases = [
            ("*/", false, "a/".repeat(499_999) + ".end"),
            ("*/", true, ".end".to_string()),
            ("a*x", true, value.clone()),
            ("*a/.e*", false, "nd".to_string()),
            ("*/?", true, "end".to_string()),
        ];
        for (pattern, longest, expected) in cases {
            let mut steps = 8 * value.len();
            let trimmed = trim_prefix(&value, pattern, longest, &mut steps);
            assert_eq!(trimmed, Ok(expected.as_str()), "{pattern}");
            let mut steps = 8 * value.len();
            assert!(
                trim_suffix(&value, pattern, longest, &mut steps).is_ok(),
                "{pattern}"
            );
        }
        assert_eq!(suffix(&value, "/*", false), "a/".repeat(499_999) + "a");
    }

    #[test]
    fn classes_and_question_marks_are_charged_and_stop_when_the_steps_run_out() {
        // A segment of 1,000 `?` tried at each of 10^6 positions: billions of steps.
        let value = "a".repeat(1_000_000);
        let pattern = format!("*{}b", "?".repeat(1000));
        assert_eq!(
            trim_prefix(&value, &pattern, false, &mut 10_000_000),
            Err(OutOfSteps)
        );
        assert_eq!(prefix(&"a".repeat(100), &pattern, false), "a".repeat(100));
        assert_eq!(prefix("xaaab", "*?a?b", false), "");
    }
}
