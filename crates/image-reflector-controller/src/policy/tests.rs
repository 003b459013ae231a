//! The engine end to end: Flux's policy cases and the surprises users report, as data.

use super::*;

fn semver(range: &str) -> Choice<'_> {
    Choice {
        semver: Some(range),
        ..Choice::default()
    }
}

fn alphabetical(order: &str) -> Choice<'_> {
    Choice {
        alphabetical: Some(order),
        ..Choice::default()
    }
}

fn numerical(order: &str) -> Choice<'_> {
    Choice {
        numerical: Some(order),
        ..Choice::default()
    }
}

fn run(choice: Choice<'_>, filter: Option<(&str, &str)>, tags: &[&str]) -> Result<String, PolicyError> {
    let policy = Policy::new(&choice)?;
    let filter = filter
        .map(|(pattern, extract)| TagFilter::new(pattern, extract))
        .transpose()?;
    policy.latest(filter.as_ref(), tags)
}

const SCANNED: &[&str] = &[
    "0.1.0",
    "0.1.1",
    "0.2.0",
    "1.0.0",
    "1.0.1",
    "1.0.2",
    "1.1.0-alpha",
];

type Case = (
    &'static str,
    Choice<'static>,
    Option<(&'static str, &'static str)>,
    &'static [&'static str],
    Result<&'static str, &'static str>,
);

const CASES: &[Case] = &[
    (
        "patch range",
        Choice {
            semver: Some("1.0.x"),
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Ok("1.0.2"),
    ),
    (
        "prerelease skipped",
        Choice {
            semver: Some(">=1.0.0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Ok("1.0.2"),
    ),
    (
        "prerelease asked for",
        Choice {
            semver: Some(">=1.0.0-0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Ok("1.1.0-alpha"),
    ),
    (
        "non-versions skipped, v kept",
        Choice {
            semver: Some(">=1.0.0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["latest", "1.0.0", "v1.5.0", "1.2", "main-abc", "2.0.0-rc.1"],
        Ok("v1.5.0"),
    ),
    (
        "rc9 above rc10",
        Choice {
            semver: Some(">=1.0.0-0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["1.0.0-rc10", "1.0.0-rc9"],
        Ok("1.0.0-rc9"),
    ),
    (
        "rc.10 above rc.9",
        Choice {
            semver: Some(">=1.0.0-0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["1.0.0-rc.9", "1.0.0-rc.10"],
        Ok("1.0.0-rc.10"),
    ),
    (
        "CalVer",
        Choice {
            semver: Some("2022.x"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["2022.1.0", "2022.10.3", "4.3.2-1", "2023.1.0"],
        Ok("2022.10.3"),
    ),
    (
        "CalVer leading zeros",
        Choice {
            semver: Some(">=2024.1.1"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["2024.01.05", "2024.12.01", "2023.12.31"],
        Ok("2024.12.01"),
    ),
    (
        "two-part tag is not a version",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["1.2", "1.1.0"],
        Ok("1.1.0"),
    ),
    (
        "tie: first seen wins",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["v1.0.0", "1.0.0"],
        Ok("v1.0.0"),
    ),
    (
        "tie: first seen wins, other order",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["1.0.0+b", "v1.0.0"],
        Ok("1.0.0+b"),
    ),
    (
        "nothing in range",
        Choice {
            semver: Some(">=3.0.0"),
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Err("unable to determine latest version from provided list"),
    ),
    (
        "no versions at all",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &["latest", "1.2"],
        Err("unable to determine latest version from provided list"),
    ),
    (
        "no tags",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        &[],
        Err("version list argument cannot be empty"),
    ),
    (
        "invalid range",
        Choice {
            semver: Some("*-*"),
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Err(r#"invalid policy: improper constraint: "*-*""#),
    ),
    (
        "empty choice",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: None,
        },
        None,
        SCANNED,
        Err("invalid policy: given ImagePolicyChoice object is invalid"),
    ),
    (
        "semver wins the union",
        Choice {
            semver: Some("0.1.x"),
            alphabetical: Some("asc"),
            numerical: Some("asc"),
        },
        None,
        SCANNED,
        Ok("0.1.1"),
    ),
    (
        "alphabetical before numerical",
        Choice {
            semver: None,
            alphabetical: Some("desc"),
            numerical: Some("bad"),
        },
        None,
        &["b", "a"],
        Ok("a"),
    ),
    (
        "alphabetical default asc",
        Choice {
            semver: None,
            alphabetical: Some(""),
            numerical: None,
        },
        None,
        &["xenial", "zesty", "bionic"],
        Ok("zesty"),
    ),
    (
        "alphabetical desc",
        Choice {
            semver: None,
            alphabetical: Some("desc"),
            numerical: None,
        },
        None,
        &["xenial", "zesty", "bionic"],
        Ok("bionic"),
    ),
    (
        "alphabetical empty",
        Choice {
            semver: None,
            alphabetical: Some("asc"),
            numerical: None,
        },
        None,
        &[],
        Err("version list argument cannot be empty"),
    ),
    (
        "alphabetical bad order",
        Choice {
            semver: None,
            alphabetical: Some("newest"),
            numerical: None,
        },
        None,
        &["a"],
        Err("invalid policy: invalid order argument provided: 'NEWEST', must be one of: ASC, DESC"),
    ),
    (
        "numerical default asc",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some(""),
        },
        None,
        &["9", "10", "2"],
        Ok("10"),
    ),
    (
        "numerical desc",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some("DESC"),
        },
        None,
        &["9", "10", "2"],
        Ok("2"),
    ),
    (
        "numerical bad order",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some("x"),
        },
        None,
        &["1"],
        Err("invalid policy: invalid order argument provided: 'X', must be one of: ASC, DESC"),
    ),
    (
        "numerical non-number",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some("asc"),
        },
        None,
        &["1", "latest"],
        Err("failed to parse invalid numeric value 'latest'"),
    ),
    (
        "numerical over an extracted id",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some("asc"),
        },
        Some((r"^main-[a-f0-9]+-(?P<id>[0-9]+)$", "$id")),
        &["main-845d3a80-2", "main-3e32dc8a-100", "latest"],
        Ok("main-3e32dc8a-100"),
    ),
    (
        "numerical error names the extracted value",
        Choice {
            semver: None,
            alphabetical: None,
            numerical: Some("asc"),
        },
        Some((r"^build-(?P<ts>.*)$", "$ts")),
        &["build-20260528-153652"],
        Err("failed to parse invalid numeric value '20260528-153652'"),
    ),
    (
        "alphabetical over an extracted timestamp",
        Choice {
            semver: None,
            alphabetical: Some("asc"),
            numerical: None,
        },
        Some((r"^[a-z]+-(?P<ts>\d{14})$", "$ts")),
        &["main-20240101000000", "dev-20240301000000", "main-20240201000000"],
        Ok("dev-20240301000000"),
    ),
    (
        "semver over an extracted version",
        Choice {
            semver: Some("^1"),
            alphabetical: None,
            numerical: None,
        },
        Some((r"^app-v(?P<v>.+)-linux$", "$v")),
        &[
            "app-v1.2.0-linux",
            "app-v1.10.0-linux",
            "app-v2.0.0-linux",
            "app-v1.11.0-darwin",
        ],
        Ok("app-v1.10.0-linux"),
    ),
    (
        "filter without extract",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        Some(("^v", "")),
        &["v1.0.0", "2.0.0"],
        Ok("v1.0.0"),
    ),
    (
        "filter keeps nothing",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        Some(("^release-", "")),
        SCANNED,
        Err("version list argument cannot be empty"),
    ),
    (
        "invalid filter",
        Choice {
            semver: Some("*"),
            alphabetical: None,
            numerical: None,
        },
        Some(("^(main", "")),
        SCANNED,
        Err(
            "failed to filter tags: invalid regular expression pattern '^(main': error parsing regexp: missing closing ): `^(main`",
        ),
    ),
];

#[test]
fn policy_table() {
    for (name, choice, filter, tags, want) in CASES {
        let got = run(*choice, *filter, tags);
        let got = got.as_deref().map_err(ToString::to_string);
        assert_eq!(got, want.map_err(str::to_string), "{name}");
    }
}

#[test]
fn helpers_build_the_union() {
    assert_eq!(run(semver("0.2.x"), None, SCANNED).as_deref(), Ok("0.2.0"));
    assert_eq!(
        run(alphabetical("ASC"), None, SCANNED).as_deref(),
        Ok("1.1.0-alpha")
    );
    assert_eq!(
        run(numerical("asc"), Some((r"^(\d+)\.", "$1")), &["1.0.0", "2.0.0"]).as_deref(),
        Ok("2.0.0")
    );
}

#[test]
fn terminal_errors_are_the_spec_ones() {
    let invalid = Policy::new(&semver("*-*")).unwrap_err();
    assert!(invalid.is_terminal());
    let filter = TagFilter::new("(", "").unwrap_err();
    assert!(filter.is_terminal());
    for retryable in [
        PolicyError::NoTags,
        PolicyError::NoMatch,
        PolicyError::NotNumeric("x".into()),
    ] {
        assert!(!retryable.is_terminal(), "{retryable}");
    }
}
