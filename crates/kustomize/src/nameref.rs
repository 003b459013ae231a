//! nameReference: after prefixes, suffixes and hash suffixes changed names, rewrite every
//! field that referred to an object by an earlier name (kustomize's back-reference fix).

use std::collections::HashMap;

use serde_json::Value;

use super::error::BuildError;
use super::file::FieldSpec;
use super::resmap::{ResId, ResMap, Resource, is_cluster_scoped};
use super::transform::fieldspecs::name_references;
use super::transform::{path_segments, selects, visit_path};

/// Fixes back-references in every object of `map`.
pub(crate) fn fix(map: &mut ResMap) -> Result<(), BuildError> {
    let builtin = name_references();
    let custom = std::mem::take(&mut map.config.name_reference);
    // The builtin table, then what `configurations` add.
    let table: Vec<Target<'_>> = builtin
        .iter()
        .map(|t| Target {
            group: t.group,
            version: t.version,
            kind: t.kind,
            referrers: &t.referrers,
        })
        .chain(custom.iter().map(|t| Target {
            group: &t.group,
            version: &t.version,
            kind: &t.kind,
            referrers: &t.field_specs,
        }))
        .collect();
    let table = &table;
    // Renames already happened and references are only rewritten here, so the ids read
    // from this snapshot cannot change during the pass.
    let index = Index::of(&map.resources);
    map.try_each(|res| {
        let referrer_id = res.id();
        // Taken before any rewrite, as kustomize picks the candidates once per referrer.
        // Opened for changing: the rewrites below work on the same parse.
        let subject_namespaces = service_account_subject_namespaces(&referrer_id, res.obj_mut());
        for target in table {
            for spec in target.referrers.iter().filter(|s| selects(s, &referrer_id)) {
                let referrer = Referrer {
                    id: &referrer_id,
                    subject_namespaces: &subject_namespaces,
                };
                fix_field(res, &referrer, target, spec, &index)?;
            }
        }
        Ok(())
    })
}

/// What name resolution needs to know about every object, without its body.
struct Candidate {
    /// Every id the object had: original first, current last.
    ids: Vec<ResId>,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
}

impl Candidate {
    fn current(&self) -> &ResId {
        self.ids.last().expect("an object has at least its original id")
    }

    fn original(&self) -> &ResId {
        &self.ids[0]
    }

    fn any_id(&self, pred: impl Fn(&ResId) -> bool) -> bool {
        self.ids.iter().any(pred)
    }
}

/// The objects of a build, looked up by any (kind, name) they ever had, so resolving one
/// reference costs a hash lookup instead of a scan of the whole build.
struct Index {
    candidates: Vec<Candidate>,
    /// Kind, then name: looked up by `&str` without building a key.
    by_kind_name: HashMap<String, HashMap<String, Vec<usize>>>,
    /// The effective namespaces objects were loaded in (cluster-scoped ones aside).
    original_namespaces: std::collections::HashSet<String>,
}

impl Index {
    fn of(resources: &[Resource]) -> Self {
        let mut by_kind_name: HashMap<String, HashMap<String, Vec<usize>>> = HashMap::new();
        let candidates: Vec<Candidate> = resources
            .iter()
            .map(|r| {
                let mut ids = Vec::with_capacity(r.prev.len() + 2);
                ids.push(r.orig.clone());
                ids.extend(r.prev.iter().cloned());
                ids.push(r.id());
                Candidate {
                    ids,
                    prefixes: r.prefixes.clone(),
                    suffixes: r.suffixes.clone(),
                }
            })
            .collect();
        for (i, c) in candidates.iter().enumerate() {
            for id in &c.ids {
                let slot = by_kind_name
                    .entry(id.kind.clone())
                    .or_default()
                    .entry(id.name.clone())
                    .or_default();
                // Indices are pushed in build order; skip the repeats of one object.
                if slot.last() != Some(&i) {
                    slot.push(i);
                }
            }
        }
        let original_namespaces = candidates
            .iter()
            .map(|c| c.original())
            .filter(|id| !is_cluster_scoped(&id.group, &id.version, &id.kind))
            .map(|id| id.effective_namespace().to_string())
            .collect();
        Index {
            candidates,
            by_kind_name,
            original_namespaces,
        }
    }

    /// Objects that ever had this kind and name, in build order.
    fn named(&self, kind: &str, name: &str) -> impl Iterator<Item = &Candidate> {
        self.by_kind_name
            .get(kind)
            .and_then(|names| names.get(name))
            .into_iter()
            .flatten()
            .map(|&i| &self.candidates[i])
    }
}

/// A referenced kind and the fields holding its name, from either table.
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    referrers: &'a [FieldSpec],
}

fn target_selects(target: &Target<'_>, id: &ResId) -> bool {
    (target.group.is_empty() || target.group == id.group)
        && (target.version.is_empty() || target.version == id.version)
        && target.kind == id.kind
}

/// The object whose fields are being fixed, as name resolution sees it.
struct Referrer<'a> {
    id: &'a ResId,
    subject_namespaces: &'a [String],
}

fn fix_field(
    res: &mut Resource,
    referrer: &Referrer<'_>,
    target: &Target<'_>,
    spec: &FieldSpec,
    index: &Index,
) -> Result<(), BuildError> {
    if spec.path == "roleRef/name" {
        let obj = res.obj();
        let role_ref = |field: &str| {
            obj.get("roleRef")
                .and_then(|r| r.get(field))
                .and_then(Value::as_str)
        };
        if role_ref("kind") != Some(target.kind) || role_ref("apiGroup").is_some_and(|g| g != target.group) {
            return Ok(());
        }
    }
    // The context is read while the object is edited.
    let (prefixes, suffixes) = (res.prefixes.clone(), res.suffixes.clone());
    let ctx = Selection {
        referrer_id: referrer.id,
        prefixes: &prefixes,
        suffixes: &suffixes,
        subject_namespaces: referrer.subject_namespaces,
        target,
        index,
    };
    let err = |message: String| BuildError::NameReference {
        referrer: referrer.id.to_string(),
        path: spec.path.clone(),
        message,
    };
    res.edit(|obj| {
        visit_path(
            obj,
            &path_segments(&spec.path),
            false,
            &|| Value::Null,
            &mut |node| rewrite(node, &ctx).map_err(&err),
        )
    })
}

/// The namespaces of a RoleBinding's ServiceAccount subjects: kustomize lets the binding
/// refer to objects there.
fn service_account_subject_namespaces(
    referrer_id: &ResId,
    obj: &serde_json::Map<String, Value>,
) -> Vec<String> {
    if referrer_id.kind != "RoleBinding" {
        return Vec::new();
    }
    obj.get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| s.get("kind").and_then(Value::as_str) == Some("ServiceAccount"))
        .filter_map(|s| s.get("namespace").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Rewrites a reference found at a field-spec path: a name, a list of names, or a map
/// holding `name` (and maybe `namespace`), or a list of such maps.
fn rewrite(node: &mut Value, ctx: &Selection<'_>) -> Result<(), String> {
    match node {
        Value::String(old) => {
            if let Some(referral) = ctx.select(old, None)? {
                *old = referral.current().name.clone();
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
            if let Some(referral) = ctx.select(&old, ns.as_deref())? {
                let new = referral.current();
                m.insert("name".into(), Value::String(new.name.clone()));
                // The namespace follows only when the build moved the referral.
                if !new.namespace.is_empty()
                    && (ns.is_some() || referral.original().namespace != new.namespace)
                {
                    m.insert("namespace".into(), Value::String(new.namespace.clone()));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

struct Selection<'a> {
    referrer_id: &'a ResId,
    prefixes: &'a [String],
    suffixes: &'a [String],
    subject_namespaces: &'a [String],
    target: &'a Target<'a>,
    index: &'a Index,
}

impl Selection<'_> {
    /// kustomize's pre-filter: a namespaced referrer sees cluster-scoped objects, objects of
    /// its own namespace and, for a RoleBinding, objects in the namespaces of its
    /// ServiceAccount subjects.
    fn could_refer_to(&self, candidate: &Candidate) -> bool {
        if is_cluster_scoped(
            &self.referrer_id.group,
            &self.referrer_id.version,
            &self.referrer_id.kind,
        ) {
            return true;
        }
        let id = candidate.current();
        is_cluster_scoped(&id.group, &id.version, &id.kind)
            || id.effective_namespace() == self.referrer_id.effective_namespace()
            || self.subject_namespaces.contains(&id.namespace)
    }

    /// The one object the reference `old` (in `namespace`, when the reference has one)
    /// points to, if any.
    fn select(&self, old: &str, namespace: Option<&str>) -> Result<Option<&Candidate>, String> {
        let mut candidates: Vec<&Candidate> = self
            .index
            .named(self.target.kind, old)
            .filter(|c| c.any_id(|id| target_selects(self.target, id) && id.name == old))
            .filter(|c| self.could_refer_to(c))
            .collect();
        if let Some(ns) = namespace {
            // A reference with a namespace means objects loaded in that namespace when the
            // build has any, else objects now in it (kustomize groups the whole build).
            let wanted = if ns.is_empty() { "default" } else { ns };
            if self.index.original_namespaces.contains(wanted) {
                candidates.retain(|c| c.original().effective_namespace() == wanted);
            } else {
                candidates.retain(|c| c.current().effective_namespace() == wanted);
            }
        }
        if candidates.len() > 1 {
            let same_context: Vec<&Candidate> = candidates
                .iter()
                .copied()
                .filter(|c| c.prefixes == self.prefixes && c.suffixes == self.suffixes)
                .collect();
            if same_context.len() == 1 {
                candidates = same_context;
            }
        }
        match candidates.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            many => {
                let first = &many[0].current().name;
                if many.iter().all(|c| &c.current().name == first) {
                    return Ok(Some(many[0]));
                }
                let ids: Vec<String> = many.iter().map(|c| c.current().to_string()).collect();
                Err(format!(
                    "found multiple possible referrals for '{old}': {}",
                    ids.join(", ")
                ))
            }
        }
    }
}
