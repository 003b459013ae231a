//! Post-build variable substitution (`spec.postBuild`), with Flux's semantics: per object,
//! on its YAML text, then read back as YAML.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use thiserror::Error;

use super::envsubst::{self, EnvsubstError};
use crate::api::conditions::keys::SUBSTITUTE_ANNOTATION;

/// The variable name rule Flux enforces (`varsubRegex`).
pub(crate) const VAR_NAME_PATTERN: &str = "^[_[:alpha:]][_[:alpha:][:digit:]]*$";

/// How substitution runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SubstituteOptions {
    /// Fail on a variable that is not set (gate `StrictPostBuildSubstitutions`, on by default).
    pub(crate) strict: bool,
    /// `substituteStrategy: Always`: substitute even when no variable is defined.
    pub(crate) always: bool,
    /// How large an object's text may grow (the build's file limit).
    pub(crate) max_bytes: usize,
}

impl Default for SubstituteOptions {
    fn default() -> Self {
        SubstituteOptions {
            strict: true,
            always: false,
            max_bytes: kustomize::DEFAULT_MAX_FILE_BYTES as usize,
        }
    }
}

/// Why one object could not be substituted. The messages are Flux's, after
/// `post build failed for '<gvk>/<name>': envsubst error: `.
#[derive(Debug, Error, PartialEq)]
pub enum SubstituteError {
    #[error("'{0}' var name is invalid, must match '{VAR_NAME_PATTERN}'")]
    InvalidName(String),
    #[error("variable substitution failed: {0}")]
    Expand(#[from] EnvsubstError),
    #[error("YAMLToJSON: {0}")]
    Yaml(String),
}

/// Merges the variables of `substituteFrom` (in list order, later entries win) and the
/// inline `substitute` map (wins over all), removing newlines from every value as Flux does.
pub(crate) fn merge_vars(
    from_refs: Vec<BTreeMap<String, String>>,
    inline: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    from_refs
        .into_iter()
        .flatten()
        .chain(
            inline
                .into_iter()
                .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone()))),
        )
        .map(|(key, value)| (key, value.replace('\n', "")))
        .collect()
}

/// Whether the object opted out with the label or annotation
/// `kustomize.toolkit.fluxcd.io/substitute: disabled`.
pub(crate) fn is_disabled(object: &Value) -> bool {
    ["labels", "annotations"]
        .iter()
        .any(|field| object["metadata"][field][SUBSTITUTE_ANNOTATION].as_str() == Some("disabled"))
}

/// Substitutes `vars` into `object` and returns the new object (the same one when it opted
/// out, or when there are no variables and the strategy is not `Always`).
pub(crate) fn substitute(
    object: &Value,
    vars: &BTreeMap<String, String>,
    options: SubstituteOptions,
) -> Result<Value, SubstituteError> {
    if is_disabled(object) || (vars.is_empty() && !options.always) {
        return Ok(object.clone());
    }
    static NAME_RULE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(VAR_NAME_PATTERN).expect("the pattern is valid"));
    if let Some(bad) = vars.keys().find(|name| !NAME_RULE.is_match(name)) {
        return Err(SubstituteError::InvalidName(bad.clone()));
    }
    // Flux substitutes over kustomize's YAML text of the object and reads the result back
    // with sigs.k8s.io/yaml (YAML 1.1).
    let text = kustomize::to_yaml(std::slice::from_ref(object));
    let expanded = envsubst::expand(&text, vars, options.strict, options.max_bytes)?;
    let documents = kustomize::yaml::parse_documents_yaml11(&expanded, "substituted object")
        .map_err(|err| SubstituteError::Yaml(err.to_string()))?;
    match <[Value; 1]>::try_from(documents) {
        Ok([value]) => Ok(value),
        Err(documents) => Err(SubstituteError::Yaml(format!(
            "expected one YAML document, found {}",
            documents.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `object` substituted with these variables and the default options.
    fn substituted(object: &Value, pairs: &[(&str, &str)]) -> Result<Value, SubstituteError> {
        substitute(object, &vars(pairs), SubstituteOptions::default())
    }

    fn config_map(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": data})
    }

    #[test]
    fn later_sources_win_and_inline_wins_over_all() {
        let merged = merge_vars(
            vec![
                vars(&[("a", "1"), ("b", "1")]),
                vars(&[("b", "2"), ("c", "multi\nline\n")]),
            ],
            Some(&vars(&[("c", "3\n"), ("d", "4")])),
        );
        assert_eq!(merged, vars(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]));
        assert_eq!(
            merge_vars(vec![vars(&[("x", "a\nb")])], None),
            vars(&[("x", "ab")])
        );
    }

    #[test]
    fn operators_and_escapes_in_an_object() {
        let object = config_map(json!({
            "plain": "${env}",
            "default": "${region:=eu-west-1}",
            "upper": "${env^^}",
            "escaped": "$${env}",
            "bare": "$env",
            "key-${env}": "x",
        }));
        let result = substituted(&object, &[("env", "prod")]).unwrap();
        assert_eq!(
            result["data"],
            json!({
                "plain": "prod",
                "default": "eu-west-1",
                "upper": "PROD",
                "escaped": "${env}",
                "bare": "$env",
                "key-prod": "x",
            })
        );
    }

    #[test]
    fn substituted_text_is_read_back_as_yaml() {
        // `replicas: ${n}` is emitted plain, so the value becomes a number (Flux documents
        // this; quote with a variable to keep a string).
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}, "spec": {"replicas": "${n}"}});
        let result = substituted(&object, &[("n", "3")]).unwrap();
        assert_eq!(result["spec"]["replicas"], json!(3));
    }

    #[test]
    fn substituted_values_are_read_as_yaml_1_1_and_strings_stay_strings() {
        let object = config_map(json!({"flag": "${flag}", "quoted": "yes", "mode": "${mode}"}));
        let result = substituted(&object, &[("flag", "on"), ("mode", "0755")]).unwrap();
        assert_eq!(
            result["data"],
            json!({"flag": true, "quoted": "yes", "mode": 493})
        );
    }

    #[test]
    fn strict_mode_names_the_missing_variable() {
        let object = config_map(json!({"a": "${env}", "b": "${missing}"}));
        let err = substituted(&object, &[("env", "prod")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "variable substitution failed: variable not set (strict mode): \"missing\""
        );
        let lenient = SubstituteOptions {
            strict: false,
            ..SubstituteOptions::default()
        };
        let result = substitute(&object, &vars(&[("env", "prod")]), lenient).unwrap();
        // `b: ${missing}` becomes `b: ` in the text, which YAML reads as null.
        assert_eq!(result["data"], json!({"a": "prod", "b": null}));
    }

    #[test]
    fn label_or_annotation_opts_out() {
        for field in ["labels", "annotations"] {
            let mut object = config_map(json!({"a": "${env}"}));
            object["metadata"][field] = json!({SUBSTITUTE_ANNOTATION: "disabled"});
            let result = substituted(&object, &[("env", "prod")]).unwrap();
            assert_eq!(result, object, "opt-out by {field}");
        }
        // Any other value does not opt out.
        let mut object = config_map(json!({"a": "${env}"}));
        object["metadata"]["labels"] = json!({SUBSTITUTE_ANNOTATION: "Disabled"});
        let result = substituted(&object, &[("env", "prod")]).unwrap();
        assert_eq!(result["data"]["a"], "prod");
    }

    #[test]
    fn strategy_decides_what_happens_without_variables() {
        let object = config_map(json!({"a": "${region:=eu}", "b": "$${kept}"}));
        let with_variables = substituted(&object, &[]).unwrap();
        assert_eq!(
            with_variables, object,
            "WithVariables and no variables: untouched"
        );
        let always = SubstituteOptions {
            always: true,
            ..SubstituteOptions::default()
        };
        let result = substitute(&object, &BTreeMap::new(), always).unwrap();
        assert_eq!(result["data"], json!({"a": "eu", "b": "${kept}"}));
    }

    #[test]
    fn a_value_that_breaks_yaml_fails_and_invalid_names_are_refused() {
        let object = config_map(json!({"a": "${v}"}));
        let err = substituted(&object, &[("v", "[unclosed")]).unwrap_err();
        assert!(matches!(&err, SubstituteError::Yaml(_)), "{err}");
        assert!(err.to_string().starts_with("YAMLToJSON: "), "{err}");
        let err = substituted(&object, &[("v", "x"), ("bad-name", "y")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "'bad-name' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
        );
    }
}
