//! Differential test: the engine's parts against the Go libraries Flux uses (Masterminds
//! semver v3.5.0, fluxcd/pkg/version v0.16.0, Go's regexp and strconv), run through
//! `e2e/semver/build.sh`'s oracle on the same inputs. Needs Go; it builds once per machine.
//!
//! Patterns Go accepts and the engine rejects (rare in tag filters, so not translated):
//! `\p{^Greek}`, octal escapes (`\0`, `\07`), duplicate group names, `(?)`, repeated flags
//! (`(?ii)`, `(?i-i)`), `[\d-z]`, group names starting with a digit (`(?P<1a>x)`); and
//! `[a--b]`, which Go rejects and the crate reads as a class difference.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::constraint::{self, tests::CHECKS, tests::ERRORS};
use super::{PolicyError, TagFilter, order, version};

const RANGES: &[&str] = &[
    "^*",
    "^x",
    "~x",
    "!=*",
    ">*",
    "<*",
    ">=*",
    "<=*",
    "!=1",
    "!=1.2",
    ">=1.x",
    "<1.x",
    ">1.x",
    "<=1.x",
    "~1.2.x",
    "^0.x",
    "^0.0.x",
    "^0.1.x",
    "~0.x",
    "1.2.3 - 1.2.3",
    "1.2 - 1.4 || 2.x",
    "1 - 2 || 4.0 - 5.1",
    "1 - 2, 1 - 2",
    ">0.5 1.0 - 2.0",
    "1-2",
    "1|2",
    "1||2 - 3",
    "=>1.0,=<2.0",
    ">= 1.2.3 < 2.0 || => 3.0 < 4",
    "1.0.0-alpha",
    "1.0.x-beta",
    "!=1.2.x-beta",
    ">1.x-beta",
    "*-beta",
    "x.x.x",
    "v1.x",
    "V1.0.0",
    "1.2.3+meta",
    ">=1.0.0+meta",
    " >= 1.0.0 ",
    ",1.0",
    "1.0,",
    "1.0 ,2.0",
    ">=1.0 ||",
    "||",
    "~>0",
    "~>1.2.3",
    "^1.2.3-rc.1",
    ">1.2.3-rc.1",
    "<1.2.3-0",
    "=1.2.3-beta",
    "1.2.3-beta",
    ">=2022.1.0 <2023.0.0",
    "==1.0",
    "!1.0",
    ">=01.2.3",
    "1.02",
    "1.2.3 1.2.3",
    "1.x.3",
    "x.2.3",
    "1.2.x3",
    "*.*",
    "1.*.*-rc.1",
    "\u{a0}1.0",
    "\u{ad}1",
    "\u{200b}1",
    "\u{2028}",
    "\u{feff}",
    "é1",
    "1.0\u{b}",
    ">=1.0.0\t<2.0.0",
];

const VERSIONS: &[&str] = &[
    "0.0.0",
    "0.0.1",
    "0.0.3",
    "0.0.4",
    "0.1.0",
    "0.2.3",
    "0.9.0",
    "1.0.0-0",
    "1.0.0-alpha",
    "1.0.0-rc.1",
    "1.0.0-rc9",
    "1.0.0-rc10",
    "1.0.0",
    "1.0.1-beta",
    "1.1.9",
    "1.2.0",
    "1.2.2",
    "1.2.3-beta",
    "1.2.3",
    "1.2.3+meta",
    "v1.2.4",
    "1.2.4-beta",
    "1.2.9",
    "1.3.0",
    "1.4.5",
    "1.4.6",
    "1.5.0-rc.1",
    "1.9.9",
    "2.0.0-0",
    "2.0.0",
    "2.1.0",
    "3.0.0",
    "4.3.2-1",
    "5.1.0",
    "2022.1.0",
    "2022.10.3",
    "2023.01.05",
    "1",
    "1.2",
];

const TAGS: &[&str] = &[
    "1.2.3",
    "v1.2.3",
    "1.2",
    "1",
    "v1",
    "01.002.03",
    "1.2.3-rc.1+build.5",
    "1.2.3+build-7",
    "1.2.3-0abc",
    "1.2-rc.1",
    "1-rc.1.2",
    "1.2.3.4",
    "1..3",
    "V1.2.3",
    "vv1.2.3",
    "latest",
    "",
    "1.2.x",
    "1.2.3-beta.01",
    "1.2.3-",
    "1.2.3-a..b",
    "18446744073709551616.0.0",
    "18446744073709551615.0.0",
    "main.abc.def",
    "v2025.02.03-rc.1",
    "1.2.3-rc.1-2",
    "1.2.3--",
    "1.2.3-+",
    "1.2.3+a+b",
    "1.2.3-α",
    "1.2.3-00",
    "1.2.3-0",
    "1.2.3+01",
    ".1.2",
    "1.2.3.",
];

const PATTERNS: &[&str] = &[
    r"\Qa.b\E",
    r"\C",
    r"(?x) a",
    r"\b{start}",
    r"\<",
    r"\Z",
    r"\z",
    r"(?U)a+",
    r"[[:word:]]",
    r"\pN",
    r"[\p{L}]",
    r"(?i:a)",
    r"(?-i)a",
    r"(?m)^a",
    r"\A",
    r"x*+",
    r"a{0}",
    r"a{0,0}",
    r"\8",
    r"\x4",
    r"\x{}",
    r"\x{110000}",
    r"[^\x00-\x{10FFFF}]",
    r"a++",
    r"**",
    r"\e",
    r"(?i)(?-i)",
    r"(?-)",
    r"(?i-)",
    r"(?--i)",
    r"[a-a]",
    r"[a-]",
    r"[-a]",
    r"[]",
    r"[^]",
    r"[[:^alpha:]]",
    r"[[:alpha:]",
    r"[[=a=]]",
    r"[[.a.]]",
    r"\pZ",
    r"\p{Zs}",
    r"\p{Latin}",
    r"\p{Any}",
    r"\p{L",
    r"a{1000}",
    r"(a{1000}){1000}",
    r"((((((((((a))))))))))",
    r"\d{2,}",
    r"a{3,2}",
    r"(?i)K",
    r"[a-z--]",
    r"[a&&b]",
    r"[a~~b]",
    r"\w\W\s\S\b\B",
    r"\v\f\t\n\r\a",
    r"(?P<>a)",
    r"(?<n>a)",
    r"(?'n'a)",
    r"(?#c)",
    r"(?|a)",
    r"(?>a)",
    r"a{,}",
    r"a{1,}",
    r"a{01}",
    r"a{1001,}",
    r"a{ 1}",
    "(abc",
    "abc)",
    "a[bc",
    "*a",
    "a**",
    "a{1001}",
    "a{2,1}",
    r"\q",
    r"(a)\1",
    "a\\",
    "[z-a]",
    "a(?<>x)",
    "(?P<name",
    r"\x{41}{2}",
    r"\P{L}{",
    r"\\{",
    r"[\{]",
    r"\{{",
    r"\{{2}",
    "(?P<a.b>x)",
    "(?P<a[0]>x)",
    "(?P<é>x)",
    "a+*?",
    "a|?",
    "(a|{2}?)",
    "a{2}{3}",
    "(?=a)",
    "(?!a)",
    "(?<=a)",
    r"^main-[a-f0-9]+-(?P<id>[0-9]+)$",
    "(?i)abc",
    "(?i-z)",
    "(?<!a)",
    "(?<=a>)",
    "a{",
    "a{,5}",
    "a{1,2",
    "x{a}",
    "[{]",
    r"\{1}",
    "{2}",
    "a{2}{,3}",
    "a(?<>x)",
    "(?P<name",
    r"\x{41}{2}",
    r"\P{L}{",
    r"\\{",
    r"[\{]",
    r"\{{",
    r"\{{2}",
    "(?P<a.b>x)",
    "(?P<a[0]>x)",
    "(?P<é>x)",
    "a+*?",
    "a|?",
    "(a|{2}?)",
    r"\d+",
    "[[:alpha:]]",
    r"\pL",
    r"\p{Greek}",
    "x{1000}",
    "(?U)a+",
    "[]a]",
    "[^]a]",
    "(?s).",
    "",
    "a|",
    "()",
    "(?:a)*",
    "x{2}{,3}",
    "a{1000,1001}",
    "(*)",
    "(?P<a-b>x)",
    "(?P=x)",
    "[a-\\d]",
    "\\",
];

const EXPANDS: &[(&str, &str, &str)] = &[
    // Constructs the crate reads differently unless translated.
    ("[[a]]", "$0", "a]"),
    ("[a&&b]", "$0", "&"),
    ("[a~~b]", "$0", "~"),
    (r"\Qa.b\E", "$0", "xa.b"),
    (r"\Qa.b\E", "$0", "xaxb"),
    ("x{,3}", "$0", "x{,3}"),
    ("[^]a]", "$0", "b"),
    ("[]a]+", "$0", "a]"),
    ("^(a)?b$", "[$1]", "b"),
    ("(?P<x>a)|(?P<y>b)", "$x$y", "b"),
    ("b", "[$0]", "abc"),
    ("b", "[$0]", "xyz"),
    ("^v(?P<major>\\d+)", "${major}x$major.$1_", "v12.3"),
];
const EXPAND_PATTERN: &str = r"^main-(?P<sha>[a-f0-9]+)-(?P<ts>[0-9]+)$";
const EXPAND_TAG: &str = "main-845d3a80-1612345678";
const TEMPLATES: &[&str] = &[
    "$ts",
    "${ts}",
    "$2",
    "${1}-${2}",
    "$0",
    "$ts_x",
    "${ts}_x",
    "$1x",
    "$01",
    "$$ts",
    "cost: $",
    "$-",
    "${ts",
    "${}",
    "$9",
    "v$sha.$ts",
    "$00",
    "${01}",
    "$100000001",
    "$é",
    "${ts}}",
    "$$$ts",
    "a$",
    "$",
    "${sha",
    "$sha$",
    "$ sha",
];

const FLOATS: &[&str] = &[
    "0",
    "42",
    "+42",
    "-42",
    "1.5",
    ".5",
    "5.",
    "1e3",
    "1E-2",
    "1_000",
    "1__000",
    "_1",
    "1_",
    "1_.5",
    "0x1p4",
    "0X1.8P1",
    "0x_1p0",
    "0x10",
    "0x",
    "inf",
    "-Infinity",
    "infin",
    "1e400",
    "1e-400",
    "20260528153652",
    "",
    "-",
    ".",
    "e5",
    "1e",
    "1e+",
    "1.2.3",
    "v1",
    "1-2",
    "+nan",
    "1e308",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "4.9e-324",
    "2e-324",
    "0x1.fffffffffffffp1023",
    "0x1p1024",
    "0x1p-1074",
    "-0",
    "00012",
    "1_2_3",
    "0_1",
    "0x_",
    "0x1_p0",
    "1e1_0",
    "Inf",
    "+Infinity",
    "infinityx",
    "NaN",
    "nan",
    "-nan",
    "12abc",
    " 1",
    "1 ",
    "0x.8p1",
    "0x1p+2",
    "0b101",
    "0o17",
    "1e00000000000000000001",
    "0x1p0000001",
];

/// One query per oracle line: the question and the engine's answer in the oracle's terms.
struct Query {
    ask: Vec<String>,
    ours: Vec<String>,
}

fn query(ask: &[&str], ours: Vec<String>) -> Query {
    Query {
        ask: ask.iter().map(|s| s.to_string()).collect(),
        ours,
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn check(range: &str, v: &str) -> Query {
    let ours = match constraint::parse(range) {
        Err(e) => vec!["error".to_string(), e],
        Ok(c) => match version::parse_lenient(v) {
            None => strings(&["bad version"]),
            Some(v) => vec![c.check(&v).to_string()],
        },
    };
    query(&["check", range, v], ours)
}

fn queries() -> Vec<Query> {
    let mut qs = Vec::new();
    for (range, v, _) in CHECKS {
        qs.push(check(range, v));
    }
    let ranges = RANGES.iter().chain(CHECKS.iter().map(|(r, _, _)| r));
    for range in ranges.chain(ERRORS.iter().map(|(r, _)| r)) {
        let ours = match constraint::parse(range) {
            Ok(_) => strings(&["ok"]),
            Err(e) => vec!["error".to_string(), e],
        };
        qs.push(query(&["constraint", range], ours));
        if constraint::parse(range).is_ok() {
            qs.extend(VERSIONS.iter().map(|v| check(range, v)));
        }
    }
    let long_tag = format!("1.2.3-{}", "a".repeat(250));
    let too_long_tag = format!("{long_tag}b");
    for tag in TAGS
        .iter()
        .copied()
        .chain([long_tag.as_str(), too_long_tag.as_str()])
    {
        let ours = match version::parse_tag(tag) {
            Some(v) => vec![format!("{}.{}.{}", v.major, v.minor, v.patch), v.pre],
            None => strings(&["skip"]),
        };
        qs.push(query(&["tag", tag], ours));
    }
    for a in VERSIONS {
        for b in VERSIONS {
            let (x, y) = (
                version::parse_lenient(a).unwrap(),
                version::parse_lenient(b).unwrap(),
            );
            qs.push(query(&["compare", a, b], vec![(x.compare(&y) as i8).to_string()]));
        }
    }
    for pattern in PATTERNS {
        let ours = match TagFilter::new(pattern, "") {
            Ok(_) => strings(&["ok"]),
            Err(PolicyError::InvalidFilter { reason, .. }) => vec!["error".to_string(), reason],
            Err(other) => panic!("{other}"),
        };
        qs.push(query(&["regexp", pattern], ours));
    }
    let expands = TEMPLATES.iter().map(|t| (EXPAND_PATTERN, *t, EXPAND_TAG));
    for (pattern, template, tag) in EXPANDS.iter().copied().chain(expands) {
        let ours = match TagFilter::new(pattern, template).map(|f| f.apply(&[tag])) {
            Ok(kept) => match kept.first() {
                Some((key, _)) => vec!["match".to_string(), key.clone()],
                None => strings(&["no match"]),
            },
            Err(e) => vec![e.to_string()],
        };
        qs.push(query(&["expand", pattern, template, tag], ours));
    }
    for f in FLOATS {
        let ours = match order::parse_go_float(f) {
            Some(x) => vec![format!("{x:?}")],
            None => strings(&["error"]),
        };
        qs.push(query(&["float", f], ours));
    }
    qs
}

/// Go prints floats its own way; compare the values (NaN equal to NaN, -0 apart from 0).
fn same(q: &Query, theirs: &[String]) -> bool {
    if q.ask[0] != "float" || theirs[0] == "error" || q.ours[0] == "error" {
        return q.ours == theirs;
    }
    let parse = |s: &str| s.parse::<f64>().unwrap_or_else(|e| panic!("{s}: {e}"));
    let (a, b) = (parse(&q.ours[0]), parse(&theirs[0]));
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[test]
fn engine_matches_the_go_libraries() {
    let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/semver/build.sh");
    let out = Command::new(&build).output().expect("run e2e/semver/build.sh");
    assert!(
        out.status.success(),
        "{}: {}",
        build.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8(out.stdout).unwrap();
    let oracle = Path::new(dir.trim()).join("semver-oracle");

    let qs = queries();
    let mut input = String::new();
    for q in &qs {
        input.push_str(&serde_json::to_string(&q.ask).unwrap());
        input.push('\n');
    }
    let mut child = Command::new(&oracle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the oracle failed");
    let answers: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), qs.len(), "one answer per query");

    let differences: Vec<String> = qs
        .iter()
        .zip(&answers)
        .filter(|(q, theirs)| !same(q, theirs))
        .map(|(q, theirs)| format!("{:?}: ours {:?}, Go {:?}", q.ask, q.ours, theirs))
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} differ:\n{}",
        differences.len(),
        qs.len(),
        differences.join("\n")
    );
}
