//! CEL: `spec.healthCheckExprs` (custom health rules per group/kind) and
//! `spec.dependsOn[].readyExpr`, evaluated with the `cel` crate on live objects as JSON,
//! within the limits of [`meter`] and off the async workers.

mod meter;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cel::Context;
use cel::objects::{Key, Map};
use kustomize::gvk::split_api_version;
use serde_json::Value;

use super::kstatus::{ObjectStatus, Status};
use crate::api::conditions::reason;
use crate::api::kustomization::CustomHealthCheck;
use crate::error::{Retry, StepError};
pub use meter::Limit;
use meter::{MAX_DEPTH, MAX_SOURCE_BYTES, Meter, Metered, Refusal, Stop};

/// Errors of compiling or evaluating CEL. Compile-time problems are configuration errors: the
/// controller stalls with reason `InvalidCELExpression` and does not retry.
#[derive(Debug, thiserror::Error)]
pub enum CelError {
    #[error("failed to parse CEL expression '{expr}': {message}")]
    Parse { expr: String, message: String },
    #[error("invalid apiVersion '{api_version}' in healthCheckExprs")]
    InvalidApiVersion { api_version: String },
    #[error("duplicate healthCheckExprs entry for {what}")]
    Duplicate { what: String },
    #[error("failed to evaluate CEL expression '{expr}': {message}")]
    Eval { expr: String, message: String },
    #[error("CEL expression '{expr}' returned {value}, not a boolean")]
    NotBool { expr: String, value: String },
    #[error("{field}: CEL expression is {len} bytes, over the limit of {MAX_SOURCE_BYTES}")]
    TooLong { field: String, len: usize },
    #[error("{field}: CEL expression nests deeper than {MAX_DEPTH} levels")]
    TooDeep { field: String },
    #[error("{field}: evaluation exceeded its {limit}")]
    Exceeded { field: String, limit: Limit },
    /// The thread that runs CEL could not start or panicked.
    #[error("{0}")]
    Thread(String),
}

impl StepError for CelError {
    fn reason(&self) -> &'static str {
        reason::INVALID_CEL_EXPRESSION
    }

    /// Compile-time problems are configuration errors that no retry can fix, and so is an
    /// expression too costly to evaluate: retrying would spend as much again.
    fn retry(&self) -> Retry {
        match self {
            CelError::Parse { .. }
            | CelError::InvalidApiVersion { .. }
            | CelError::Duplicate { .. }
            | CelError::TooLong { .. }
            | CelError::TooDeep { .. }
            | CelError::Exceeded { .. } => Retry::Terminal,
            CelError::Eval { .. } | CelError::NotBool { .. } | CelError::Thread(_) => Retry::RetryInterval,
        }
    }

    fn condition_message(&self, _: Duration) -> String {
        if self.is_terminal() {
            format!("Reconciliation failed terminally due to configuration error: {self}")
        } else {
            self.to_string()
        }
    }
}

/// A compiled expression with its field and source, for messages.
#[derive(Debug)]
struct Expr {
    field: String,
    source: String,
    program: Metered,
}

impl Expr {
    /// Compiles the expression of `field` (`healthCheckExprs[0].current`). Call it on a CEL
    /// thread ([`on_cel_thread`]).
    fn compile(field: String, source: &str) -> Result<Self, CelError> {
        let program = Metered::parse(source).map_err(|refusal| match refusal {
            Refusal::TooLong(len) => CelError::TooLong {
                field: field.clone(),
                len,
            },
            Refusal::TooDeep => CelError::TooDeep { field: field.clone() },
            Refusal::Parse(message) => CelError::Parse {
                expr: source.to_string(),
                message,
            },
        })?;
        Ok(Self {
            field,
            source: source.to_string(),
            program,
        })
    }

    /// An optional expression of a rule: absent and empty both mean there is none.
    fn compile_optional(field: String, source: Option<&str>) -> Result<Option<Self>, CelError> {
        source
            .filter(|s| !s.is_empty())
            .map(|source| Self::compile(field, source))
            .transpose()
    }

    fn eval_bool(&self, context: &Context, meter: &Meter) -> Result<bool, CelError> {
        match self.program.evaluate(context, meter) {
            Ok(cel::Value::Bool(value)) => Ok(value),
            Ok(other) => Err(CelError::NotBool {
                expr: self.source.clone(),
                value: format!("{other:?}"),
            }),
            Err(Stop::Limit(limit)) => Err(CelError::Exceeded {
                field: self.field.clone(),
                limit,
            }),
            Err(Stop::Error(e)) => Err(CelError::Eval {
                expr: self.source.clone(),
                message: e.to_string(),
            }),
        }
    }
}

/// A context with the metering function of `meter` and `variables`.
fn metered_context<'a>(
    meter: &Arc<Meter>,
    variables: impl IntoIterator<Item = (&'a str, &'a Value)>,
) -> Context<'static, 'static> {
    let mut context = Context::default();
    meter.install(&mut context);
    for (name, value) in variables {
        context.add_variable_from_value(name, to_cel(value));
    }
    context
}

/// The expressions of one `healthCheckExprs` entry.
#[derive(Debug)]
struct Rule {
    current: Expr,
    in_progress: Option<Expr>,
    failed: Option<Expr>,
}

/// Compiled `healthCheckExprs`, keyed by group and optional kind.
#[derive(Debug, Default)]
pub struct HealthExprs {
    rules: HashMap<(String, Option<String>), Arc<Rule>>,
}

/// Compiles `healthCheckExprs`. The first expression that does not parse or is over a limit,
/// or a second entry for the same group/kind, is an error naming it.
pub async fn compile(exprs: &[CustomHealthCheck]) -> Result<HealthExprs, CelError> {
    let exprs = exprs.to_vec();
    on_cel_thread(move || compile_now(&exprs)).await
}

fn compile_now(exprs: &[CustomHealthCheck]) -> Result<HealthExprs, CelError> {
    let mut rules = HashMap::new();
    for (index, check) in exprs.iter().enumerate() {
        let group = group_of(&check.api_version).ok_or_else(|| CelError::InvalidApiVersion {
            api_version: check.api_version.clone(),
        })?;
        let field = |name: &str| format!("healthCheckExprs[{index}].{name}");
        let rule = Rule {
            current: Expr::compile(field("current"), &check.current)?,
            in_progress: Expr::compile_optional(field("inProgress"), check.in_progress.as_deref())?,
            failed: Expr::compile_optional(field("failed"), check.failed.as_deref())?,
        };
        let key = (group.to_string(), check.kind.clone().filter(|k| !k.is_empty()));
        if rules.contains_key(&key) {
            let what = match &key.1 {
                Some(kind) => format!("apiVersion '{}' kind '{kind}'", check.api_version),
                None => format!("apiVersion '{}'", check.api_version),
            };
            return Err(CelError::Duplicate { what });
        }
        rules.insert(key, Arc::new(rule));
    }
    Ok(HealthExprs { rules })
}

impl HealthExprs {
    /// The status of `object` by its group/kind's expressions, or `None` when no entry applies
    /// (kstatus rules then decide). A kind-specific entry wins over a group-wide one.
    ///
    /// Order as Flux: an unobserved `status.observedGeneration` is InProgress; then
    /// `inProgress`, `failed`, `current`, the first true one decides; none true is InProgress.
    /// The object's top-level fields (`metadata`, `spec`, `status`, ...) are the variables.
    pub(crate) fn evaluate(
        &self,
        object: &Value,
    ) -> Option<impl Future<Output = Result<ObjectStatus, CelError>> + use<>> {
        let group = group_of(object.get("apiVersion")?.as_str()?)?;
        let kind = object.get("kind").and_then(Value::as_str).map(str::to_string);
        let rule = self
            .rules
            .get(&(group.to_string(), kind.clone()))
            .or_else(|| self.rules.get(&(group.to_string(), None)))?;
        let (rule, object) = (Arc::clone(rule), object.clone());
        Some(on_cel_thread(move || {
            evaluate_rule(&rule, &object, kind.as_deref().unwrap_or_default())
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether an entry judges objects of `kind` in `api_version`'s group.
    pub(crate) fn judges(&self, api_version: &str, kind: &str) -> bool {
        group_of(api_version).is_some_and(|group| {
            self.rules
                .contains_key(&(group.to_string(), Some(kind.to_string())))
                || self.rules.contains_key(&(group.to_string(), None))
        })
    }
}

fn evaluate_rule(rule: &Rule, object: &Value, kind: &str) -> Result<ObjectStatus, CelError> {
    let generation = object.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && generation != observed
    {
        return Ok(ObjectStatus::new(
            Status::InProgress,
            format!("{kind} generation is {generation}, but latest observed generation is {observed}"),
        ));
    }
    let meter = Meter::new();
    let fields = object.as_object().into_iter().flatten();
    let context = metered_context(&meter, fields.map(|(name, value)| (name.as_str(), value)));
    let ordered = [
        (rule.in_progress.as_ref(), Status::InProgress, "inProgress"),
        (rule.failed.as_ref(), Status::Failed, "failed"),
        (Some(&rule.current), Status::Current, "current"),
    ];
    for (expr, status, name) in ordered {
        if let Some(expr) = expr
            && expr.eval_bool(&context, &meter)?
        {
            return Ok(ObjectStatus::new(
                status,
                format!("healthCheckExprs {name} expression is true: {}", expr.source),
            ));
        }
    }
    Ok(ObjectStatus::new(
        Status::InProgress,
        "no healthCheckExprs expression is true yet",
    ))
}

/// Evaluates the `readyExpr` of `field` (`dependsOn[0].readyExpr`) with `self` (the dependent
/// Kustomization) and `dep` (the dependency), both as full objects.
pub(crate) async fn eval_ready_expr(
    field: String,
    expr: String,
    self_obj: Value,
    dep: Value,
) -> Result<bool, CelError> {
    on_cel_thread(move || {
        let expr = Expr::compile(field, &expr)?;
        let meter = Meter::new();
        let context = metered_context(&meter, [("self", &self_obj), ("dep", &dep)]);
        expr.eval_bool(&context, &meter)
    })
    .await
}

/// Runs `work` on a CEL thread of its own ([`meter::run`]).
async fn on_cel_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CelError> + Send + 'static,
) -> Result<T, CelError> {
    meter::run(work)
        .await
        .unwrap_or_else(|e| Err(CelError::Thread(e)))
}

/// The group of an `apiVersion` (`""` for the core group); `None` if malformed: an empty
/// group or version, or more than one `/`.
fn group_of(api_version: &str) -> Option<&str> {
    let (group, version) = split_api_version(api_version);
    let malformed =
        version.is_empty() || group.contains('/') || (group.is_empty() && api_version.contains('/'));
    (!malformed).then_some(group)
}

/// JSON to CEL, with integers as CEL `int` like Kubernetes' unstructured objects.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::from(s.as_str()),
        Value::Array(items) => cel::Value::List(std::sync::Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<Key, cel::Value> = fields
                .iter()
                .map(|(k, v)| (Key::from(k.as_str()), to_cel(v)))
                .collect();
            cel::Value::Map(Map::from(map))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The cert-manager rule from Flux's RFC-0009 (custom health checks).
    fn certificate_rule() -> CustomHealthCheck {
        CustomHealthCheck {
            api_version: "cert-manager.io/v1".into(),
            kind: Some("Certificate".into()),
            in_progress: Some(
                "status.conditions.filter(e, e.type == 'Issuing').all(e, e.observedGeneration == metadata.generation && e.status == 'True')".into(),
            ),
            failed: Some(
                "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'False')".into(),
            ),
            current: "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')".into(),
        }
    }

    fn certificate(generation: i64, conditions: Value) -> Value {
        json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "web", "namespace": "apps", "generation": generation},
            "spec": {"secretName": "web-tls"},
            "status": {"conditions": conditions}
        })
    }

    async fn status_of(exprs: &HealthExprs, object: &Value) -> Status {
        exprs
            .evaluate(object)
            .expect("a rule applies")
            .await
            .expect("evaluates")
            .status
    }

    #[tokio::test]
    async fn in_progress_is_checked_before_failed_and_current() {
        let exprs = compile(&[certificate_rule()]).await.unwrap();
        // Re-issuing while the old certificate is still Ready: the RFC calls this in progress.
        let issuing = certificate(
            2,
            json!([
                {"type": "Issuing", "status": "True", "observedGeneration": 2},
                {"type": "Ready", "status": "True", "observedGeneration": 2}
            ]),
        );
        assert_eq!(status_of(&exprs, &issuing).await, Status::InProgress);
        // `all` over no Issuing condition would be true, so the snapshots carry Issuing=False.
        let failed = certificate(
            2,
            json!([
                {"type": "Issuing", "status": "False", "observedGeneration": 2},
                {"type": "Ready", "status": "False", "observedGeneration": 2}
            ]),
        );
        let got = exprs.evaluate(&failed).unwrap().await.unwrap();
        assert_eq!(got.status, Status::Failed);
        assert!(
            got.message.contains("failed expression is true"),
            "{}",
            got.message
        );
        let ready = certificate(
            2,
            json!([
                {"type": "Issuing", "status": "False", "observedGeneration": 2},
                {"type": "Ready", "status": "True", "observedGeneration": 2}
            ]),
        );
        assert_eq!(status_of(&exprs, &ready).await, Status::Current);
    }

    #[tokio::test]
    async fn nothing_true_is_in_progress() {
        let exprs = compile(&[certificate_rule()]).await.unwrap();
        // Ready written for generation 1 while the object is at 2: no expression holds.
        let stale = certificate(
            2,
            json!([{"type": "Ready", "status": "True", "observedGeneration": 1}]),
        );
        assert_eq!(status_of(&exprs, &stale).await, Status::InProgress);
    }

    #[tokio::test]
    async fn an_entry_judges_its_kind_or_its_whole_group() {
        let group_wide = CustomHealthCheck {
            api_version: "example.com/v1".into(),
            kind: None,
            current: "true".into(),
            in_progress: None,
            failed: None,
        };
        let exprs = compile(&[certificate_rule(), group_wide]).await.unwrap();
        assert!(exprs.judges("cert-manager.io/v1", "Certificate"));
        assert!(!exprs.judges("cert-manager.io/v1", "Issuer"));
        assert!(exprs.judges("example.com/v2", "Widget"));
        assert!(!exprs.judges("v1", "ConfigMap"));
    }

    #[tokio::test]
    async fn unobserved_generation_is_in_progress_without_evaluating() {
        let rule = CustomHealthCheck {
            api_version: "example.com/v1".into(),
            kind: None,
            current: "status.missing.field == 1".into(),
            in_progress: None,
            failed: None,
        };
        let exprs = compile(&[rule]).await.unwrap();
        let object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": 3}, "status": {"observedGeneration": 2}
        });
        let got = exprs.evaluate(&object).unwrap().await.unwrap();
        assert_eq!(
            got,
            ObjectStatus::new(
                Status::InProgress,
                "Widget generation is 3, but latest observed generation is 2"
            )
        );
    }

    #[tokio::test]
    async fn a_missing_field_is_an_evaluation_error_naming_the_expression() {
        let exprs = compile(&[certificate_rule()]).await.unwrap();
        let no_status = json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "web", "generation": 1}
        });
        let err = exprs.evaluate(&no_status).unwrap().await.unwrap_err();
        assert!(matches!(err, CelError::Eval { .. }), "{err:?}");
        assert!(err.to_string().contains("e.type == 'Issuing'"), "{err}");
        assert!(!err.is_terminal());
    }

    #[tokio::test]
    async fn integers_compare_as_kubernetes_ints() {
        let rule = CustomHealthCheck {
            api_version: "apps.example.com/v1".into(),
            kind: Some("Pool".into()),
            current: "metadata.generation == status.observedGeneration && status.readyReplicas >= spec.replicas && status.readyReplicas > 0".into(),
            in_progress: None,
            failed: Some("has(status.error)".into()),
        };
        let exprs = compile(&[rule]).await.unwrap();
        let pool = |ready: i64, error: Option<&str>| {
            let mut status = json!({"observedGeneration": 4, "readyReplicas": ready});
            if let Some(error) = error {
                status["error"] = json!(error);
            }
            json!({"apiVersion": "apps.example.com/v1", "kind": "Pool",
                   "metadata": {"name": "p", "generation": 4}, "spec": {"replicas": 2}, "status": status})
        };
        assert_eq!(status_of(&exprs, &pool(2, None)).await, Status::Current);
        assert_eq!(status_of(&exprs, &pool(1, None)).await, Status::InProgress);
        assert_eq!(
            status_of(&exprs, &pool(2, Some("quota exceeded"))).await,
            Status::Failed
        );
    }

    #[tokio::test]
    async fn kind_specific_entry_wins_and_other_groups_are_not_matched() {
        let group_wide = CustomHealthCheck {
            api_version: "cert-manager.io/v1".into(),
            kind: None,
            current: "false".into(),
            in_progress: None,
            failed: Some("true".into()),
        };
        let exprs = compile(&[group_wide, certificate_rule()]).await.unwrap();
        let ready = certificate(
            1,
            json!([
                {"type": "Issuing", "status": "False", "observedGeneration": 1},
                {"type": "Ready", "status": "True", "observedGeneration": 1}
            ]),
        );
        assert_eq!(status_of(&exprs, &ready).await, Status::Current);
        let issuer =
            json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca"}});
        assert_eq!(status_of(&exprs, &issuer).await, Status::Failed);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        assert!(exprs.evaluate(&deployment).is_none());
    }

    #[tokio::test]
    async fn an_expression_that_does_not_compile_is_a_terminal_error_quoting_it() {
        let mut rule = certificate_rule();
        rule.failed = Some("status.conditions.filter(e, e.type == 'Ready'".into());
        let err = compile(&[rule]).await.unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "InvalidCELExpression");
        let message = err.condition_message(Duration::ZERO);
        assert!(
            message.starts_with(
                "Reconciliation failed terminally due to configuration error: failed to parse CEL expression \
                 'status.conditions.filter(e, e.type == 'Ready'': "
            ),
            "{message}"
        );
    }

    #[tokio::test]
    async fn duplicate_group_and_kind_is_an_error_naming_them() {
        let mut other_version = certificate_rule();
        other_version.api_version = "cert-manager.io/v1beta1".into();
        let err = compile(&[certificate_rule(), other_version]).await.unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(
            err.to_string(),
            "duplicate healthCheckExprs entry for apiVersion 'cert-manager.io/v1beta1' kind 'Certificate'"
        );
    }

    #[tokio::test]
    async fn a_malformed_api_version_is_rejected() {
        let mut rule = certificate_rule();
        rule.api_version = "cert-manager.io/v1/extra".into();
        let err = compile(&[rule]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid apiVersion 'cert-manager.io/v1/extra' in healthCheckExprs"
        );
    }

    #[tokio::test]
    async fn ready_expr_sees_self_and_dep() {
        let this = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                          "metadata": {"name": "apps", "annotations": {"tier": "2"}}});
        let dep = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                         "metadata": {"name": "infra", "generation": 5},
                         "status": {"observedGeneration": 5,
                                    "conditions": [{"type": "Ready", "status": "True"}]}});
        let expr = "self.metadata.annotations['tier'] == '2' && dep.metadata.generation == dep.status.observedGeneration \
                    && dep.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')";
        let ready = |expr: &str| {
            eval_ready_expr(
                "dependsOn[0].readyExpr".into(),
                expr.into(),
                this.clone(),
                dep.clone(),
            )
        };
        assert!(ready(expr).await.unwrap());
        assert!(!ready("dep.metadata.name == 'other'").await.unwrap());
        let err = ready("dep.metadata.name").await.unwrap_err();
        assert!(matches!(err, CelError::NotBool { .. }), "{err:?}");
        assert!(ready("dep.metadata.name ==").await.unwrap_err().is_terminal());
    }
}
