//! nameReference: after prefixes, suffixes and hash suffixes changed names, rewrite every
//! field that referred to an object by an earlier name (kustomize's back-reference fix).

use serde_json::Value;

use super::BuildError;
use super::kustomization::FieldSpec;
use super::resmap::{ResId, ResMap, Resource, is_cluster_scoped};
use super::transform::fieldspecs::{NameReference, name_references};
use super::transform::{path_segments, selects, visit_path};

/// Fixes back-references in every object of `map`.
pub fn fix(map: &mut ResMap) -> Result<(), BuildError> {
    let table = name_references();
    // Candidates are read from a snapshot: renames already happened, references are only
    // rewritten here, so the ids cannot change during the pass.
    let snapshot: Vec<Resource> = map.resources.clone();
    for res in &mut map.resources {
        let referrer_id = res.id();
        for target in &table {
            for spec in target.referrers.iter().filter(|s| selects(s, &referrer_id)) {
                fix_field(res, &referrer_id, target, spec, &snapshot)?;
            }
        }
    }
    Ok(())
}

fn target_selects(target: &NameReference, id: &ResId) -> bool {
    (target.group.is_empty() || target.group == id.group)
        && (target.version.is_empty() || target.version == id.version)
        && target.kind == id.kind
}

fn fix_field(
    res: &mut Resource,
    referrer_id: &ResId,
    target: &NameReference,
    spec: &FieldSpec,
    all: &[Resource],
) -> Result<(), BuildError> {
    let mut obj = Value::Object(std::mem::take(&mut res.obj));
    let role_ref = spec.path == "roleRef/name";
    let role_ref_kind = obj
        .pointer("/roleRef/kind")
        .and_then(Value::as_str)
        .map(str::to_string);
    let role_ref_group = obj
        .pointer("/roleRef/apiGroup")
        .and_then(Value::as_str)
        .map(str::to_string);
    if role_ref
        && (role_ref_kind.as_deref() != Some(target.kind)
            || role_ref_group.as_deref().is_some_and(|g| g != target.group))
    {
        let Value::Object(m) = obj else {
            unreachable!("wrapped an object")
        };
        res.obj = m;
        return Ok(());
    }
    let ctx = Selection {
        referrer: res,
        referrer_id,
        target,
        all,
    };
    let err = |message: String| BuildError::NameReference {
        referrer: referrer_id.to_string(),
        path: spec.path.clone(),
        message,
    };
    let result = visit_path(
        &mut obj,
        &path_segments(&spec.path),
        false,
        &|| Value::Null,
        &mut |node| rewrite(node, &ctx).map_err(&err),
    );
    let Value::Object(m) = obj else {
        unreachable!("wrapped an object")
    };
    res.obj = m;
    result
}

/// Rewrites a reference found at a field-spec path: a name, a list of names, or a map
/// holding `name` (and maybe `namespace`), or a list of such maps.
fn rewrite(node: &mut Value, ctx: &Selection<'_>) -> Result<(), String> {
    match node {
        Value::String(old) => {
            if let Some(new) = ctx.select(old, None)? {
                *old = new.name;
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                rewrite(item, ctx)?;
            }
        }
        Value::Object(m) => {
            // kustomize does not look at a subject's kind: a User named like a renamed
            // ServiceAccount is renamed too.
            let Some(old) = m.get("name").and_then(Value::as_str).map(str::to_string) else {
                return Ok(());
            };
            let ns = m.get("namespace").and_then(Value::as_str).map(str::to_string);
            if let Some(referral) = ctx.select_resource(&old, ns.as_deref())? {
                let new = referral.id();
                m.insert("name".into(), Value::String(new.name.clone()));
                // The namespace follows only when the build moved the referral.
                if !new.namespace.is_empty() && (ns.is_some() || referral.orig.namespace != new.namespace) {
                    m.insert("namespace".into(), Value::String(new.namespace));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

struct Selection<'a> {
    referrer: &'a Resource,
    referrer_id: &'a ResId,
    target: &'a NameReference,
    all: &'a [Resource],
}

impl Selection<'_> {
    /// kustomize's pre-filter: a namespaced referrer sees cluster-scoped objects, objects of
    /// its own namespace and, for a RoleBinding, objects in the namespaces of its
    /// ServiceAccount subjects.
    fn could_refer_to(&self, candidate: &Resource) -> bool {
        if is_cluster_scoped(&self.referrer_id.group, &self.referrer_id.kind) {
            return true;
        }
        let id = candidate.id();
        if is_cluster_scoped(&id.group, &id.kind)
            || id.effective_namespace() == self.referrer_id.effective_namespace()
        {
            return true;
        }
        self.referrer_id.kind == "RoleBinding"
            && self
                .referrer
                .obj
                .get("subjects")
                .and_then(Value::as_array)
                .is_some_and(|subjects| {
                    subjects.iter().any(|s| {
                        s.get("kind").and_then(Value::as_str) == Some("ServiceAccount")
                            && s.get("namespace").and_then(Value::as_str) == Some(id.namespace.as_str())
                    })
                })
    }

    /// The current id of the one object the reference `old` points to, if any.
    fn select(&self, old: &str, namespace: Option<&str>) -> Result<Option<ResId>, String> {
        Ok(self.select_resource(old, namespace)?.map(Resource::id))
    }

    /// The one object the reference `old` (in `namespace`, when the reference has one)
    /// points to, if any.
    fn select_resource(&self, old: &str, namespace: Option<&str>) -> Result<Option<&Resource>, String> {
        let mut candidates: Vec<&Resource> = self
            .all
            .iter()
            .filter(|r| r.any_id(|id| target_selects(self.target, id) && id.name == old))
            .collect();
        candidates.retain(|r| self.could_refer_to(r));
        if let Some(ns) = namespace {
            let wanted = if ns.is_empty() { "default" } else { ns };
            candidates.retain(|r| r.any_id(|id| id.name == old && id.effective_namespace() == wanted));
        }
        if candidates.len() > 1 {
            let same_context: Vec<&Resource> = candidates
                .iter()
                .copied()
                .filter(|r| r.prefixes == self.referrer.prefixes && r.suffixes == self.referrer.suffixes)
                .collect();
            if same_context.len() == 1 {
                candidates = same_context;
            }
        }
        match candidates.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            many => {
                let first = many[0].id();
                if many.iter().all(|r| r.id().name == first.name) {
                    return Ok(Some(many[0]));
                }
                let ids: Vec<String> = many.iter().map(|r| r.id().to_string()).collect();
                Err(format!(
                    "found multiple possible referrals for '{old}': {}",
                    ids.join(", ")
                ))
            }
        }
    }
}
