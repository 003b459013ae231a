//! A Kustomization's life: first apply, new revisions and pruning, suspension, deletion,
//! dependencies, sources that are missing, builds that fail, objects that move.

use serde_json::json;

use super::{Action, Expect, Scenario, apply, config_map, deployment, files, step, tree};

pub(super) fn scenarios() -> Vec<Scenario> {
    let mut all = vec![
        Scenario {
            name: "first-apply",
            files: tree(&[
                config_map("settings", "one"),
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: s3cret\n".into(),
                "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n".into(),
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: app\nspec:\n  clusterIP: None\n  selector: {app: app}\n  ports:\n  - {name: http, port: 80}\n".into(),
                deployment("app", None),
            ]),
            setup: vec![],
            steps: vec![apply("app", json!({}))],
        },
        Scenario {
            name: "new-revision-prunes",
            files: tree(&[config_map("a", "one"), config_map("b", "one")]),
            setup: vec![],
            steps: vec![
                apply("app", json!({})),
                step(Action::Commit(tree(&[config_map("a", "two"), config_map("c", "two")])), vec![("app", Expect::Revision)]),
            ],
        },
        Scenario {
            name: "prune-off-keeps",
            files: tree(&[config_map("a", "one"), config_map("b", "one")]),
            setup: vec![],
            steps: vec![
                apply("app", json!({"prune": false})),
                step(Action::Commit(tree(&[config_map("a", "two")])), vec![("app", Expect::Revision)]),
            ],
        },
        Scenario {
            name: "prune-disabled-annotation",
            files: tree(&[
                config_map("a", "one"),
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}\n".into(),
            ]),
            setup: vec![],
            steps: vec![
                apply("app", json!({})),
                step(Action::Commit(tree(&[config_map("a", "two")])), vec![("app", Expect::Revision)]),
            ],
        },
        Scenario {
            name: "suspend-resume",
            files: tree(&[config_map("a", "one")]),
            setup: vec![],
            steps: vec![
                apply("app", json!({})),
                step(Action::Apply(vec![("app", json!({"suspend": true}))]), vec![("app", Expect::Suspended)]),
                step(Action::Commit(tree(&[config_map("a", "two")])), vec![("app", Expect::Quiet)]),
                apply("app", json!({"suspend": false})),
            ],
        },
        Scenario {
            name: "missing-source",
            files: tree(&[config_map("a", "one")]),
            setup: vec![],
            steps: vec![step(
                Action::Apply(vec![("app", json!({"sourceRef": {"kind": "GitRepository", "name": "nowhere"}}))]),
                vec![("app", Expect::Done)],
            )],
        },
        Scenario {
            name: "missing-path",
            files: tree(&[config_map("a", "one")]),
            setup: vec![],
            steps: vec![apply("app", json!({"path": "./not-there"}))],
        },
        Scenario {
            name: "escaping-path",
            files: tree(&[config_map("a", "one")]),
            setup: vec![],
            steps: vec![apply("app", json!({"path": "../../.."}))],
        },
        Scenario {
            name: "build-bad-yaml",
            files: files(&[
                ("kustomization.yaml", "resources: [objects.yaml]\n"),
                ("objects.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n"),
            ]),
            setup: vec![],
            steps: vec![apply("app", json!({}))],
        },
        Scenario {
            name: "build-missing-resource",
            files: files(&[("kustomization.yaml", "resources: [objects.yaml, missing.yaml]\n"), ("objects.yaml", &config_map("a", "one"))]),
            setup: vec![],
            steps: vec![apply("app", json!({}))],
        },
        Scenario {
            name: "broken-revision-keeps-objects",
            files: tree(&[config_map("a", "one")]),
            setup: vec![],
            steps: vec![
                apply("app", json!({})),
                step(
                    Action::Commit(files(&[("kustomization.yaml", "resources: [gone.yaml]\n")])),
                    vec![("app", Expect::Revision)],
                ),
            ],
        },
        Scenario {
            name: "moved-object",
            files: files(&[
                ("a/kustomization.yaml", "resources: [objects.yaml]\n"),
                ("a/objects.yaml", &[config_map("stays", "a"), config_map("moves", "a")].join("---\n")),
                ("b/kustomization.yaml", "resources: [objects.yaml]\n"),
                ("b/objects.yaml", &config_map("other", "b")),
            ]),
            setup: vec![],
            // a is suspended while b takes the object over, so that a's prune comes after.
            steps: vec![
                step(
                    Action::Apply(vec![("a", json!({"path": "./a"})), ("b", json!({"path": "./b"}))]),
                    vec![("a", Expect::Revision), ("b", Expect::Revision)],
                ),
                step(Action::Apply(vec![("a", json!({"path": "./a", "suspend": true}))]), vec![("a", Expect::Suspended)]),
                step(
                    Action::Commit(files(&[
                        ("a/kustomization.yaml", "resources: [objects.yaml]\n"),
                        ("a/objects.yaml", &config_map("stays", "a")),
                        ("b/kustomization.yaml", "resources: [objects.yaml]\n"),
                        ("b/objects.yaml", &[config_map("other", "b"), config_map("moves", "b")].join("---\n")),
                    ])),
                    vec![("b", Expect::Revision)],
                ),
                step(Action::Apply(vec![("a", json!({"path": "./a", "suspend": false}))]), vec![("a", Expect::Revision)]),
            ],
        },
    ];
    all.extend(deletion());
    all.extend(dependencies());
    all
}

/// Deleting a Kustomization under each `deletionPolicy`.
fn deletion() -> Vec<Scenario> {
    [
        ("deleted-kustomization", json!({})),
        (
            "deletion-policy-delete",
            json!({"prune": false, "deletionPolicy": "Delete"}),
        ),
        ("deletion-policy-orphan", json!({"deletionPolicy": "Orphan"})),
        (
            "deletion-policy-mirror-prune",
            json!({"prune": false, "deletionPolicy": "MirrorPrune"}),
        ),
        (
            "deletion-policy-wait",
            json!({"deletionPolicy": "WaitForTermination"}),
        ),
    ]
    .into_iter()
    .map(|(name, spec)| Scenario {
        name,
        files: tree(&[config_map("a", "one"), deployment("web", None)]),
        setup: vec![],
        steps: vec![
            apply("app", spec),
            step(Action::Delete("app"), vec![("app", Expect::Gone)]),
        ],
    })
    .collect()
}

fn dependencies() -> Vec<Scenario> {
    let two = files(&[
        ("dep/kustomization.yaml", "resources: [objects.yaml]\n"),
        ("dep/objects.yaml", &config_map("dep", "one")),
        ("app/kustomization.yaml", "resources: [objects.yaml]\n"),
        ("app/objects.yaml", &config_map("app", "one")),
    ]);
    vec![
        Scenario {
            name: "depends-on-ready",
            files: two.clone(),
            setup: vec![],
            steps: vec![
                apply("dep", json!({"path": "./dep"})),
                apply("app", json!({"path": "./app", "dependsOn": [{"name": "dep"}]})),
            ],
        },
        Scenario {
            name: "depends-on-not-ready",
            files: two.clone(),
            setup: vec![],
            steps: vec![
                apply("dep", json!({"path": "./nothing-here"})),
                step(
                    Action::Apply(vec![(
                        "app",
                        json!({"path": "./app", "dependsOn": [{"name": "dep"}]}),
                    )]),
                    vec![("app", Expect::Done)],
                ),
            ],
        },
        Scenario {
            name: "depends-on-ready-expr",
            files: two.clone(),
            setup: vec![],
            steps: vec![
                apply("dep", json!({"path": "./dep"})),
                apply(
                    "app",
                    json!({"path": "./app", "dependsOn": [{"name": "dep",
                        "readyExpr": "dep.metadata.generation == dep.status.observedGeneration && dep.status.lastAppliedRevision != ''"}]}),
                ),
            ],
        },
        Scenario {
            name: "depends-on-ready-expr-false",
            files: two,
            setup: vec![],
            steps: vec![
                apply("dep", json!({"path": "./dep"})),
                step(
                    Action::Apply(vec![(
                        "app",
                        json!({"path": "./app", "dependsOn": [{"name": "dep", "readyExpr": "dep.metadata.name == 'other'"}]}),
                    )]),
                    vec![("app", Expect::Done)],
                ),
            ],
        },
    ]
}
