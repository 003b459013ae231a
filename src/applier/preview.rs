//! What an apply would change, without writing anything (the `diff` command), from the same
//! per-object plans an apply makes.

use super::diff::diff_text;
use super::inspect::Mode;
use super::plan::{Desired, Known, Plan, Write};
use super::{Action, Applier, ApplyError, ApplyRequest, ChangeSet, ObjectError};
use crate::api::inventory::ObjectRef;

/// The difference an apply would make to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectDiff {
    pub object: ObjectRef,
    /// `Created`, `Configured`, `Unchanged` or `Skipped`.
    pub action: Action,
    /// Unified diff (live → desired), Secret values masked; empty when nothing would change.
    pub diff: String,
}

impl Applier {
    /// Per object in apply order, the action an apply would report and a unified diff with
    /// Secret values masked. Fails where the apply's planning would fail.
    pub async fn diff(&self, req: ApplyRequest<'_>) -> Result<Vec<ObjectDiff>, ApplyError> {
        self.preview(&req).await.map_err(|errors| ApplyError {
            errors,
            changes: ChangeSet::default(),
        })
    }

    async fn preview(&self, req: &ApplyRequest<'_>) -> Result<Vec<ObjectDiff>, Vec<ObjectError>> {
        let p = self.prepare(req, Mode::Preview).await?;
        let items = (0..p.desired.len()).map(|i| (i, Known::Unread)).collect();
        let mut diffs = Vec::new();
        let mut errors = Vec::new();
        for (i, plan) in self.plan_all(&p, items).await {
            match plan.and_then(|plan| previewed(&p.desired[i], plan)) {
                Ok(diff) => diffs.push(diff),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Ok(diffs) } else { Err(errors) }
    }
}

/// What a plan would do to the object. An object deferred for something this apply creates
/// cannot be validated before that exists: it is shown as created when it does not exist yet,
/// else the deferral is the error.
fn previewed(d: &Desired, plan: Plan) -> Result<ObjectDiff, ObjectError> {
    let created = || diff_text(None, &d.obj, &[]);
    let (action, diff) = match plan {
        Plan::Settled(outcome) => (outcome.action, String::new()),
        Plan::Write(write) => {
            let text = match &write {
                Write::Apply {
                    live,
                    ignored,
                    merged,
                } => diff_text(live.as_ref(), merged, ignored),
                Write::Recreate => created(),
            };
            (write.action(), text)
        }
        Plan::Deferred { exists: false, .. } => (Action::Created, created()),
        Plan::Deferred { error, exists: true } => return Err(error),
    };
    Ok(ObjectDiff {
        object: d.object.clone(),
        action,
        diff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applier::plan::Outcome;
    use crate::applier::stage::Stage;
    use crate::applier::{FailureKind, ObjectError};
    use crate::kube_ext::ResolvedKind;
    use kube::api::ApiResource;
    use serde_json::json;

    fn config_map(data: &str) -> Desired {
        Desired {
            obj: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "apps"},
                "data": {"k": data}}),
            object: ObjectRef::new("", "ConfigMap", "apps", "c"),
            api_version: "v1".into(),
            kind: ResolvedKind {
                resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
                namespaced: true,
            },
            stage: Stage::Rest,
            print: String::new(),
        }
    }

    fn deferral() -> ObjectError {
        ObjectError {
            subject: "ConfigMap/apps/c".into(),
            kind: FailureKind::MissingDependency,
            message: "dry-run failed (NotFound): namespaces \"apps\" not found".into(),
        }
    }

    #[test]
    fn each_plan_previews_as_the_action_apply_would_report() {
        let d = config_map("new");
        let skipped = previewed(&d, Plan::Settled(Outcome::settled(Action::Skipped, None))).unwrap();
        assert_eq!((skipped.action, skipped.diff.as_str()), (Action::Skipped, ""));

        let mut live = d.obj.clone();
        live["data"]["k"] = json!("old");
        live["metadata"]["resourceVersion"] = json!("7");
        let mut merged = d.obj.clone();
        merged["metadata"]["resourceVersion"] = json!("7");
        let write = Write::Apply {
            live: Some(live),
            ignored: Vec::new(),
            merged,
        };
        let configured = previewed(&d, Plan::Write(write)).unwrap();
        assert_eq!(configured.action, Action::Configured);
        assert!(
            configured.diff.contains("-  k: old\n") && configured.diff.contains("+  k: new\n"),
            "{}",
            configured.diff
        );

        let recreated = previewed(&d, Plan::Write(Write::Recreate)).unwrap();
        assert_eq!(recreated.action, Action::Created);
        assert!(recreated.diff.contains("+  k: new\n"), "{}", recreated.diff);

        // waiting for a namespace of the same apply: shown as the object it would create
        let pending = Plan::Deferred {
            error: deferral(),
            exists: false,
        };
        let created = previewed(&d, pending).unwrap();
        assert_eq!(created.action, Action::Created);
        assert!(created.diff.contains("+  k: new\n"), "{}", created.diff);
        // an existing object whose dry-run waits for something cannot be previewed
        let blocked = Plan::Deferred {
            error: deferral(),
            exists: true,
        };
        assert_eq!(previewed(&d, blocked).unwrap_err(), deferral());
    }
}
