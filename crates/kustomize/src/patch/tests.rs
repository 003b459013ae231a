//! Expected values come from `kustomize build` v5.8.1 (api v0.21.1) run on the same
//! resource and patch (a `patches` entry), not from this code.

use serde_json::{Value, json};

use super::target::Target;
use super::*;
use crate::selector::Selector;

fn selects(selector: &Selector, object: &Value) -> Result<bool, PatchError> {
    selects_with_original(selector, object, None)
}

fn selects_with_original(
    selector: &Selector,
    object: &Value,
    original: Option<OriginalId<'_>>,
) -> Result<bool, PatchError> {
    Ok(Target::compile(selector)?.selects(object.as_object().expect("an object"), original))
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).expect("test YAML parses")
}

fn patched(resource: &str, patch: &str) -> Value {
    let doc = parse(patch, "patch.yaml").expect("patch parses");
    apply(&yaml(resource), &doc, None).expect("patch applies")
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  finalizers: [a, b]
spec:
  template:
    spec:
      containers:
      - name: main
        image: nginx
        ports:
        - containerPort: 80
        - containerPort: 53
          protocol: UDP
        env:
        - name: A
          value: "1"
        args: [x, y]
      tolerations:
      - key: k1
      volumes:
      - name: v1
        emptyDir: {}
"#;

#[test]
fn builtin_lists_merge_by_key_and_new_elements_go_first() {
    let patch = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  finalizers: [b, c]
spec:
  template:
    spec:
      containers:
      - name: sidecar
        image: busybox
      - name: main
        ports:
        - containerPort: 80
          name: http
        - containerPort: 53
          name: dns
        env:
        - name: B
          value: "2"
        args: [z]
      tolerations:
      - key: k2
      volumes:
      - name: v2
        emptyDir: {}
"#;
    let expected = yaml(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  finalizers: [b, c, a]
  name: app
spec:
  template:
    spec:
      containers:
      - image: busybox
        name: sidecar
      - args: [z]
        env:
        - name: B
          value: "2"
        - name: A
          value: "1"
        image: nginx
        name: main
        ports:
        - containerPort: 80
          name: http
        - containerPort: 53
          protocol: UDP
      tolerations:
      - key: k2
      volumes:
      - emptyDir: {}
        name: v2
      - emptyDir: {}
        name: v1
"#,
    );
    assert_eq!(patched(DEPLOYMENT, patch), expected);
}

#[test]
fn container_ports_match_on_port_and_protocol() {
    // (original ports, patch ports, kustomize's result)
    let cases = [
        (
            "[{containerPort: 80}]",
            "[{containerPort: 80, name: http}]",
            "[{containerPort: 80, name: http}]",
        ),
        (
            "[{containerPort: 53, protocol: UDP}]",
            "[{containerPort: 53, name: dns}]",
            "[{containerPort: 53, protocol: UDP}]",
        ),
        (
            "[{containerPort: 53}]",
            "[{containerPort: 53, protocol: UDP, name: dns}]",
            "[{containerPort: 53}]",
        ),
        (
            "[{containerPort: 80, protocol: TCP}]",
            "[{containerPort: 80, name: http}]",
            "[{containerPort: 80, protocol: TCP}]",
        ),
        (
            "[{containerPort: 80}]",
            "[{containerPort: 81}]",
            "[{containerPort: 81}, {containerPort: 80}]",
        ),
        (
            "[{containerPort: 53, protocol: UDP}]",
            "[{containerPort: 53, protocol: TCP, name: dns}]",
            "[{containerPort: 53, protocol: TCP, name: dns}, {containerPort: 53, protocol: UDP}]",
        ),
        (
            "[{containerPort: 1}, {containerPort: 2}]",
            "[{containerPort: 3}, {containerPort: 2, name: two}, {containerPort: 4}]",
            "[{containerPort: 3}, {containerPort: 2, name: two}, {containerPort: 4}, {containerPort: 1}]",
        ),
        (
            "[{containerPort: 1}, {containerPort: 2}]",
            "[{$patch: replace}, {containerPort: 9}]",
            "[{containerPort: 9}]",
        ),
        (
            "[{containerPort: 1, name: a}, {containerPort: 2}]",
            "[{containerPort: 1, name: b, $patch: replace}]",
            "[{containerPort: 1, name: a}, {containerPort: 2}]",
        ),
        (
            "[{containerPort: 1, name: a}]",
            "[{containerPort: 1, name: null}]",
            "[{containerPort: 1}]",
        ),
        (
            "[{name: x, containerPort: 80}]",
            "[{containerPort: 80, $patch: delete}]",
            "[]",
        ),
        (
            "[{containerPort: 80}]",
            "[{name: noport}]",
            "[{containerPort: 80}]",
        ),
        (
            "[{containerPort: 1}, {containerPort: 2}]",
            "[]",
            "[{containerPort: 1}, {containerPort: 2}]",
        ),
    ];
    let pod = |ports: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    ports: {ports}\n"
        )
    };
    for (original, patch, expected) in cases {
        let result = patched(&pod(original), &pod(patch));
        assert_eq!(result, yaml(&pod(expected)), "{original} patched with {patch}");
    }
}

#[test]
fn map_directives_and_literal_apimachinery_directives() {
    let original = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels: {a: "1", b: "2"}
  annotations: {x: "1"}
spec:
  replicas: 2
  selector:
    matchLabels: {app: a}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1}
  template:
    metadata:
      labels: {app: a}
    spec:
      containers:
      - name: main
        image: nginx
        resources: {limits: {cpu: "1"}, requests: {cpu: "1"}}
"#;
    let patch = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  labels:
    $patch: replace
    c: "3"
  annotations:
    $patch: delete
spec:
  replicas: null
  strategy:
    $retainKeys: [type]
    type: Recreate
  template:
    spec:
      $setElementOrder/containers: [{name: main}]
      containers:
      - name: main
        resources:
          limits:
            $patch: delete
"#;
    let expected = yaml(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    c: "3"
  name: app
spec:
  selector:
    matchLabels:
      app: a
  strategy:
    $retainKeys:
    - type
    rollingUpdate:
      maxSurge: 1
    type: Recreate
  template:
    metadata:
      labels:
        app: a
    spec:
      $setElementOrder/containers:
      - name: main
      containers:
      - image: nginx
        name: main
        resources:
          requests:
            cpu: "1"
"#,
    );
    assert_eq!(patched(original, patch), expected);
}

#[test]
fn nulls_new_fields_and_element_directives() {
    let original = r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  tolerations: [{key: a}]
  containers:
  - name: c
    args: [a]
"#;
    let patch = r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {y: null, z: "1", w: {$patch: delete}}
spec:
  tolerations: []
  volumes:
  - name: v
    emptyDir: {sizeLimit: null}
  - name: gone
    $patch: delete
  containers:
  - name: c
    args: []
  - name: new
    image: i
    $patch: replace
  - name: absent
    $patch: delete
"#;
    let expected = yaml(
        r#"
apiVersion: v1
kind: Pod
metadata:
  labels:
    z: "1"
  name: p
spec:
  containers:
  - args: []
    name: c
  - image: i
    name: new
  tolerations: []
  volumes:
  - emptyDir: {}
    name: v
"#,
    );
    assert_eq!(patched(original, patch), expected);
}

#[test]
fn custom_resource_lists_are_replaced_and_maps_merged() {
    let original = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  finalizers: [a, b]
spec:
  containers:
  - name: main
    image: x
  items: [{name: a, v: 1}]
  map: {a: 1, b: {c: 2}}
"#;
    let patch = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  finalizers: [c]
spec:
  containers:
  - name: side
  items: [{name: a, w: 2}]
  map: {b: {d: 3}}
"#;
    let expected = yaml(
        r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  finalizers: [c]
  name: w
spec:
  containers:
  - name: side
  items:
  - name: a
    w: 2
  map:
    a: 1
    b:
      c: 2
      d: 3
"#,
    );
    assert_eq!(patched(original, patch), expected);
}

#[test]
fn service_ports_merge_on_port_and_selectors_merge_as_maps() {
    let original = r#"
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  selector: {app: a, tier: b}
  ports:
  - port: 80
    targetPort: 8080
  - port: 443
"#;
    let patch = r#"
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  selector: {app: z}
  ports:
  - port: 80
    name: http
"#;
    let expected = yaml(
        r#"
apiVersion: v1
kind: Service
metadata:
  name: s
spec:
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - port: 443
  selector:
    app: z
    tier: b
"#,
    );
    assert_eq!(patched(original, patch), expected);
}

#[test]
fn delete_directive_at_the_top_removes_the_object() {
    let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n$patch: delete\n";
    assert_eq!(patched(DEPLOYMENT, patch), Value::Null);
}

#[test]
fn identity_is_kept_unless_the_options_allow_a_change() {
    let patch = "apiVersion: v9\nkind: StatefulSet\nmetadata: {name: renamed, namespace: other}\n";
    let target = yaml(DEPLOYMENT);
    let mut doc = parse(patch, "inline patch").unwrap();
    let kept = apply(&target, &doc, None).unwrap();
    assert_eq!(
        (
            &kept["apiVersion"],
            &kept["kind"],
            &kept["metadata"]["name"],
            kept["metadata"].get("namespace")
        ),
        (&json!("apps/v1"), &json!("Deployment"), &json!("app"), None)
    );
    doc.options = PatchOptions {
        allow_name_change: true,
        allow_kind_change: true,
    };
    let changed = apply(&target, &doc, None).unwrap();
    assert_eq!(
        (
            &changed["apiVersion"],
            &changed["kind"],
            &changed["metadata"]["name"],
            changed["metadata"].get("namespace")
        ),
        (&json!("apps/v1"), &json!("StatefulSet"), &json!("renamed"), None)
    );
}

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: p\n  labels: {a: \"1\"}\ndata: {k: v}\n";

#[test]
fn json6902_operations_as_kustomize_applies_them() {
    // `replace` of a missing key adds it (evanphx/json-patch v4).
    let result = patched(CONFIG_MAP, "- op: replace\n  path: /data/missing\n  value: x\n");
    assert_eq!(result["data"], json!({"k": "v", "missing": "x"}));
    let result = patched(
        CONFIG_MAP,
        r#"[{"op": "add", "path": "/metadata/labels/b", "value": "2"}, {"op": "move", "from": "/data/k", "path": "/data/k2"}]"#,
    );
    assert_eq!(result["data"], json!({"k2": "v"}));
    assert_eq!(result["metadata"]["labels"], json!({"a": "1", "b": "2"}));
}

#[test]
fn json6902_errors_name_the_operation_and_path() {
    let target = yaml(CONFIG_MAP);
    let cases = [
        (
            "- op: add\n  path: /data/k\n  value: ok\n- op: remove\n  path: /data/missing\n",
            1,
            "remove",
            "/data/missing",
        ),
        (
            "- op: test\n  path: /data/k\n  value: nope\n",
            0,
            "test",
            "/data/k",
        ),
        ("[{\"op\": \"bogus\", \"path\": \"/data\"}]", 0, "bogus", "/data"),
    ];
    for (text, index, op, path) in cases {
        let doc = parse(text, "inline patch").unwrap();
        let err = apply(&target, &doc, None).unwrap_err();
        assert!(
            matches!(&err, PatchError::Json6902 { index: i, op: o, path: p, .. } if *i == index && o == op && p == path),
            "{text}: {err}"
        );
        assert!(err.to_string().contains(path), "{err}");
    }
}

#[test]
fn parse_tells_the_formats_apart() {
    let sm = parse(
        "kind: Deployment\nmetadata: {name: app}\n---\nkind: Service\nmetadata: {name: s}\n",
        "p.yaml",
    )
    .unwrap();
    assert!(matches!(sm.kind, PatchKind::StrategicMerge(ref docs) if docs.len() == 2));
    let json = parse("[{\"op\": \"remove\", \"path\": \"/spec\"}]", "p.json").unwrap();
    assert_eq!(
        json.kind,
        PatchKind::Json6902(vec![json!({"op": "remove", "path": "/spec"})])
    );
    let yaml_ops = parse("- op: remove\n  path: /spec\n", "inline patch").unwrap();
    assert_eq!(yaml_ops.kind, json.kind);
}

#[test]
fn unparseable_patches_name_their_origin() {
    // Each of these fails in kustomize with "unable to parse SM or JSON patch".
    for text in [
        "",
        "not: [a patch",
        "- just a string",
        "spec: {replicas: 7}",
        "kind: Deployment\nspec: {replicas: 7}",
        "metadata: {name: app}\nspec: {replicas: 7}",
    ] {
        let err = parse(text, "overlays/prod/patch.yaml").unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("unable to parse SM or JSON patch from overlays/prod/patch.yaml"),
            "{text:?}: {message}"
        );
    }
}

const SELECTABLE: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
  annotations: {team: a}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: prod
  labels: {app: api, tier: back}
---
apiVersion: v1
kind: Service
metadata:
  name: web-svc
  labels: {app: web}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: web
"#;

#[test]
fn selectors_select_what_kustomize_selects() {
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(SELECTABLE)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .collect();
    // (target as YAML, kind/name of the objects kustomize patched)
    let cases = [
        ("{kind: Deployment}", "Deployment/web Deployment/api"),
        ("{name: web}", "Deployment/web Widget/web"),
        ("{name: 'web.*'}", "Deployment/web Service/web-svc Widget/web"),
        ("{name: eb}", ""),
        (
            "{namespace: default}",
            "Deployment/web Service/web-svc Widget/web",
        ),
        ("{namespace: prod}", "Deployment/api"),
        (
            "{namespace: '.*'}",
            "Deployment/web Deployment/api Service/web-svc ClusterRole/reader Widget/web",
        ),
        ("{namespace: _non_namespaceable_}", "ClusterRole/reader"),
        ("{group: apps}", "Deployment/web Deployment/api"),
        (
            "{version: v1}",
            "Deployment/web Deployment/api Service/web-svc ClusterRole/reader Widget/web",
        ),
        ("{kind: Deploy}", ""),
        (
            "{kind: 'Deployment|Service'}",
            "Deployment/web Deployment/api Service/web-svc",
        ),
        ("{labelSelector: app=web}", "Deployment/web Service/web-svc"),
        (
            "{labelSelector: app!=web}",
            "Deployment/api ClusterRole/reader Widget/web",
        ),
        (
            "{labelSelector: 'app in (web,api),tier'}",
            "Deployment/web Deployment/api",
        ),
        (
            "{labelSelector: tier notin (front)}",
            "Deployment/api Service/web-svc ClusterRole/reader Widget/web",
        ),
        (
            "{labelSelector: '!tier'}",
            "Service/web-svc ClusterRole/reader Widget/web",
        ),
        ("{labelSelector: app==api}", "Deployment/api"),
        ("{annotationSelector: team=a}", "Deployment/web"),
        ("{annotationSelector: team}", "Deployment/web"),
        (
            "{group: apps, kind: Deployment, name: web, labelSelector: tier=front}",
            "Deployment/web",
        ),
    ];
    for (target, expected) in cases {
        let selector: Selector = serde_yaml::from_str(target).unwrap();
        let selected: Vec<String> = objects
            .iter()
            .filter(|o| selects(&selector, o).unwrap())
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(selected.join(" "), expected, "target {target}");
    }
}

#[test]
fn selectors_match_the_original_name_and_namespace_too() {
    let object =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dev-app", "namespace": "dev"}});
    let selector = Selector {
        name: Some("app".into()),
        namespace: Some("default".into()),
        ..Default::default()
    };
    assert!(!selects(&selector, &object).unwrap());
    let original = OriginalId {
        name: "app",
        namespace: "",
    };
    assert!(selects_with_original(&selector, &object, Some(original)).unwrap());
}

#[test]
fn bad_selectors_name_the_field() {
    let object = yaml(CONFIG_MAP);
    let bad_regex = Selector {
        name: Some("([".into()),
        ..Default::default()
    };
    let err = selects(&bad_regex, &object).unwrap_err();
    assert!(
        matches!(&err, PatchError::Selector { field, .. } if field == "name"),
        "{err}"
    );
    let bad_labels = Selector {
        label_selector: Some("app in (web".into()),
        ..Default::default()
    };
    let err = selects(&bad_labels, &object).unwrap_err();
    assert!(
        matches!(&err, PatchError::Selector { field, .. } if field == "labelSelector"),
        "{err}"
    );
}

#[test]
fn single_key_lists_put_the_patch_elements_first_in_patch_order() {
    // (original env names, patch env names, kustomize's order; ' marks a patched element)
    let cases = [
        ("a b c", "x", "x' a b c"),
        ("a b c", "x y", "x' y' a b c"),
        ("a b c", "c x", "c' x' a b"),
        ("a b c", "b x a", "b' x' a' c"),
        ("a b c", "x b y", "x' b' y' a c"),
        ("a b c", "c b a", "c' b' a'"),
        ("a b c", "c a", "c' a' b"),
    ];
    let pod = |names: &str, value: &str| {
        let env: Vec<String> = names
            .split(' ')
            .map(|n| format!("{{name: {n}, value: {value}}}"))
            .collect();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    env: [{}]\n",
            env.join(", ")
        )
    };
    for (original, patch, expected) in cases {
        let result = patched(&pod(original, "d"), &pod(patch, "p"));
        let order: Vec<String> = result["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}{}",
                    e["name"].as_str().unwrap(),
                    if e["value"] == "p" { "'" } else { "" }
                )
            })
            .collect();
        assert_eq!(order.join(" "), expected, "[{original}] + [{patch}]");
    }
}

#[test]
fn a_patch_cannot_change_the_kind_of_a_node() {
    // kustomize: "wrong node kind: expected MappingNode but got ScalarNode" (and the others).
    let original = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  hostname: h\n  dnsConfig: {options: [{name: x}]}\n  tolerations: [{key: a}]\n";
    let cases = [
        (
            "dnsConfig: scalar",
            ".spec.dnsConfig",
            "MappingNode",
            "ScalarNode",
        ),
        (
            "hostname: {nested: map}",
            ".spec.hostname",
            "ScalarNode",
            "MappingNode",
        ),
        ("dnsConfig: [1]", ".spec.dnsConfig", "MappingNode", "SequenceNode"),
        (
            "tolerations: {a: 1}",
            ".spec.tolerations",
            "SequenceNode",
            "MappingNode",
        ),
    ];
    for (field, path, expected, got) in cases {
        let patch = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  {field}\n");
        let doc = parse(&patch, "inline patch").unwrap();
        let err = apply(&yaml(original), &doc, None).unwrap_err();
        assert_eq!(
            err,
            PatchError::WrongNodeKind {
                path: path.into(),
                expected,
                got
            },
            "{field}"
        );
        assert!(err.to_string().contains(path), "{err}");
    }
}

#[test]
fn a_replace_marker_in_a_new_keyed_list_is_copied_literally() {
    let original = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n";
    for list in [
        "[{$patch: replace}, {name: a}, {name: b}]",
        "[{$patch: replace}]",
        "[{name: a}, {$patch: replace}]",
    ] {
        let patch = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  initContainers: {list}\n  volumes: {list}\n"
        );
        let result = patched(original, &patch);
        assert_eq!(
            result["spec"]["initContainers"],
            json!([{"$patch": "replace"}]),
            "{list}"
        );
        assert_eq!(
            result["spec"]["volumes"],
            json!([{"$patch": "replace"}]),
            "{list}"
        );
        assert_eq!(result["spec"]["containers"], json!([{"name": "c"}]));
    }
}

#[test]
fn label_selectors_compare_integers() {
    let objects: Vec<Value> = [("a", Some("3")), ("b", Some("7")), ("c", Some("x")), ("d", None)]
        .iter()
        .map(|(name, tier)| {
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
            if let Some(tier) = tier {
                object["metadata"]["labels"] = json!({"tier": tier});
            }
            object
        })
        .collect();
    // Selected by kustomize v5.8.1 on the same objects.
    for (selector, expected) in [("tier>5", "b"), ("tier<5", "a"), ("tier>3", "b"), ("!tier", "d")] {
        let selector = Selector {
            label_selector: Some(selector.into()),
            ..Default::default()
        };
        let selected: Vec<&str> = objects
            .iter()
            .filter(|o| selects(&selector, o).unwrap())
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(selected.join(" "), expected);
    }
    let bad = Selector {
        label_selector: Some("tier>x".into()),
        ..Default::default()
    };
    assert!(matches!(
        selects(&bad, &objects[0]),
        Err(PatchError::Selector { .. })
    ));
}
