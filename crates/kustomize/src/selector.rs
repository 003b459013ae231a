//! Selecting objects with a [`Selector`] (`patches[].target` and `ignore[].target`): group,
//! version, kind, name and namespace are regexes anchored as `^(?:...)$`; `labelSelector` and
//! `annotationSelector` use the Kubernetes label-selector syntax (as
//! `k8s.io/apimachinery/pkg/labels.Parse` accepts it). kustomize's patch targets and Flux's
//! drift ignore rules select alike except for the name and namespace they match
//! ([`Namespacing`]). A selector is compiled once and then tested against any number of objects.

use std::borrow::Cow;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::gvk::split_api_version;

/// Selector specifies a set of resources. Any resource that matches intersection of all
/// conditions is included in this set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Group is the API group to select resources from. Together with Version and Kind it is
    /// capable of unambiguously identifying and/or selecting resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Version of the API Group to select resources from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Kind of the API Group to select resources from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace to select resources from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name to match resources with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// AnnotationSelector is a string that follows the label selection expression
    /// https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#api It matches
    /// with the resource annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
    /// LabelSelector is a string that follows the label selection expression
    /// https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#api It matches
    /// with the resource labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

impl Selector {
    /// The fields this selector sets (non-empty), with their YAML names.
    pub fn set_fields(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("group", &self.group),
            ("version", &self.version),
            ("kind", &self.kind),
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("labelSelector", &self.label_selector),
            ("annotationSelector", &self.annotation_selector),
        ]
        .into_iter()
        .filter_map(|(field, value)| value.as_deref().filter(|v| !v.is_empty()).map(|v| (field, v)))
    }
}

/// kustomize's effective namespace of a cluster-scoped object, so that a namespace pattern
/// such as `default` never matches it.
pub(crate) const NOT_A_NAMESPACE: &str = "_non_namespaceable_";

/// The identity a kustomize patch target may match besides the object's current one: its
/// name and namespace before prefixes, suffixes and namespace changes.
#[derive(Clone, Copy, Debug, Default)]
pub struct OriginalId<'a> {
    pub(crate) name: &'a str,
    pub(crate) namespace: &'a str,
}

/// Which name and namespace the `name` and `namespace` patterns are matched against.
#[derive(Clone, Copy, Debug)]
pub enum Namespacing<'a> {
    /// Flux's `spec.ignore` (fluxcd/pkg/ssa `jsondiff.SelectorRegex`): `metadata.name` and
    /// `metadata.namespace` as they are, empty when absent.
    AsWritten,
    /// kustomize's `resmap.Select` (patch targets): the effective namespace, `default` when
    /// empty and [`NOT_A_NAMESPACE`] for a kind kustomize knows as cluster-scoped; the
    /// `original` name and namespace match too.
    Kustomize {
        cluster_scoped: bool,
        original: Option<OriginalId<'a>>,
    },
}

/// A selector field that cannot be compiled; displays as `<field>: <problem>`, the field by
/// its YAML name, for callers to prefix with where the selector is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SelectorError {
    pub(crate) field: &'static str,
    pub(crate) problem: SelectorProblem,
}

/// What is wrong with a selector field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorProblem {
    #[error("invalid regular expression '{pattern}': {reason}")]
    Regex { pattern: String, reason: String },
    #[error("invalid selector '{selector}': {reason}")]
    LabelSelector { selector: String, reason: String },
}

/// A [`Selector`] with its patterns compiled and its label selectors parsed.
#[derive(Clone, Debug)]
pub struct CompiledSelector {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: LabelSelector,
    annotations: LabelSelector,
}

impl CompiledSelector {
    /// Compiles `selector`; an empty field selects everything. A bad field is named.
    pub fn compile(selector: &Selector) -> Result<Self, SelectorError> {
        let pattern = |field: &'static str, pattern: &Option<String>| {
            pattern
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| {
                    Regex::new(&format!("^(?:{p})$")).map_err(|err| SelectorError {
                        field,
                        problem: SelectorProblem::Regex {
                            pattern: p.to_string(),
                            reason: err.to_string(),
                        },
                    })
                })
                .transpose()
        };
        let label_selector = |field: &'static str, text: &Option<String>| {
            LabelSelector::parse(text.as_deref().unwrap_or_default()).map_err(|reason| SelectorError {
                field,
                problem: SelectorProblem::LabelSelector {
                    selector: text.clone().unwrap_or_default(),
                    reason,
                },
            })
        };
        Ok(CompiledSelector {
            group: pattern("group", &selector.group)?,
            version: pattern("version", &selector.version)?,
            kind: pattern("kind", &selector.kind)?,
            name: pattern("name", &selector.name)?,
            namespace: pattern("namespace", &selector.namespace)?,
            labels: label_selector("labelSelector", &selector.label_selector)?,
            annotations: label_selector("annotationSelector", &selector.annotation_selector)?,
        })
    }

    /// Whether `object` is selected, its name and namespace taken as `namespacing` says.
    pub fn matches(&self, object: &Map<String, Value>, namespacing: Namespacing<'_>) -> bool {
        let metadata = object.get("metadata").and_then(Value::as_object);
        let api_version = text(Some(object), "apiVersion");
        let (group, version) = split_api_version(api_version);
        let (name, namespace) = (text(metadata, "name"), text(metadata, "namespace"));
        let matches = |regex: &Option<Regex>, current: &str, original: Option<&str>| {
            regex
                .as_ref()
                .is_none_or(|r| r.is_match(current) || original.is_some_and(|o| r.is_match(o)))
        };
        let identity = match namespacing {
            Namespacing::AsWritten => {
                matches(&self.name, name, None) && matches(&self.namespace, namespace, None)
            }
            Namespacing::Kustomize {
                cluster_scoped,
                original,
            } => {
                matches(&self.name, name, original.map(|o| o.name))
                    && matches(
                        &self.namespace,
                        effective_namespace(cluster_scoped, namespace),
                        original.map(|o| effective_namespace(cluster_scoped, o.namespace)),
                    )
            }
        };
        let map = |field: &str| metadata.and_then(|m| m.get(field)).and_then(Value::as_object);
        identity
            && matches(&self.group, group, None)
            && matches(&self.version, version, None)
            && matches(&self.kind, text(Some(object), "kind"), None)
            && self.labels.matches(map("labels"))
            && self.annotations.matches(map("annotations"))
    }
}

/// The string at `key` of `map`, "" when absent or not a string.
fn text<'a>(map: Option<&'a Map<String, Value>>, key: &str) -> &'a str {
    map.and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// kustomize's namespace of an object for matching.
fn effective_namespace(cluster_scoped: bool, namespace: &str) -> &str {
    if cluster_scoped {
        NOT_A_NAMESPACE
    } else if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

/// A parsed label selector: every requirement must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq)]
struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One requirement of a label selector (`k=v` is `In` one value, `k!=v` is `NotIn`).
#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k,l>1,m<2` as apimachinery's `labels.Parse`
    /// does, keys and values validated as label keys and values. The error says what is wrong.
    fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = Tokens::new(text);
        let mut requirements = Vec::new();
        if tokens.peek() == Token::End {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(parse_requirement(&mut tokens)?);
            match tokens.next() {
                Token::End => return Ok(LabelSelector { requirements }),
                Token::Comma => {}
                other => return Err(format!("expected ',' or the end, found {other}")),
            }
        }
    }

    /// Whether `labels` (a `metadata.labels` or `metadata.annotations` map) satisfy every
    /// requirement. A value that is not a string counts as its JSON text.
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |key: &str| {
            labels.and_then(|m| m.get(key)).map(|v| match v {
                Value::String(s) => Cow::Borrowed(s.as_str()),
                other => Cow::Owned(other.to_string()),
            })
        };
        // Labels that are not integers never satisfy `>` or `<` (apimachinery skips them).
        let number = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok());
        self.requirements.iter().all(|requirement| match requirement {
            Requirement::Exists(key) => get(key).is_some(),
            Requirement::DoesNotExist(key) => get(key).is_none(),
            Requirement::In(key, values) => get(key).is_some_and(|v| values.iter().any(|x| *x == v)),
            Requirement::NotIn(key, values) => !get(key).is_some_and(|v| values.iter().any(|x| *x == v)),
            Requirement::GreaterThan(key, bound) => number(key).is_some_and(|v| v > *bound),
            Requirement::LessThan(key, bound) => number(key).is_some_and(|v| v < *bound),
        })
    }
}

/// A token of the label-selector syntax.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Token<'a> {
    Word(&'a str),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
    End,
}

impl std::fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let symbol = match self {
            Token::Word(word) => *word,
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::End => return f.write_str("the end"),
        };
        write!(f, "'{symbol}'")
    }
}

/// apimachinery's lexer: a word runs until whitespace or one of `=!(),<>`; `!=` and `==` are
/// one token each.
struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        Tokens { rest: text }
    }

    fn peek(&self) -> Token<'a> {
        Tokens { rest: self.rest }.next()
    }

    fn next(&mut self) -> Token<'a> {
        const SPECIAL: &[char] = &['=', '!', '(', ')', ',', '>', '<'];
        self.rest = self.rest.trim_start_matches([' ', '\t', '\r', '\n']);
        let (token, len) = match self.rest.chars().next() {
            None => (Token::End, 0),
            Some(_) if self.rest.starts_with("!=") => (Token::NotEquals, 2),
            Some(_) if self.rest.starts_with("==") => (Token::DoubleEquals, 2),
            Some('!') => (Token::Not, 1),
            Some('=') => (Token::Equals, 1),
            Some('>') => (Token::GreaterThan, 1),
            Some('<') => (Token::LessThan, 1),
            Some('(') => (Token::Open, 1),
            Some(')') => (Token::Close, 1),
            Some(',') => (Token::Comma, 1),
            Some(_) => {
                let end = self
                    .rest
                    .find(|c: char| matches!(c, ' ' | '\t' | '\r' | '\n') || SPECIAL.contains(&c))
                    .unwrap_or(self.rest.len());
                (Token::Word(&self.rest[..end]), end)
            }
        };
        self.rest = &self.rest[len..];
        token
    }
}

fn parse_requirement(tokens: &mut Tokens<'_>) -> Result<Requirement, String> {
    let negated = tokens.peek() == Token::Not;
    if negated {
        tokens.next();
    }
    let key = match tokens.next() {
        Token::Word(word) => label_key(word)?,
        other => return Err(format!("expected a key, found {other}")),
    };
    if negated {
        return Ok(Requirement::DoesNotExist(key));
    }
    if matches!(tokens.peek(), Token::End | Token::Comma) {
        return Ok(Requirement::Exists(key));
    }
    match tokens.next() {
        Token::Word("in") => Ok(Requirement::In(key, set_values(tokens)?)),
        Token::Word("notin") => Ok(Requirement::NotIn(key, set_values(tokens)?)),
        Token::Equals | Token::DoubleEquals => Ok(Requirement::In(key, vec![exact_value(tokens)?])),
        Token::NotEquals => Ok(Requirement::NotIn(key, vec![exact_value(tokens)?])),
        Token::GreaterThan => Ok(Requirement::GreaterThan(key, bound(tokens, '>')?)),
        Token::LessThan => Ok(Requirement::LessThan(key, bound(tokens, '<')?)),
        other => Err(format!(
            "expected an operator (in, notin, =, ==, !=, >, <) after '{key}', found {other}"
        )),
    }
}

/// The value after `=`, `==`, `!=`, `>` or `<`; nothing before a `,` or the end is "".
fn exact_value(tokens: &mut Tokens<'_>) -> Result<String, String> {
    let value = match tokens.peek() {
        Token::End | Token::Comma => "",
        Token::Word(word) => {
            tokens.next();
            word
        }
        other => return Err(format!("expected a value, found {other}")),
    };
    label_value(value)
}

/// `(a,b)` after `in` or `notin`; an empty item (`()`, `(a,)`) is the value "".
fn set_values(tokens: &mut Tokens<'_>) -> Result<Vec<String>, String> {
    match tokens.next() {
        Token::Open => {}
        other => return Err(format!("expected '(' after in or notin, found {other}")),
    }
    let mut values = Vec::new();
    loop {
        let value = match tokens.peek() {
            Token::Word(word) => {
                tokens.next();
                word
            }
            _ => "",
        };
        values.push(label_value(value)?);
        match tokens.next() {
            Token::Comma => {}
            Token::Close => return Ok(values),
            other => return Err(format!("expected ',' or ')', found {other}")),
        }
    }
}

fn bound(tokens: &mut Tokens<'_>, operator: char) -> Result<i64, String> {
    let value = exact_value(tokens)?;
    value
        .parse()
        .map_err(|_| format!("'{operator}' needs an integer, found '{value}'"))
}

fn label_value(value: &str) -> Result<String, String> {
    if is_label_value(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "value '{value}' is not a label value: at most 63 characters, alphanumeric at both ends, '-', '_' or '.' inside"
        ))
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters, alphanumeric at both ends, `-`, `_` and `.` inside.
fn label_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let problem = if name.contains('/') {
        Some("has more than one '/'")
    } else if prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        Some("has a prefix that is not a lowercase DNS subdomain")
    } else if name.is_empty() {
        Some("has an empty name")
    } else if !is_label_value(name) {
        Some("needs a name of at most 63 characters: alphanumeric at both ends, '-', '_' or '.' inside")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(format!("key '{key}' {problem}")),
        None => Ok(key.to_string()),
    }
}

/// A label value: empty, or at most 63 characters, alphanumeric at both ends, `-`, `_` and
/// `.` inside.
fn is_label_value(value: &str) -> bool {
    let inner_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value.chars().all(inner_ok))
}

/// A lowercase RFC 1123 subdomain: at most 253 characters, dot-separated labels of lowercase
/// alphanumerics and `-`, alphanumeric at both ends.
fn is_dns_subdomain(text: &str) -> bool {
    let label_ok = |label: &str| {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        label.starts_with(alnum) && label.ends_with(alnum) && label.chars().all(|c| alnum(c) || c == '-')
    };
    !text.is_empty() && text.len() <= 253 && text.split('.').all(label_ok)
}

#[cfg(test)]
mod tests {
    //! Expected values are what Kubernetes label selectors select (equality- and set-based
    //! requirements; `!=` and `notin` also hold for a missing key; `>` and `<` compare
    //! integers), kustomize's effective namespaces of patch targets (`default` when unset, none
    //! for a cluster-scoped kind), and Flux's ignore rules (names and namespaces as written).

    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    fn deployment() -> Map<String, Value> {
        object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod",
                "labels": {"app": "web", "tier": "front", "replicas": "3", "example.com/team": "a"},
                "annotations": {"note": "x"}}}))
    }

    fn selector(yaml: &str) -> CompiledSelector {
        let selector: Selector = serde_yaml::from_str(yaml).expect("selector YAML");
        CompiledSelector::compile(&selector).expect("compiles")
    }

    fn selects(yaml: &str, obj: &Map<String, Value>) -> bool {
        selector(yaml).matches(obj, Namespacing::AsWritten)
    }

    #[test]
    fn each_label_selector_operator() {
        let obj = deployment();
        for (labels, expected) in [
            ("app=web", true),
            ("app=api", false),
            ("app==web", true),
            ("app!=api", true),
            ("app!=web", false),
            // `!=` and `notin` also hold when the key is missing
            ("missing!=web", true),
            ("app in (api, web)", true),
            ("app in (api)", false),
            ("missing in (web)", false),
            ("app notin (api)", true),
            ("app notin (web,api)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!tier", false),
            ("replicas>2", true),
            ("replicas>3", false),
            ("replicas<4", true),
            ("replicas<3", false),
            // a label that is not an integer satisfies neither `>` nor `<`
            ("app>0", false),
            ("app<0", false),
            ("missing<100", false),
            ("example.com/team=a", true),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            (" app = web , ! missing ", true),
            ("app in(web)", true),
        ] {
            let yaml = format!("{{labelSelector: '{labels}'}}");
            assert_eq!(selects(&yaml, &obj), expected, "{labels}");
        }
    }

    #[test]
    fn empty_values_are_values() {
        let with_empty = object(json!({"metadata": {"labels": {"a": ""}}}));
        let with_value = object(json!({"metadata": {"labels": {"a": "x"}}}));
        for (labels, empty, value) in [
            ("a=", true, false),
            ("a in ()", true, false),
            ("a in (x,)", true, true),
            ("a notin ()", false, true),
        ] {
            let yaml = format!("{{labelSelector: '{labels}'}}");
            assert_eq!(selects(&yaml, &with_empty), empty, "{labels} on a=\"\"");
            assert_eq!(selects(&yaml, &with_value), value, "{labels} on a=x");
        }
    }

    #[test]
    fn annotation_selectors_read_annotations() {
        let obj = deployment();
        assert!(selects("{annotationSelector: note=x}", &obj));
        assert!(!selects("{annotationSelector: app=web}", &obj));
        assert!(selects("{annotationSelector: '!app'}", &obj));
    }

    #[test]
    fn empty_selectors_select_everything() {
        let obj = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert!(selects("{}", &obj));
        assert!(selects("{name: '', labelSelector: '  '}", &obj));
    }

    #[test]
    fn patterns_are_anchored_regexes() {
        let obj = deployment();
        for (yaml, expected) in [
            ("{kind: Deployment}", true),
            ("{kind: Deploy}", false),
            ("{kind: 'Deploy.*'}", true),
            ("{kind: ployment}", false),
            // the whole alternation is anchored, not its first and last branch
            ("{name: 'web|api'}", true),
            ("{name: 'we|api'}", false),
            ("{name: 'api|eb'}", false),
            ("{group: apps, version: v1}", true),
            ("{group: ''}", true),
            ("{group: app}", false),
            ("{version: v1beta1}", false),
            ("{namespace: 'pro.'}", true),
        ] {
            assert_eq!(selects(yaml, &obj), expected, "{yaml}");
        }
        let core = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert!(!selects("{group: '.+'}", &core));
        assert!(selects("{group: '', version: v1}", &core));
    }

    #[test]
    fn flux_matches_the_namespace_as_written() {
        let unset = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        let cluster = object(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "reader"}}),
        );
        assert!(!selects("{namespace: default}", &unset));
        assert!(selects("{namespace: '.*'}", &unset));
        assert!(!selects("{namespace: '.+'}", &cluster));
        assert!(!selects(&format!("{{namespace: {NOT_A_NAMESPACE}}}"), &cluster));
    }

    #[test]
    fn kustomize_matches_effective_namespaces_and_the_original_id() {
        let kustomize = |cluster_scoped, original| Namespacing::Kustomize {
            cluster_scoped,
            original,
        };
        let unset = object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert!(selector("{namespace: default}").matches(&unset, kustomize(false, None)));
        let cluster = object(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "reader"}}),
        );
        for (yaml, expected) in [
            ("{namespace: default}", false),
            ("{namespace: '.+'}", true),
            ("{namespace: _non_namespaceable_}", true),
        ] {
            assert_eq!(
                selector(yaml).matches(&cluster, kustomize(true, None)),
                expected,
                "{yaml}"
            );
        }
        // renamed and moved by prefixes and `namespace:`: the original id still matches
        let moved = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "dev-app", "namespace": "dev"}}));
        let original = Some(OriginalId {
            name: "app",
            namespace: "",
        });
        let target = selector("{name: app, namespace: default}");
        assert!(!target.matches(&moved, kustomize(false, None)));
        assert!(target.matches(&moved, kustomize(false, original)));
        assert!(!target.matches(&moved, Namespacing::AsWritten));
        assert!(selector("{name: dev-app, namespace: dev}").matches(&moved, kustomize(false, original)));
    }

    #[test]
    fn bad_patterns_name_their_field() {
        for field in ["group", "version", "kind", "name", "namespace"] {
            let yaml = format!("{{{field}: '(['}}");
            let selector: Selector = serde_yaml::from_str(&yaml).unwrap();
            let err = CompiledSelector::compile(&selector).unwrap_err();
            assert_eq!(err.field, field);
            assert!(
                err.to_string()
                    .starts_with(&format!("{field}: invalid regular expression '([': ")),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_label_selectors_name_their_field_and_the_problem() {
        // (field, [(selector text, the problem its error names)])
        let cases: [(&str, &[(&str, &str)]); 2] = [
            (
                "labelSelector",
                &[
                    ("a in (b", "expected ',' or ')', found the end"),
                    ("a b", "expected an operator"),
                    ("a=1,", "expected a key, found the end"),
                    (",a", "expected a key, found ','"),
                    ("!", "expected a key, found the end"),
                    ("!a=b", "expected ',' or the end, found '='"),
                    ("a in b", "expected '(' after in or notin, found 'b'"),
                    ("a in (b c)", "expected ',' or ')', found 'c'"),
                    ("a=(b)", "expected a value, found '('"),
                    ("a>x", "'>' needs an integer, found 'x'"),
                    ("a<", "'<' needs an integer, found ''"),
                    ("a>=1", "expected a value, found '='"),
                    ("-a=b", "key '-a'"),
                    ("a/b/c", "key 'a/b/c' has more than one '/'"),
                    ("Example.com/a", "key 'Example.com/a' has a prefix"),
                    ("/a", "key '/a' has a prefix"),
                    ("a/", "key 'a/' has an empty name"),
                    ("a=b/c", "value 'b/c' is not a label value"),
                ],
            ),
            (
                "annotationSelector",
                &[("a=-b", "value '-b' is not a label value")],
            ),
        ];
        for (field, texts) in cases {
            for &(text, problem) in texts {
                let selector = if field == "labelSelector" {
                    Selector {
                        label_selector: Some(text.into()),
                        ..Default::default()
                    }
                } else {
                    Selector {
                        annotation_selector: Some(text.into()),
                        ..Default::default()
                    }
                };
                let err = CompiledSelector::compile(&selector).unwrap_err();
                assert_eq!(err.field, field, "{text}");
                let message = err.to_string();
                let prefix = format!("{field}: invalid selector '{text}': ");
                assert!(
                    message.starts_with(&prefix) && message[prefix.len()..].starts_with(problem),
                    "{text}: {message}"
                );
            }
        }
    }

    #[test]
    fn long_keys_and_values_are_rejected() {
        let name = "a".repeat(63);
        let prefix = format!("{}.example.com", "b".repeat(63));
        for (text, ok) in [
            (format!("{name}=x"), true),
            (format!("{name}a=x"), false),
            (format!("{prefix}/{name}=x"), true),
            (format!("a={name}"), true),
            (format!("a={name}a"), false),
            ("a.b_c-d=E.f_G-h".to_string(), true),
        ] {
            let selector = Selector {
                label_selector: Some(text.clone()),
                ..Default::default()
            };
            assert_eq!(CompiledSelector::compile(&selector).is_ok(), ok, "{text}");
        }
    }
}
