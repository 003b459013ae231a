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
//!
//! Unlike Flux, one expansion is bounded by the caller's limit twice: in what it writes (the
//! object's text, and the arguments being expanded) and in what it reads without writing
//! (arguments it consumes, values that trims and replacements scan), so a short text can
//! neither grow without bound nor rescan a long value forever.

mod pattern;

use std::collections::BTreeMap;

use thiserror::Error;

/// Why an expansion failed (texts as in fluxcd/pkg/envsubst, except for the bounds).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
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
    /// The output would pass the limit: `variable` is the last expansion before that point
    /// (None when the text alone is too large).
    #[error("{} makes the object larger than the limit of {limit} bytes", culprit(.variable))]
    TooLarge { variable: Option<String>, limit: usize },
    /// The operators read more than `limit` bytes, the last of them while expanding
    /// `variable`.
    #[error("expanding ${{{variable}}} reads more than {limit} bytes of values and patterns")]
    TooCostly { variable: String, limit: usize },
}

fn culprit(variable: &Option<String>) -> String {
    match variable {
        Some(name) => format!("expanding ${{{name}}}"),
        None => "its text alone".into(),
    }
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

/// Expands `text`, writing at most `limit` bytes. In strict mode an unset variable without a
/// default operator fails; otherwise it expands to "".
pub(crate) fn expand(
    text: &str,
    vars: &BTreeMap<String, String>,
    strict: bool,
    limit: usize,
) -> Result<String, EnvsubstError> {
    let nodes = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
    }
    .parse_text()?;
    let mut expansion = Expansion {
        vars,
        strict,
        limit,
        held: 0,
        reads_left: limit,
        last: None,
    };
    let mut out = String::new();
    for node in &nodes {
        expansion.eval(node, &mut out)?;
    }
    Ok(out)
}

/// One expansion in progress, with what it may still write and read.
struct Expansion<'a> {
    vars: &'a BTreeMap<String, String>,
    strict: bool,
    limit: usize,
    /// Bytes the output and the arguments being expanded hold together.
    held: usize,
    /// Bytes the operators may still read (the limit, at the start).
    reads_left: usize,
    /// The variable expanded last: it is blamed when the output grows too large.
    last: Option<&'a str>,
}

impl<'a> Expansion<'a> {
    fn eval(&mut self, node: &'a Node, out: &mut String) -> Result<(), EnvsubstError> {
        match node {
            Node::Text(text) => self.write(out, text),
            Node::Func { param, op, args } => {
                // Arguments are expanded first, even when the default is not used.
                let mut values = Vec::with_capacity(args.len());
                for arg in args {
                    let mut value = String::new();
                    self.eval(arg, &mut value)?;
                    values.push(value);
                }
                let value = match self.vars.get(param) {
                    Some(value) => value.as_str(),
                    None if self.strict && !is_default_op(op) => {
                        return Err(EnvsubstError::NotSet(param.clone()));
                    }
                    None => "",
                };
                // The arguments are read, then the result takes their place.
                let arg_bytes: usize = values.iter().map(String::len).sum();
                self.read(param, arg_bytes)?;
                self.held -= arg_bytes;
                let result = self.apply(param, op, value, &values)?;
                self.last = Some(param);
                self.write(out, &result)
            }
        }
    }

    /// Appends `text` to `out` if the limit allows it.
    fn write(&mut self, out: &mut String, text: &str) -> Result<(), EnvsubstError> {
        self.room(text.len())?;
        self.held += text.len();
        out.push_str(text);
        Ok(())
    }

    /// Fails unless `bytes` more fit under the limit.
    fn room(&self, bytes: usize) -> Result<(), EnvsubstError> {
        if bytes > self.limit - self.held {
            return Err(EnvsubstError::TooLarge {
                variable: self.last.map(str::to_string),
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Charges `bytes` read while expanding `param`.
    fn read(&mut self, param: &str, bytes: usize) -> Result<(), EnvsubstError> {
        self.reads_left = self
            .reads_left
            .checked_sub(bytes)
            .ok_or_else(|| self.too_costly(param))?;
        Ok(())
    }

    fn too_costly(&self, param: &str) -> EnvsubstError {
        EnvsubstError::TooCostly {
            variable: param.to_string(),
            limit: self.limit,
        }
    }

    fn apply(
        &mut self,
        param: &'a str,
        op: &str,
        value: &str,
        args: &[String],
    ) -> Result<String, EnvsubstError> {
        let arg = |i: usize| args.get(i).map(String::as_str);
        let pattern = arg(0).unwrap_or("");
        // A replacement scans the value and may write little of it (trims charge their own
        // steps); every other operator writes about as much as it reads.
        if op.starts_with('/') {
            self.read(param, value.len())?;
        }
        Ok(match op {
            "," => map_first(value, char::to_lowercase),
            ",," => value.to_lowercase(),
            "^" => map_first(value, char::to_uppercase),
            "^^" => value.to_uppercase(),
            "#" if args.is_empty() => value.len().to_string(),
            "#" => self.trim(param, value, pattern, true, false)?,
            "##" => self.trim(param, value, pattern, true, true)?,
            "%" => self.trim(param, value, pattern, false, false)?,
            "%%" => self.trim(param, value, pattern, false, true)?,
            ":" => substring(value, arg(0), arg(1)),
            "/" => value.replacen(pattern, arg(1).unwrap_or(""), 1),
            "//" => self.replace_all(param, value, pattern, arg(1).unwrap_or(""))?,
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
        })
    }

    /// `${v//p/r}`: each match is charged and the result checked as it grows, since a short
    /// pattern matches often (an empty one at every character boundary, as in Go).
    fn replace_all(
        &mut self,
        param: &'a str,
        value: &str,
        pattern: &str,
        replacement: &str,
    ) -> Result<String, EnvsubstError> {
        self.last = Some(param);
        let mut replaced = String::new();
        let mut copied = 0;
        for (at, found) in value.match_indices(pattern) {
            self.read(param, pattern::CHAR_COST)?;
            self.room(replaced.len() + (at - copied) + replacement.len())?;
            replaced.push_str(&value[copied..at]);
            replaced.push_str(replacement);
            copied = at + found.len();
        }
        replaced.push_str(&value[copied..]);
        Ok(replaced)
    }

    /// `value` without the shortest or longest prefix (or suffix) matching `pattern`, in
    /// steps charged to the reads.
    fn trim(
        &mut self,
        param: &str,
        value: &str,
        pattern: &str,
        prefix: bool,
        longest: bool,
    ) -> Result<String, EnvsubstError> {
        let steps = &mut self.reads_left;
        let trimmed = if prefix {
            pattern::trim_prefix(value, pattern, longest, steps)
        } else {
            pattern::trim_suffix(value, pattern, longest, steps)
        };
        match trimmed {
            Ok(trimmed) => Ok(trimmed.to_string()),
            Err(pattern::OutOfSteps) => Err(self.too_costly(param)),
        }
    }
}

fn is_default_op(op: &str) -> bool {
    matches!(op, "-" | "+" | "=" | "?" | ":-" | ":+" | ":=" | ":?")
}

fn map_first<I: Iterator<Item = char>>(value: &str, f: impl Fn(char) -> I) -> String {
    let mut chars = value.chars();
    match chars.next() {
        Some(first) => f(first).chain(chars).collect(),
        None => String::new(),
    }
}

/// `${v:pos}` and `${v:pos:len}` on bytes, like Go (positions that are not numbers leave
/// the value unchanged; a negative position counts from the end, a negative length back
/// from the end). Positions past either end are clamped where Go's sums would overflow.
fn substring(value: &str, pos: Option<&str>, len: Option<&str>) -> String {
    let Some(Ok(pos)) = pos.map(str::parse::<i64>) else {
        return value.to_string();
    };
    let size = value.len();
    let from_end = |back: i64| size.checked_sub(usize::try_from(back.unsigned_abs()).unwrap_or(usize::MAX));
    let start = match usize::try_from(pos) {
        Ok(pos) => pos,
        Err(_) => from_end(pos).unwrap_or(0),
    };
    let end = match len.map(str::parse::<i64>) {
        None => size,
        Some(Err(_)) => return value.to_string(),
        Some(Ok(len)) => match usize::try_from(len) {
            Ok(len) => start.saturating_add(len).min(size),
            Err(_) => from_end(len).unwrap_or(0),
        },
    };
    if start >= end {
        return String::new();
    }
    String::from_utf8_lossy(&value.as_bytes()[start..end]).into_owned()
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
mod tests;
