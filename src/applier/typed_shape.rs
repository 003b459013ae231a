//! The fields Flux's apply writes into built-in kinds that a manifest leaves out.
//!
//! Flux converts each object of a kind its Go client knows into the Go type and back before
//! applying it. That conversion writes every struct-typed field even when empty and every
//! field declared without `omitempty` even when unset, so the apply carries `strategy: {}`,
//! `resources: {}`, `targetPort: 0` or `spec: {}` that the manifest never had, and the API
//! server records Flux as their field manager. These are not the API server's defaults (it
//! fills in the values afterwards, as it would for us). Only fields whose zero value a valid
//! manifest can leave out are listed here: a required field (a container's `name`, a port
//! number) is absent only from a manifest the server rejects anyway. Alpha fields and the
//! kinds a controller writes (events, leases, reviews) are left out too.

use serde_json::{Map, Value};

/// What the conversion writes for an absent field.
#[derive(Clone, Copy)]
enum Zero {
    /// A struct: `{}`.
    Empty,
    /// A pointer or list without `omitempty`: `null`.
    Null,
    /// A string without `omitempty`, or a quantity (a struct written as a string).
    Text(&'static str),
    /// An int-or-string, written as `0` when unset even with `omitempty`.
    Int(i64),
}

/// A field of a Go type: what it becomes when absent, and the fields inside it.
struct Field {
    name: &'static str,
    zero: Option<Zero>,
    inner: Inner,
}

enum Inner {
    Leaf,
    Struct(&'static [Field]),
    /// A list of structs; each element gets these fields.
    List(&'static [Field]),
}

const fn field(name: &'static str, zero: Option<Zero>, inner: Inner) -> Field {
    Field { name, zero, inner }
}

const EMPTY: Option<Zero> = Some(Zero::Empty);
const NULL: Option<Zero> = Some(Zero::Null);
const NONE: Option<Zero> = None;

/// A quantity is written as a string, `"0"` when zero.
const RESOURCE_FIELD_REF: &[Field] = &[field("divisor", Some(Zero::Text("0")), Inner::Leaf)];
const DOWNWARD_ITEMS: &[Field] = &[field("resourceFieldRef", NONE, Inner::Struct(RESOURCE_FIELD_REF))];
const PROBE: &[Field] = &[field(
    "grpc",
    NONE,
    Inner::Struct(&[field("service", NULL, Inner::Leaf)]),
)];
const CONTAINER: &[Field] = &[
    field("resources", EMPTY, Inner::Leaf),
    field("livenessProbe", NONE, Inner::Struct(PROBE)),
    field("readinessProbe", NONE, Inner::Struct(PROBE)),
    field("startupProbe", NONE, Inner::Struct(PROBE)),
    field(
        "env",
        NONE,
        Inner::List(&[field(
            "valueFrom",
            NONE,
            Inner::Struct(&[field("resourceFieldRef", NONE, Inner::Struct(RESOURCE_FIELD_REF))]),
        )]),
    ),
];
const PVC_SPEC: &[Field] = &[
    field("resources", EMPTY, Inner::Leaf),
    field(
        "dataSource",
        NONE,
        Inner::Struct(&[field("apiGroup", NULL, Inner::Leaf)]),
    ),
    field(
        "dataSourceRef",
        NONE,
        Inner::Struct(&[field("apiGroup", NULL, Inner::Leaf)]),
    ),
];
const MONITORS: &[Field] = &[field("monitors", NULL, Inner::Leaf)];
const VOLUME: &[Field] = &[
    field(
        "downwardAPI",
        NONE,
        Inner::Struct(&[field("items", NONE, Inner::List(DOWNWARD_ITEMS))]),
    ),
    field(
        "projected",
        NONE,
        Inner::Struct(&[field(
            "sources",
            NULL,
            Inner::List(&[field(
                "downwardAPI",
                NONE,
                Inner::Struct(&[field("items", NONE, Inner::List(DOWNWARD_ITEMS))]),
            )]),
        )]),
    ),
    field(
        "ephemeral",
        NONE,
        Inner::Struct(&[field(
            "volumeClaimTemplate",
            NONE,
            Inner::Struct(&[
                field("metadata", EMPTY, Inner::Leaf),
                field("spec", EMPTY, Inner::Struct(PVC_SPEC)),
            ]),
        )]),
    ),
    field("cephfs", NONE, Inner::Struct(MONITORS)),
    field("rbd", NONE, Inner::Struct(MONITORS)),
    field(
        "scaleIO",
        NONE,
        Inner::Struct(&[field("secretRef", NULL, Inner::Leaf)]),
    ),
];
const NODE_AFFINITY: &[Field] = &[
    field(
        "requiredDuringSchedulingIgnoredDuringExecution",
        NONE,
        Inner::Struct(&[field("nodeSelectorTerms", NULL, Inner::Leaf)]),
    ),
    field(
        "preferredDuringSchedulingIgnoredDuringExecution",
        NONE,
        Inner::List(&[field("preference", EMPTY, Inner::Leaf)]),
    ),
];
const POD_SPEC: &[Field] = &[
    field("containers", NULL, Inner::List(CONTAINER)),
    field("initContainers", NONE, Inner::List(CONTAINER)),
    field("ephemeralContainers", NONE, Inner::List(CONTAINER)),
    field("volumes", NONE, Inner::List(VOLUME)),
    field(
        "affinity",
        NONE,
        Inner::Struct(&[field("nodeAffinity", NONE, Inner::Struct(NODE_AFFINITY))]),
    ),
];
const POD_TEMPLATE: &[Field] = &[
    field("metadata", EMPTY, Inner::Leaf),
    field("spec", EMPTY, Inner::Struct(POD_SPEC)),
];
const TEMPLATE: Field = field("template", EMPTY, Inner::Struct(POD_TEMPLATE));
const SELECTOR: Field = field("selector", NULL, Inner::Leaf);
const UPDATE_STRATEGY: Field = field("updateStrategy", EMPTY, Inner::Leaf);
const JOB_SPEC: &[Field] = &[
    TEMPLATE,
    field(
        "podFailurePolicy",
        NONE,
        Inner::Struct(&[field(
            "rules",
            NULL,
            Inner::List(&[field(
                "onExitCodes",
                NONE,
                Inner::Struct(&[field("values", NULL, Inner::Leaf)]),
            )]),
        )]),
    ),
    field(
        "successPolicy",
        NONE,
        Inner::Struct(&[field("rules", NULL, Inner::Leaf)]),
    ),
];
const INGRESS_BACKEND: &[Field] = &[
    field(
        "service",
        NONE,
        Inner::Struct(&[field("port", EMPTY, Inner::Leaf)]),
    ),
    field(
        "resource",
        NONE,
        Inner::Struct(&[field("apiGroup", NULL, Inner::Leaf)]),
    ),
];
const INGRESS_SPEC: &[Field] = &[
    field("defaultBackend", NONE, Inner::Struct(INGRESS_BACKEND)),
    field(
        "rules",
        NONE,
        Inner::List(&[field(
            "http",
            NONE,
            Inner::Struct(&[field(
                "paths",
                NULL,
                Inner::List(&[
                    field("backend", EMPTY, Inner::Struct(INGRESS_BACKEND)),
                    field("pathType", NULL, Inner::Leaf),
                ]),
            )]),
        )]),
    ),
];
const METRIC_SOURCE: &[Field] = &[
    field("metric", EMPTY, Inner::Leaf),
    field("target", EMPTY, Inner::Leaf),
];
const HPA_V2_SPEC: &[Field] = &[
    field("scaleTargetRef", EMPTY, Inner::Leaf),
    field(
        "metrics",
        NONE,
        Inner::List(&[
            field(
                "object",
                NONE,
                Inner::Struct(&[
                    field("describedObject", EMPTY, Inner::Leaf),
                    field("metric", EMPTY, Inner::Leaf),
                    field("target", EMPTY, Inner::Leaf),
                ]),
            ),
            field("pods", NONE, Inner::Struct(METRIC_SOURCE)),
            field("external", NONE, Inner::Struct(METRIC_SOURCE)),
            field(
                "resource",
                NONE,
                Inner::Struct(&[field("target", EMPTY, Inner::Leaf)]),
            ),
            field(
                "containerResource",
                NONE,
                Inner::Struct(&[field("target", EMPTY, Inner::Leaf)]),
            ),
        ]),
    ),
];
const WEBHOOKS: Field = field(
    "webhooks",
    NONE,
    Inner::List(&[
        field("clientConfig", EMPTY, Inner::Leaf),
        field("admissionReviewVersions", NULL, Inner::Leaf),
        field("sideEffects", NULL, Inner::Leaf),
    ]),
);
const ROLE_REF: Field = field("roleRef", EMPTY, Inner::Leaf);
const EMPTY_SPEC: Field = field("spec", EMPTY, Inner::Leaf);

/// Top-level fields per `apiVersion` and kind.
const KINDS: &[(&str, &str, &[Field])] = &[
    ("v1", "Pod", &[field("spec", EMPTY, Inner::Struct(POD_SPEC))]),
    ("v1", "PodTemplate", &[TEMPLATE]),
    (
        "v1",
        "ReplicationController",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[field("template", NONE, Inner::Struct(POD_TEMPLATE))]),
        )],
    ),
    (
        "v1",
        "Service",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[field(
                "ports",
                NONE,
                Inner::List(&[field("targetPort", Some(Zero::Int(0)), Inner::Leaf)]),
            )]),
        )],
    ),
    ("v1", "Namespace", &[EMPTY_SPEC]),
    ("v1", "ResourceQuota", &[EMPTY_SPEC]),
    ("v1", "PersistentVolume", &[EMPTY_SPEC]),
    (
        "v1",
        "PersistentVolumeClaim",
        &[field("spec", EMPTY, Inner::Struct(PVC_SPEC))],
    ),
    (
        "v1",
        "LimitRange",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[field("limits", NULL, Inner::Leaf)]),
        )],
    ),
    (
        "apps/v1",
        "Deployment",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[SELECTOR, field("strategy", EMPTY, Inner::Leaf), TEMPLATE]),
        )],
    ),
    (
        "apps/v1",
        "ReplicaSet",
        &[field("spec", EMPTY, Inner::Struct(&[SELECTOR, TEMPLATE]))],
    ),
    (
        "apps/v1",
        "DaemonSet",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[SELECTOR, TEMPLATE, UPDATE_STRATEGY]),
        )],
    ),
    (
        "apps/v1",
        "StatefulSet",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[
                SELECTOR,
                field("serviceName", Some(Zero::Text("")), Inner::Leaf),
                TEMPLATE,
                UPDATE_STRATEGY,
                field(
                    "volumeClaimTemplates",
                    NONE,
                    Inner::List(&[
                        field("metadata", EMPTY, Inner::Leaf),
                        field("spec", EMPTY, Inner::Struct(PVC_SPEC)),
                        field("status", EMPTY, Inner::Leaf),
                    ]),
                ),
            ]),
        )],
    ),
    (
        "batch/v1",
        "Job",
        &[field("spec", EMPTY, Inner::Struct(JOB_SPEC))],
    ),
    (
        "batch/v1",
        "CronJob",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[
                field("schedule", Some(Zero::Text("")), Inner::Leaf),
                field(
                    "jobTemplate",
                    EMPTY,
                    Inner::Struct(&[
                        field("metadata", EMPTY, Inner::Leaf),
                        field("spec", EMPTY, Inner::Struct(JOB_SPEC)),
                    ]),
                ),
            ]),
        )],
    ),
    (
        "networking.k8s.io/v1",
        "Ingress",
        &[field("spec", EMPTY, Inner::Struct(INGRESS_SPEC))],
    ),
    ("networking.k8s.io/v1", "IngressClass", &[EMPTY_SPEC]),
    (
        "networking.k8s.io/v1",
        "NetworkPolicy",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[field("podSelector", EMPTY, Inner::Leaf)]),
        )],
    ),
    ("policy/v1", "PodDisruptionBudget", &[EMPTY_SPEC]),
    (
        "autoscaling/v1",
        "HorizontalPodAutoscaler",
        &[field(
            "spec",
            EMPTY,
            Inner::Struct(&[field("scaleTargetRef", EMPTY, Inner::Leaf)]),
        )],
    ),
    (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        &[field("spec", EMPTY, Inner::Struct(HPA_V2_SPEC))],
    ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", &[ROLE_REF]),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &[ROLE_REF]),
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        &[WEBHOOKS],
    ),
    (
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        &[WEBHOOKS],
    ),
];

/// Writes into `obj` the fields Flux's typed conversion would add to it; other kinds are left
/// as they are. A field of an unexpected type is left alone (the server rejects such a manifest;
/// Flux would skip the conversion of the whole object).
pub(crate) fn add_typed_zero_fields(obj: &mut Value) {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some((_, _, fields)) = KINDS.iter().find(|(v, k, _)| *v == api_version && *k == kind) else {
        return;
    };
    if let Some(map) = obj.as_object_mut() {
        fill(map, fields);
    }
}

fn fill(map: &mut Map<String, Value>, fields: &[Field]) {
    for f in fields {
        if let Some(zero) = f.zero {
            map.entry(f.name).or_insert_with(|| match zero {
                Zero::Empty => Value::Object(Map::new()),
                Zero::Null => Value::Null,
                Zero::Text(t) => t.into(),
                Zero::Int(i) => i.into(),
            });
        }
        match (&f.inner, map.get_mut(f.name)) {
            (Inner::Struct(inner), Some(Value::Object(m))) => fill(m, inner),
            (Inner::List(inner), Some(Value::Array(items))) => {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    fill(item, inner);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filled(mut obj: Value) -> Value {
        add_typed_zero_fields(&mut obj);
        obj
    }

    #[test]
    fn a_deployment_gets_an_empty_strategy_and_container_resources() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}});
        assert_eq!(
            filled(deployment),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "strategy": {},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "app:1", "resources": {}}]}}}})
        );
    }

    #[test]
    fn a_service_port_gets_a_zero_target_port() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80}, {"port": 81, "targetPort": "http"}]}});
        assert_eq!(
            filled(service)["spec"]["ports"],
            json!([{"port": 80, "targetPort": 0}, {"port": 81, "targetPort": "http"}])
        );
    }

    #[test]
    fn absent_structs_are_written_and_filled_in_turn() {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        assert_eq!(filled(namespace)["spec"], json!({}));
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *"}});
        assert_eq!(
            filled(cron)["spec"],
            json!({"schedule": "* * * * *", "jobTemplate": {"metadata": {}, "spec": {"template": {
                "metadata": {}, "spec": {"containers": null}}}}})
        );
    }

    #[test]
    fn nested_lists_pointers_and_quantities_get_their_zero_values() {
        let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"serviceName": "db", "selector": {}, "template": {"spec": {"containers": [{"name": "c",
                "readinessProbe": {"grpc": {"port": 9}},
                "env": [{"name": "LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        let spec = filled(set)["spec"].clone();
        assert_eq!(spec["updateStrategy"], json!({}));
        assert_eq!(spec["template"]["metadata"], json!({}));
        let container = &spec["template"]["spec"]["containers"][0];
        assert_eq!(
            container["readinessProbe"]["grpc"],
            json!({"port": 9, "service": null})
        );
        assert_eq!(
            container["env"][0]["valueFrom"]["resourceFieldRef"],
            json!({"resource": "limits.cpu", "divisor": "0"})
        );
        assert_eq!(
            spec["volumeClaimTemplates"][0],
            json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {}},
                "status": {}})
        );
    }

    #[test]
    fn ingress_backends_and_network_policy_selectors() {
        let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"},
            "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "s"}}}]}}]}});
        assert_eq!(
            filled(ingress)["spec"]["rules"][0]["http"]["paths"][0],
            json!({"path": "/", "pathType": null, "backend": {"service": {"name": "s", "port": {}}}})
        );
        let policy =
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p"}});
        assert_eq!(filled(policy)["spec"], json!({"podSelector": {}}));
    }

    #[test]
    fn set_values_and_other_kinds_stay_as_they_are() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {}, "strategy": {"type": "Recreate"}, "template": {"metadata": {},
                "spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]}}}});
        assert_eq!(filled(deployment.clone()), deployment);
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(filled(config_map.clone()), config_map);
        // Another version of a known kind, and a custom resource named like one.
        let beta = json!({"apiVersion": "apps/v1beta1", "kind": "Deployment", "metadata": {"name": "d"}});
        assert_eq!(filled(beta.clone()), beta);
        let custom = json!({"apiVersion": "example.com/v1", "kind": "Service", "metadata": {"name": "s"}});
        assert_eq!(filled(custom.clone()), custom);
    }

    #[test]
    fn fields_of_an_unexpected_type_are_left_alone() {
        let odd = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {}, "template": "not a map", "strategy": {}}});
        assert_eq!(filled(odd.clone()), odd);
    }
}
