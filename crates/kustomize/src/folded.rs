//! A quirk of kustomize's YAML round trip that changes values: strings written as folded
//! block scalars (`>`, `>-`) keep that style inside kustomize and are printed and parsed
//! again before output. goyaml v3's folded printer writes an extra line break before a
//! more-indented line that follows a text line (when the value itself does not start with
//! a blank), so such a value gains a `\n` there. Annotation values are rebuilt as plain
//! strings at the end of kustomize's build, so they keep the value as written.

use serde_json::Value;

/// The first text line of every folded block scalar in `text`, trimmed: what a string that
/// came from a folded scalar starts with. Empty for most files (no `>` header). The content
/// of a block scalar is text, never a header, even when a line of it ends in `: >`.
pub(crate) fn folded_starts(text: &str) -> Vec<String> {
    if !text.contains('>') {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((folded, parent)) = block_header(line) else {
            continue;
        };
        let mut first = None;
        while let Some(next) = lines.peek() {
            let content = next.trim();
            if !content.is_empty() && indentation(next) <= parent {
                break;
            }
            if first.is_none() && !content.is_empty() {
                first = Some(content.to_string());
            }
            lines.next();
        }
        if folded && let Some(first) = first {
            out.push(first);
        }
    }
    out
}

/// For a line ending in a block scalar header (`key: >-`, `- |`): whether the scalar is
/// folded, and the column its content must be indented past (its key's, or its dash's).
fn block_header(line: &str) -> Option<(bool, usize)> {
    let (before, last) = line.trim_end().rsplit_once(' ')?;
    let before = before.trim_end();
    let folded = match last.chars().next()? {
        '>' => true,
        '|' => false,
        _ => return None,
    };
    if !last[1..]
        .chars()
        .all(|c| matches!(c, '-' | '+') || c.is_ascii_digit())
    {
        return None;
    }
    if before.ends_with('-') {
        return Some((folded, before.len() - 1));
    }
    if !before.ends_with(':') {
        return None;
    }
    let bytes = line.as_bytes();
    let mut column = indentation(line);
    while bytes.get(column) == Some(&b'-') && bytes.get(column + 1) == Some(&b' ') {
        column += 2;
        column += indentation(&line[column..]);
    }
    Some((folded, column))
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Applies the round-trip quirk to every string of `doc` (a parsed document) that came from
/// one of the folded scalars starting with `starts`, except annotation values.
pub(crate) fn apply(doc: &mut Value, starts: &[String]) {
    if starts.is_empty() {
        return;
    }
    let annotations = doc.pointer_mut("/metadata/annotations").map(std::mem::take);
    walk(doc, starts);
    if let Some(a) = annotations
        && let Some(slot) = doc.pointer_mut("/metadata/annotations")
    {
        *slot = a;
    }
}

fn walk(node: &mut Value, starts: &[String]) {
    match node {
        Value::String(s) if starts.iter().any(|f| s.starts_with(f.as_str())) => {
            if let Some(changed) = round_trip(s) {
                *s = changed;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, starts)),
        Value::Object(map) => map.values_mut().for_each(|v| walk(v, starts)),
        _ => {}
    }
}

/// The value after goyaml v3 prints it folded and reads it back, when that differs.
fn round_trip(s: &str) -> Option<String> {
    let blank = |c: char| c == ' ' || c == '\t';
    // Values the printer cannot fold are printed quoted, unchanged.
    if s.starts_with(blank) || s.ends_with(blank) || s.contains(" \n") || s.contains("\t\n") {
        return None;
    }
    let lines: Vec<&str> = s.split('\n').collect();
    if !lines
        .windows(2)
        .any(|w| !w[0].is_empty() && !w[0].starts_with(blank) && w[1].starts_with(blank))
    {
        return None;
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            let previous = lines[i - 1];
            if !previous.is_empty() && !previous.starts_with(blank) && line.starts_with(blank) {
                out.push('\n');
            }
        }
        out.push_str(line);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_more_indented_line_after_text_gains_a_break() {
        assert_eq!(
            round_trip("Restart:\n  kubectl x\nthen\n").as_deref(),
            Some("Restart:\n\n  kubectl x\nthen\n")
        );
        assert_eq!(round_trip("a b\nc\n"), None);
        assert_eq!(round_trip("  lead\n  x"), None);
    }

    #[test]
    fn the_content_of_a_block_scalar_holds_no_header() {
        // a literal block of embedded YAML, then a value starting as its folded text did
        let text = "data:\n  config: |\n    note: >\n      Run:\n        x\n  other: |\n    Run:\n      y\n";
        assert!(folded_starts(text).is_empty());
        let text = "items:\n- >\n  Run:\n    x\n- a: b\n  c: >-\n    Then:\n  d: >\n   Last\n";
        assert_eq!(folded_starts(text), vec!["Run:", "Then:", "Last"]);
    }

    #[test]
    fn only_values_of_folded_scalars_outside_annotations_change() {
        let text = "metadata:\n  annotations:\n    d: >\n      Run:\n        x\ndata:\n  r: >-\n    Run:\n      x\n  l: |\n    Other:\n      y\n";
        let starts = folded_starts(text);
        assert_eq!(starts, vec!["Run:", "Run:"]);
        let mut doc = json!({"metadata": {"annotations": {"d": "Run:\n  x\n"}}, "data": {"r": "Run:\n  x", "l": "Other:\n  y\n"}});
        apply(&mut doc, &starts);
        assert_eq!(
            doc,
            json!({"metadata": {"annotations": {"d": "Run:\n  x\n"}}, "data": {"r": "Run:\n\n  x", "l": "Other:\n  y\n"}})
        );
    }
}
