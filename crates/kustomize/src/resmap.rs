//! Resources with kustomize's identity bookkeeping (original id, earlier ids, applied
//! prefixes/suffixes, generator state) and the ordered resource map.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::error::BuildError;
use super::file::Config;
use super::gvk::split_api_version;
use super::packed::Packed;
use super::patch::schema::SchemaChoice;
use super::yaml::Step;

/// A resource id: group/version/kind plus name and namespace.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct ResId {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
}

impl ResId {
    /// The id of an object as it is now.
    pub(crate) fn of(obj: &Map<String, Value>) -> ResId {
        let (group, version) = split_api_version(str_at(obj, &["apiVersion"]));
        ResId {
            group: group.to_string(),
            version: version.to_string(),
            kind: str_at(obj, &["kind"]).to_string(),
            name: str_at(obj, &["metadata", "name"]).to_string(),
            namespace: str_at(obj, &["metadata", "namespace"]).to_string(),
        }
    }

    /// Same kind and name and the same effective namespace (empty means `default` for
    /// namespaced kinds), as kustomize's `ResId.Equals`.
    pub(crate) fn same_as(&self, other: &ResId) -> bool {
        self.identity() == other.identity()
    }

    /// The fields `same_as` compares, as a hashable key.
    fn identity(&self) -> (&str, &str, &str, &str, &str) {
        (
            &self.group,
            &self.version,
            &self.kind,
            &self.name,
            self.effective_namespace(),
        )
    }

    /// The namespace used for comparisons: `default` when empty for namespaced kinds, and a
    /// fixed marker for cluster-scoped kinds.
    pub(crate) fn effective_namespace(&self) -> &str {
        if is_cluster_scoped(&self.group, &self.version, &self.kind) {
            "~cluster"
        } else if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }
}

impl std::fmt::Display for ResId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "[noGrp]"
        } else {
            &self.group
        };
        let ns = if self.namespace.is_empty() {
            "[noNs]"
        } else {
            &self.namespace
        };
        write!(f, "{}.{}.{}/{}.{}", self.kind, self.version, group, self.name, ns)
    }
}

/// The string at a path of object keys, or "" when absent or not a string.
pub(crate) fn str_at<'a>(obj: &'a Map<String, Value>, path: &[&str]) -> &'a str {
    let mut cur = obj;
    for (i, key) in path.iter().enumerate() {
        match cur.get(*key) {
            Some(Value::Object(m)) if i + 1 < path.len() => cur = m,
            Some(Value::String(s)) if i + 1 == path.len() => return s,
            _ => return "",
        }
    }
    ""
}

/// kustomize rewrites `metadata.annotations` as a string map when it removes its index
/// annotations after a filter over the whole build (JSON6902 patches, replacements).
pub(crate) fn annotations_as_strings(meta: &mut Map<String, Value>) {
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        for v in annotations.values_mut() {
            if !v.is_string() {
                *v = Value::String(if v.is_null() {
                    "null".into()
                } else {
                    super::yaml::scalar_text(v)
                });
            }
        }
    }
}

/// Whether kustomize knows `group/version` `kind` as cluster-scoped. It knows scope only
/// for the exact API versions of its builtin Kubernetes 1.21 schema, so a cluster-scoped
/// kind at a newer version (`flowcontrol.apiserver.k8s.io/v1` FlowSchema,
/// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy) or any CRD kind counts as
/// namespaced here and gets the kustomization's namespace. The applier takes the real
/// scope from discovery.
pub(crate) fn is_cluster_scoped(group: &str, version: &str, kind: &str) -> bool {
    const V1_AND_BETA: &[&str] = &["v1", "v1beta1"];
    const BETA: &[&str] = &["v1beta1"];
    const CLUSTER: &[(&str, &[&str], &[&str])] = &[
        (
            "",
            &["v1"],
            &[
                "ComponentStatus",
                "Namespace",
                "Node",
                "NodeProxyOptions",
                "PersistentVolume",
            ],
        ),
        (
            "admissionregistration.k8s.io",
            V1_AND_BETA,
            &["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"],
        ),
        ("apiextensions.k8s.io", V1_AND_BETA, &["CustomResourceDefinition"]),
        ("apiregistration.k8s.io", V1_AND_BETA, &["APIService"]),
        ("certificates.k8s.io", V1_AND_BETA, &["CertificateSigningRequest"]),
        (
            "flowcontrol.apiserver.k8s.io",
            BETA,
            &["FlowSchema", "PriorityLevelConfiguration"],
        ),
        ("networking.k8s.io", V1_AND_BETA, &["IngressClass"]),
        ("node.k8s.io", V1_AND_BETA, &["RuntimeClass"]),
        ("policy", BETA, &["PodSecurityPolicy"]),
        (
            "rbac.authorization.k8s.io",
            V1_AND_BETA,
            &["ClusterRole", "ClusterRoleBinding"],
        ),
        ("scheduling.k8s.io", V1_AND_BETA, &["PriorityClass"]),
        (
            "storage.k8s.io",
            V1_AND_BETA,
            &["CSIDriver", "CSINode", "StorageClass", "VolumeAttachment"],
        ),
    ];
    CLUSTER
        .iter()
        .any(|(g, versions, kinds)| *g == group && versions.contains(&version) && kinds.contains(&kind))
}

/// How a generated ConfigMap/Secret still has to be finished at the top level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Generated {
    /// Append the content hash to the name once all transformers ran.
    pub(crate) hash_suffix: bool,
}

/// Where an object came from, for `buildMetadata: [originAnnotations]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Loaded from this file.
    File(std::path::PathBuf),
    /// Made by a builtin generator (`ConfigMapGenerator`, `SecretGenerator`) configured in
    /// this kustomization file.
    Generator {
        file: std::path::PathBuf,
        kind: &'static str,
        /// The plugin config's name, for a generator configured under `generators:`.
        name: Option<String>,
    },
}

/// One transformer run, for `buildMetadata: [transformerAnnotations]` (see `buildmeta`): the
/// file that configured it and its builtin kind (and, for a plugin config, the config's name).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Transformation {
    pub(crate) configured_in: std::path::PathBuf,
    pub(crate) kind: String,
    pub(crate) name: Option<String>,
}

/// One object plus the history kustomize keeps about it.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    body: Body,
    /// The id when the object was loaded or generated.
    pub(crate) orig: ResId,
    /// Ids it had before each rename or namespace change, oldest first.
    pub(crate) prev: Vec<ResId>,
    /// Prefixes and suffixes applied so far (the nameReference "context").
    pub(crate) prefixes: Vec<String>,
    pub(crate) suffixes: Vec<String>,
    pub(crate) generated: Option<Generated>,
    pub(crate) origin: Option<Origin>,
    /// The transformers that ran over it (for `buildMetadata: [transformerAnnotations]`).
    pub(crate) transformations: Vec<std::sync::Arc<Transformation>>,
    /// Values its file wrote as nothing (`key:`), which the first strategic merge patch
    /// drops (see `patch::smp::drop_implicit_nulls`).
    pub(crate) implicit_nulls: Vec<super::yaml::NullPath>,
}

/// The object: packed between build steps, open while a step works on it (see
/// [`super::packed`]).
#[derive(Clone, Debug)]
enum Body {
    Open(Map<String, Value>),
    /// With the id it had when packed, so ids are read without parsing.
    Packed {
        object: Packed,
        id: ResId,
    },
}

impl Resource {
    /// A freshly loaded object, packed. Null `metadata.labels`/`annotations` are dropped, as
    /// kustomize does when it reads an object.
    pub(crate) fn new(mut obj: Map<String, Value>) -> Self {
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            for key in ["labels", "annotations"] {
                if meta.get(key).is_some_and(Value::is_null) {
                    meta.remove(key);
                }
            }
        }
        let mut res = Resource {
            orig: ResId::of(&obj),
            body: Body::Open(obj),
            prev: Vec::new(),
            prefixes: Vec::new(),
            suffixes: Vec::new(),
            generated: None,
            origin: None,
            transformations: Vec::new(),
            implicit_nulls: Vec::new(),
        };
        res.pack();
        res
    }

    /// The current id.
    pub(crate) fn id(&self) -> ResId {
        self.current_id().into_owned()
    }

    /// The current id, borrowed when the object is packed.
    fn current_id(&self) -> Cow<'_, ResId> {
        match &self.body {
            Body::Open(obj) => Cow::Owned(ResId::of(obj)),
            Body::Packed { id, .. } => Cow::Borrowed(id),
        }
    }

    /// Whether any id this object ever had (original, earlier, current) satisfies `pred`.
    pub(crate) fn any_id(&self, pred: impl Fn(&ResId) -> bool) -> bool {
        pred(&self.orig) || self.prev.iter().any(&pred) || pred(&self.current_id())
    }

    /// The object for reading: borrowed when open, parsed from the packed text (which
    /// stays as it is) otherwise.
    pub(crate) fn obj(&self) -> Cow<'_, Map<String, Value>> {
        match &self.body {
            Body::Open(obj) => Cow::Borrowed(obj),
            Body::Packed { object, .. } => Cow::Owned(object.to_map()),
        }
    }

    /// The object for changing, opened if it was packed.
    pub(crate) fn obj_mut(&mut self) -> &mut Map<String, Value> {
        if let Body::Packed { object, .. } = &self.body {
            self.body = Body::Open(object.to_map());
        }
        match &mut self.body {
            Body::Open(obj) => obj,
            Body::Packed { .. } => unreachable!("opened above"),
        }
    }

    /// Runs `f` on the object as a `Value` (the form path visitors walk).
    pub(crate) fn edit<R>(&mut self, f: impl FnOnce(&mut Value) -> R) -> R {
        let obj = self.obj_mut();
        let mut value = Value::Object(std::mem::take(obj));
        let result = f(&mut value);
        *obj = match value {
            Value::Object(m) => m,
            // Visitors change fields below the root, never the root itself.
            _ => unreachable!("an edit replaced the whole object"),
        };
        result
    }

    /// Replaces the object.
    pub(crate) fn replace(&mut self, obj: Map<String, Value>) {
        self.body = Body::Open(obj);
    }

    /// Packs the object once a step is done with it.
    pub(crate) fn pack(&mut self) {
        if let Body::Open(obj) = &self.body {
            self.body = Body::Packed {
                object: Packed::from_map(obj),
                id: ResId::of(obj),
            };
        }
    }

    /// The packed object, for the build's output.
    pub(crate) fn into_packed(mut self) -> Packed {
        self.pack();
        match self.body {
            Body::Packed { object, .. } => object,
            Body::Open(_) => unreachable!("packed above"),
        }
    }

    /// Current metadata, created when missing.
    pub(crate) fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let meta = self
            .obj_mut()
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        meta.as_object_mut().expect("made an object above")
    }

    /// Turns every annotation value into text, as kustomize does when it finally rewrites
    /// the annotations of each object: a value written as nothing becomes `""`, a written
    /// null `"null"`, a map or list `""`, a number or boolean its text.
    pub(crate) fn annotations_to_text(&mut self) {
        if let Body::Packed { object, .. } = &self.body
            && !object.has_non_string_annotation()
        {
            return;
        }
        let non_string = |m: &Map<String, Value>| m.values().any(|v| !v.is_string());
        let needed = self
            .obj()
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object)
            .is_some_and(non_string);
        if !needed {
            return;
        }
        let implicit: Vec<String> = self
            .implicit_nulls
            .iter()
            .filter_map(|path| match path.as_slice() {
                [Step::Key(m), Step::Key(a), Step::Key(key)] if m == "metadata" && a == "annotations" => {
                    Some(key.clone())
                }
                _ => None,
            })
            .collect();
        if let Some(Value::Object(annotations)) = self.metadata_mut().get_mut("annotations") {
            for (key, value) in annotations.iter_mut() {
                let text = match &*value {
                    Value::String(_) => continue,
                    Value::Null if !implicit.contains(key) => "null".to_string(),
                    Value::Null | Value::Object(_) | Value::Array(_) => String::new(),
                    other => super::yaml::scalar_text(other),
                };
                *value = Value::String(text);
            }
        }
    }

    /// Drops an empty or null `metadata.annotations`, as kustomize's output never carries
    /// one (an empty `metadata.labels` or `data` stays).
    pub(crate) fn drop_empty_annotations(&mut self) {
        if let Body::Packed { object, .. } = &self.body
            && !object.contains(r#""annotations":{}"#)
            && !object.contains(r#""annotations":null"#)
        {
            return;
        }
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
        let has_empty = self
            .obj()
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .is_some_and(empty);
        if has_empty && let Some(Value::Object(meta)) = self.obj_mut().get_mut("metadata") {
            meta.remove("annotations");
        }
    }

    /// Sets one annotation, creating `metadata.annotations` when missing.
    pub(crate) fn set_annotation(&mut self, key: &str, value: String) {
        let annotations = self
            .metadata_mut()
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(a) = annotations {
            a.insert(key.into(), Value::String(value));
        }
    }

    /// Renames the object, remembering the old id.
    pub(crate) fn set_name(&mut self, name: String) {
        let old = self.id();
        if old.name != name {
            self.prev.push(old);
            self.metadata_mut().insert("name".into(), Value::String(name));
        }
    }

    /// Moves the object to a namespace, remembering the old id.
    pub(crate) fn set_namespace(&mut self, namespace: &str) {
        let old = self.id();
        if old.namespace != namespace {
            self.prev.push(old);
            self.metadata_mut()
                .insert("namespace".into(), Value::String(namespace.to_string()));
        }
    }
}

/// Resources in accumulation (FIFO) order, and what the build accepted but a user should
/// hear about.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResMap {
    pub(crate) resources: Vec<Resource>,
    /// Accepted as kustomize accepts it, yet probably a mistake (a patch target that
    /// selects nothing); each names its file.
    pub(crate) warnings: Vec<String>,
    /// The `configurations` of the kustomizations accumulated so far.
    pub(crate) config: Config,
    /// The `vars` of the kustomizations accumulated so far.
    pub(crate) vars: Vec<Var>,
    /// The `openapi` schema the patches use.
    pub(crate) schema: SchemaChoice,
}

impl ResMap {
    /// Appends, refusing a second object with the same current id.
    pub(crate) fn append(&mut self, res: Resource, file: &str) -> Result<(), BuildError> {
        self.append_all(
            ResMap {
                resources: vec![res],
                ..ResMap::default()
            },
            file,
        )
    }

    /// Runs `step` on every resource in order and packs each one as soon as the step is
    /// done with it, so a step holds one parsed object at a time.
    pub(crate) fn try_each<E>(
        &mut self,
        mut step: impl FnMut(&mut Resource) -> Result<(), E>,
    ) -> Result<(), E> {
        for res in &mut self.resources {
            let result = step(res);
            res.pack();
            result?;
        }
        Ok(())
    }

    /// [`ResMap::try_each`] for a step that cannot fail.
    pub(crate) fn each(&mut self, mut step: impl FnMut(&mut Resource)) {
        let done: Result<(), std::convert::Infallible> = self.try_each(|res| {
            step(res);
            Ok(())
        });
        let Ok(()) = done;
    }

    /// Fails when two objects now have the same id.
    pub(crate) fn check_unique(&self, file: &str) -> Result<(), BuildError> {
        let ids: Vec<Cow<'_, ResId>> = self.resources.iter().map(Resource::current_id).collect();
        first_duplicate(&ids).map_or(Ok(()), |id| Err(duplicate(file, id)))
    }

    /// Appends every resource of `other`, refusing any id already present; on error the map
    /// is unchanged.
    pub(crate) fn append_all(&mut self, other: ResMap, file: &str) -> Result<(), BuildError> {
        let ids: Vec<Cow<'_, ResId>> = self
            .resources
            .iter()
            .chain(&other.resources)
            .map(Resource::current_id)
            .collect();
        if let Some(id) = first_duplicate(&ids) {
            return Err(duplicate(file, id));
        }
        self.config
            .merge(&other.config)
            .map_err(|message| BuildError::Kustomization {
                file: file.to_string(),
                message,
            })?;
        add_vars(&mut self.vars, other.vars).map_err(|message| BuildError::Kustomization {
            file: file.to_string(),
            message,
        })?;
        self.resources.extend(other.resources);
        self.warnings.extend(other.warnings);
        Ok(())
    }
}

/// One var of `vars:` (see `vars`), with the id of the object it was bound to (if any) when
/// its kustomization was done.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Var {
    pub(crate) name: String,
    pub(crate) objref: ResId,
    pub(crate) field_path: String,
    pub(crate) bound: Option<ResId>,
}

impl Var {
    pub(crate) fn describe(&self) -> String {
        format!("{} ({}: {})", self.name, self.objref, self.field_path)
    }
}

/// Adds vars to a set; a name already there is an error.
pub(crate) fn add_vars(set: &mut Vec<Var>, incoming: Vec<Var>) -> Result<(), String> {
    for var in incoming {
        if set.iter().any(|v| v.name == var.name) {
            return Err(format!("var '{}' already encountered", var.name));
        }
        set.push(var);
    }
    Ok(())
}

/// The first id equal (`same_as`) to an earlier one; hashing keeps big builds linear.
fn first_duplicate<'a>(ids: &'a [Cow<'_, ResId>]) -> Option<&'a ResId> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter()
        .map(AsRef::as_ref)
        .find(|id: &&ResId| !seen.insert(id.identity()))
}

fn duplicate(file: &str, id: &ResId) -> BuildError {
    BuildError::DuplicateId {
        file: file.to_string(),
        id: id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(v: Value) -> Resource {
        Resource::new(v.as_object().unwrap().clone())
    }

    #[test]
    fn duplicate_ids_are_refused_with_the_id() {
        let mut m = ResMap::default();
        m.append(
            res(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})),
            "a.yaml",
        )
        .unwrap();
        let err = m
            .append(res(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}})), "b.yaml")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "b.yaml: may not add resource with an already registered id: ConfigMap.v1.[noGrp]/a.default"
        );
        assert_eq!(m.resources.len(), 1, "the map is unchanged");
    }

    #[test]
    fn a_packed_resource_reads_back_whole() {
        let object = json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v", "n": 1.5}});
        let r = res(object.clone());
        assert_eq!(Value::Object(r.obj().into_owned()), object);
    }

    #[test]
    fn changes_made_while_open_survive_packing_and_move_the_id() {
        let mut r = res(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        r.obj_mut().insert("data".into(), json!({"k": "v"}));
        r.set_namespace("ns");
        r.pack();
        assert_eq!(r.id().namespace, "ns");
        assert_eq!(
            r.into_packed().to_value(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn renames_keep_history() {
        let mut r = res(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}}));
        r.set_name("p-a".into());
        assert!(r.any_id(|id| id.name == "a"));
        assert_eq!(r.id().name, "p-a");
        assert_eq!(r.id().group, "apps");
    }
}
