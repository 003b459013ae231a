//! `dependsOn`: a Kustomization waits until the Kustomizations it depends on are ready.

use kube::api::Api;
use kube::{Client, ResourceExt};

use std::time::Duration;

use crate::api::Kustomization;
use crate::api::conditions::{READY, reason};
use crate::api::kustomization::{DependencyReference, given};
use crate::error::{Retry, StepError};

use super::status;
use crate::health::cel::{CelError, eval_ready_expr};

/// Why a dependency holds this Kustomization back. Messages are Flux's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DependencyError {
    /// The message is the API server's, as in Flux.
    #[error("dependency '{0}' not found: {1}")]
    NotFound(String, String),
    #[error("dependency '{0}' is not ready")]
    NotReady(String),
    #[error("dependency '{0}' revision is not up to date")]
    RevisionNotUpToDate(String),
    #[error("dependency '{0}' is not ready according to readyExpr eval")]
    ReadyExprFalse(String),
    /// A `readyExpr` that does not compile or is over its limits: a configuration error.
    #[error("{0}")]
    InvalidReadyExpr(#[source] CelError),
    #[error("dependency '{0}' readyExpr eval failed: {1}")]
    ReadyExprEval(String, #[source] CelError),
}

impl StepError for DependencyError {
    /// A broken `readyExpr` is a configuration error; the rest resolve themselves.
    fn reason(&self) -> &'static str {
        match self {
            Self::InvalidReadyExpr(e) => e.reason(),
            _ => reason::DEPENDENCY_NOT_READY,
        }
    }

    fn retry(&self) -> Retry {
        match self {
            Self::InvalidReadyExpr(_) => Retry::Terminal,
            _ => Retry::Dependency,
        }
    }

    fn condition_message(&self, requeue_dependency: Duration) -> String {
        match self {
            Self::InvalidReadyExpr(e) => e.condition_message(requeue_dependency),
            other => other.to_string(),
        }
    }
}

/// `<namespace>/<name>` of a dependency; the namespace defaults to the Kustomization's.
pub(crate) fn dependency_key(ks: &Kustomization, dependency: &DependencyReference) -> (String, String) {
    let own = ks.namespace().unwrap_or_default();
    let namespace = given(dependency.namespace.as_deref()).unwrap_or(&own);
    (namespace.to_string(), dependency.name.clone())
}

/// The source a Kustomization reads, as `(kind, namespace, name)` with the namespace defaulted.
pub(crate) fn source_key(ks: &Kustomization) -> (&'static str, String, String) {
    let source = &ks.spec.source_ref;
    let own = ks.namespace().unwrap_or_default();
    let namespace = given(source.namespace.as_deref()).unwrap_or(&own);
    (source.kind.as_str(), namespace.to_string(), source.name.clone())
}

/// Flux's built-in readiness check of one dependency: Ready=True for its current generation
/// and, when both read the same source, already at the revision about to be applied.
pub(crate) fn check_ready(
    ks: &Kustomization,
    dependency: &Kustomization,
    revision: &str,
) -> Result<(), DependencyError> {
    let key = format!(
        "{}/{}",
        dependency.namespace().unwrap_or_default(),
        dependency.name_any()
    );
    let Some(dep_status) = dependency.status.as_ref().filter(|s| !s.conditions.is_empty()) else {
        return Err(DependencyError::NotReady(key));
    };
    let observed = dependency.metadata.generation == Some(dep_status.observed_generation);
    if !observed || !status::is_true(&dep_status.conditions, READY) {
        return Err(DependencyError::NotReady(key));
    }
    if source_key(ks) == source_key(dependency)
        && dep_status.last_applied_revision.as_deref() != Some(revision)
    {
        return Err(DependencyError::RevisionNotUpToDate(key));
    }
    Ok(())
}

/// Checks the dependency at `index` of `dependsOn`: its `readyExpr` when set, which replaces
/// the built-in [`check_ready`] unless `additive` (Flux's AdditiveCELDependencyCheck gate)
/// asks for both, the expression first.
pub(crate) async fn check_dependency(
    ks: &Kustomization,
    index: usize,
    reference: &DependencyReference,
    dependency: &Kustomization,
    revision: &str,
    additive: bool,
) -> Result<(), DependencyError> {
    let Some(expr) = reference.ready_expr.as_deref().filter(|e| !e.is_empty()) else {
        return check_ready(ks, dependency, revision);
    };
    let key = format!(
        "{}/{}",
        dependency.namespace().unwrap_or_default(),
        dependency.name_any()
    );
    let as_value = |k: &Kustomization| serde_json::to_value(k).unwrap_or_default();
    let field = format!("dependsOn[{index}].readyExpr");
    match eval_ready_expr(field, expr.to_string(), as_value(ks), as_value(dependency)).await {
        Ok(true) if additive => check_ready(ks, dependency, revision),
        Ok(true) => Ok(()),
        Ok(false) => Err(DependencyError::ReadyExprFalse(key)),
        Err(error) if error.is_terminal() => Err(DependencyError::InvalidReadyExpr(error)),
        Err(error) => Err(DependencyError::ReadyExprEval(key, error)),
    }
}

/// Checks every dependency in order, stopping at the first that is not ready. Dependencies are
/// read from the API server, not a cache, so they are found across shards.
pub(crate) async fn check_dependencies(
    client: &Client,
    ks: &Kustomization,
    revision: &str,
    additive: bool,
) -> Result<(), DependencyError> {
    for (index, dependency) in ks.spec.depends_on.iter().enumerate() {
        let (namespace, name) = dependency_key(ks, dependency);
        let dep = Api::<Kustomization>::namespaced(client.clone(), &namespace)
            .get(&name)
            .await
            .map_err(|e| {
                let message = match e {
                    kube::Error::Api(status) => status.message,
                    other => other.to_string(),
                };
                DependencyError::NotFound(format!("{namespace}/{name}"), message)
            })?;
        check_dependency(ks, index, dependency, &dep, revision, additive).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ks(
        name: &str,
        source: serde_json::Value,
        generation: i64,
        status: serde_json::Value,
    ) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "apps", "generation": generation},
            "spec": {"interval": "5m", "prune": true, "sourceRef": source},
            "status": status,
        }))
        .unwrap()
    }

    fn ready(generation: i64, revision: &str) -> serde_json::Value {
        json!({"observedGeneration": generation, "lastAppliedRevision": revision, "conditions": [{
            "type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    }

    #[test]
    fn namespace_defaults_to_the_kustomizations() {
        let me = ks(
            "app",
            json!({"kind": "GitRepository", "name": "repo"}),
            1,
            json!({}),
        );
        let plain = DependencyReference {
            name: "infra".into(),
            namespace: None,
            ready_expr: None,
        };
        let other = DependencyReference {
            name: "infra".into(),
            namespace: Some("ops".into()),
            ready_expr: None,
        };
        assert_eq!(
            dependency_key(&me, &plain),
            ("apps".to_string(), "infra".to_string())
        );
        assert_eq!(
            dependency_key(&me, &other),
            ("ops".to_string(), "infra".to_string())
        );
        let empty = DependencyReference {
            namespace: Some(String::new()),
            ..plain.clone()
        };
        assert_eq!(
            dependency_key(&me, &empty),
            ("apps".to_string(), "infra".to_string()),
            "\"\" is the Kustomization's own namespace"
        );
    }

    #[tokio::test]
    async fn ready_expr_replaces_the_built_in_check() {
        let repo = json!({"kind": "GitRepository", "name": "repo"});
        let me = ks("app", repo.clone(), 1, json!({}));
        // Not Ready by the built-in rules, but the expression only asks for the revision.
        let dep = ks("infra", repo, 2, ready(1, "r1"));
        let reference = |expr: &str| DependencyReference {
            name: "infra".into(),
            namespace: None,
            ready_expr: Some(expr.into()),
        };
        assert!(
            check_dependency(
                &me,
                0,
                &reference("dep.status.lastAppliedRevision == 'r1'"),
                &dep,
                "r1",
                false
            )
            .await
            .is_ok()
        );
        let err = check_dependency(
            &me,
            0,
            &reference("dep.metadata.name == self.metadata.name"),
            &dep,
            "r1",
            false,
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency 'apps/infra' is not ready according to readyExpr eval"
        );
        let err = check_dependency(&me, 0, &reference("dep.status.("), &dep, "r1", false)
            .await
            .unwrap_err();
        assert!(err.is_terminal(), "{err}");
    }

    // Before, the AdditiveCELDependencyCheck gate was accepted without effect: a readyExpr
    // always replaced the built-in check.
    #[tokio::test]
    async fn with_the_additive_gate_the_built_in_check_follows_a_true_ready_expr() {
        let repo = json!({"kind": "GitRepository", "name": "repo"});
        let me = ks("app", repo.clone(), 1, json!({}));
        // Not Ready by the built-in rules (generation 2 not observed).
        let stale = ks("infra", repo.clone(), 2, ready(1, "r1"));
        let fresh = ks("infra", repo, 1, ready(1, "r1"));
        let reference = |expr: &str| DependencyReference {
            name: "infra".into(),
            namespace: None,
            ready_expr: Some(expr.into()),
        };
        let yes = reference("dep.status.lastAppliedRevision == 'r1'");
        let err = check_dependency(&me, 0, &yes, &stale, "r1", true)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "dependency 'apps/infra' is not ready");
        assert!(check_dependency(&me, 0, &yes, &fresh, "r1", true).await.is_ok());
        assert!(
            check_dependency(&me, 0, &yes, &fresh, "r2", true).await.is_err(),
            "revision rule too"
        );
        // The expression still decides first.
        let no = reference("dep.metadata.name == self.metadata.name");
        let err = check_dependency(&me, 0, &no, &fresh, "r1", true)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency 'apps/infra' is not ready according to readyExpr eval"
        );
    }

    #[test]
    fn readiness_follows_fluxs_rules() {
        let repo = json!({"kind": "GitRepository", "name": "repo"});
        let me = ks("app", repo.clone(), 1, json!({}));
        let cases = [
            (
                "no conditions",
                ks("infra", repo.clone(), 1, json!({"observedGeneration": 1})),
                Some("dependency 'apps/infra' is not ready"),
            ),
            (
                "old generation",
                ks("infra", repo.clone(), 2, ready(1, "r1")),
                Some("dependency 'apps/infra' is not ready"),
            ),
            (
                "same source, old revision",
                ks("infra", repo.clone(), 1, ready(1, "r0")),
                Some("dependency 'apps/infra' revision is not up to date"),
            ),
            (
                "same source, same revision",
                ks("infra", repo.clone(), 1, ready(1, "r1")),
                None,
            ),
            (
                "other source, other revision",
                ks(
                    "infra",
                    json!({"kind": "GitRepository", "name": "other"}),
                    1,
                    ready(1, "x"),
                ),
                None,
            ),
        ];
        for (case, dep, expected) in cases {
            let got = check_ready(&me, &dep, "r1").err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), expected, "{case}");
        }
        let not_ready = json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False",
            "reason": "BuildFailed", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert!(check_ready(&me, &ks("infra", repo, 1, not_ready), "r1").is_err());
    }

    #[tokio::test]
    async fn a_ready_expr_over_its_limits_is_a_terminal_error_naming_its_field() {
        // A string doubled 24 times. Before: it was built to the end (with 50 doublings the
        // process aborted on memory) and the dependency counted as ready.
        let repo = json!({"kind": "GitRepository", "name": "repo"});
        let me = ks("app", repo.clone(), 1, json!({}));
        let dep = ks("infra", repo, 1, ready(1, "r1"));
        let reference = DependencyReference {
            name: "infra".into(),
            namespace: None,
            ready_expr: Some(format!(
                "['ab']{}.all(s, size(s) > 0)",
                ".map(s, s + s)".repeat(24)
            )),
        };
        let err = check_dependency(&me, 1, &reference, &dep, "r1", false)
            .await
            .unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "InvalidCELExpression");
        assert_eq!(
            err.condition_message(Duration::ZERO),
            "Reconciliation failed terminally due to configuration error: dependsOn[1].readyExpr: evaluation \
             exceeded its cost limit (16 MiB of values built or copied)"
        );
    }
}
