//! Expected values follow bash parameter expansion and fluxcd/pkg/envsubst's own test table;
//! the bounds on what one expansion may write and read are checked here too.

use super::*;

/// The output limit of a build: 16 MiB.
const LIMIT: usize = kustomize::DEFAULT_MAX_FILE_BYTES as usize;

/// [`super::expand`] within the build's limit.
fn expand(text: &str, vars: &BTreeMap<String, String>, strict: bool) -> Result<String, EnvsubstError> {
    super::expand(text, vars, strict, LIMIT)
}

fn vars() -> BTreeMap<String, String> {
    [
        ("name", "world"),
        ("path", "a/b/c.tar.gz"),
        ("empty", ""),
        ("mixed", "hELLO"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Expected values follow bash parameter expansion except where fluxcd/pkg/envsubst's
/// documented semantics differ (every default operator means "value if non-empty").
#[test]
fn each_operator() {
    let cases = [
        ("hello ${name}", "hello world"),
        ("${#name}", "5"),
        ("${mixed^}", "HELLO"),
        ("${mixed^^}", "HELLO"),
        ("${name,}", "world"),
        ("${mixed,,}", "hello"),
        ("${name:1}", "orld"),
        ("${name:1:3}", "orl"),
        ("${name:-2}", "world"),
        // Go's Atoi does not skip the space: the value comes back unchanged.
        ("${name: -2}", "world"),
        ("${path#*/}", "b/c.tar.gz"),
        ("${path##*/}", "c.tar.gz"),
        ("${path##a*}", ""),
        ("${path%.*}", "a/b/c.tar"),
        ("${path%%.*}", "a/b/c"),
        ("${name/o/0}", "w0rld"),
        ("${path//\\//-}", "a-b-c.tar.gz"),
        ("${name/#wo/WO}", "WOrld"),
        ("${name/%ld/LD}", "worLD"),
        ("${unset=dflt}", "dflt"),
        ("${unset:=dflt}", "dflt"),
        ("${empty:-dflt}", "dflt"),
        ("${name:=dflt}", "world"),
        ("${unset:+alt}", "alt"),
        ("${unset:?msg}", "msg"),
        ("${unset:=${name}-x}", "world-x"),
        ("$name and $$name", "$name and $name"),
        ("$${name}", "${name}"),
        ("cost: $5", "cost: $5"),
    ];
    for (input, expected) in cases {
        assert_eq!(expand(input, &vars(), true).as_deref(), Ok(expected), "{input}");
    }
}

/// One variable (name, value), and inputs with what they expand to.
type Group<'a> = ((&'a str, &'a str), &'a [(&'a str, &'a str)]);

/// Cases of fluxcd/pkg/envsubst's own TestExpand (expected values from its test table),
/// grouped by the variable they set.
#[test]
fn the_reference_implementation_table() {
    let groups: &[Group] = &[
        (
            ("var01", "abcdEFGH28ij"),
            &[
                ("${#var01}", "12"),
                ("${var01^}", "AbcdEFGH28ij"),
                ("${var=${var01^^}}", "ABCDEFGH28IJ"),
                ("$${var01}", "${var01}"),
                (
                    "some text ${var01}$${var$${var01}$var01${var01}",
                    "some text abcdEFGH28ij${var${var01}$var01abcdEFGH28ij",
                ),
            ],
        ),
        (("var01", "ABCDEFGH28IJ"), &[("${var01,}", "aBCDEFGH28IJ")]),
        (
            ("path_name", "/home/bozo/ideas/thoughts.for.today"),
            &[
                ("${path_name:11}", "ideas/thoughts.for.today"),
                ("${path_name:11:5}", "ideas"),
            ],
        ),
        (("var", "abc"), &[("${var=xyz}", "abc")]),
        (
            ("default_var", "foo"),
            &[
                ("something ${var=${default_var}}", "something foo"),
                ("something $${var=${default_var}}", "something ${var=foo}"),
                (r"\\something ${var=${default_var}}", r"\\something foo"),
            ],
        ),
        (
            ("default_var", "foo1"),
            &[
                ("foo: ${var=${default_var}-suffix}", "foo: foo1-suffix"),
                (
                    "foo: ${var=prefix${default_var}-suffix}",
                    "foo: prefixfoo1-suffix",
                ),
            ],
        ),
        (
            ("stringZ", "abcABC123ABCabc"),
            &[
                ("${stringZ/%abc/XYZ}", "abcABC123ABCXYZ"),
                ("${stringZ/#abc/XYZ}", "XYZABC123ABCabc"),
                ("${stringZ//abc/xyz}", "xyzABC123ABCxyz"),
                ("${stringZ/abc/xyz}", "xyzABC123ABCabc"),
            ],
        ),
        (
            ("stringZ", "somevalue"),
            &[
                ("${stringZ/#/prefix-}", "prefix-somevalue"),
                ("${stringZ/%/-suffix}", "somevalue-suffix"),
            ],
        ),
        (("stringZ", "foo/bar"), &[(r"${stringZ/\//-}", "foo-bar")]),
        (
            ("stringZ", "foo/bar/baz"),
            &[(r"${stringZ//\//-}", "foo-bar-baz")],
        ),
        (("stringZ", "foo.bar"), &[("${stringZ/./}", "foobar")]),
        (
            ("filename", "bash.string.txt"),
            &[
                ("${filename#*.}", "string.txt"),
                ("${filename##*.}", "txt"),
                ("${filename%.*}", "bash.string"),
                ("${filename%%.*}", "bash"),
            ],
        ),
        (
            ("filename", "path/to/file"),
            &[("${filename#*/}", "to/file"), ("${filename##*/}", "file")],
        ),
        (
            ("filename", "/path/to/file"),
            &[("${filename#*/}", "path/to/file"), ("${filename##*/}", "file")],
        ),
    ];
    for ((name, value), cases) in groups {
        let vars = [(name.to_string(), value.to_string())].into();
        for (input, expected) in *cases {
            // The reference table runs without strict mode (every variable "exists").
            assert_eq!(
                expand(input, &vars, false).as_deref(),
                Ok(*expected),
                "{input} with {name}={value}"
            );
        }
    }
}

#[test]
fn strict_mode_fails_on_unset_variables_without_a_default() {
    assert_eq!(
        EnvsubstError::NotSet("missing".into()).to_string(),
        "variable not set (strict mode): \"missing\""
    );
    for input in [
        "a: ${missing}",
        "${missing^^}",
        // The default's own variables are expanded (and checked) first.
        "${name:=${missing}}",
    ] {
        assert_eq!(
            expand(input, &vars(), true),
            Err(EnvsubstError::NotSet("missing".into())),
            "{input}"
        );
    }
    assert_eq!(expand("a: ${missing}", &vars(), false).as_deref(), Ok("a: "));
    // fluxcd/pkg/envsubst's TestExpandStrict: operators that read the value fail...
    for input in [
        "${#missing}",
        "${missing^}",
        "${missing^^}",
        "${missing,}",
        "${missing,,}",
        "${missing:0}",
        "${missing:0:10}",
        "${missing/pattern/replacement}",
        "${missing//pattern/replacement}",
        "${missing/#pattern/replacement}",
        "${missing/%pattern/replacement}",
        "${missing#pattern}",
        "${missing##pattern}",
        "${missing%pattern}",
        "${missing%%pattern}",
    ] {
        assert_eq!(
            expand(input, &BTreeMap::new(), true),
            Err(EnvsubstError::NotSet("missing".into())),
            "{input}"
        );
    }
    // ...and the default operators supply their value.
    for (input, expected) in [
        ("${missing:-fallback}", "fallback"),
        ("${missing:=assigned}", "assigned"),
        ("${missing=assigned}", "assigned"),
    ] {
        assert_eq!(
            expand(input, &BTreeMap::new(), true).as_deref(),
            Ok(expected),
            "{input}"
        );
    }
}

#[test]
fn nesting_is_bounded_and_patterns_match_in_polynomial_time() {
    let nested = |levels: usize| format!("{}x{}", "${a:=".repeat(levels), "}".repeat(levels));
    assert_eq!(expand(&nested(64), &BTreeMap::new(), true).as_deref(), Ok("x"));
    assert_eq!(
        expand(&nested(65), &BTreeMap::new(), true),
        Err(EnvsubstError::TooDeep)
    );
    assert_eq!(
        expand(&nested(100_000), &BTreeMap::new(), true),
        Err(EnvsubstError::TooDeep)
    );

    // Trying every split of 12 stars over 30 characters, for each of 30 prefixes, takes
    // minutes; matching with one backtrack point takes microseconds.
    let value = "a".repeat(30);
    let vars = BTreeMap::from([("v".to_string(), value.clone())]);
    let text = format!("${{v#{}b}}", "*a".repeat(12));
    let started = std::time::Instant::now();
    assert_eq!(expand(&text, &vars, true), Ok(value));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn malformed_expressions_fail() {
    let cases = [
        ("${name", EnvsubstError::MissingClosingBrace),
        ("${}", EnvsubstError::VariableName),
        ("${name-x}", EnvsubstError::MissingClosingBrace),
        ("${name:=x", EnvsubstError::FuncSubstitution),
        ("${#}", EnvsubstError::BadSubstitution),
    ];
    for (input, error) in cases {
        assert_eq!(expand(input, &vars(), true), Err(error), "{input}");
    }
}

fn one_var(name: &str, value: String) -> BTreeMap<String, String> {
    BTreeMap::from([(name.to_string(), value)])
}

#[test]
fn positions_past_the_end_or_inside_a_character_never_panic() {
    // Before: `${v:9223372036854775807:1}` overflowed an add ("build panicked").
    // A negative position can only come from a variable: `${v:-1}` is a default.
    let vars = BTreeMap::from([
        ("v".to_string(), "world".to_string()),
        ("min".to_string(), i64::MIN.to_string()),
        ("neg".to_string(), "-2".to_string()),
    ]);
    let cases = [
        ("${v:9223372036854775807:1}", "".to_string()),
        ("${v:9223372036854775807}", "".into()),
        ("${v:5:1}", "".into()),
        ("${v:1:9223372036854775807}", "orld".into()),
        ("${v:${min}}", "world".into()),
        ("${v:${min}:2}", "wo".into()),
        ("${v:0:${min}}", "".into()),
        ("${v:${neg}:-1}", "l".into()),
        ("${v:3:-3}", "".into()),
        ("${v:1:99999999999999999999}", "world".into()),
    ];
    for (input, expected) in cases {
        assert_eq!(expand(input, &vars, true), Ok(expected), "{input}");
    }
    // Positions count bytes, as Go's do: a cut inside a character is U+FFFD, not a panic.
    let vars = one_var("u", "üñ".into());
    assert_eq!(expand("${u:2}", &vars, true).as_deref(), Ok("ñ"));
    assert_eq!(expand("${u:1:2}", &vars, true).as_deref(), Ok("\u{fffd}\u{fffd}"));
    assert_eq!(expand("${u:3}", &vars, true).as_deref(), Ok("\u{fffd}"));
}

#[test]
fn output_is_bounded_naming_the_variable() {
    // Before: `${big}` 30,000 times in one object was written out in full; with a 100 KB
    // value that is 3 GB, and the build aborted on memory.
    let vars = one_var("big", "a".repeat(100_000));
    let too_large = |variable: &str| EnvsubstError::TooLarge {
        variable: Some(variable.into()),
        limit: LIMIT,
    };
    let bombs = [
        "${big}\n".repeat(30_000),
        // Arguments count too: a default made of a thousand values...
        format!("${{unset:={}}}", "${big}".repeat(1000)),
        // ...and a replacement repeated at each of 100,000 matches (10 GB).
        "${big//a/${big}}".into(),
        // An empty pattern matches before every character.
        "${big///${big}}".into(),
    ];
    for bomb in &bombs {
        assert_eq!(expand(bomb, &vars, true), Err(too_large("big")), "{:.40}", bomb);
    }
    assert_eq!(
        too_large("big").to_string(),
        "expanding ${big} makes the object larger than the limit of 16777216 bytes"
    );

    // The limit is exact, and plain text after an expansion names that expansion.
    let vars = one_var("v", "12345".into());
    assert_eq!(
        super::expand("${v}${v}", &vars, true, 10).as_deref(),
        Ok("1234512345")
    );
    let over = |variable: Option<&str>| EnvsubstError::TooLarge {
        variable: variable.map(str::to_string),
        limit: 9,
    };
    assert_eq!(super::expand("${v}${v}", &vars, true, 9), Err(over(Some("v"))));
    assert_eq!(super::expand("${v}12345", &vars, true, 9), Err(over(Some("v"))));
    assert_eq!(super::expand("0123456789", &vars, true, 9), Err(over(None)));
    assert_eq!(
        over(None).to_string(),
        "its text alone makes the object larger than the limit of 9 bytes"
    );
}

#[test]
fn trims_of_long_values_are_linear_and_repeated_scans_are_bounded() {
    // Before: each trim matched every prefix on its own; 80,000 characters took 9 s.
    let value = "x".repeat(80_000);
    let vars = one_var("v", value.clone());
    for (input, expected) in [
        ("${v#*y}", value.as_str()),
        ("${v##*y}", &value),
        ("${v%y*}", &value),
        ("${v%%x*}", ""),
        ("${v#x*}", &value[1..]),
    ] {
        assert_eq!(expand(input, &vars, true).as_deref(), Ok(expected), "{input}");
    }

    // Each of these reads the whole value and writes nothing: the reads are bounded (by the
    // limit too), the output limit alone would not stop them.
    let vars = one_var("big", "a".repeat(1 << 16));
    let costly = EnvsubstError::TooCostly {
        variable: "big".into(),
        limit: 1 << 20,
    };
    for op in ["%%a*", "##*a", "//a/", "%%[a]*"] {
        let text = format!("${{big{op}}}").repeat(100);
        let expanded = super::expand(&text, &vars, true, 1 << 20);
        assert_eq!(expanded, Err(costly.clone()), "{op}");
    }
    assert_eq!(
        costly.to_string(),
        "expanding ${big} reads more than 1048576 bytes of values and patterns"
    );
    // Arguments are read too: here a 64 KiB position that is not a number, so the result
    // is the one-byte value each time.
    let vars = BTreeMap::from([
        ("v".to_string(), "x".to_string()),
        ("big".to_string(), "a".repeat(1 << 16)),
    ]);
    assert_eq!(
        super::expand(&"${v:${big}}".repeat(100), &vars, true, 1 << 20),
        Err(EnvsubstError::TooCostly {
            variable: "v".into(),
            limit: 1 << 20,
        })
    );
}
