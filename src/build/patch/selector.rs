//! Patch target selection (kustomize `types.Selector` and `resmap.Select`): group, version,
//! kind, name and namespace are regexes anchored as `^(?:...)$`; labelSelector and
//! annotationSelector use the Kubernetes label-selector syntax.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::PatchError;
use crate::api::kustomization::Selector;
use crate::build::resmap::str_at;

/// kustomize's effective namespace of a cluster-scoped object, so that a namespace regex
/// such as `default` never matches it.
const NOT_A_NAMESPACE: &str = "_non_namespaceable_";

/// Cluster-scoped builtin kinds (Kubernetes 1.21 schema). Every other kind, including
/// cluster-scoped custom resources, counts as namespaced, as in kustomize.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ComponentStatus",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

/// Whether kustomize knows `kind` as cluster-scoped.
pub fn is_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// The identity a selector may match besides the object's current one: kustomize lets a
/// target match an object's original name and namespace (before prefixes, suffixes and
/// namespace changes).
#[derive(Clone, Copy, Debug, Default)]
pub struct OriginalId<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
}

/// A selector with its patterns compiled once (as kustomize does), so testing every object
/// of a build costs no regex compilation.
pub struct Target {
    namespace: Option<Regex>,
    name: Option<Regex>,
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    labels: Vec<Requirement>,
    annotations: Vec<Requirement>,
}

impl Target {
    /// Compiles `selector`; a bad regex or label selector names its field.
    pub fn compile(selector: &Selector) -> Result<Self, PatchError> {
        let pattern = |field: &str, pattern: &Option<String>| {
            pattern
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| {
                    Regex::new(&format!("^(?:{p})$")).map_err(|err| PatchError::Selector {
                        field: field.to_string(),
                        reason: err.to_string(),
                    })
                })
                .transpose()
        };
        let requirements =
            |field: &str, selector: Option<&str>| match selector.filter(|s| !s.trim().is_empty()) {
                None => Ok(Vec::new()),
                Some(text) => parse_label_selector(text).map_err(|reason| PatchError::Selector {
                    field: field.to_string(),
                    reason: format!("{reason} in {text:?}"),
                }),
            };
        Ok(Target {
            namespace: pattern("namespace", &selector.namespace)?,
            name: pattern("name", &selector.name)?,
            group: pattern("group", &selector.group)?,
            version: pattern("version", &selector.version)?,
            kind: pattern("kind", &selector.kind)?,
            labels: requirements("labelSelector", selector.label_selector.as_deref())?,
            annotations: requirements("annotationSelector", selector.annotation_selector.as_deref())?,
        })
    }

    /// Whether this target selects `object`, matching name and namespace against the
    /// current or the `original` identity.
    pub fn selects(&self, object: &Map<String, Value>, original: Option<OriginalId<'_>>) -> bool {
        let api_version = str_at(object, &["apiVersion"]);
        let kind = str_at(object, &["kind"]);
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let effective = |ns| effective_namespace(kind, ns);
        let matches = |regex: &Option<Regex>, current: &str, original: Option<&str>| {
            regex
                .as_ref()
                .is_none_or(|r| r.is_match(current) || original.is_some_and(|o| r.is_match(o)))
        };
        matches(
            &self.namespace,
            effective(str_at(object, &["metadata", "namespace"])),
            original.map(|o| effective(o.namespace)),
        ) && matches(
            &self.name,
            str_at(object, &["metadata", "name"]),
            original.map(|o| o.name),
        ) && matches(&self.group, group, None)
            && matches(&self.version, version, None)
            && matches(&self.kind, kind, None)
            && (self.labels.is_empty() || {
                let labels = string_map(object, "labels");
                self.labels.iter().all(|r| r.matches(&labels))
            })
            && (self.annotations.is_empty() || {
                let annotations = string_map(object, "annotations");
                self.annotations.iter().all(|r| r.matches(&annotations))
            })
    }
}

/// kustomize's namespace of an object for matching: cluster-scoped kinds have none.
fn effective_namespace<'a>(kind: &str, namespace: &'a str) -> &'a str {
    if is_cluster_scoped(kind) {
        NOT_A_NAMESPACE
    } else if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

fn string_map(object: &Map<String, Value>, field: &str) -> BTreeMap<String, String> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), String::from)))
                .collect()
        })
        .unwrap_or_default()
}

/// One requirement of a label selector.
#[derive(Debug, PartialEq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
            Requirement::Equals(key, value) => labels.get(key) == Some(value),
            Requirement::NotEquals(key, value) => labels.get(key) != Some(value),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => !labels.get(key).is_some_and(|v| values.contains(v)),
            // Labels that are not integers never match (apimachinery logs and skips them).
            Requirement::GreaterThan(key, bound) => labels
                .get(key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            Requirement::LessThan(key, bound) => labels
                .get(key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

/// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k,l>1,m<2`.
fn parse_label_selector(text: &str) -> Result<Vec<Requirement>, String> {
    let mut requirements = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (requirement, remaining) = parse_requirement(rest)?;
        requirements.push(requirement);
        rest = remaining.trim_start();
        if let Some(after_comma) = rest.strip_prefix(',') {
            rest = after_comma.trim_start();
            if rest.is_empty() {
                return Err("trailing ','".to_string());
            }
        } else if !rest.is_empty() {
            return Err(format!("unexpected {rest:?}"));
        }
    }
    Ok(requirements)
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn split_token(text: &str) -> (&str, &str) {
    let end = text.find(|c: char| !is_key_char(c)).unwrap_or(text.len());
    text.split_at(end)
}

fn parse_requirement(text: &str) -> Result<(Requirement, &str), String> {
    if let Some(negated) = text.strip_prefix('!') {
        let (key, rest) = split_token(negated.trim_start());
        return valid_key(key).map(|key| (Requirement::DoesNotExist(key), rest));
    }
    let (key, rest) = split_token(text);
    let key = valid_key(key)?;
    let rest = rest.trim_start();
    for (op, greater) in [(">", true), ("<", false)] {
        if let Some(after) = rest.strip_prefix(op) {
            let (value, remaining) = split_token(after.trim_start());
            let bound = value
                .parse::<i64>()
                .map_err(|_| format!("{op} needs an integer, found {value:?}"))?;
            let requirement = if greater {
                Requirement::GreaterThan(key, bound)
            } else {
                Requirement::LessThan(key, bound)
            };
            return Ok((requirement, remaining));
        }
    }
    for (op, negate) in [("==", false), ("!=", true), ("=", false)] {
        if let Some(after) = rest.strip_prefix(op) {
            let (value, remaining) = split_token(after.trim_start());
            let value = value.to_string();
            return Ok((
                if negate {
                    Requirement::NotEquals(key, value)
                } else {
                    Requirement::Equals(key, value)
                },
                remaining,
            ));
        }
    }
    for (op, negate) in [("notin", true), ("in", false)] {
        if let Some(after) = rest.strip_prefix(op)
            && after.starts_with(|c: char| c.is_whitespace() || c == '(')
        {
            let after = after.trim_start();
            let inner = after.strip_prefix('(').ok_or("expected '(' after set operator")?;
            let close = inner.find(')').ok_or("missing ')'")?;
            let values: Vec<String> = inner[..close].split(',').map(|v| v.trim().to_string()).collect();
            if values.iter().any(|v| !v.chars().all(is_key_char)) {
                return Err(format!("invalid value in set {:?}", &inner[..close]));
            }
            let remaining = &inner[close + 1..];
            return Ok((
                if negate {
                    Requirement::NotIn(key, values)
                } else {
                    Requirement::In(key, values)
                },
                remaining,
            ));
        }
    }
    Ok((Requirement::Exists(key), rest))
}

fn valid_key(key: &str) -> Result<String, String> {
    if key.is_empty() {
        Err("expected a label key".to_string())
    } else {
        Ok(key.to_string())
    }
}
