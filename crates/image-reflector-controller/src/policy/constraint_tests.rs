//! Masterminds v3 range semantics as its README documents them, written as data.

use super::*;

/// (range, version, matches)
pub(crate) const CHECKS: &[(&str, &str, bool)] = &[
    // A bare version is `=`; with missing parts it is a tilde range.
    ("1.2.3", "1.2.3", true),
    ("1.2.3", "1.2.4", false),
    ("=1.2.3", "v1.2.3", true),
    ("v1.2.3", "1.2.3", true),
    ("1.2.3+build", "1.2.3", true),
    ("1.2", "1.2.5", true),
    ("1.2", "1.3.0", false),
    ("1", "1.9.9", true),
    ("1", "2.0.0", false),
    ("= 1.2", "1.2.0", true),
    // Wildcards.
    ("*", "1.2.3", true),
    ("*", "1.2.3-alpha", false),
    ("x", "0.0.1", true),
    ("1.x", "1.5.0", true),
    ("1.x", "2.0.0", false),
    ("1.2.x", "1.2.9", true),
    ("1.2.x", "1.3.0", false),
    ("1.2.X", "1.2.1", true),
    ("1.2.*", "1.2.1", true),
    ("0.x.x", "1.2.3", false),
    // Not equal, also to a whole wildcard range.
    ("!=1.2.3", "1.2.3", false),
    ("!=1.2.3", "1.2.4", true),
    ("!=1.x", "1.5.0", false),
    ("!=1.x", "2.0.0", true),
    ("!=1.2.x", "1.2.5", false),
    ("!=1.2.x", "1.3.0", true),
    // Comparisons; `>1` means the next major, `<=1.2` all of 1.2.x.
    (">1.2.3", "1.2.4", true),
    (">1.2.3", "1.2.3", false),
    (">1", "1.9.0", false),
    (">1", "2.0.0", true),
    (">1.1", "1.1.9", false),
    (">1.1", "1.2.0", true),
    ("<1.2.3", "1.2.2", true),
    ("<1.2.3", "1.2.3", false),
    ("<2", "1.9.9", true),
    ("<2", "2.0.0", false),
    (">=1.2.3", "1.2.3", true),
    ("=>1.2.3", "1.2.2", false),
    (">= 1.2", "1.2.0", true),
    ("<=1.2.3", "1.2.3", true),
    ("<=1.2.3", "1.2.4", false),
    ("<=1", "1.9.9", true),
    ("<=1", "2.0.0", false),
    ("<=1.2", "1.2.9", true),
    ("<=1.2", "1.3.0", false),
    ("=<1.2.3", "1.2.3", true),
    // Tilde: patch-level changes when a minor is given, minor-level otherwise.
    ("~1.2.3", "1.2.9", true),
    ("~1.2.3", "1.3.0", false),
    ("~1.2.3", "1.2.2", false),
    ("~1", "1.9.0", true),
    ("~1", "2.0.0", false),
    ("~1.x", "1.9.0", true),
    ("~>1.2", "1.2.5", true),
    ("~>1.2", "1.3.0", false),
    ("~0.0.0", "1.2.3", true),
    ("~*", "2.1.1", true),
    ("~0", "0.9.0", true),
    ("~0", "1.0.0", false),
    // Caret: up to the next major, or the next minor below 1.0.0, or exactly 0.0.z.
    ("^1.2.3", "1.9.9", true),
    ("^1.2.3", "2.0.0", false),
    ("^1.2.3", "1.2.2", false),
    ("^0.2.3", "0.2.9", true),
    ("^0.2.3", "0.3.0", false),
    ("^0.0.3", "0.0.3", true),
    ("^0.0.3", "0.0.4", false),
    ("^0.0", "0.0.9", true),
    ("^0.0", "0.1.0", false),
    ("^0", "0.9.0", true),
    ("^0", "1.0.0", false),
    ("^1.x", "1.5.0", true),
    ("^1", "1.5.0", true),
    // Prereleases only where a comparator of the AND group names one; then any of them.
    (">1.2.3", "1.2.4-beta", false),
    (">1.2.3-0", "1.2.4-beta", true),
    ("<1.2.3", "1.2.3-beta", false),
    (">=1.0.0-0", "1.0.0-rc.1", true),
    (">=1.0.0-alpha", "1.0.1-beta", true),
    ("^1.0.0-0", "1.2.0-beta", true),
    (">=1.0.0-0 <2.0.0", "1.5.0-rc.1", true),
    (">=1.0.0 <2.0.0-0", "1.5.0-rc.1", true),
    (">=1.0.0 || >=2.0.0-0", "1.5.0-rc.1", false),
    (">=1.0.0 || >=1.0.0-0", "1.5.0-rc.1", true),
    // `rc9` > `rc10`: words compare by bytes (flux2#4599).
    (">=1.0.0-rc10", "1.0.0-rc9", true),
    (">1.0.0-rc9", "1.0.0-rc10", false),
    (">1.0.0-rc.9", "1.0.0-rc.10", true),
    // Hyphen ranges, inclusive, partial ends as in `<=`.
    ("1.2 - 1.4.5", "1.3.0", true),
    ("1.2 - 1.4.5", "1.4.6", false),
    ("1.2.3 - 2", "2.9.9", true),
    ("1.2.3 - 2", "3.0.0", false),
    ("1.2.3 - 2", "1.2.2", false),
    // AND by comma or space, OR by `||`.
    (">=1.2, <1.4", "1.3.0", true),
    (">=1.2 <1.4", "1.4.0", false),
    (">=1.2,<1.4", "1.3.9", true),
    ("<1.0.0 || >=2.0.0", "0.9.0", true),
    ("<1.0.0 || >=2.0.0", "1.5.0", false),
    ("1.2.3 || 1.2.5", "1.2.5", true),
    ("1.0 ~ 1.0.5", "1.0.7", true),
    ("1.0\t|| >2\n", "2.1.0", false),
    ("1.0\t|| >2\n", "3.0.0", true),
    // CalVer (image-reflector-controller#250).
    ("2022.x", "2022.10.3", true),
    ("2022.x", "4.3.2-1", false),
    (">=2022.1.0", "2023.01.05", true),
];

#[test]
fn check_table() {
    for (range, version, want) in CHECKS {
        let c = parse(range).unwrap_or_else(|e| panic!("{range}: {e}"));
        let v = parse_lenient(version).unwrap_or_else(|| panic!("{version}"));
        assert_eq!(c.check(&v), *want, "{range:?} against {version}");
    }
}

/// (range, error)
pub(crate) const ERRORS: &[(&str, &str)] = &[
    ("*-*", r#"improper constraint: "*-*""#),
    (">= bar", r#"improper constraint: ">= bar""#),
    ("", r#"improper constraint: """#),
    ("1.2.3.4", r#"improper constraint: "1.2.3.4""#),
    (">1.0 || ", r#"improper constraint: " ""#),
    ("1.0~ 2.0", r#"improper constraint: "1.0~ 2.0""#),
    ("1.0\t|| >2\n=", "improper constraint: \" >2\\n=\""),
    ("1.2.3-beta.01", "constraint parser error"),
    ("1x", "constraint parser error"),
    (">=99999999999999999999", "constraint parser error"),
];

#[test]
fn error_table() {
    for (range, want) in ERRORS {
        assert_eq!(parse(range).unwrap_err(), *want, "{range:?}");
    }
    let long = "1".repeat(513);
    assert_eq!(
        parse(&long).unwrap_err(),
        "constraint string is too long (max 512 bytes)"
    );
    assert!(
        parse(&"1".repeat(512)).is_err_and(|e| e == "constraint parser error"),
        "512 bytes are parsed"
    );
    let groups = vec!["1"; 33].join("||");
    assert_eq!(parse(&groups).unwrap_err(), "too many constraint groups (max 32)");
    assert!(parse(&vec!["1"; 32].join("||")).is_ok());
}

#[test]
fn ranges_are_rewritten_in_place() {
    let cases = [
        ("1 - 2", ">= 1, <= 2 "),
        ("1 - 2 || 4.0 - 5.1", ">= 1, <= 2 ||>= 4.0, <= 5.1 "),
        ("1 - 2, 1 - 2", ">= 1, <= 2 ,>= 1, <= 2 "),
        (">0.5 1.0 - 2.0", ">0.5>= 1.0, <= 2.0 "),
        ("1-2", "1-2"),
    ];
    for (range, want) in cases {
        assert_eq!(rewrite_ranges(range), want, "{range:?}");
    }
}

#[test]
fn quoting_is_go_percent_q() {
    assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
    assert_eq!(go_quote("\t\n\x01\x7f"), r#""\t\n\x01\x7f""#);
    assert_eq!(go_quote("é\u{85}"), "\"é\\u0085\"");
}
