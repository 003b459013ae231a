//! kustomize's builtin field-spec tables (api v0.21.1 `builtinpluginconsts`), expressed as
//! data: where labels, annotations and name references live in builtin kinds.

use crate::file::FieldSpec;

fn fs(group: &str, version: &str, kind: &str, path: &str, create: bool) -> FieldSpec {
    FieldSpec {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        path: path.into(),
        create,
    }
}

/// Workloads whose pod template lives at `spec/template`, with the group/version filter
/// kustomize's tables use for each.
const TEMPLATED: &[(&str, &str, &str)] = &[
    ("", "v1", "ReplicationController"),
    ("", "", "Deployment"),
    ("", "", "ReplicaSet"),
    ("", "", "DaemonSet"),
    ("apps", "", "StatefulSet"),
    ("batch", "", "Job"),
];

/// Label paths in pod templates (and StatefulSet volume claim templates).
pub(crate) fn template_labels() -> Vec<FieldSpec> {
    let mut out: Vec<FieldSpec> = TEMPLATED
        .iter()
        .map(|(g, v, k)| fs(g, v, k, "spec/template/metadata/labels", true))
        .collect();
    out.push(fs(
        "apps",
        "",
        "StatefulSet",
        "spec/volumeClaimTemplates[]/metadata/labels",
        true,
    ));
    out.push(fs(
        "batch",
        "",
        "CronJob",
        "spec/jobTemplate/metadata/labels",
        true,
    ));
    out.push(fs(
        "batch",
        "",
        "CronJob",
        "spec/jobTemplate/spec/template/metadata/labels",
        true,
    ));
    out
}

/// `metadata/labels` of every object.
pub(crate) fn metadata_labels() -> Vec<FieldSpec> {
    vec![fs("", "", "", "metadata/labels", true)]
}

/// The full commonLabels table: metadata, selectors and templates.
pub(crate) fn common_labels() -> Vec<FieldSpec> {
    let mut out = metadata_labels();
    out.push(fs("", "v1", "Service", "spec/selector", true));
    out.push(fs("", "v1", "ReplicationController", "spec/selector", true));
    out.push(fs("", "", "Deployment", "spec/selector/matchLabels", true));
    out.push(fs("", "", "ReplicaSet", "spec/selector/matchLabels", true));
    out.push(fs("", "", "DaemonSet", "spec/selector/matchLabels", true));
    out.push(fs("apps", "", "StatefulSet", "spec/selector/matchLabels", true));
    for kind in ["Deployment", "StatefulSet"] {
        for affinity in ["podAffinity", "podAntiAffinity"] {
            out.push(fs(
                "apps",
                "",
                kind,
                &format!("spec/template/spec/affinity/{affinity}/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels"),
                false,
            ));
            out.push(fs(
                "apps",
                "",
                kind,
                &format!("spec/template/spec/affinity/{affinity}/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels"),
                false,
            ));
        }
        out.push(fs(
            "apps",
            "",
            kind,
            "spec/template/spec/topologySpreadConstraints/labelSelector/matchLabels",
            false,
        ));
    }
    out.push(fs("batch", "", "Job", "spec/selector/matchLabels", false));
    out.push(fs(
        "batch",
        "",
        "CronJob",
        "spec/jobTemplate/spec/selector/matchLabels",
        false,
    ));
    out.push(fs(
        "policy",
        "",
        "PodDisruptionBudget",
        "spec/selector/matchLabels",
        false,
    ));
    out.push(fs(
        "networking.k8s.io",
        "",
        "NetworkPolicy",
        "spec/podSelector/matchLabels",
        false,
    ));
    out.push(fs(
        "networking.k8s.io",
        "",
        "NetworkPolicy",
        "spec/ingress/from/podSelector/matchLabels",
        false,
    ));
    out.push(fs(
        "networking.k8s.io",
        "",
        "NetworkPolicy",
        "spec/egress/to/podSelector/matchLabels",
        false,
    ));
    out.extend(template_labels());
    out
}

/// The commonAnnotations table: metadata and pod templates.
pub(crate) fn common_annotations() -> Vec<FieldSpec> {
    let mut out = vec![fs("", "", "", "metadata/annotations", true)];
    out.extend(
        TEMPLATED
            .iter()
            .map(|(g, v, k)| fs(g, v, k, "spec/template/metadata/annotations", true)),
    );
    out.push(fs(
        "batch",
        "",
        "CronJob",
        "spec/jobTemplate/metadata/annotations",
        true,
    ));
    out.push(fs(
        "batch",
        "",
        "CronJob",
        "spec/jobTemplate/spec/template/metadata/annotations",
        true,
    ));
    out
}

/// A referenced kind and the fields of other kinds that hold its name.
pub(crate) struct NameReference {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) referrers: Vec<FieldSpec>,
}

/// Pod spec locations of the kinds kustomize fixes config/secret references in.
const POD_SPECS: &[(&str, &str, &str)] = &[
    ("v1", "Pod", "spec"),
    ("", "PodTemplate", "template/spec"),
    ("", "Deployment", "spec/template/spec"),
    ("", "ReplicaSet", "spec/template/spec"),
    ("", "DaemonSet", "spec/template/spec"),
    ("", "StatefulSet", "spec/template/spec"),
    ("", "Job", "spec/template/spec"),
    ("", "CronJob", "spec/jobTemplate/spec/template/spec"),
];

/// Pod spec locations for serviceAccountName, claimName and priorityClassName.
const POD_SPECS_RC: &[(&str, &str)] = &[
    ("Pod", "spec"),
    ("StatefulSet", "spec/template/spec"),
    ("Deployment", "spec/template/spec"),
    ("ReplicationController", "spec/template/spec"),
    ("CronJob", "spec/jobTemplate/spec/template/spec"),
    ("Job", "spec/template/spec"),
    ("DaemonSet", "spec/template/spec"),
];

fn pod_refs(suffixes: &[&str]) -> Vec<FieldSpec> {
    let mut out = Vec::new();
    for (version, kind, base) in POD_SPECS {
        for s in suffixes {
            out.push(fs("", version, kind, &format!("{base}/{s}"), false));
        }
    }
    out
}

fn pod_refs_rc(suffix: &str) -> Vec<FieldSpec> {
    POD_SPECS_RC
        .iter()
        .map(|(kind, base)| fs("", "", kind, &format!("{base}/{suffix}"), false))
        .collect()
}

/// The nameReference table.
pub(crate) fn name_references() -> Vec<NameReference> {
    let hpa = || {
        vec![fs(
            "",
            "",
            "HorizontalPodAutoscaler",
            "spec/scaleTargetRef/name",
            false,
        )]
    };
    let mut config_map = pod_refs(&[
        "volumes/configMap/name",
        "containers/env/valueFrom/configMapKeyRef/name",
        "initContainers/env/valueFrom/configMapKeyRef/name",
        "containers/envFrom/configMapRef/name",
        "initContainers/envFrom/configMapRef/name",
        "volumes/projected/sources/configMap/name",
    ]);
    config_map.extend([
        fs("", "", "Node", "spec/configSource/configMap", false),
        fs("", "", "Role", "rules/resourceNames", false),
        fs("", "", "ClusterRole", "rules/resourceNames", false),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/fastcgi-params-configmap",
            false,
        ),
    ]);
    let mut secret = pod_refs(&[
        "volumes/secret/secretName",
        "containers/env/valueFrom/secretKeyRef/name",
        "initContainers/env/valueFrom/secretKeyRef/name",
        "containers/envFrom/secretRef/name",
        "initContainers/envFrom/secretRef/name",
        "imagePullSecrets/name",
        "volumes/projected/sources/secret/name",
    ]);
    secret.extend([
        fs("", "", "Ingress", "spec/tls/secretName", false),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/ingress.kubernetes.io\\/auth-secret",
            false,
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-secret",
            false,
        ),
        fs(
            "",
            "",
            "Ingress",
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-tls-secret",
            false,
        ),
        fs("", "", "ServiceAccount", "imagePullSecrets/name", false),
        fs("", "", "StorageClass", "parameters/secretName", false),
        fs("", "", "StorageClass", "parameters/adminSecretName", false),
        fs("", "", "StorageClass", "parameters/userSecretName", false),
        fs("", "", "StorageClass", "parameters/secretRef", false),
        fs("", "", "Role", "rules/resourceNames", false),
        fs("", "", "ClusterRole", "rules/resourceNames", false),
        fs(
            "serving.knative.dev",
            "v1",
            "Service",
            "spec/template/spec/containers/env/valueFrom/secretKeyRef/name",
            false,
        ),
        fs("", "", "PersistentVolume", "spec/azureFile/secretName", false),
    ]);
    let service = vec![
        fs("apps", "", "StatefulSet", "spec/serviceName", false),
        fs(
            "",
            "",
            "Ingress",
            "spec/rules/http/paths/backend/serviceName",
            false,
        ),
        fs("", "", "Ingress", "spec/backend/serviceName", false),
        fs(
            "",
            "",
            "Ingress",
            "spec/rules/http/paths/backend/service/name",
            false,
        ),
        fs("", "", "Ingress", "spec/defaultBackend/service/name", false),
        fs(
            "apiregistration.k8s.io",
            "",
            "APIService",
            "spec/service/name",
            false,
        ),
        fs(
            "admissionregistration.k8s.io",
            "",
            "ValidatingWebhookConfiguration",
            "webhooks/clientConfig/service",
            false,
        ),
        fs(
            "admissionregistration.k8s.io",
            "",
            "MutatingWebhookConfiguration",
            "webhooks/clientConfig/service",
            false,
        ),
    ];
    let rbac = "rbac.authorization.k8s.io";
    let mut service_account = vec![
        fs(rbac, "", "RoleBinding", "subjects", false),
        fs(rbac, "", "ClusterRoleBinding", "subjects", false),
    ];
    service_account.extend(pod_refs_rc("serviceAccountName"));
    let mut pv = vec![fs("", "", "PersistentVolumeClaim", "spec/volumeName", false)];
    pv.push(fs("", "", "ClusterRole", "rules/resourceNames", false));
    vec![
        NameReference {
            group: "",
            version: "",
            kind: "Deployment",
            referrers: hpa(),
        },
        NameReference {
            group: "",
            version: "",
            kind: "ReplicationController",
            referrers: hpa(),
        },
        NameReference {
            group: "",
            version: "",
            kind: "ReplicaSet",
            referrers: hpa(),
        },
        NameReference {
            group: "",
            version: "",
            kind: "StatefulSet",
            referrers: hpa(),
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            referrers: config_map,
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "Secret",
            referrers: secret,
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "Service",
            referrers: service,
        },
        NameReference {
            group: rbac,
            version: "",
            kind: "Role",
            referrers: vec![fs(rbac, "", "RoleBinding", "roleRef/name", false)],
        },
        NameReference {
            group: rbac,
            version: "",
            kind: "ClusterRole",
            referrers: vec![
                fs(rbac, "", "RoleBinding", "roleRef/name", false),
                fs(rbac, "", "ClusterRoleBinding", "roleRef/name", false),
            ],
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "ServiceAccount",
            referrers: service_account,
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "PersistentVolumeClaim",
            referrers: pod_refs_rc("volumes/persistentVolumeClaim/claimName"),
        },
        NameReference {
            group: "",
            version: "v1",
            kind: "PersistentVolume",
            referrers: pv,
        },
        NameReference {
            group: "storage.k8s.io",
            version: "v1",
            kind: "StorageClass",
            referrers: vec![
                fs("", "", "PersistentVolume", "spec/storageClassName", false),
                fs("", "", "PersistentVolumeClaim", "spec/storageClassName", false),
                fs(
                    "",
                    "",
                    "StatefulSet",
                    "spec/volumeClaimTemplates/spec/storageClassName",
                    false,
                ),
            ],
        },
        NameReference {
            group: "scheduling.k8s.io",
            version: "v1",
            kind: "PriorityClass",
            referrers: pod_refs_rc("priorityClassName"),
        },
        // kustomize's table spells this group "networking.k8s.io/v1", so it never matches.
        NameReference {
            group: "networking.k8s.io/v1",
            version: "v1",
            kind: "IngressClass",
            referrers: vec![fs("", "", "Ingress", "spec/ingressClassName", false)],
        },
    ]
}
