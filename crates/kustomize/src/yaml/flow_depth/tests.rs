use super::*;
use crate::yaml::parse_documents;

const DEEP: usize = MAX_FLOW_DEPTH + 1;

fn refused(text: &str) -> bool {
    refuse_deep_flow(text, "deep.yaml").is_err()
}

/// `n` lines `k<i>: <value>` in one mapping.
fn values(n: usize, value: &str) -> String {
    (0..n).map(|i| format!("k{i}: {value}\n")).collect()
}

#[test]
fn brackets_inside_plain_scalars_do_not_add_up_across_the_file() {
    // The fuzzer's shape: a ConfigMap value copied into more than a thousand keys.
    let value = "xxx  xxx [{namexxx";
    let text = format!("data:\n{}", values(1500, value).replace("k", "  k"));
    let docs = parse_documents(&text, "cm.yaml").unwrap();
    assert_eq!(docs[0]["data"]["k1499"], value);
    assert_eq!(docs[0]["data"].as_object().map(|m| m.len()), Some(1500));
    for value in ["a [b", "a {b", "a - [b", "a ? {b", "a &b [c", "a !t [b", "[]x ["] {
        assert!(!refused(&values(DEEP, value)), "{value}");
    }
    let items: String = (0..DEEP).map(|_| "- a [b\n").collect();
    assert!(!refused(&items));
}

#[test]
fn brackets_in_quoted_scalars_comments_and_block_scalars_are_ignored() {
    for value in [
        "\"a [b\"",
        "'a {b'",
        "\"a \\\" [b\"",
        "'it''s [b'",
        "x # see [y",
        "\"x\" # [[",
        "# [",
    ] {
        assert!(!refused(&values(DEEP, value)), "{value}");
    }
    let script: String = (0..DEEP).map(|_| "  [ -f x && y: [ z\n").collect();
    for header in ["|", ">-", "|2", "|+ # comment"] {
        assert!(!refused(&format!("run: {header}\n{script}")), "{header}");
    }
    assert!(!refused(&format!("- a: |\n{}", script.replace("  [", "      ["))));
    assert!(!refused(&format!("--- |\n{}", script.replace("  [", "["))));
}

#[test]
fn deep_flow_where_a_node_starts_is_still_refused() {
    let open = |n: usize, b: &str| b.repeat(n);
    for prefix in [
        "key: ",
        "key:\t",
        "- ",
        "- - ",
        "? ",
        "--- ",
        "",
        "    ",
        "key: !!seq ",
        "- &a ",
        "key: &a !t ",
        "\"quoted key\": ",
        "[x]: ",
        "- key: ",
    ] {
        for bracket in ["[", "{"] {
            // The first value is quoted: a plain one would go on in the indented line.
            let text = format!("a: \"1\"\n{prefix}{}\n", open(DEEP, bracket));
            let err = refuse_deep_flow(&text, "deep.yaml").unwrap_err().to_string();
            assert_eq!(
                err, "deep.yaml:2: malformed YAML: flow collections nested deeper than 1000 levels",
                "{prefix:?}{bracket}"
            );
            assert!(!refused(&format!("{prefix}{}", open(MAX_FLOW_DEPTH, bracket))));
        }
    }
    // Inside a flow collection every bracket counts, on any line, as any text after it.
    assert!(refused(&format!("k: [\n{}", "  x [\n".repeat(DEEP))));
    assert!(refused(&format!("k: {{a: \"{}\"", open(DEEP, "{"))));
}

#[test]
fn a_block_scalar_ends_where_its_indentation_does() {
    let deep = "[".repeat(DEEP);
    for text in [
        format!("run: |\n  text [\nkey: {deep}\n"),
        format!("- a: |\n    text\n  b: {deep}\n"),
        format!("- |\n  text\n- {deep}\n"),
        format!("a:\n  b: >\n      text\n    c: {deep}\n"),
        format!("a: |4\n    text\n  {deep}\n"),
        format!("--- |\ntext\n--- {deep}\n"),
        // Not a block scalar header: the next line is scanned as any other.
        format!("a: |x\n  {deep}\n"),
    ] {
        assert!(refused(&text), "{text:.40}");
    }
}

#[test]
fn a_line_continuing_a_plain_scalar_starts_no_node() {
    // The fuzzer's second shape: our printer folds a long explicit key over lines, and a
    // folded line began with `{`; copied under a thousand keys, it was refused.
    let key = format!("a{} b", "{".repeat(20));
    let entry = |i: usize| format!("  k{i}:\n    ? {key}\n      {{{{x:y {{z\n    : v\n");
    let text = format!("data:\n{}", (0..DEEP).map(entry).collect::<String>());
    assert!(!refused(&text));
    let docs = parse_documents(&text, "folded.yaml").unwrap();
    assert_eq!(docs[0]["data"]["k1000"][format!("{key} {{{{x:y {{z")], "v");
    let open = "{".repeat(DEEP);
    for text in [
        format!("k: a\n  {open}\n"),
        format!("- a\n  {open}\n"),
        format!("? a\n\n  b\n  {open}\n: v\n"),
    ] {
        assert!(!refused(&text), "{text}");
        parse_documents(&text, "folded.yaml").unwrap();
    }
}

#[test]
fn a_line_not_continuing_a_plain_scalar_still_counts() {
    let open = "[".repeat(DEEP);
    for text in [
        format!("k:\n  {open}\n"),
        format!("k: a\nj: {open}\n"),
        format!("k: a\n{open}\n"),
        format!("- a\n- {open}\n"),
        format!("k: a # c\n  {open}\n"),
        format!("k: \"a\"\n  {open}\n"),
        format!("k: a\n---\n{open}\n"),
        format!("k: &a\n  {open}\n"),
    ] {
        assert!(refused(&text), "{text}");
    }
}
