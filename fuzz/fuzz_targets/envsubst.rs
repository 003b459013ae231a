//! Fuzzes Flux's `${...}` expansion. The input is `name=value` lines, a line `---text---`, and
//! the text to expand; strict mode when the text starts with `!`. Invariants: no panic, no
//! runaway recursion (nesting is bounded), text without `$` comes back unchanged, and outside
//! strict mode no variable is ever reported as unset.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/flux/envsubst.rs"]
mod envsubst;

use envsubst::{EnvsubstError, expand};

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    let (vars_text, text) = input.split_once("---text---\n").unwrap_or(("", input));
    let vars: BTreeMap<String, String> = vars_text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let strict = text.starts_with('!');
    let result = expand(text, &vars, strict);
    if !text.contains('$') {
        assert_eq!(result.as_deref(), Ok(text), "text without $ changed");
    }
    if !strict {
        assert!(!matches!(result, Err(EnvsubstError::NotSet(_))), "{result:?} outside strict mode");
    }
});
