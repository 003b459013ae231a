//! `--feature-gates`: Flux's gate names and defaults, so a Flux Deployment's
//! arguments start this controller unchanged. Gates that only tune Flux's own machinery
//! (caches, pollers) are accepted and reported as having no effect here.

use flux_runtime::gates::{Effect, Gate};

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
    /// Let `spec.kubeConfig.configMapRef` mint ServiceAccount tokens for remote clusters (off,
    /// as in Flux: a tenant would otherwise get tokens of its namespace's accounts).
    pub object_level_workload_identity: bool,
    /// New work cancels a running health wait with Ready=False HealthCheckCanceled and an
    /// event (off, as in Flux: without it the wait is dropped silently and the new work runs).
    pub cancel_health_check_on_new_revision: bool,
    /// No success event with `commit_status: update` (the one notification-controller turns
    /// into a Git commit status): many Kustomizations would flood notifications.
    pub disable_commit_status_event: bool,
    /// A dependency's `readyExpr`, when true, is followed by the built-in readiness check
    /// instead of replacing it.
    pub additive_cel_dependency_check: bool,
    /// Health checks wait until every object is Current or Failed instead of stopping at the
    /// first Failed one.
    pub disable_fail_fast_behavior: bool,
    /// The "server-side apply completed" log line groups objects by action.
    pub group_change_log: bool,
    /// Source objects are read from the API server, never from the watch cache.
    pub direct_source_fetch: bool,
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
            object_level_workload_identity: false,
            cancel_health_check_on_new_revision: false,
            disable_commit_status_event: false,
            additive_cel_dependency_check: false,
            disable_fail_fast_behavior: false,
            group_change_log: false,
            direct_source_fetch: false,
            without_effect: Vec::new(),
        }
    }
}

/// The gates this controller knows: those it acts on, and those it accepts without acting on
/// them, with Flux's default and why.
const GATES: &[Gate<FeatureGates>] = &[
    Gate {
        name: "StrictPostBuildSubstitutions",
        effect: Effect::Sets(|gates, on| gates.strict_post_build_substitutions = on),
    },
    Gate {
        name: "ExternalArtifact",
        effect: Effect::Sets(|gates, on| gates.external_artifact = on),
    },
    Gate {
        name: "DisableConfigWatchers",
        effect: Effect::Sets(|gates, on| gates.disable_config_watchers = on),
    },
    Gate {
        name: "MigrateAPIVersion",
        effect: Effect::Sets(|gates, on| gates.migrate_api_version = on),
    },
    Gate {
        name: "ObjectLevelWorkloadIdentity",
        effect: Effect::Sets(|gates, on| gates.object_level_workload_identity = on),
    },
    Gate {
        name: "DisableCommitStatusEvent",
        effect: Effect::Sets(|gates, on| gates.disable_commit_status_event = on),
    },
    Gate {
        name: "CacheSecretsAndConfigMaps",
        effect: Effect::Nothing {
            default: false,
            why: "Secrets and ConfigMaps are read when a reconcile needs them",
        },
    },
    Gate {
        name: "DisableStatusPollerCache",
        effect: Effect::Nothing {
            default: true,
            why: "health checks use watches, not a poller",
        },
    },
    Gate {
        name: "DirectSourceFetch",
        effect: Effect::Sets(|gates, on| gates.direct_source_fetch = on),
    },
    Gate {
        name: "DisableFailFastBehavior",
        effect: Effect::Sets(|gates, on| gates.disable_fail_fast_behavior = on),
    },
    Gate {
        name: "GroupChangeLog",
        effect: Effect::Sets(|gates, on| gates.group_change_log = on),
    },
    Gate {
        name: "AdditiveCELDependencyCheck",
        effect: Effect::Sets(|gates, on| gates.additive_cel_dependency_check = on),
    },
    Gate {
        name: "CancelHealthCheckOnNewRevision",
        effect: Effect::Sets(|gates, on| gates.cancel_health_check_on_new_revision = on),
    },
];

/// Parses `Name=bool,Name=bool` (the runtime's parser, over this controller's gates); an
/// unknown gate or a value that is not a boolean is an error naming it.
pub fn parse(text: &str) -> Result<FeatureGates, String> {
    let (mut gates, without_effect) = flux_runtime::gates::parse(GATES, text)?;
    gates.without_effect = without_effect;
    Ok(gates)
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
        assert!(
            !gates.object_level_workload_identity,
            "off unless asked, as in Flux"
        );
        assert!(
            parse("ObjectLevelWorkloadIdentity=true")
                .unwrap()
                .object_level_workload_identity
        );
        let gates = parse(
            "AdditiveCELDependencyCheck=true,DisableFailFastBehavior=true,GroupChangeLog=true,DirectSourceFetch=true",
        )
        .unwrap();
        assert!(gates.additive_cel_dependency_check && gates.disable_fail_fast_behavior);
        assert!(gates.group_change_log && gates.direct_source_fetch);
        assert!(gates.without_effect.is_empty(), "{:?}", gates.without_effect);
        let gates = parse("").unwrap();
        // Flux v1.9.6's gate: a Flux Deployment setting it must start this controller.
        assert!(!gates.disable_commit_status_event);
        assert!(
            parse("DisableCommitStatusEvent=true")
                .unwrap()
                .disable_commit_status_event
        );
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
