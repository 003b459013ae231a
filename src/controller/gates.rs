//! `--feature-gates`: Flux's gate names and defaults, so a Flux Deployment's
//! arguments start this controller unchanged. Gates that only tune Flux's own machinery
//! (caches, pollers) are accepted and reported as having no effect here.

/// The gates, with Flux's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// Fail on variables without a value or default (on since Flux v1.9).
    pub strict_post_build_substitutions: bool,
    /// Allow `sourceRef.kind: ExternalArtifact` and watch those sources.
    pub external_artifact: bool,
    /// Do not watch labelled ConfigMaps and Secrets.
    pub disable_config_watchers: bool,
    /// Rewrite managedFields API versions before the dry-run.
    pub migrate_api_version: bool,
    /// Gates set to a non-default value that change nothing in this controller, with why.
    pub without_effect: Vec<(&'static str, &'static str)>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            strict_post_build_substitutions: true,
            external_artifact: false,
            disable_config_watchers: false,
            migrate_api_version: false,
            without_effect: Vec::new(),
        }
    }
}

/// Gates this controller accepts without acting on them, and why.
const WITHOUT_EFFECT: &[(&str, bool, &str)] = &[
    (
        "CacheSecretsAndConfigMaps",
        false,
        "Secrets and ConfigMaps are read when a reconcile needs them",
    ),
    (
        "DisableStatusPollerCache",
        true,
        "health checks use watches, not a poller",
    ),
    ("DirectSourceFetch", false, "sources are always read directly"),
    (
        "DisableFailFastBehavior",
        false,
        "health checks always fail fast on a Failed object",
    ),
    (
        "GroupChangeLog",
        false,
        "the change set is logged one line per object",
    ),
    (
        "AdditiveCELDependencyCheck",
        false,
        "readyExpr replaces the built-in dependency check",
    ),
    (
        "CancelHealthCheckOnNewRevision",
        false,
        "a running health check finishes before a new revision",
    ),
    (
        "ObjectLevelWorkloadIdentity",
        false,
        "decryption and kubeconfig workload identity are not supported",
    ),
];

/// Parses `Name=bool,Name=bool`; an unknown gate or a value that is not a boolean is an
/// error naming it.
pub fn parse(text: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for feature gate {entry}"))?;
        let (name, value) = (name.trim(), value.trim());
        let enabled = parse_bool(value)
            .ok_or_else(|| format!("invalid value of {name}={value}, err: not a boolean"))?;
        match name {
            "StrictPostBuildSubstitutions" => gates.strict_post_build_substitutions = enabled,
            "ExternalArtifact" => gates.external_artifact = enabled,
            "DisableConfigWatchers" => gates.disable_config_watchers = enabled,
            "MigrateAPIVersion" => gates.migrate_api_version = enabled,
            _ => {
                let (known, default, why) = WITHOUT_EFFECT
                    .iter()
                    .find(|(known, ..)| *known == name)
                    .ok_or_else(|| format!("unrecognized feature gate: {name}"))?;
                if enabled != *default {
                    gates.without_effect.push((known, why));
                }
            }
        }
    }
    Ok(gates)
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fluxs_gates_parse_with_fluxs_defaults() {
        assert_eq!(parse("").unwrap(), FeatureGates::default());
        let gates =
            parse("ExternalArtifact=true, StrictPostBuildSubstitutions=false,DisableConfigWatchers=True")
                .unwrap();
        assert!(gates.external_artifact && gates.disable_config_watchers);
        assert!(!gates.strict_post_build_substitutions && !gates.migrate_api_version);
    }

    #[test]
    fn gates_without_effect_are_reported_only_when_changed() {
        let gates = parse("DisableStatusPollerCache=true,CacheSecretsAndConfigMaps=true").unwrap();
        let names: Vec<_> = gates.without_effect.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["CacheSecretsAndConfigMaps"]);
    }

    #[test]
    fn bad_gates_are_named() {
        assert_eq!(
            parse("NoSuchGate=true").unwrap_err(),
            "unrecognized feature gate: NoSuchGate"
        );
        assert_eq!(
            parse("ExternalArtifact=yes").unwrap_err(),
            "invalid value of ExternalArtifact=yes, err: not a boolean"
        );
        assert_eq!(
            parse("ExternalArtifact").unwrap_err(),
            "missing bool value for feature gate ExternalArtifact"
        );
    }
}
