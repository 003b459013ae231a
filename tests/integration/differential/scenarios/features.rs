//! The spec's features one by one: decryption, health, force, the `ssa` annotations,
//! transformers, substitution and impersonation.

use serde_json::{Value, json};

use super::super::harness::Keys;
use super::{Action, Expect, Scenario, apply, config_map, deployment, files, step, tree};

fn secret(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "{ns}"}, "stringData": data})
}

fn plain_config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "{ns}"}, "data": data})
}

pub(super) fn scenarios(keys: &Keys) -> Vec<Scenario> {
    let mut all = sops(keys);
    all.extend(health());
    all.extend(apply_modes());
    all.extend(transformers());
    all.extend(substitution());
    all.extend(impersonation());
    all
}

fn sops(keys: &Keys) -> Vec<Scenario> {
    let encrypted = keys.encrypt(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  token: t0ken-from-sops\n",
    );
    let tree = files(&[
        ("kustomization.yaml", "resources: [secret.yaml]\n"),
        ("secret.yaml", &encrypted),
    ]);
    let decryption = json!({"decryption": {"provider": "sops", "secretRef": {"name": "sops-keys"}}});
    let mut retried = tree.clone();
    retried.push(("README.md".into(), "a change beside the manifests\n".into()));
    vec![
        Scenario {
            name: "sops-decrypts",
            files: tree.clone(),
            setup: vec![secret("sops-keys", json!({"identity.agekey": keys.identity}))],
            steps: vec![apply("app", decryption.clone())],
        },
        Scenario {
            name: "sops-wrong-key",
            files: tree.clone(),
            setup: vec![secret("sops-keys", json!({"identity.agekey": keys.stranger}))],
            steps: vec![apply("app", decryption.clone())],
        },
        Scenario {
            name: "sops-missing-key-secret",
            files: tree.clone(),
            setup: vec![],
            // A new revision failing the same way: Flux warns on every failed run.
            steps: vec![
                apply("app", decryption),
                step(Action::Commit(retried), vec![("app", Expect::Revision)]),
            ],
        },
        Scenario {
            name: "sops-not-configured",
            files: tree,
            setup: vec![],
            steps: vec![apply("app", json!({}))],
        },
    ]
}

fn health() -> Vec<Scenario> {
    let web = |behavior| tree(&[config_map("a", "one"), deployment("web", behavior)]);
    let check = json!({"healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "{ns}"}]});
    vec![
        Scenario {
            name: "health-checks-pass",
            files: web(None),
            setup: vec![],
            steps: vec![apply("app", check.clone())],
        },
        Scenario {
            name: "health-checks-missing-object",
            files: web(None),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"timeout": "5s", "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "typo", "namespace": "{ns}"}]}),
            )],
        },
        Scenario {
            name: "wait-pass",
            files: web(None),
            setup: vec![],
            steps: vec![apply("app", json!({"wait": true}))],
        },
        Scenario {
            name: "wait-fails",
            files: web(Some("fail")),
            setup: vec![],
            steps: vec![apply("app", json!({"wait": true, "timeout": "20s"}))],
        },
        Scenario {
            name: "wait-times-out",
            files: web(Some("never-ready")),
            setup: vec![],
            steps: vec![apply("app", json!({"wait": true, "timeout": "4s"}))],
        },
        Scenario {
            name: "health-check-exprs",
            files: tree(&[config_map("a", "one"), deployment("web", None)]),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"wait": true, "healthCheckExprs": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "current": "data.value == 'one'", "failed": "data.value == 'bad'"}]}),
            )],
        },
    ]
}

fn immutable(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: frozen\nimmutable: true\ndata:\n  value: \"{value}\"\n"
    )
}

fn ssa(name: &str, mode: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations: {{kustomize.toolkit.fluxcd.io/ssa: {mode}}}\ndata:\n  value: \"{value}\"\n"
    )
}

fn apply_modes() -> Vec<Scenario> {
    let mut all: Vec<Scenario> = [("immutable-without-force", false), ("immutable-with-force", true)]
        .into_iter()
        .map(|(name, force)| Scenario {
            name,
            files: tree(&[immutable("one")]),
            setup: vec![],
            steps: vec![
                apply("app", json!({"force": force})),
                step(
                    Action::Commit(tree(&[immutable("two")])),
                    vec![("app", Expect::Revision)],
                ),
            ],
        })
        .collect();
    // Objects another manager made or changed before (the suite, as kubectl would).
    let existing = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "{ns}"},
            "data": {"value": "theirs", "extra": "kept?"}})
    };
    all.push(Scenario {
        name: "ssa-annotations",
        files: tree(&[
            ssa("merge", "Merge", "one"),
            ssa("ignore", "Ignore", "one"),
            ssa("if-not-present", "IfNotPresent", "one"),
            ssa("override", "Override", "one"),
        ]),
        setup: vec![
            existing("merge"),
            existing("ignore"),
            existing("if-not-present"),
            existing("override"),
        ],
        steps: vec![
            apply("app", json!({})),
            step(
                Action::Commit(tree(&[
                    ssa("merge", "Merge", "two"),
                    ssa("ignore", "Ignore", "two"),
                    ssa("if-not-present", "IfNotPresent", "two"),
                    ssa("override", "Override", "two"),
                ])),
                vec![("app", Expect::Revision)],
            ),
        ],
    });
    all.push(Scenario {
        name: "drift-corrected",
        files: tree(&[config_map("a", "one")]),
        setup: vec![],
        steps: vec![
            apply("app", json!({})),
            step(
                Action::Objects(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a", "namespace": "{ns}", "labels": {"added": "by-hand"}}, "data": {"value": "changed"}})]),
                vec![],
            ),
            step(Action::Commit(tree(&[config_map("a", "one"), config_map("b", "one")])), vec![("app", Expect::Revision)]),
        ],
    });
    all
}

fn transformers() -> Vec<Scenario> {
    let web = tree(&[config_map("a", "one"), deployment("web", None)]);
    vec![
        Scenario {
            name: "target-namespace",
            files: tree(&[config_map("a", "one")]),
            setup: vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}-t"}})],
            steps: vec![apply("app", json!({"targetNamespace": "{ns}-t"}))],
        },
        Scenario {
            name: "patches",
            files: web.clone(),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"patches": [
                    {"patch": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  patched: \"yes\"\n"},
                    {"patch": "- op: replace\n  path: /spec/replicas\n  value: 2\n", "target": {"kind": "Deployment", "name": "web"}},
                ]}),
            )],
        },
        Scenario {
            name: "images",
            files: web.clone(),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"images": [{"name": "registry.invalid/app", "newName": "registry.invalid/other", "newTag": "2"}]}),
            )],
        },
        Scenario {
            name: "components",
            files: files(&[
                ("base/kustomization.yaml", "resources: [objects.yaml]\n"),
                ("base/objects.yaml", &config_map("a", "one")),
                (
                    "extra/kustomization.yaml",
                    "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [more.yaml]\n",
                ),
                ("extra/more.yaml", &config_map("from-component", "one")),
            ]),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"path": "./base", "components": ["../extra"]}),
            )],
        },
        Scenario {
            name: "common-metadata",
            files: web.clone(),
            setup: vec![],
            steps: vec![apply(
                "app",
                json!({"commonMetadata": {"labels": {"team": "a"}, "annotations": {"owner": "team-a"}}}),
            )],
        },
        Scenario {
            name: "name-prefix-suffix",
            files: web,
            setup: vec![],
            steps: vec![apply("app", json!({"namePrefix": "pre-", "nameSuffix": "-post"}))],
        },
    ]
}

fn substitution() -> Vec<Scenario> {
    let tree = tree(&[
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vars\ndata:\n  inline: \"${inline}\"\n  from_cm: \"${from_cm}\"\n  from_secret: \"${from_secret}\"\n  defaulted: \"${unset:=fallback}\"\n".into(),
    ]);
    let post_build = |optional: bool| {
        json!({"postBuild": {"substitute": {"inline": "in"}, "substituteFrom": [
            {"kind": "ConfigMap", "name": "vars-cm"},
            {"kind": "Secret", "name": "vars-secret", "optional": optional},
        ]}})
    };
    let cm = plain_config_map("vars-cm", json!({"from_cm": "cm"}));
    vec![
        Scenario {
            name: "substitute-from",
            files: tree.clone(),
            setup: vec![cm.clone(), secret("vars-secret", json!({"from_secret": "s3"}))],
            steps: vec![apply("app", post_build(false))],
        },
        Scenario {
            name: "substitute-from-optional-missing",
            files: tree.clone(),
            setup: vec![cm.clone()],
            steps: vec![apply("app", post_build(true))],
        },
        Scenario {
            name: "substitute-from-missing",
            files: tree,
            setup: vec![cm],
            steps: vec![apply("app", post_build(false))],
        },
    ]
}

fn impersonation() -> Vec<Scenario> {
    let account = |name: &str| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "{ns}"}});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployer", "namespace": "{ns}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "{ns}"}]});
    vec![
        Scenario {
            name: "impersonation-allowed",
            files: tree(&[config_map("a", "one")]),
            setup: vec![account("deployer"), binding],
            steps: vec![apply("app", json!({"serviceAccountName": "deployer"}))],
        },
        Scenario {
            name: "impersonation-denied",
            files: tree(&[config_map("a", "one")]),
            setup: vec![account("nobody")],
            steps: vec![apply("app", json!({"serviceAccountName": "nobody"}))],
        },
    ]
}
