//! Fuzzes Flux's `${...}` expansion. The input is `name=value` lines, a line `---text---`, and
//! the text to expand; strict mode when the text starts with `!`. Invariants: no panic, no
//! runaway recursion (nesting is bounded), text without `$` comes back unchanged (or is refused
//! as too large), the output never passes the limit, and outside strict mode no variable is
//! ever reported as unset.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/flux/envsubst/mod.rs"]
mod envsubst;

use envsubst::{EnvsubstError, expand};

/// Small enough that inputs reach it: a few kilobytes of variables and text.
const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    let (vars_text, text) = input.split_once("---text---\n").unwrap_or(("", input));
    let vars: BTreeMap<String, String> = vars_text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let strict = text.starts_with('!');
    let result = expand(text, &vars, strict, LIMIT);
    if let Ok(out) = &result {
        assert!(out.len() <= LIMIT, "{} bytes out, limit {LIMIT}", out.len());
    }
    if !text.contains('$') && text.len() <= LIMIT {
        assert_eq!(result.as_deref(), Ok(text), "text without $ changed");
    }
    if !strict {
        assert!(!matches!(result, Err(EnvsubstError::NotSet(_))), "{result:?} outside strict mode");
    }
});
