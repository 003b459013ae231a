//! Flux's `${...}` expansion (fluxcd/pkg/envsubst, a fork of drone/envsubst), written from
//! its grammar and documented behaviour:
//! * only `${...}` expands; `$var` stays; `$$` is an escape for `$` everywhere in plain text,
//!   so `$${v}` prints `${v}`;
//! * `${v}`, `${#v}`, `${v^}`, `${v^^}`, `${v,}`, `${v,,}`, `${v:n}`, `${v:n:len}`,
//!   `${v#p}`, `${v##p}`, `${v%p}`, `${v%%p}` (shell patterns where `*` also matches `/`),
//!   `${v/p/r}`, `${v//p/r}`, `${v/#p/r}`, `${v/%p/r}` (plain strings; `\/` and `\\` escape
//!   in them), and the default
//!   operators `=`, `:=`, `:-`, `:+`, `:?`: all of them mean "the value if non-empty, else
//!   the default" (arguments may nest `${...}`); `${v-d}` is a syntax error;
//! * strict mode: a variable that is not set fails unless a default operator is used.

use std::collections::BTreeMap;

use thiserror::Error;

/// Why an expansion failed (texts as in fluxcd/pkg/envsubst).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnvsubstError {
    #[error("bad substitution")]
    BadSubstitution,
    #[error("missing closing brace")]
    MissingClosingBrace,
    #[error("unable to parse variable name")]
    VariableName,
    #[error("unable to parse substitution within function")]
    FuncSubstitution,
    #[error("unable to parse default function")]
    DefaultFunction,
    #[error("variable not set (strict mode): {0:?}")]
    NotSet(String),
    /// Parsing and expanding recurse once per level: a manifest must not choose the depth.
    #[error("substitutions nested deeper than {MAX_NESTING} levels")]
    TooDeep,
}

/// How deep `${...}` may nest inside default arguments.
const MAX_NESTING: usize = 64;

#[derive(Debug, PartialEq)]
enum Node {
    Text(String),
    Func {
        param: String,
        op: String,
        args: Vec<Node>,
    },
}

/// Expands `text`. In strict mode an unset variable without a default operator fails;
/// otherwise it expands to "".
pub(crate) fn expand(
    text: &str,
    vars: &BTreeMap<String, String>,
    strict: bool,
) -> Result<String, EnvsubstError> {
    let nodes = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
    }
    .parse_text()?;
    let mut out = String::new();
    for node in &nodes {
        eval(node, vars, strict, &mut out)?;
    }
    Ok(out)
}

fn eval(
    node: &Node,
    vars: &BTreeMap<String, String>,
    strict: bool,
    out: &mut String,
) -> Result<(), EnvsubstError> {
    match node {
        Node::Text(text) => out.push_str(text),
        Node::Func { param, op, args } => {
            // Arguments are expanded first, even when the default is not used.
            let mut values = Vec::with_capacity(args.len());
            for arg in args {
                let mut value = String::new();
                eval(arg, vars, strict, &mut value)?;
                values.push(value);
            }
            let value = match vars.get(param) {
                Some(value) => value.as_str(),
                None if strict && !is_default_op(op) => {
                    return Err(EnvsubstError::NotSet(param.clone()));
                }
                None => "",
            };
            out.push_str(&apply(op, value, &values));
        }
    }
    Ok(())
}

fn is_default_op(op: &str) -> bool {
    matches!(op, "-" | "+" | "=" | "?" | ":-" | ":+" | ":=" | ":?")
}

fn apply(op: &str, value: &str, args: &[String]) -> String {
    let arg = |i: usize| args.get(i).map(String::as_str);
    match op {
        "," => map_first(value, char::to_lowercase),
        ",," => value.to_lowercase(),
        "^" => map_first(value, char::to_uppercase),
        "^^" => value.to_uppercase(),
        "#" if args.is_empty() => value.len().to_string(),
        "#" => trim_prefix(value, arg(0).unwrap_or(""), false),
        "##" => trim_prefix(value, arg(0).unwrap_or(""), true),
        "%" => trim_suffix(value, arg(0).unwrap_or(""), false),
        "%%" => trim_suffix(value, arg(0).unwrap_or(""), true),
        ":" => substring(value, arg(0), arg(1)),
        "/" => value.replacen(arg(0).unwrap_or(""), arg(1).unwrap_or(""), 1),
        "//" => value.replace(arg(0).unwrap_or(""), arg(1).unwrap_or("")),
        "/#" => match (arg(0), arg(1)) {
            (Some(pattern), Some(replacement)) if value.starts_with(pattern) => {
                value.replacen(pattern, replacement, 1)
            }
            _ => value.to_string(),
        },
        "/%" => match (arg(0), arg(1)) {
            (Some(pattern), Some(replacement)) if value.ends_with(pattern) => {
                format!("{}{replacement}", &value[..value.len() - pattern.len()])
            }
            _ => value.to_string(),
        },
        // Plain `${v}` and every default operator.
        _ if value.is_empty() && !args.is_empty() => args.concat(),
        _ => value.to_string(),
    }
}

fn map_first<I: Iterator<Item = char>>(value: &str, f: impl Fn(char) -> I) -> String {
    let mut chars = value.chars();
    match chars.next() {
        Some(first) => f(first).chain(chars).collect(),
        None => String::new(),
    }
}

/// `${v:pos}` and `${v:pos:len}` on bytes, like Go (positions that are not numbers leave
/// the value unchanged; negative ones count from the end).
fn substring(value: &str, pos: Option<&str>, len: Option<&str>) -> String {
    let bytes = value.as_bytes();
    let Some(Ok(pos)) = pos.map(str::parse::<i64>) else {
        return value.to_string();
    };
    let size = bytes.len() as i64;
    let start = if pos < 0 { (size + pos).max(0) } else { pos };
    let slice = |from: i64, to: i64| String::from_utf8_lossy(&bytes[from as usize..to as usize]).into_owned();
    let Some(len) = len else {
        return if start < size {
            slice(start, size)
        } else {
            String::new()
        };
    };
    let Ok(len) = len.parse::<i64>() else {
        return value.to_string();
    };
    if len < 0 {
        let end = size + len;
        return if end < start {
            String::new()
        } else {
            slice(start, end)
        };
    }
    if start + len >= size {
        return if start < size {
            slice(start, size)
        } else {
            String::new()
        };
    }
    slice(start, start + len)
}

fn trim_prefix(value: &str, pattern: &str, longest: bool) -> String {
    // Candidate prefixes from the longest down to one character, as in drone/envsubst.
    let ends: Vec<usize> = value
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .rev()
        .collect();
    let mut matched = None;
    for end in ends {
        match glob_match(pattern, &value[..end]) {
            None => return value.to_string(),
            Some(true) => {
                matched = Some(end);
                if longest {
                    break;
                }
            }
            Some(false) => {}
        }
    }
    matched.map_or_else(|| value.to_string(), |end| value[end..].to_string())
}

fn trim_suffix(value: &str, pattern: &str, longest: bool) -> String {
    let reversed: String = value.chars().rev().collect();
    let reversed_pattern: String = pattern.chars().rev().collect();
    trim_prefix(&reversed, &reversed_pattern, longest)
        .chars()
        .rev()
        .collect()
}

/// The shell patterns of envsubst's own `path.Match`: `*` and `?` (both also match `/`,
/// unlike Go's `path.Match`), `[...]` classes with ranges and `^`, `\` escapes. `None` for
/// a malformed pattern.
fn glob_match(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    glob_at(&p, &n)
}

fn glob_at(p: &[char], n: &[char]) -> Option<bool> {
    // Greedy matching that, on a mismatch, lets the last `*` take one more character: linear
    // in the name per `*`, where trying every split recursively is exponential in the stars.
    let (mut pi, mut ni) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if p.get(pi) == Some(&'*') {
            pi += 1;
            last_star = Some((pi, ni));
            continue;
        }
        if pi < p.len()
            && let Some(next) = match_one(p, pi, n[ni])?
        {
            pi = next;
            ni += 1;
            continue;
        }
        match last_star {
            Some((after, taken)) => {
                pi = after;
                ni = taken + 1;
                last_star = Some((after, taken + 1));
            }
            None => return Some(false),
        }
    }
    while p.get(pi) == Some(&'*') {
        pi += 1;
    }
    if pi == p.len() {
        return Some(true);
    }
    // The name is used up but the pattern is not: a malformed rest is still an error.
    match p[pi] {
        '[' => p.iter().skip(pi + 2).position(|&c| c == ']').map(|_| false),
        '\\' => p.get(pi + 1).map(|_| false),
        _ => Some(false),
    }
}

/// Whether the pattern element at `pi` (not `*`) matches `c`: the index after it when it does,
/// `None` inside when it does not, `None` outside for a malformed element.
fn match_one(p: &[char], pi: usize, c: char) -> Option<Option<usize>> {
    match p[pi] {
        '?' => Some(Some(pi + 1)),
        '[' => {
            let close = p.iter().skip(pi + 2).position(|&x| x == ']')? + pi + 2;
            let (negate, class) = match p[pi + 1] {
                '^' => (true, &p[pi + 2..close]),
                _ => (false, &p[pi + 1..close]),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            Some((hit != negate).then_some(close + 1))
        }
        '\\' => {
            let escaped = *p.get(pi + 1)?;
            Some((c == escaped).then_some(pi + 2))
        }
        literal => Some((c == literal).then_some(pi + 1)),
    }
}

/// A recursive-descent parser over the grammar of fluxcd/pkg/envsubst/parse.
struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// How many `${` are open.
    depth: usize,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn at_open(&self) -> bool {
        self.peek() == Some('$') && self.peek_at(1) == Some('{')
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// Top level: text with `$$` escapes, and `${...}` expressions.
    fn parse_text(&mut self) -> Result<Vec<Node>, EnvsubstError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                if !text.is_empty() {
                    nodes.push(Node::Text(std::mem::take(&mut text)));
                }
                self.pos += 2;
                nodes.push(self.parse_func()?);
            } else if c == '$' && self.peek_at(1) == Some('$') {
                text.push('$');
                self.pos += 2;
            } else {
                text.push(c);
                self.pos += 1;
            }
        }
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        Ok(nodes)
    }

    /// After `${`.
    fn parse_func(&mut self) -> Result<Node, EnvsubstError> {
        if self.depth == MAX_NESTING {
            return Err(EnvsubstError::TooDeep);
        }
        self.depth += 1;
        let node = self.parse_func_body();
        self.depth -= 1;
        node
    }

    fn parse_func_body(&mut self) -> Result<Node, EnvsubstError> {
        if self.eat('#') {
            let param = self.ident();
            if param.is_empty() || !self.eat('}') {
                return Err(EnvsubstError::BadSubstitution);
            }
            return Ok(Node::Func {
                param,
                op: "#".into(),
                args: vec![],
            });
        }
        let param = self.ident();
        if param.is_empty() {
            return Err(EnvsubstError::VariableName);
        }
        match self.peek() {
            Some(':') if matches!(self.peek_at(1), Some('=' | '-' | '?' | '+')) => self.parse_default(param),
            Some(':') => self.parse_substring(param),
            Some('=') => self.parse_default(param),
            Some(',' | '^') => {
                let op = self.take_op(|c, i| (c == ',' || c == '^') && i < 2);
                self.close(Node::Func {
                    param,
                    op,
                    args: vec![],
                })
            }
            Some('/') => self.parse_replace(param),
            Some(c @ ('#' | '%')) => {
                let op = self.take_op(|x, i| x == c && i < 2);
                let pattern = self.param(|c| c != '}', false)?;
                self.close(Node::Func {
                    param,
                    op,
                    args: vec![pattern],
                })
            }
            _ if self.eat('}') => Ok(Node::Func {
                param,
                op: String::new(),
                args: vec![],
            }),
            _ => Err(EnvsubstError::MissingClosingBrace),
        }
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(is_ident) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn take_op(&mut self, accept: impl Fn(char, usize) -> bool) -> String {
        let mut op = String::new();
        while let Some(c) = self.peek().filter(|&c| accept(c, op.chars().count())) {
            op.push(c);
            self.pos += 1;
        }
        op
    }

    fn close(&mut self, node: Node) -> Result<Node, EnvsubstError> {
        if self.eat('}') {
            Ok(node)
        } else {
            Err(EnvsubstError::BadSubstitution)
        }
    }

    /// One argument: a nested `${...}` or text up to a character `accept` refuses (or up to
    /// the next `${`). `escapes` turns on `$$`, `\/` and `\\`.
    fn param(&mut self, accept: impl Fn(char) -> bool, escapes: bool) -> Result<Node, EnvsubstError> {
        if self.at_open() {
            self.pos += 2;
            return self.parse_func();
        }
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                break;
            }
            let next = self.peek_at(1);
            if escapes && ((c == '$' && next == Some('$')) || (c == '\\' && matches!(next, Some('/' | '\\'))))
            {
                text.push(next.expect("checked"));
                self.pos += 2;
                continue;
            }
            if !accept(c) {
                break;
            }
            text.push(c);
            self.pos += 1;
        }
        if text.is_empty() {
            Err(EnvsubstError::FuncSubstitution)
        } else {
            Ok(Node::Text(text))
        }
    }

    fn parse_default(&mut self, param: String) -> Result<Node, EnvsubstError> {
        let op = if self.peek() == Some('=') {
            self.take_op(|c, i| c == '=' && i == 0)
        } else {
            self.take_op(|c, i| (i == 0 && c == ':') || (i == 1 && matches!(c, '=' | '-' | '?' | '+')))
        };
        if op.is_empty() {
            return Err(EnvsubstError::DefaultFunction);
        }
        let mut args = Vec::new();
        while !self.eat('}') {
            args.push(self.param(|c| c != '}', false)?);
        }
        Ok(Node::Func { param, op, args })
    }

    fn parse_substring(&mut self, param: String) -> Result<Node, EnvsubstError> {
        self.pos += 1; // ':'
        let offset = self.param(|c| c != ':' && c != '}', false)?;
        if self.eat('}') {
            return Ok(Node::Func {
                param,
                op: ":".into(),
                args: vec![offset],
            });
        }
        if self.take_op(|c, _| c == ':').is_empty() {
            return Err(EnvsubstError::BadSubstitution);
        }
        let length = self.param(|c| c != '}', false)?;
        self.close(Node::Func {
            param,
            op: ":".into(),
            args: vec![offset, length],
        })
    }

    fn parse_replace(&mut self, param: String) -> Result<Node, EnvsubstError> {
        let op = self.take_op(|c, i| (i == 0 && c == '/') || (i == 1 && matches!(c, '/' | '#' | '%')));
        let pattern = if self.peek() == Some('/') {
            Node::Text(String::new())
        } else {
            self.param(|c| c != '/', true)?
        };
        if !self.eat('/') {
            return Err(EnvsubstError::BadSubstitution);
        }
        if self.eat('}') {
            return Ok(Node::Func {
                param,
                op,
                args: vec![pattern],
            });
        }
        let replacement = self.param(|c| c != '}', true)?;
        self.close(Node::Func {
            param,
            op,
            args: vec![pattern, replacement],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
