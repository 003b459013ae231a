//! Prints objects as YAML byte for byte as kustomize v5.8.1 does: each object goes through
//! JSON into goyaml v2's encoder, whose rules are reproduced here.
//!
//! - Keys are sorted in goyaml v2's natural order: runs of digits compare by value (`a9`
//!   before `a10`, `x7` before `x07`), and a non-letter sorts before a letter (`a_b` before
//!   `aB`).
//! - Two-space indent; a list that is a map value starts at its key's column, a list inside
//!   a list continues the `- ` line (`- - 1`); `{}` and `[]` for empty maps and lists.
//! - A string that a YAML 1.1 reader would take for something else (`"yes"`, `"0755"`,
//!   `"1e3"`, `"~"`, `"2024-01-01"`, `"1:20"`, `""`) is double-quoted. Otherwise it is plain
//!   unless it starts with an indicator (`'-'`, `'*x'`, `'? x'`), holds `: ` or ` #`, starts
//!   or ends with a space, or is `---`/`...`: then single-quoted (quotes doubled).
//! - A string with a line break is a literal block: `|` ending in one newline, `|-` without
//!   one, `|+` with more, and an indentation digit (`|2`) when it starts with a space or a
//!   break. Lines ending in a space, a value ending in a space, and characters outside
//!   goyaml's printable set (tab, `\r`, controls, anything beyond the Basic Multilingual
//!   Plane) make it double-quoted instead, with escapes (`\t`, `\n`, `\x01`, `\U0001F600`).
//! - Plain, single- and double-quoted scalars fold at a space once the line passes 80
//!   columns (a double-quoted fold before a second space writes `\`); keys never fold.
//! - A key with a line break or longer than 128 bytes is written as `? key` / `: value`.
//! - Floats print as Go's `%g` (`1e-05`, `1.2345675e+06`); integral ones as integers.
//! - A string starting with a byte order mark is double-quoted with every character
//!   escaped (`"\uFEFF\x78"`), as goyaml's check looks at the start of the value only.
//!
//! Every deliberate difference from kustomize's text is listed here:
//! - Control characters other than tab, `\n` and `\r` make kustomize fail ("control
//!   characters are not allowed"); this printer escapes them instead.

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// Prints objects as YAML documents separated by `---`.
pub(crate) fn emit_documents(objects: &[Value]) -> String {
    document_pieces(objects).collect()
}

/// The stream of [`emit_documents`] one document at a time (each piece after the first
/// starts with its `---` separator), so a caller can write or hash a big build without
/// holding its whole text.
pub fn document_pieces<V: std::borrow::Borrow<Value>>(
    objects: impl IntoIterator<Item = V>,
) -> impl Iterator<Item = String> {
    objects.into_iter().enumerate().map(|(i, obj)| {
        let document = emit_document(obj.borrow());
        if i > 0 {
            format!("---\n{document}")
        } else {
            document
        }
    })
}

/// One YAML document, without a separator.
pub fn emit_document(obj: &Value) -> String {
    let mut e = Emitter {
        out: String::new(),
        column: 0,
        whitespace: true,
        indention: true,
    };
    e.node(obj, -1, false, false);
    if !e.out.ends_with('\n') {
        e.out.push('\n');
    }
    e.out
}

const BEST_WIDTH: usize = 80;
const BEST_INDENT: i32 = 2;
const MAX_SIMPLE_KEY: usize = 128;

/// The writer's position: goyaml decides line breaks and spaces from these.
struct Emitter {
    out: String,
    /// Characters (not bytes) since the last line break.
    column: usize,
    /// The last thing written was whitespace.
    whitespace: bool,
    /// The line holds only indentation and indicators so far.
    indention: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

fn increase(indent: i32, flow: bool, indentless: bool) -> i32 {
    if indent < 0 {
        if flow { BEST_INDENT } else { 0 }
    } else if indentless {
        indent
    } else {
        indent + BEST_INDENT
    }
}

impl Emitter {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn write_indent(&mut self, indent: i32) {
        let indent = indent.max(0) as usize;
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn indicator(&mut self, text: &str, need_whitespace: bool, is_whitespace: bool, is_indention: bool) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        text.chars().for_each(|c| self.put(c));
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn node(&mut self, v: &Value, indent: i32, mapping_context: bool, simple_key: bool) {
        match v {
            Value::Object(m) if !m.is_empty() => self.mapping(m, indent),
            Value::Array(a) if !a.is_empty() => {
                let indentless = mapping_context && !self.indention;
                let indent = increase(indent, false, indentless);
                for item in a {
                    self.write_indent(indent);
                    self.indicator("-", true, false, true);
                    self.node(item, indent, false, false);
                }
            }
            Value::Object(_) => self.empty_flow("{", "}"),
            Value::Array(_) => self.empty_flow("[", "]"),
            Value::String(s) => self.string(s, indent, simple_key),
            Value::Null => self.plain("null", indent, false),
            Value::Bool(b) => self.plain(if *b { "true" } else { "false" }, indent, false),
            Value::Number(n) => self.plain(&number(n), indent, false),
        }
    }

    fn empty_flow(&mut self, open: &str, close: &str) {
        self.indicator(open, true, true, false);
        self.indicator(close, false, false, false);
    }

    fn mapping(&mut self, map: &Map<String, Value>, indent: i32) {
        let indent = increase(indent, false, false);
        for (k, v) in in_key_order(map.iter().collect(), |(k, _)| k.as_str()) {
            self.write_indent(indent);
            if !analyze(k).multiline && k.len() <= MAX_SIMPLE_KEY {
                self.string(k, indent, true);
                self.indicator(":", false, false, false);
            } else {
                self.indicator("?", true, false, true);
                self.string(k, indent, false);
                self.write_indent(indent);
                self.indicator(":", true, false, true);
            }
            self.node(v, indent, true, false);
        }
    }

    fn string(&mut self, s: &str, indent: i32, simple_key: bool) {
        let scan = analyze(s);
        let mut style = if s.contains('\n') {
            Style::Literal
        } else if super::yaml::reads_back_as_string(s) {
            Style::Plain
        } else {
            Style::Double
        };
        if style == Style::Plain && (!scan.plain_allowed || (s.is_empty() && simple_key)) {
            style = Style::Single;
        }
        if style == Style::Single && !scan.single_allowed {
            style = Style::Double;
        }
        if style == Style::Literal && (!scan.block_allowed || simple_key) {
            style = Style::Double;
        }
        let indent = increase(indent, true, false);
        let breaks = !simple_key;
        match style {
            Style::Plain => self.plain(s, indent, breaks),
            Style::Single => self.single_quoted(s, indent, breaks),
            Style::Double => self.double_quoted(s, indent, breaks),
            Style::Literal => self.literal(s, indent),
        }
    }

    /// Writes a line break from the value: `\n` as a newline, others (U+2028...) as
    /// themselves; either way the column starts again.
    fn write_break(&mut self, c: char) {
        self.out.push(c);
        self.column = 0;
    }

    fn plain(&mut self, s: &str, indent: i32, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        self.flowing(s, indent, allow_breaks, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn single_quoted(&mut self, s: &str, indent: i32, allow_breaks: bool) {
        self.indicator("'", true, false, false);
        self.flowing(s, indent, allow_breaks, true);
        self.indicator("'", false, false, false);
    }

    /// The text of a plain or single-quoted scalar: folded at the first of a run of spaces
    /// past the line width (inside quotes, never at the first or last character), line
    /// breaks kept, and quotes doubled when `quoted`.
    fn flowing(&mut self, s: &str, indent: i32, allow_breaks: bool, quoted: bool) {
        let (mut spaces, mut breaks) = (false, false);
        let last = s.len().saturating_sub(1);
        let mut chars = s.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == ' ' {
                let next_space = chars.peek().is_some_and(|(_, n)| *n == ' ');
                let inside = !quoted || (i != 0 && i != last);
                if allow_breaks && !spaces && self.column > BEST_WIDTH && inside && !next_space {
                    self.write_indent(indent);
                } else {
                    self.put(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent(indent);
                }
                if quoted && c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                (spaces, breaks) = (false, false);
            }
        }
    }

    fn double_quoted(&mut self, s: &str, indent: i32, allow_breaks: bool) {
        self.indicator("\"", true, false, false);
        let starts_with_bom = s.starts_with('\u{feff}');
        let mut spaces = false;
        let last = s.len().saturating_sub(1);
        let mut chars = s.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if starts_with_bom || !is_printable(c) || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                match escape(c) {
                    Some(e) => self.put(e),
                    None => {
                        let code = c as u32;
                        let hex = match code {
                            0..=0xFF => format!("x{code:02X}"),
                            0x100..=0xFFFF => format!("u{code:04X}"),
                            _ => format!("U{code:08X}"),
                        };
                        hex.chars().for_each(|h| self.put(h));
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if allow_breaks && !spaces && self.column > BEST_WIDTH && i != 0 && i != last {
                    self.write_indent(indent);
                    if chars.peek().is_some_and(|(_, n)| *n == ' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.indicator("\"", false, false, false);
    }

    fn literal(&mut self, s: &str, indent: i32) {
        self.indicator("|", true, false, false);
        if s.starts_with(|c: char| c == ' ' || is_break(c)) {
            self.indicator(&BEST_INDENT.to_string(), false, false, false);
        }
        let mut ending = s.chars().rev();
        match (ending.next(), ending.next()) {
            (Some(last), _) if !is_break(last) => self.indicator("-", false, false, false),
            (Some(_), None) => self.indicator("+", false, false, false),
            (Some(_), Some(before)) if is_break(before) => self.indicator("+", false, false, false),
            _ => {}
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for c in s.chars() {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent(indent);
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

fn escape(c: char) -> Option<char> {
    Some(match c {
        '\0' => '0',
        '\x07' => 'a',
        '\x08' => 'b',
        '\t' => 't',
        '\n' => 'n',
        '\x0b' => 'v',
        '\x0c' => 'f',
        '\r' => 'r',
        '\x1b' => 'e',
        '"' => '"',
        '\\' => '\\',
        '\u{85}' => 'N',
        '\u{a0}' => '_',
        '\u{2028}' => 'L',
        '\u{2029}' => 'P',
        _ => return None,
    })
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// goyaml's printable set: `\n`, ASCII from space to `~`, and the Basic Multilingual Plane
/// from U+00A0 except surrogates, the byte order mark, U+FFFE and U+FFFF.
fn is_printable(c: char) -> bool {
    matches!(c, '\n' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}') && c != '\u{feff}'
}

/// What goyaml's scan of a string allows, in block context.
struct Scan {
    multiline: bool,
    plain_allowed: bool,
    single_allowed: bool,
    block_allowed: bool,
}

fn analyze(s: &str) -> Scan {
    if s.is_empty() {
        return Scan {
            multiline: false,
            plain_allowed: true,
            single_allowed: true,
            block_allowed: false,
        };
    }
    let mut indicators = s.starts_with("---") || s.starts_with("...");
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut special, mut line_breaks) = (false, false, false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let mut chars = s.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let followed_by_whitespace = next.is_none_or(|n| n == ' ' || n == '\t');
        let last = next.is_none();
        if first {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@'
                | '`' => indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => indicators = true,
                '#' if preceded_by_whitespace => indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            leading_space |= first;
            trailing_space |= last;
            break_space |= previous_break;
            (previous_space, previous_break) = (true, false);
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= first;
            trailing_break |= last;
            space_break |= previous_space;
            (previous_space, previous_break) = (false, true);
        } else {
            (previous_space, previous_break) = (false, false);
        }
        preceded_by_whitespace = c == ' ' || c == '\t' || is_break(c);
        first = false;
    }
    let edges = leading_space || leading_break || trailing_space || trailing_break;
    let unquotable = space_break || special;
    Scan {
        multiline: line_breaks,
        plain_allowed: !(edges || break_space || unquotable || line_breaks || indicators),
        single_allowed: !(break_space || unquotable),
        block_allowed: !(trailing_space || unquotable),
    }
}

/// `items` sorted by their keys in goyaml v2's order. That order is not transitive for some
/// sets of keys (`02` before `0a` before `2` before `02`), for which kustomize's output
/// changes from run to run; a merge sort gives them one order where the standard sort may
/// panic.
fn in_key_order<T>(mut items: Vec<T>, key: impl Fn(&T) -> &str + Copy) -> Vec<T> {
    if items.len() < 2 {
        return items;
    }
    let right = in_key_order(items.split_off(items.len() / 2), key);
    let left = in_key_order(items, key);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let next = if natural_order(key(r), key(l)) == Ordering::Less {
            right.next()
        } else {
            left.next()
        };
        out.extend(next);
    }
    out.extend(left.chain(right));
    out
}

/// goyaml v2's key order (its `keyList.Less`) for string keys.
fn natural_order(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        natural(a.as_bytes(), b.as_bytes(), |c: u8| char::from(c))
    } else {
        let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        natural(&ar, &br, |c: char| c)
    }
}

fn natural<T: Copy + Ord>(ar: &[T], br: &[T], char_of: impl Fn(T) -> char) -> Ordering {
    let digit = |c: T| char_of(c).to_digit(10).filter(|_| char_of(c).is_ascii_digit());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (char_of(ar[i]).is_alphabetic(), char_of(br[i]).is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl { Ordering::Less } else { Ordering::Greater };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if char_of(ar[i]) == '0' || char_of(br[i]) == '0' {
            // Inside a number that already has a non-zero digit, zeros count.
            if ar[..i].iter().rev().map_while(|&c| digit(c)).any(|d| d != 0) {
                (an, bn) = (1, 1);
            }
        }
        let number = |r: &[T], n: &mut i64| {
            let mut end = i;
            while let Some(d) = r.get(end).and_then(|&c| digit(c)) {
                *n = n.wrapping_mul(10).wrapping_add(i64::from(d));
                end += 1;
            }
            end
        };
        let (ai, bi) = (number(ar, &mut an), number(br, &mut bn));
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

/// A number as goyaml v2 prints what came through JSON: integers as they are, floats as Go's
/// shortest `%g` (exponent below -4 or from 6 up), integral floats that read back as 64-bit
/// integers as those.
fn number(n: &serde_json::Number) -> String {
    let Some(f) = n.as_f64().filter(|_| n.is_f64()) else {
        return n.to_string();
    };
    if let Some(integer) = super::yaml::integral_float(f) {
        return integer.to_string();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    if (-4..6).contains(&exp) {
        return f.to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_sort_in_goyaml_natural_order() {
        let keys = vec![
            "a10", "aB", "a_b", "a9", "a-b", "A", "10", "2", "1", "", "x007", "x7", "x07", "_z", "é", "zzz",
        ];
        let keys = in_key_order(keys, |k| k);
        assert_eq!(
            keys,
            [
                "", "_z", "1", "2", "10", "A", "a-b", "a_b", "a9", "a10", "aB", "x7", "x07", "x007", "zzz",
                "é"
            ]
        );
    }

    #[test]
    fn keys_in_no_consistent_order_still_print() {
        // kustomize printed these three in each of their rotations over a dozen runs.
        let v = json!({"02": 1, "0a": 2, "2": 3});
        let text = emit_document(&v);
        let rotations = [
            "\"02\": 1\n0a: 2\n\"2\": 3\n",
            "0a: 2\n\"2\": 3\n\"02\": 1\n",
            "\"2\": 3\n\"02\": 1\n0a: 2\n",
        ];
        assert!(rotations.contains(&text.as_str()), "{text}");
        // Many keys of digits, a letter and a dash, full of such cycles (enough for the
        // standard sort to notice).
        let mut seed = 1u64;
        let map: Map<String, Value> = (0..2000)
            .map(|_| {
                let mut key = String::new();
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                for shift in 0..(seed >> 60) as usize % 8 + 1 {
                    key.push(b"0129a-"[(seed >> (shift * 5)) as usize % 6] as char);
                }
                (key, json!(1))
            })
            .collect();
        let text = emit_document(&Value::Object(map.clone()));
        assert_eq!(text.lines().count(), map.len());
    }

    #[test]
    fn floats_print_as_go_g() {
        let text = emit_document(&json!([
            1.5,
            0.00001,
            1234567.5,
            123456.5,
            0.0001,
            -2.5e-7,
            1e23,
            3,
            2.0e10,
            6.153255929452609e18,
            -1e19,
            1.8446744073709552e19
        ]));
        assert_eq!(
            text,
            "- 1.5\n- 1e-05\n- 1.2345675e+06\n- 123456.5\n- 0.0001\n- -2.5e-07\n- 1e+23\n- 3\n- 20000000000\n\
             - 6153255929452609000\n- -1e+19\n- 1.8446744073709552e+19\n"
        );
    }

    #[test]
    fn scalar_styles_follow_goyaml() {
        let v = json!({"d": {
            "colon": "a: b", "dash": "-", "dashx": "-x", "hash": "a #b", "lead": " x", "empty": "",
            "ml": "a\nb\n", "strip": "a\nb", "keep": "a\n\n", "indented": "  a\nb\n", "trail": "a \nb\n",
            "tab": "a\tb", "emoji": "\u{1F600}", "quote": "'q'", "yes": "yes", "octal": "0755", "bom": "\u{feff}x",
            "sep": "u\u{2028}v",
        }});
        let want = "d:\n  bom: \"\\uFEFF\\x78\"\n  colon: 'a: b'\n  dash: '-'\n  dashx: -x\n  emoji: \"\\U0001F600\"\n  empty: \"\"\n  hash: 'a #b'\n  indented: |2\n      a\n    b\n  keep: |+\n    a\n\n  lead: ' x'\n  ml: |\n    a\n    b\n  octal: \"0755\"\n  quote: '''q'''\n  sep: 'u\u{2028}    v'\n  strip: |-\n    a\n    b\n  tab: \"a\\tb\"\n  trail: \"a \\nb\\n\"\n  \"yes\": \"yes\"\n";
        assert_eq!(emit_document(&v), want);
    }

    #[test]
    fn long_strings_fold_after_80_columns_and_keys_do_not() {
        let long = format!("{}end", "word ".repeat(30));
        let v = json!({"k": long, "q": format!("a: {long}"), "s": [format!("x\n{long} ")]});
        let words = |n: usize| vec!["word"; n].join(" ");
        let want = format!(
            "k: {w15} {w1}\n  {w14} end\nq: 'a: {w15}\n  {w15} end'\ns:\n- \"x\\n{w16}\n  {w14} end \"\n",
            w15 = words(15),
            w1 = words(1),
            w14 = words(14),
            w16 = words(16)
        );
        assert_eq!(emit_document(&v), want);
        let key = format!("{} x", "k".repeat(90));
        assert_eq!(emit_document(&json!({key.clone(): 1})), format!("{key}: 1\n"));
    }

    #[test]
    fn multi_line_and_very_long_keys_are_complex_keys() {
        let long = "k".repeat(129);
        let v = json!({"a\nb": 1, long.clone(): {"x": 2}});
        assert_eq!(
            emit_document(&v),
            format!("? |-\n  a\n  b\n: 1\n? {long}\n: x: 2\n")
        );
    }

    #[test]
    fn nested_lists_continue_the_item_line() {
        let v = json!({"l": [[1, 2], [[3]], [], {}, {"a": ["x"]}, {"b": {"c": "d"}}]});
        assert_eq!(
            emit_document(&v),
            "l:\n- - 1\n  - 2\n- - - 3\n- []\n- {}\n- a:\n  - x\n- b:\n    c: d\n"
        );
    }
}
