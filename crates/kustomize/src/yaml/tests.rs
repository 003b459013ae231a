use super::*;

#[test]
fn malformed_yaml_names_file_and_line() {
    let err = parse_documents("a: 1\nb: [1, 2\nc: 3\n", "base/deploy.yaml").unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("base/deploy.yaml:"), "{msg}");
    assert!(matches!(err, BuildError::Yaml { line, .. } if line >= 2), "{msg}");
}

#[test]
fn non_object_document_is_rejected_with_its_index() {
    let err = parse_resources("kind: A\n---\n- 1\n- 2\n", "res.yaml", Ok).unwrap_err();
    assert_eq!(
        err.to_string(),
        "res.yaml: document 2 is not an object (found a list)"
    );
}

#[test]
fn anchors_aliases_and_merge_keys_resolve() {
    let docs = parse_documents("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nref: *b\n", "f").unwrap();
    assert_eq!(docs[0]["other"], serde_json::json!({"x": 1, "y": 3}));
    assert_eq!(docs[0]["ref"], serde_json::json!({"x": 1, "y": 2}));
}

#[test]
fn alias_expansion_beyond_the_budget_is_refused_naming_the_file() {
    // 600 aliases of a 500-item list: 300,000 nodes from a file of about 4 KB.
    let bomb = format!(
        "a: &a [{}]\nb:\n{}",
        vec!["x"; 500].join(","),
        "- *a\n".repeat(600)
    );
    let err = parse_documents(&bomb, "bomb.yaml").unwrap_err().to_string();
    assert!(err.starts_with("bomb.yaml:"), "{err}");
    assert!(err.contains("aliases expand to more than 100000 nodes"), "{err}");
    // A quarter of it is an ordinary, if generous, use of anchors.
    let fine = format!(
        "a: &a [{}]\nb:\n{}",
        vec!["x"; 500].join(","),
        "- *a\n".repeat(150)
    );
    let docs = parse_documents(&fine, "fine.yaml").unwrap();
    assert_eq!(docs[0]["b"].as_array().map(Vec::len), Some(150));
}

fn assert_refused_within_a_second(text: &str) {
    let started = std::time::Instant::now();
    assert!(parse_documents(text, "deep.yaml").is_err());
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(1), "{took:?}");
}

#[test]
fn flow_collections_nested_past_the_limit_are_refused_before_parsing() {
    let nested = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
    let err = parse_documents(&nested(1001), "deep.yaml")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "deep.yaml:1: malformed YAML: flow collections nested deeper than 1000 levels"
    );
    // A deep file is refused before the scanner, whose time grows with the square of the depth.
    assert_refused_within_a_second(&nested(200_000));
    // Brackets inside a plain scalar open nothing, however many documents repeat them.
    let plain = format!("a:\n  ow{}ner: x\n", "[".repeat(600));
    let docs = parse_documents(&[plain.as_str(); 3].join("---\n"), "plain.yaml").unwrap();
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[2]["a"][format!("ow{}ner", "[".repeat(600))], "x");
    let indented = |n: usize| format!("a:\n  {}{}\n", "[".repeat(n), "]".repeat(n));
    assert!(
        parse_documents(&indented(1001), "deep.yaml").is_err(),
        "so can an indented one"
    );
    // Shallow nesting is the parser's business as before.
    assert_eq!(
        parse_documents(&nested(3), "ok.yaml").unwrap()[0]["a"],
        serde_json::json!([[[]]])
    );
}

#[test]
fn lists_expand_and_empty_documents_drop() {
    let text = "---\n---\napiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n";
    let objs = parse_resources(text, "f", Ok).unwrap();
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[1]["kind"], "B");
}

#[test]
fn plain_scalars_resolve_like_kyaml_and_quoted_ones_stay_strings() {
    let text = "a: 0755\nb: '0755'\nc: -01\nd: 2024-01-01\ne: \"2024-01-01\"\nf: 1_000\ng: 0x1F\nh: yes\ni: .5\nj: !!str 12\nk: 08\n";
    let d = &parse_documents(text, "f").unwrap()[0];
    assert_eq!(d["a"], serde_json::json!(493));
    assert_eq!(d["b"], serde_json::json!("0755"));
    assert_eq!(d["c"], serde_json::json!(-1));
    assert_eq!(d["d"], serde_json::json!("2024-01-01T00:00:00Z"));
    assert_eq!(d["e"], serde_json::json!("2024-01-01"));
    assert_eq!(d["f"], serde_json::json!(1000));
    assert_eq!(d["g"], serde_json::json!(31));
    assert_eq!(d["h"], serde_json::json!("yes"));
    assert_eq!(d["i"], serde_json::json!(0.5));
    assert_eq!(d["j"], serde_json::json!("12"));
    assert_eq!(d["k"], serde_json::json!(8));
}

#[test]
fn composite_keys_are_refused_at_once_however_deeply_nested() {
    let err = parse_documents("a: 1\nb: {[x]: 1}\n", "list-key.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "list-key.yaml:2: malformed YAML: b: invalid map key: a list"
    );
    let nested = |n: usize| format!("kind: {}a{}\n", "{".repeat(n), "}".repeat(n));
    let err = parse_documents_yaml11(&nested(2), "map-key.yaml").unwrap_err();
    assert!(err.to_string().contains("invalid map key: an object"), "{err}");
    assert_refused_within_a_second(&nested(60));
}

#[test]
fn duplicate_keys_are_rejected() {
    let err = parse_documents("a: 1\na: 2\n", "dup.yaml").unwrap_err();
    assert!(err.to_string().starts_with("dup.yaml:"), "{err}");
    assert!(err.to_string().contains("already defined"), "{err}");
}

#[test]
fn emitted_yaml_reads_back_to_the_same_values() {
    let v = serde_json::json!({
        "a": "0755", "b": "2024-01-01", "c": "yes", "d": "", "e": "line1\nline2", "f": "- x", "g": "a: b",
        "h": [1, "2", {"x": [], "y": {}}, [true, null]], "i": {"j": {"k": 1.5}}, "l": "plain text", "m": "#x",
    });
    let text = crate::printer::emit_documents(&[v.clone(), serde_json::json!({"n": 1})]);
    let back = parse_documents(&text, "emitted").unwrap();
    assert_eq!(back, vec![v, serde_json::json!({"n": 1})], "{text}");
}

#[test]
fn strings_that_read_as_other_types_are_recognised() {
    // As kustomize v5.8.1 printed these ConfigMap values.
    let quoted = [
        "y",
        "Y",
        "n",
        "N",
        "on",
        "off",
        "yes",
        "No",
        "2024-01-01",
        "2024-01-01T10:00:00Z",
        "2024-1-1",
        "2001-12-14t21:59:43.10-05:00",
        "1:20",
        "190:20:30",
        "0x1F",
        "1e3",
        "~",
        "null",
        ".5",
        "+1",
        "0o17",
        "1_000",
        "0b101",
        ".inf",
        ".NaN",
        "1.0",
        "012",
        "0",
        "-0",
        "08",
        "True",
        "NULL",
        "+.5",
        "1.5e+3",
        "3.",
    ];
    for s in quoted {
        assert!(!reads_back_as_string(s), "{s}");
    }
    for s in ["=", "<<", "a=b", "1,000", "0x", "yes please", "1 2", "tRUE", "~x"] {
        assert!(reads_back_as_string(s), "{s}");
    }
}

#[test]
fn large_integral_floats_read_as_the_integers_kustomize_prints() {
    // Expected values as kustomize v5.8.1 printed these scalars. A leading zero with an 8
    // or 9 is no octal integer but a float; printed in full it reads back as an integer.
    let text = "a: 06153255929452608058\nb: -06153255929452608058\nc: 9223372036854775808\n\
                    d: -10000000000000000000\ne: 99999999999999999999\nf: 1.8446744073709550e19\n\
                    g: 6153255929452608512\nh: 0615325592945260805812345\n";
    let d = &parse_documents(text, "f").unwrap()[0];
    assert_eq!(d["a"], serde_json::json!(6153255929452609000_i64));
    assert_eq!(d["b"], serde_json::json!(-6153255929452609000_i64));
    assert_eq!(d["c"], serde_json::json!(9223372036854775808_u64));
    assert_eq!(d["d"], serde_json::json!(-1e19));
    assert_eq!(d["e"], serde_json::json!(1e20));
    assert_eq!(d["f"], serde_json::json!(18446744073709550000_u64));
    assert_eq!(d["g"], serde_json::json!(6153255929452608512_i64));
    assert_eq!(d["h"], serde_json::json!(6.153255929452608e23));
    let printed = crate::printer::emit_documents(std::slice::from_ref(d));
    assert_eq!(
        parse_documents(&printed, "printed").unwrap(),
        vec![d.clone()],
        "{printed}"
    );
}

#[test]
fn integral_floats_become_integers() {
    let docs = parse_documents("a: 1.0\nb: 1.5\n", "f").unwrap();
    assert_eq!(docs[0]["a"], serde_json::json!(1));
    assert_eq!(docs[0]["b"], serde_json::json!(1.5));
}

/// kyaml keeps a value written as nothing apart from a written null; a flow mapping's empty
/// value is the empty string.
#[test]
fn implicit_nulls_are_located_and_flow_empties_are_strings() {
    let text = "a:\nb: null\nc: ~\nd:   # why\nl:\n- x:\n  y: 1\n- {p: , q: null, 'r': }\ne: {\"f\": }\n";
    let mut seen = Vec::new();
    let objects = parse_resources_with_nulls(text, "t.yaml", |obj, nulls| {
        seen = nulls;
        Ok(obj)
    })
    .unwrap();
    let key = |k: &str| Step::Key(k.to_string());
    assert_eq!(
        seen,
        vec![
            vec![key("a")],
            vec![key("d")],
            vec![key("l"), Step::Index(0), key("x")]
        ]
    );
    assert_eq!(
        Value::Object(objects[0].clone()),
        serde_json::json!({"a": null, "b": null, "c": null, "d": null,
            "l": [{"x": null, "y": 1}, {"p": "", "q": null, "r": ""}], "e": {"f": ""}})
    );
}
