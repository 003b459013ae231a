//! Drift between the dry-run result and the live object (labels, annotations and everything
//! outside `metadata` and `status`), `spec.ignore` rules, and a masked, human-readable diff.

use kustomize::selector::{CompiledSelector, Namespacing, SelectorError};
use serde_json::{Map, Value};

use super::masking::mask_pair;
use crate::api::kustomization::IgnoreRule;

/// A `spec.ignore` rule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IgnoreRuleError {
    /// Displays as `spec.ignore[i].target.<field>: <problem>`.
    #[error("spec.ignore[{rule}].target.{error}")]
    Target { rule: usize, error: SelectorError },
    #[error("spec.ignore[{rule}].paths: '{path}' is not a JSON pointer")]
    Pointer { rule: usize, path: String },
}

/// `spec.ignore` compiled once per apply: each rule's selector (none selects every object)
/// and its JSON pointers.
#[derive(Clone, Debug, Default)]
pub(crate) struct IgnoreRules {
    rules: Vec<(Option<CompiledSelector>, Vec<String>)>,
}

impl IgnoreRules {
    /// Checks and compiles `rules`; the first bad one is named with its field.
    pub(crate) fn compile(rules: &[IgnoreRule]) -> Result<Self, IgnoreRuleError> {
        let compiled = rules.iter().enumerate().map(|(i, rule)| {
            if let Some(path) = rule.paths.iter().find(|p| !p.is_empty() && !p.starts_with('/')) {
                return Err(IgnoreRuleError::Pointer {
                    rule: i,
                    path: path.clone(),
                });
            }
            let selector = rule
                .target
                .as_ref()
                .map(CompiledSelector::compile)
                .transpose()
                .map_err(|error| IgnoreRuleError::Target { rule: i, error })?;
            Ok((selector, rule.paths.clone()))
        });
        Ok(IgnoreRules {
            rules: compiled.collect::<Result<_, _>>()?,
        })
    }

    /// The JSON pointers of the rules that select `obj` (the dry-run object), matched as Flux
    /// does: name and namespace as written.
    pub(crate) fn paths_for(&self, obj: &Value) -> Vec<String> {
        self.rules
            .iter()
            .filter(|(selector, _)| match (selector, obj.as_object()) {
                (None, _) => true,
                (Some(selector), Some(object)) => selector.matches(object, Namespacing::AsWritten),
                (Some(_), None) => false,
            })
            .flat_map(|(_, paths)| paths.iter().cloned())
            .collect()
    }
}

/// The reference tokens of a JSON pointer, unescaped: `~1` is `/`, then `~0` is `~`.
pub(crate) fn pointer_tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// The array index a token names: `0`, or digits without a leading zero.
/// `-` (past the end) and anything else name no element.
pub(crate) fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    (digits && (token == "0" || !token.starts_with('0')))
        .then(|| token.parse().ok())
        .flatten()
}

/// A token as it orders removals: array indices by number.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Token {
    Index(usize),
    Key(String),
}

/// Removes the values at JSON pointers; a pointer to nothing is a no-op. Pointers are resolved
/// against the object as given: array elements are removed from the highest index down, so
/// removing one does not move the element another pointer names.
pub(crate) fn remove_pointers(obj: &mut Value, pointers: &[String]) {
    let mut resolved: Vec<Vec<Token>> = pointers
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            pointer_tokens(p)
                .into_iter()
                .map(|t| match array_index(&t) {
                    Some(i) => Token::Index(i),
                    None => Token::Key(t),
                })
                .collect()
        })
        .collect();
    resolved.sort_unstable_by(|a, b| b.cmp(a));
    resolved.dedup();
    for tokens in resolved {
        remove_tokens(obj, &tokens);
    }
}

fn remove_tokens(obj: &mut Value, tokens: &[Token]) {
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut node = obj;
    for token in parents {
        node = match (node, token) {
            (Value::Object(map), Token::Key(k)) => match map.get_mut(k) {
                Some(child) => child,
                None => return,
            },
            (Value::Object(map), Token::Index(i)) => match map.get_mut(&i.to_string()) {
                Some(child) => child,
                None => return,
            },
            (Value::Array(items), Token::Index(i)) => match items.get_mut(*i) {
                Some(child) => child,
                None => return,
            },
            _ => return,
        };
    }
    match (node, last) {
        (Value::Object(map), Token::Key(k)) => {
            map.remove(k);
        }
        (Value::Object(map), Token::Index(i)) => {
            map.remove(&i.to_string());
        }
        (Value::Array(items), Token::Index(i)) if *i < items.len() => {
            items.remove(*i);
        }
        _ => {}
    }
}

/// The parts of an object drift is judged on: labels, annotations, and everything outside
/// `metadata` and `status`.
fn comparable(obj: &Value, ignored: &[String]) -> Value {
    let mut copy = obj.clone();
    remove_pointers(&mut copy, ignored);
    let Some(map) = copy.as_object_mut() else {
        return copy;
    };
    let metadata = map.remove("metadata").unwrap_or(Value::Null);
    map.remove("status");
    let mut kept = Map::new();
    for key in ["labels", "annotations"] {
        // an empty map and no map are the same
        if let Some(v) = metadata
            .get(key)
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
        {
            kept.insert(key.into(), v.clone());
        }
    }
    map.insert("metadata".into(), Value::Object(kept));
    if obj.get("kind").and_then(Value::as_str) == Some("HorizontalPodAutoscaler") {
        normalize_hpa_metrics(&mut copy);
    }
    copy
}

/// The dry-run of an HPA can repeat or leave empty `spec.metrics` entries (Flux normalizes the
/// same quirk).
fn normalize_hpa_metrics(obj: &mut Value) {
    if let Some(metrics) = obj.pointer_mut("/spec/metrics").and_then(Value::as_array_mut) {
        let mut seen = Vec::new();
        metrics.retain(|m| {
            let keep = m.as_object().is_some_and(|o| !o.is_empty()) && !seen.contains(m);
            if keep {
                seen.push(m.clone());
            }
            keep
        });
    }
}

/// True when the dry-run result differs from the live object in anything drift is judged on.
/// A dry-run result without `resourceVersion` means the object does not exist yet.
pub(crate) fn has_drifted(live: Option<&Value>, dry_run: &Value, ignored: &[String]) -> bool {
    let Some(live) = live else { return true };
    if dry_run.pointer("/metadata/resourceVersion").is_none() {
        return true;
    }
    comparable(live, ignored) != comparable(dry_run, ignored)
}

/// The fields (dotted paths) in which `merged` (the dry-run result) differs from `live`, over
/// what drift is judged on: a map is descended, anything else named where it differs.
pub(crate) fn drifted_fields(live: &Value, merged: &Value, ignored: &[String]) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for key in keys {
                    let null = Value::Null;
                    let child = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(
                        &child,
                        a.get(key).unwrap_or(&null),
                        b.get(key).unwrap_or(&null),
                        out,
                    );
                }
            }
            (a, b) if a != b => out.push(path.to_string()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(
        "",
        &comparable(live, ignored),
        &comparable(merged, ignored),
        &mut out,
    );
    out
}

/// A unified diff of `live` and `merged` (the dry-run result) over the fields drift is judged
/// on, with Secret values masked. Empty when nothing differs.
pub(crate) fn diff_text(live: Option<&Value>, merged: &Value, ignored: &[String]) -> String {
    let mut before = live.map(|l| comparable(l, ignored)).unwrap_or(Value::Null);
    let mut after = comparable(merged, ignored);
    mask_pair(&mut before, &mut after);
    if before == after {
        return String::new();
    }
    let render = |v: &Value| {
        if v.is_null() {
            String::new()
        } else {
            serde_yaml::to_string(v).unwrap_or_default()
        }
    };
    let (old, new) = (render(&before), render(&after));
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(2)
        .header("live", "desired")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kustomization::Selector;
    use serde_json::json;

    fn ignored_paths(rules: &[IgnoreRule], obj: &Value) -> Result<Vec<String>, IgnoreRuleError> {
        Ok(IgnoreRules::compile(rules)?.paths_for(obj))
    }

    fn live() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": "5", "uid": "u", "generation": 2,
                "managedFields": [{"manager": "x"}], "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"metadata": {}}}, "status": {"readyReplicas": 2}})
    }

    #[test]
    fn drifted_fields_name_each_changed_leaf_and_nothing_the_server_owns() {
        let mut merged = live();
        merged["spec"]["replicas"] = 3.into();
        merged["metadata"]["labels"]["team"] = "x".into();
        merged["metadata"]["resourceVersion"] = "6".into();
        merged["status"] = json!({});
        assert_eq!(
            drifted_fields(&live(), &merged, &[]),
            ["metadata.labels.team", "spec.replicas"]
        );
        assert_eq!(
            drifted_fields(&live(), &merged, &["/spec/replicas".to_string()]),
            ["metadata.labels.team"]
        );
        assert!(drifted_fields(&live(), &live(), &[]).is_empty());
    }

    #[test]
    fn server_metadata_and_status_are_not_drift() {
        let mut dry = live();
        dry["metadata"]["resourceVersion"] = "6".into();
        dry["metadata"]["managedFields"] = json!([]);
        dry["metadata"]["generation"] = 3.into();
        dry["status"] = json!({});
        assert!(!has_drifted(Some(&live()), &dry, &[]));
    }

    #[test]
    fn spec_labels_and_annotations_are_drift() {
        let mut dry = live();
        dry["spec"]["replicas"] = 3.into();
        assert!(has_drifted(Some(&live()), &dry, &[]));
        let mut dry = live();
        dry["metadata"]["labels"]["team"] = "x".into();
        assert!(has_drifted(Some(&live()), &dry, &[]));
        let mut dry = live();
        dry["metadata"]["annotations"] = json!({"a": "b"});
        assert!(has_drifted(Some(&live()), &dry, &[]));
    }

    #[test]
    fn missing_live_object_or_resource_version_is_a_create() {
        assert!(has_drifted(None, &live(), &[]));
        let mut dry = live();
        dry["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        assert!(has_drifted(Some(&live()), &dry, &[]));
    }

    #[test]
    fn ignored_paths_do_not_count() {
        let mut dry = live();
        dry["spec"]["replicas"] = 3.into();
        assert!(!has_drifted(Some(&live()), &dry, &["/spec/replicas".into()]));
    }

    #[test]
    fn rules_match_by_anchored_regex_and_selectors() {
        let rule = |target: Selector| IgnoreRule {
            paths: vec!["/spec/replicas".into()],
            target: Some(target),
        };
        let obj = live();
        let sel = |f: fn(&mut Selector)| {
            let mut s = Selector::default();
            f(&mut s);
            s
        };
        assert_eq!(
            ignored_paths(&[rule(sel(|s| s.kind = Some("Deploy.*".into())))], &obj).unwrap(),
            ["/spec/replicas"]
        );
        // (the rule's target, how many of its paths apply to the Deployment)
        let cases = [
            // anchored: "Deploy" does not match "Deployment"
            (sel(|s| s.kind = Some("Deploy".into())), 0),
            (sel(|s| s.group = Some("apps".into())), 1),
            (sel(|s| s.version = Some("v2".into())), 0),
            (sel(|s| s.label_selector = Some("app in (web, api)".into())), 1),
            (sel(|s| s.label_selector = Some("app!=web".into())), 0),
            (sel(|s| s.annotation_selector = Some("a=b".into())), 0),
        ];
        for (target, expected) in cases {
            let case = format!("{target:?}");
            assert_eq!(
                ignored_paths(&[rule(target)], &obj).unwrap().len(),
                expected,
                "{case}"
            );
        }
        assert_eq!(
            ignored_paths(
                &[IgnoreRule {
                    paths: vec!["/x".into()],
                    target: None
                }],
                &obj
            )
            .unwrap(),
            ["/x"]
        );
    }

    #[test]
    fn bad_rules_name_the_field() {
        let rule = IgnoreRule {
            paths: vec!["/a".into()],
            target: Some(Selector {
                name: Some("(".into()),
                ..Default::default()
            }),
        };
        let err = ignored_paths(&[rule], &live()).unwrap_err().to_string();
        assert!(
            err.starts_with("spec.ignore[0].target.name: invalid regular expression '('"),
            "{err}"
        );
        let rule = IgnoreRule {
            paths: vec!["spec".into()],
            target: None,
        };
        assert_eq!(
            ignored_paths(&[rule], &live()).unwrap_err().to_string(),
            "spec.ignore[0].paths: 'spec' is not a JSON pointer"
        );
    }

    #[test]
    fn label_selector_expressions() {
        let mut obj = live();
        obj["metadata"]["labels"] = json!({"a": "1", "b": "2"});
        let rules = |sel: &str| {
            [IgnoreRule {
                paths: vec!["/x".into()],
                target: Some(Selector {
                    label_selector: Some(sel.into()),
                    ..Default::default()
                }),
            }]
        };
        for (sel, expected) in [
            ("a=1", true),
            ("a==1,b=2", true),
            ("a=1,b=3", false),
            ("a", true),
            ("!c", true),
            ("!a", false),
            ("a notin (2,3)", true),
            ("c notin (2)", true),
            ("b in (1)", false),
        ] {
            assert_eq!(
                ignored_paths(&rules(sel), &obj).unwrap().len(),
                usize::from(expected),
                "{sel}"
            );
        }
        for malformed in ["a in (1", "a b"] {
            let err = ignored_paths(&rules(malformed), &obj).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!(
                    "spec.ignore[0].target.labelSelector: invalid selector '{malformed}': "
                )),
                "{err}"
            );
        }
    }

    // "~1" is "/", "~0" is "~", decoded in that order ("~01" is "~1")
    #[test]
    fn pointer_tokens_are_unescaped() {
        assert_eq!(
            pointer_tokens("/metadata/annotations/a~1b"),
            ["metadata", "annotations", "a/b"]
        );
        assert_eq!(pointer_tokens("/x~01"), ["x~1"]);
        assert_eq!(pointer_tokens("/"), [""]);
        assert!(pointer_tokens("").is_empty());
    }

    // a JSON pointer's array index is "0" or a number without leading zeros; "-" names
    // the (nonexistent) element after the last
    #[test]
    fn array_indices_are_zero_or_digits_without_a_leading_zero() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        for not_an_index in ["01", "-", "+1", "-1", "1e0", "", "a"] {
            assert_eq!(array_index(not_an_index), None, "{not_an_index}");
        }
    }

    #[test]
    fn pointer_removal_unescapes_segments() {
        let mut obj = json!({"metadata": {"annotations": {"a/b": "x", "c": "y"}}, "list": [1, 2]});
        remove_pointers(
            &mut obj,
            &[
                "/metadata/annotations/a~1b".into(),
                "/list/0".into(),
                "/missing/x".into(),
            ],
        );
        assert_eq!(obj, json!({"metadata": {"annotations": {"c": "y"}}, "list": [2]}));
    }

    #[test]
    fn pointers_through_list_indices_remove_what_they_name_in_the_given_object() {
        let obj = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}, {"name": "c", "image": "c:1"}]}});
        let mut o = obj.clone();
        remove_pointers(&mut o, &["/spec/containers/1/image".into()]);
        assert_eq!(o["spec"]["containers"][1], json!({"name": "b"}));
        assert_eq!(o["spec"]["containers"][0], obj["spec"]["containers"][0]);
        // two elements of one list: both named against the original, whatever the rule order
        let mut o = obj.clone();
        remove_pointers(
            &mut o,
            &["/spec/containers/0".into(), "/spec/containers/1".into()],
        );
        assert_eq!(
            o,
            json!({"spec": {"containers": [{"name": "c", "image": "c:1"}]}})
        );
        // an element and a field inside an element before it
        let mut o = obj.clone();
        remove_pointers(
            &mut o,
            &["/spec/containers/0/image".into(), "/spec/containers/2".into()],
        );
        assert_eq!(
            o,
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "b:1"}]}})
        );
        // pointers to nothing change nothing (past the end, "-", leading zero, into a string)
        let mut o = obj.clone();
        remove_pointers(
            &mut o,
            &[
                "/spec/containers/3".into(),
                "/spec/containers/-".into(),
                "/spec/containers/01/image".into(),
                "/spec/containers/0/image/x".into(),
                "/spec/containers/name".into(),
            ],
        );
        assert_eq!(o, obj);
        // a number names a key of an object
        let mut o = json!({"data": {"0": "x", "1": "y"}});
        remove_pointers(&mut o, &["/data/0".into()]);
        assert_eq!(o, json!({"data": {"1": "y"}}));
    }

    #[test]
    fn ignoring_an_image_by_list_index_keeps_that_change_out_of_drift() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "resourceVersion": "5"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:1"}, {"name": "proxy", "image": "proxy:1"}]}}}});
        let ignored = ["/spec/template/spec/containers/0/image".to_string()];
        let mut dry = live.clone();
        dry["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2".into();
        assert!(!has_drifted(Some(&live), &dry, &ignored));
        assert_eq!(diff_text(Some(&live), &dry, &ignored), "");
        let mut dry = live.clone();
        dry["spec"]["template"]["spec"]["containers"][1]["image"] = "proxy:2".into();
        assert!(has_drifted(Some(&live), &dry, &ignored));
    }

    #[test]
    fn secret_diffs_are_masked() {
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "resourceVersion": "1"},
            "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="}});
        let mut merged = live.clone();
        merged["data"]["password"] = "czNjcjN0".into();
        let text = diff_text(Some(&live), &merged, &[]);
        assert!(text.contains("-  password: '*** (before)'"), "{text}");
        assert!(text.contains("+  password: '*** (after)'"), "{text}");
        assert!(text.contains("user: '***'"), "{text}");
        for secret in ["aHVudGVyMg==", "czNjcjN0", "YWRtaW4=", "hunter2", "admin"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert_eq!(diff_text(Some(&live), &live, &[]), "");
    }
}
