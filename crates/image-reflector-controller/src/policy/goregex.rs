//! Go's `regexp.Compile` on top of the `regex` crate. Both implement RE2 syntax with
//! leftmost-first matching; where they part, the pattern is first rewritten so that it
//! means what Go reads (literal `{`, `\Q…\E`, `[`, `&&`, `~~` in classes), then Go's extra
//! rules are checked, and a rejected pattern gets Go's error text.

use std::borrow::Cow;

use regex::Regex;
use regex_syntax::ast::{self, Ast, ErrorKind};

/// Go's limit on a `{n,m}` count, and on nested counts multiplied.
const MAX_REPEAT: u32 = 1000;

/// The error is Go's: `error parsing regexp: <code>: `<expr>``.
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    let pattern = translate(pattern);
    let ast = ast::parse::Parser::new()
        .parse(&pattern)
        .map_err(|e| parse_error(&pattern, &e))?;
    check(&pattern, &ast)?;
    Regex::new(&pattern).map_err(|e| match e {
        regex::Error::CompiledTooBig(_) => go_error("expression too large", &pattern),
        other => other.to_string(),
    })
}

fn go_error(code: &str, expr: &str) -> String {
    format!("error parsing regexp: {code}: `{expr}`")
}

/// Rewrites the constructs Go reads as literals but the crate does not: a `{` that opens no
/// `{n}`, `{n,}` or `{n,m}`; `\Q…\E` quoting; and, in a class, `[` (unless `[:name:]`),
/// `&` and `~` (the crate's nested classes and `&&`/`~~` set operations).
fn translate(pattern: &str) -> Cow<'_, str> {
    let mut out = String::with_capacity(pattern.len());
    let mut in_class = false;
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        let mut len = c.len_utf8();
        match c {
            '\\' => {
                let escape = escape_len(rest);
                if !in_class && rest[1..].starts_with('Q') {
                    let quoted = &rest[2..];
                    let end = quoted.find(r"\E").unwrap_or(quoted.len());
                    out.push_str(&regex::escape(&quoted[..end]));
                    len = (2 + end + 2).min(rest.len());
                } else {
                    out.push_str(&rest[..escape]);
                    len = escape;
                }
            }
            '[' if in_class => match class_name_len(rest) {
                Some(n) => {
                    out.push_str(&rest[..n]);
                    len = n;
                }
                None => out.push_str(r"\["),
            },
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '[' => {
                in_class = true;
                // A `]` right after `[` or `[^` is a literal.
                let open = if rest[1..].starts_with('^') { 2 } else { 1 };
                len = open + usize::from(rest[open..].starts_with(']'));
                out.push_str(&rest[..len]);
            }
            '{' if !in_class && !opens_repeat(rest) => out.push_str(r"\{"),
            _ => out.push(c),
        }
        rest = &rest[len..];
    }
    if out == pattern {
        Cow::Borrowed(pattern)
    } else {
        Cow::Owned(out)
    }
}

/// The length of the escape at the start of `s`, with the braces of `\p{…}` and `\x{…}`.
fn escape_len(s: &str) -> usize {
    let Some(c) = s[1..].chars().next() else { return 1 };
    let len = 1 + c.len_utf8();
    if matches!(c, 'p' | 'P' | 'x') && s[len..].starts_with('{') {
        return s[len..].find('}').map_or(s.len(), |i| len + i + 1);
    }
    len
}

/// `[:alpha:]` or `[:^alpha:]` at the start of `s`.
fn class_name_len(s: &str) -> Option<usize> {
    let name = s.strip_prefix("[:")?;
    let end = name.find(":]")?;
    let body = name[..end].strip_prefix('^').unwrap_or(&name[..end]);
    (!body.is_empty() && body.bytes().all(|b| b.is_ascii_alphabetic())).then_some(2 + end + 2)
}

fn opens_repeat(s: &str) -> bool {
    let Some((body, _)) = s.strip_prefix('{').and_then(|b| b.split_once('}')) else {
        return false;
    };
    let (min, max) = body.split_once(',').unwrap_or((body, "0"));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    !min.is_empty() && digits(min) && digits(max)
}

fn parse_error(pattern: &str, e: &ast::Error) -> String {
    let span = e.span();
    let (start, end) = (span.start.offset, span.end.offset.max(span.start.offset));
    let text = &pattern[start..end];
    let from_start = &pattern[start..];
    // The `(?` of the group a flag or name error is in.
    let group = || pattern[..start].rfind("(?").unwrap_or(0);
    // The `\` of the escape an error is in.
    let escape = || match pattern[start..].starts_with('\\') {
        true => start,
        false => pattern[..start].rfind('\\').unwrap_or(start),
    };
    match e.kind() {
        ErrorKind::GroupUnclosed => go_error("missing closing )", pattern),
        ErrorKind::GroupUnopened => go_error("unexpected )", pattern),
        ErrorKind::ClassUnclosed => go_error("missing closing ]", from_start),
        ErrorKind::RepetitionMissing => {
            go_error("missing argument to repetition operator", repeat_op(from_start))
        }
        ErrorKind::RepetitionCountInvalid => go_error("invalid repeat count", text),
        ErrorKind::EscapeUnexpectedEof if pattern.ends_with('\\') && escape() == pattern.len() - 1 => {
            go_error("trailing backslash at end of expression", "")
        }
        // `\p{L` with no `}`.
        ErrorKind::EscapeUnexpectedEof if pattern[escape() + 1..].starts_with(['p', 'P']) => {
            go_error("invalid character class range", &pattern[escape()..])
        }
        ErrorKind::EscapeUnexpectedEof | ErrorKind::EscapeHexEmpty => {
            let from = &pattern[escape()..];
            go_error(
                "invalid escape sequence",
                from.find('}').map_or(from, |i| &from[..=i]),
            )
        }
        // Go quotes `\x{110000` without its brace.
        ErrorKind::EscapeHexInvalid => go_error("invalid escape sequence", &pattern[escape()..end]),
        ErrorKind::EscapeUnrecognized | ErrorKind::UnsupportedBackreference => {
            go_error("invalid escape sequence", text)
        }
        ErrorKind::ClassRangeInvalid => go_error("invalid character class range", text),
        // `[a-\d]`: Go objects to the escape.
        ErrorKind::ClassRangeLiteral => go_error("invalid escape sequence", text),
        ErrorKind::GroupNameEmpty | ErrorKind::GroupNameInvalid | ErrorKind::GroupNameUnexpectedEof => {
            named_capture_error(&pattern[group()..])
        }
        // Go reads `(?<=` and `(?<!` as a badly named group.
        ErrorKind::UnsupportedLookAround if from_start.starts_with("(?<") => named_capture_error(from_start),
        ErrorKind::UnsupportedLookAround => go_error("invalid or unsupported Perl syntax", text),
        // Go quotes from the group's `(?` through the character it stopped at.
        ErrorKind::FlagUnrecognized | ErrorKind::FlagRepeatedNegation { .. } => {
            go_error("invalid or unsupported Perl syntax", &pattern[group()..end])
        }
        ErrorKind::FlagDanglingNegation => {
            let close = pattern[end..]
                .find([')', ':'])
                .map_or(pattern.len(), |i| end + i + 1);
            go_error("invalid or unsupported Perl syntax", &pattern[group()..close])
        }
        ErrorKind::NestLimitExceeded(_) => go_error("expression nests too deeply", pattern),
        _ => e.to_string(),
    }
}

/// Go quotes a named group from `(?` through `>`, or to the end when there is no `>`.
fn named_capture_error(group: &str) -> String {
    go_error(
        "invalid named capture",
        group.find('>').map_or(group, |i| &group[..=i]),
    )
}

/// The repetition operator at the start of `s` as Go quotes it: `*`, `+?`, `{2,3}`.
fn repeat_op(s: &str) -> &str {
    let len = match s.as_bytes().first() {
        Some(b'{') => s.find('}').map_or(s.len(), |i| i + 1),
        Some(_) => 1,
        None => 0,
    };
    let lazy = usize::from(s[len..].starts_with('?'));
    &s[..len + lazy]
}

/// What Go rejects and the crate accepts: counts over 1000 (alone or nested), a repetition
/// of a repetition, group names with `.[]`, and the flags `x`, `R` and `u`.
fn check(pattern: &str, node: &Ast) -> Result<(), String> {
    match node {
        Ast::Repetition(rep) => {
            let op = &pattern[rep.op.span.start.offset..rep.op.span.end.offset];
            if let Some((min, max)) = counts(rep)
                && (min.max(max) > MAX_REPEAT || ((min >= 2 || max >= 2) && !repeat_fits(node, MAX_REPEAT)))
            {
                return Err(go_error("invalid repeat count", op));
            }
            if let Ast::Repetition(inner) = &*rep.ast {
                let ops = &pattern[inner.op.span.start.offset..rep.op.span.end.offset];
                return Err(go_error("invalid nested repetition operator", ops));
            }
            check(pattern, &rep.ast)
        }
        Ast::Group(group) => {
            match &group.kind {
                ast::GroupKind::CaptureName { name, .. }
                    if !name.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    return Err(named_capture_error(&pattern[group.span.start.offset..]));
                }
                ast::GroupKind::NonCapturing(flags) => check_flags(pattern, flags)?,
                _ => {}
            }
            check(pattern, &group.ast)
        }
        Ast::Flags(flags) => check_flags(pattern, &flags.flags),
        Ast::Alternation(alt) => alt.asts.iter().try_for_each(|a| check(pattern, a)),
        Ast::Concat(concat) => concat.asts.iter().try_for_each(|a| check(pattern, a)),
        _ => Ok(()),
    }
}

/// `{n,m}` counts (`{n,}` as n, as Go's size check reads it); `*`, `+`, `?` have none.
fn counts(rep: &ast::Repetition) -> Option<(u32, u32)> {
    match &rep.op.kind {
        ast::RepetitionKind::Range(ast::RepetitionRange::Exactly(n) | ast::RepetitionRange::AtLeast(n)) => {
            Some((*n, *n))
        }
        ast::RepetitionKind::Range(ast::RepetitionRange::Bounded(m, n)) => Some((*m, *n)),
        _ => None,
    }
}

/// Go's `repeatIsValid`: along any path the counts multiplied stay within `budget`.
fn repeat_fits(node: &Ast, budget: u32) -> bool {
    let mut budget = budget;
    if let Ast::Repetition(rep) = node
        && let Some((min, max)) = counts(rep)
    {
        let unbounded = matches!(
            rep.op.kind,
            ast::RepetitionKind::Range(ast::RepetitionRange::AtLeast(_))
        );
        let m = if unbounded { min } else { max };
        if max == 0 && !unbounded {
            return true;
        }
        if m > budget {
            return false;
        }
        budget = budget.checked_div(m).unwrap_or(budget);
    }
    match node {
        Ast::Repetition(rep) => repeat_fits(&rep.ast, budget),
        Ast::Group(group) => repeat_fits(&group.ast, budget),
        Ast::Alternation(alt) => alt.asts.iter().all(|a| repeat_fits(a, budget)),
        Ast::Concat(concat) => concat.asts.iter().all(|a| repeat_fits(a, budget)),
        _ => true,
    }
}

/// Go knows the flags `i`, `m`, `s` and `U`; the error quotes from `(?` through the flag.
fn check_flags(pattern: &str, flags: &ast::Flags) -> Result<(), String> {
    for item in &flags.items {
        if let ast::FlagsItemKind::Flag(ast::Flag::IgnoreWhitespace | ast::Flag::CRLF | ast::Flag::Unicode) =
            item.kind
        {
            let open = pattern[..item.span.start.offset].rfind("(?").unwrap_or(0);
            return Err(go_error(
                "invalid or unsupported Perl syntax",
                &pattern[open..item.span.end.offset],
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_literals_are_escaped() {
        let cases = [
            ("a{", r"a\{"),
            ("x{2}{,3}", r"x{2}\{,3}"),
            (r"\p{L}{2}", r"\p{L}{2}"),
            (r"\\{", r"\\\{"),
            (r"\Qa.b\E+", r"a\.b+"),
            (r"\Q*", r"\*"),
            ("[[a]]", r"[\[a]]"),
            ("[[:alpha:]&&~]", r"[[:alpha:]\&\&\~]"),
            ("[]a]{", r"[]a]\{"),
            ("[^]{]", "[^]{]"),
            ("abc", "abc"),
        ];
        for (pattern, want) in cases {
            assert_eq!(translate(pattern), want, "{pattern:?}");
        }
    }

    #[test]
    fn invalid_patterns_get_go_texts() {
        let cases: &[(&str, &str)] = &[
            ("(abc", "missing closing ): `(abc`"),
            ("abc)", "unexpected ): `abc)`"),
            ("a[bc", "missing closing ]: `[bc`"),
            ("*a", "missing argument to repetition operator: `*`"),
            ("a|?", "missing argument to repetition operator: `?`"),
            ("(a|{2}?)", "missing argument to repetition operator: `{2}?`"),
            ("a**", "invalid nested repetition operator: `**`"),
            ("a+*?", "invalid nested repetition operator: `+*?`"),
            ("a{1001}", "invalid repeat count: `{1001}`"),
            ("a{2,1}", "invalid repeat count: `{2,1}`"),
            ("(a{100}){11}", "invalid repeat count: `{11}`"),
            (r"\q", r"invalid escape sequence: `\q`"),
            (r"(a)\1", r"invalid escape sequence: `\1`"),
            (r"\x4", r"invalid escape sequence: `\x4`"),
            (r"\x{}", r"invalid escape sequence: `\x{}`"),
            (r"\x{110000}", r"invalid escape sequence: `\x{110000`"),
            (r"[a-\d]", r"invalid escape sequence: `\d`"),
            ("a\\", "trailing backslash at end of expression: ``"),
            (r"\p{L", r"invalid character class range: `\p{L`"),
            ("[z-a]", "invalid character class range: `z-a`"),
            ("(?P<a-b>x)", "invalid named capture: `(?P<a-b>`"),
            ("(?P<a.b>x)", "invalid named capture: `(?P<a.b>`"),
            ("a(?<>x)", "invalid named capture: `(?<>`"),
            ("(?P<name", "invalid named capture: `(?P<name`"),
            ("(?<=a)", "invalid named capture: `(?<=a)`"),
            ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
            ("(?i-z)", "invalid or unsupported Perl syntax: `(?i-z`"),
            ("(?x) a", "invalid or unsupported Perl syntax: `(?x`"),
            ("(?-)", "invalid or unsupported Perl syntax: `(?-)`"),
            ("(?--i)", "invalid or unsupported Perl syntax: `(?--`"),
        ];
        for (pattern, want) in cases {
            assert_eq!(
                compile(pattern).unwrap_err(),
                format!("error parsing regexp: {want}"),
                "{pattern:?}"
            );
        }
    }
}
