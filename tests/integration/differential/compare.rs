//! Two masked sides compared field by field, and the differences judged against the table of
//! intended ones.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::intended::Entry;

/// One field (or list item) where the sides differ; `None` where a side has nothing.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Difference {
    pub(super) path: String,
    pub(super) flux: Option<String>,
    pub(super) ours: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
        write!(
            f,
            "{}\n      flux: {}\n      ours: {}",
            self.path,
            show(&self.flux),
            show(&self.ours)
        )
    }
}

/// Every difference between the two sides. Conditions are matched by type, field managers
/// by manager and operation, events and notifications by their longest common subsequence
/// (an extra or missing one is one difference, not a shift of all that follow).
pub(super) fn diff(flux: &Value, ours: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk("", flux, ours, &mut out);
    out
}

fn walk(path: &str, flux: &Value, ours: &Value, out: &mut Vec<Difference>) {
    if flux == ours {
        return;
    }
    match (flux, ours) {
        (Value::Object(f), Value::Object(o)) => {
            let keys: BTreeSet<&String> = f.keys().chain(o.keys()).collect();
            for key in keys {
                let child = join(path, key);
                walk(
                    &child,
                    f.get(key).unwrap_or(&Value::Null),
                    o.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(f), Value::Array(o)) if path.starts_with("events.") => {
            sequence(path, f, o, |v| v.to_string(), out)
        }
        (Value::Array(f), Value::Array(o)) if path.starts_with("notifications.") => sequence(
            path,
            f,
            o,
            |n| format!("{} {} {}", n["severity"], n["reason"], n["message"]),
            out,
        ),
        (Value::Array(f), Value::Array(o)) if keyed(f) && keyed(o) => {
            let index = |items: &[Value]| -> BTreeMap<String, Value> {
                items.iter().map(|v| (item_key(v), v.clone())).collect()
            };
            let (fi, oi) = (index(f), index(o));
            let keys: BTreeSet<&String> = fi.keys().chain(oi.keys()).collect();
            for key in keys {
                walk(
                    &format!("{path}[{key}]"),
                    fi.get(key).unwrap_or(&Value::Null),
                    oi.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(f), Value::Array(o)) if f.len() == o.len() => {
            for (i, (a, b)) in f.iter().zip(o).enumerate() {
                walk(&format!("{path}[{i}]"), a, b, out);
            }
        }
        _ => out.push(Difference {
            path: path.to_string(),
            flux: shown(flux),
            ours: shown(ours),
        }),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn shown(v: &Value) -> Option<String> {
    (!v.is_null()).then(|| v.to_string())
}

/// Lists whose items name themselves: conditions (`type`), field managers (`manager`).
fn keyed(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|v| v.get("type").is_some_and(Value::is_string) || v.get("manager").is_some())
}

fn item_key(v: &Value) -> String {
    match v.get("manager") {
        Some(manager) => format!(
            "{} {}{}",
            manager.as_str().unwrap_or_default(),
            v["operation"].as_str().unwrap_or_default(),
            v["subresource"]
                .as_str()
                .map(|s| format!(" {s}"))
                .unwrap_or_default()
        ),
        None => v["type"].as_str().unwrap_or_default().to_string(),
    }
}

/// Ordered lists aligned on `key`: pairs with equal keys are compared field by field, the
/// rest reported as present on one side only, at their index on that side.
fn sequence(path: &str, f: &[Value], o: &[Value], key: impl Fn(&Value) -> String, out: &mut Vec<Difference>) {
    let (fk, ok): (Vec<String>, Vec<String>) = (f.iter().map(&key).collect(), o.iter().map(&key).collect());
    // Longest common subsequence table, from the ends.
    let mut lcs = vec![vec![0usize; ok.len() + 1]; fk.len() + 1];
    for i in (0..fk.len()).rev() {
        for j in (0..ok.len()).rev() {
            lcs[i][j] = if fk[i] == ok[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < fk.len() || j < ok.len() {
        if i < fk.len() && j < ok.len() && fk[i] == ok[j] {
            walk(&format!("{path}[{i}]"), &f[i], &o[j], out);
            i += 1;
            j += 1;
        } else if j == ok.len() || (i < fk.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(Difference {
                path: format!("{path}[{i}]"),
                flux: shown(&f[i]),
                ours: None,
            });
            i += 1;
        } else {
            out.push(Difference {
                path: format!("{path}[+{j}]"),
                flux: None,
                ours: shown(&o[j]),
            });
            j += 1;
        }
    }
}

/// `*` matches any run of characters; everything else matches itself.
pub(super) fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else { return false };
            rest = &rest[at + part.len()..];
        }
    }
    true
}

/// [`glob`] against any of `patterns`' `|`-separated alternatives.
fn glob_any(patterns: &str, text: &str) -> bool {
    patterns.split('|').any(|p| glob(p, text))
}

fn matches(entry: &Entry, scenario: &str, d: &Difference) -> bool {
    let side =
        |pattern: &str, value: &Option<String>| glob_any(pattern, value.as_deref().unwrap_or("(absent)"));
    glob_any(entry.scenario, scenario)
        && glob_any(entry.path, &d.path)
        && side(entry.flux, &d.flux)
        && side(entry.ours, &d.ours)
}

/// A scenario's differences, each with the table entry that explains it (if any).
type Judged = (String, Vec<(Difference, Option<&'static Entry>)>);

/// The differences of every scenario, judged.
pub(super) struct Verdict {
    scenarios: Vec<Judged>,
    unused: Vec<&'static Entry>,
    table: &'static [Entry],
}

impl Verdict {
    pub(super) fn judge(differences: &BTreeMap<&str, Vec<Difference>>, table: &'static [Entry]) -> Self {
        let mut used = BTreeSet::new();
        let scenarios = differences
            .iter()
            .map(|(name, diffs)| {
                let judged = diffs
                    .iter()
                    .map(|d| {
                        let entry = table.iter().position(|e| matches(e, name, d));
                        if let Some(i) = entry {
                            used.insert(i);
                        }
                        (d.clone(), entry.map(|i| &table[i]))
                    })
                    .collect();
                (name.to_string(), judged)
            })
            .collect();
        let unused = table
            .iter()
            .enumerate()
            .filter(|(i, _)| !used.contains(i))
            .map(|(_, e)| e)
            .collect();
        Self {
            scenarios,
            unused,
            table,
        }
    }

    /// Scenarios by outcome: identical, only intended differences, failing.
    fn counts(&self) -> [usize; 3] {
        let mut counts = [0; 3];
        for (_, diffs) in &self.scenarios {
            let slot = if diffs.is_empty() {
                0
            } else if diffs.iter().any(|(_, e)| e.is_none()) {
                2
            } else {
                1
            };
            counts[slot] += 1;
        }
        counts
    }

    pub(super) fn passed(&self) -> bool {
        self.counts()[2] == 0 && self.unused.is_empty()
    }

    pub(super) fn report(&self) -> String {
        let [identical, intended, failing] = self.counts();
        let mut out = format!(
            "differential suite: {} scenarios, {identical} identical, {intended} with intended differences only, \
             {failing} failing\n",
            self.scenarios.len()
        );
        for (name, diffs) in &self.scenarios {
            for (d, entry) in diffs {
                let why = match entry {
                    Some(e) => format!("[intended: {}]", e.id),
                    None => "[UNEXPECTED]".into(),
                };
                let _ = writeln!(out, "  {name} {why} {d}");
            }
        }
        let _ = writeln!(
            out,
            "the table of intended differences (tests/integration/differential/intended.rs):"
        );
        for e in self.table {
            let scenarios = self
                .scenarios
                .iter()
                .filter(|(_, diffs)| diffs.iter().any(|(_, m)| m.is_some_and(|m| std::ptr::eq(m, e))))
                .count();
            let _ = writeln!(out, "  {} ({scenarios} scenarios): {}", e.id, e.reason);
        }
        out
    }

    pub(super) fn failures(&self, logs: &str) -> String {
        let mut out = String::new();
        for (name, diffs) in &self.scenarios {
            for (d, _) in diffs.iter().filter(|(_, e)| e.is_none()) {
                let _ = writeln!(out, "scenario {name}: {d}");
            }
        }
        for e in &self.unused {
            let _ = writeln!(
                out,
                "table entry {} matched no difference: remove it (or the scenario that shows it is gone)",
                e.id
            );
        }
        format!(
            "the controllers differ where the table of intended differences does not say so:\n{out}{logs}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_align_on_a_common_subsequence_and_conditions_by_type() {
        let flux = json!({"events": {"k": ["a", "b", "c"]}, "c": [{"type": "Ready", "m": 1}, {"type": "Healthy", "m": 2}]});
        let ours = json!({"events": {"k": ["a", "c", "d"]}, "c": [{"type": "Healthy", "m": 2}, {"type": "Ready", "m": 3}]});
        let found: Vec<String> = diff(&flux, &ours)
            .iter()
            .map(|d| format!("{} {:?} {:?}", d.path, d.flux, d.ours))
            .collect();
        assert_eq!(
            found,
            [
                r#"c[Ready].m Some("1") Some("3")"#,
                r#"events.k[1] Some("\"b\"") None"#,
                r#"events.k[+2] None Some("\"d\"")"#,
            ]
        );
    }

    #[test]
    fn glob_matches_runs() {
        assert!(glob(
            "steps[*].status.conditions[Ready].message",
            "steps[0].status.conditions[Ready].message"
        ));
        assert!(glob("*drift*", "x drift y"));
        assert!(!glob("a*b", "ac"));
        assert!(glob("(absent)", "(absent)"));
    }
}
