//! Masterminds/semver v3.5.0 constraints (`NewConstraint` and `Check`), which Flux's semver
//! policy uses: a bare version means `=`, `x`/`X`/`*` wildcards, `a - b` ranges, `,` or
//! space for AND, `||` for OR, and prereleases only in an AND group that names one.
//! The grammar is the library's regular expressions, rebuilt here so that what is accepted,
//! how it splits into comparators and the error texts match it.

use std::cmp::Ordering;
use std::sync::LazyLock;

use regex::Regex;

use super::version::{Version, compare_prerelease, parse_lenient};

const MAX_CONSTRAINT_LEN: usize = 512;
const MAX_CONSTRAINT_GROUPS: usize = 32;

/// Go's `\s` is ASCII only (no `\v`); the `regex` crate's is Unicode.
const WS: &str = r"[\t\n\f\r ]";
/// The operators in Masterminds' order, which decides leftmost-first matching; the empty
/// alternative is a bare version.
const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";
/// A constraint version: the core parts also accept the wildcards (and, as in the library,
/// a literal `|`, which then fails to parse as a version).
const CV: &str = concat!(
    r"v?([0-9|xX*]+)(\.[0-9|xX*]+)?(\.[0-9|xX*]+)?",
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?",
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
);

fn re(pattern: String) -> Regex {
    Regex::new(&pattern).expect("constant constraint grammar")
}

static ONE: LazyLock<Regex> = LazyLock::new(|| re(format!("^{WS}*({OPS}){WS}*({CV}){WS}*$")));
static RANGE: LazyLock<Regex> = LazyLock::new(|| re(format!("{WS}*({CV}){WS}+-{WS}+({CV}){WS}*")));
static FIND: LazyLock<Regex> = LazyLock::new(|| re(format!("({OPS}){WS}*({CV})")));
static VALID: LazyLock<Regex> = LazyLock::new(|| {
    re(format!(
        "^({WS}*({OPS}){WS}*({CV}){WS}*)((?:{WS}+|,{WS}*)({OPS}){WS}*({CV}){WS}*)*$"
    ))
});

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    TildeOrEqual,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Tilde,
    Caret,
}

#[derive(Debug, Clone)]
struct Comparator {
    op: Op,
    con: Version,
    /// Some part was a wildcard or missing: `1.x`, `1`, `*`.
    dirty: bool,
    minor_dirty: bool,
    patch_dirty: bool,
}

/// A parsed range: OR groups of AND-ed comparators.
#[derive(Debug, Clone)]
pub(crate) struct Constraints {
    groups: Vec<Group>,
}

#[derive(Debug, Clone)]
struct Group {
    comparators: Vec<Comparator>,
    /// A comparator names a prerelease, so prereleases may match in this group.
    has_pre: bool,
}

/// `NewConstraint`; the error is the library's text, which Flux shows after `invalid policy: `.
pub(crate) fn parse(range: &str) -> Result<Constraints, String> {
    if range.len() > MAX_CONSTRAINT_LEN {
        return Err(format!(
            "constraint string is too long (max {MAX_CONSTRAINT_LEN} bytes)"
        ));
    }
    let rewritten = rewrite_ranges(range);
    let ors: Vec<&str> = rewritten.split("||").collect();
    if ors.len() > MAX_CONSTRAINT_GROUPS {
        return Err(format!(
            "too many constraint groups (max {MAX_CONSTRAINT_GROUPS})"
        ));
    }
    let mut groups = Vec::with_capacity(ors.len());
    for or in ors {
        if !VALID.is_match(or) {
            return Err(format!("improper constraint: {}", go_quote(or)));
        }
        let comparators = FIND
            .find_iter(or)
            .map(|m| parse_comparator(m.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let has_pre = comparators.iter().any(|c| !c.con.pre.is_empty());
        groups.push(Group { comparators, has_pre });
    }
    Ok(Constraints { groups })
}

/// `a - b` becomes `>= a, <= b `, each match replacing the first occurrence of its text.
fn rewrite_ranges(range: &str) -> String {
    let mut out = range.to_string();
    for caps in RANGE.captures_iter(range) {
        let replacement = format!(">= {}, <= {} ", &caps[1], &caps[11]);
        out = out.replacen(&caps[0], &replacement, 1);
    }
    out
}

fn parse_comparator(text: &str) -> Result<Comparator, String> {
    let m = ONE
        .captures(text)
        .ok_or_else(|| format!("improper constraint: {}", go_quote(text)))?;
    let part = |i: usize| m.get(i).map_or("", |g| g.as_str());
    let op = match part(1) {
        "" | "=" => Op::TildeOrEqual,
        "!=" => Op::NotEqual,
        ">" => Op::Greater,
        "<" => Op::Less,
        ">=" | "=>" => Op::GreaterEqual,
        "<=" | "=<" => Op::LessEqual,
        "~" | "~>" => Op::Tilde,
        _ => Op::Caret,
    };
    let (major, minor, patch, pre) = (part(3), part(4), part(5), part(6));
    let is_x = |s: &str| matches!(s.trim_start_matches('.'), "x" | "X" | "*");
    // A wildcard or missing part zeroes the rest and drops build metadata.
    let (version, dirty, minor_dirty, patch_dirty) = if is_x(major) {
        (format!("0.0.0{pre}"), true, false, false)
    } else if minor.is_empty() || is_x(minor) {
        (format!("{major}.0.0{pre}"), true, true, false)
    } else if patch.is_empty() || is_x(patch) {
        (format!("{major}{minor}.0{pre}"), true, false, true)
    } else {
        (part(2).to_string(), false, false, false)
    };
    // e.g. `1x.2.3`, `1|2` or a leading-zero prerelease number.
    let con = parse_lenient(&version).ok_or("constraint parser error")?;
    Ok(Comparator {
        op,
        con,
        dirty,
        minor_dirty,
        patch_dirty,
    })
}

impl Constraints {
    /// `Check`: some OR group whose comparators all hold.
    pub(crate) fn check(&self, v: &Version) -> bool {
        self.groups.iter().any(|g| {
            // A prerelease only matches in a group that names one.
            (v.pre.is_empty() || g.has_pre) && g.comparators.iter().all(|c| c.check(v))
        })
    }
}

impl Comparator {
    fn check(&self, v: &Version) -> bool {
        let con = &self.con;
        let cmp = v.compare(con);
        match self.op {
            Op::TildeOrEqual if self.dirty => self.tilde(v),
            Op::TildeOrEqual => cmp == Ordering::Equal,
            Op::NotEqual => self.not_equal(v),
            Op::Greater if !self.dirty => cmp == Ordering::Greater,
            // `>1` means 2.0.0 and up, `>1.1` means 1.2.0 and up.
            Op::Greater => match v.major.cmp(&con.major) {
                Ordering::Greater => true,
                Ordering::Less => false,
                Ordering::Equal if self.minor_dirty => false,
                Ordering::Equal if self.patch_dirty => v.minor > con.minor,
                Ordering::Equal => cmp == Ordering::Greater,
            },
            Op::Less => cmp == Ordering::Less,
            Op::GreaterEqual => cmp != Ordering::Less,
            Op::LessEqual if !self.dirty => cmp != Ordering::Greater,
            // `<=1` takes all of 1.x, `<=1.1` all of 1.1.x.
            Op::LessEqual => {
                !(v.major > con.major || (v.major == con.major && v.minor > con.minor && !self.minor_dirty))
            }
            Op::Tilde => self.tilde(v),
            Op::Caret => self.caret(v),
        }
    }

    /// `~1.2.3` is `>=1.2.3 <1.3.0`, `~1` is `>=1.0.0 <2.0.0`, `~0.0.0` is anything.
    fn tilde(&self, v: &Version) -> bool {
        let con = &self.con;
        if v.compare(con) == Ordering::Less {
            return false;
        }
        if (con.major, con.minor, con.patch) == (0, 0, 0) && !self.minor_dirty && !self.patch_dirty {
            return true;
        }
        v.major == con.major && (v.minor == con.minor || self.minor_dirty)
    }

    /// `^1.2.3` is `>=1.2.3 <2.0.0`, `^0.2.3` is `>=0.2.3 <0.3.0`, `^0.0.3` is `=0.0.3`.
    fn caret(&self, v: &Version) -> bool {
        let con = &self.con;
        if v.compare(con) == Ordering::Less {
            return false;
        }
        if con.major > 0 || self.minor_dirty {
            return v.major == con.major;
        }
        if v.major > 0 {
            return false;
        }
        if con.minor > 0 || self.patch_dirty {
            return v.minor == con.minor;
        }
        if v.minor > 0 {
            return false;
        }
        v.patch == con.patch
    }

    /// `!=1.x` excludes all of 1.x; `!=1.2.x` all of 1.2.x with the same prerelease.
    fn not_equal(&self, v: &Version) -> bool {
        let con = &self.con;
        if self.dirty {
            if con.major != v.major {
                return true;
            }
            if self.minor_dirty {
                return false;
            }
            if con.minor != v.minor {
                return true;
            }
            if self.patch_dirty {
                return (!v.pre.is_empty() || !con.pre.is_empty())
                    && compare_prerelease(&v.pre, &con.pre) != Ordering::Equal;
            }
            if con.patch != v.patch {
                return true;
            }
        }
        v.compare(con) != Ordering::Equal
    }
}

/// Go's `%q` for the error texts: printable characters as they are, the rest escaped.
/// (Go's notion of printable is approximated: controls, format characters and spaces other
/// than ' ' are escaped.)
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || (c.is_whitespace() && c != ' ') || is_format(c) => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The common Unicode format characters (category Cf), which Go does not print.
fn is_format(c: char) -> bool {
    matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}')
}

#[cfg(test)]
#[path = "constraint_tests.rs"]
pub(crate) mod tests;
