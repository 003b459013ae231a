//! The GitOps loop with the real source-controller: commits on a Git server over HTTP become
//! source-controller artifacts, which our controller applies, prunes and refuses when broken.

use crate::support::config_maps;
use crate::support::flux::{GitOps, main_revision};

const KUSTOMIZATION: &str = "resources: [objects.yaml]\n";

#[tokio::test]
async fn commits_are_applied_pruned_and_a_broken_force_push_keeps_what_runs() {
    let g = GitOps::start("flux-gitops", "2s").await;
    let objects = config_maps(&[("a", "one"), ("b", "one")]);
    let first = g.repo.commit(&[
        ("deploy/kustomization.yaml", KUSTOMIZATION),
        ("deploy/objects.yaml", &objects),
    ]);
    g.apply_kustomization("app", "./deploy").await;

    let ks = g
        .wait_ready(
            "app",
            "True",
            &format!("Applied revision: {}", main_revision(&first)),
        )
        .await;
    let status = ks.status.unwrap();
    assert_eq!(status.last_applied_revision, Some(main_revision(&first)));
    assert_eq!(g.config_map_value("a").await.as_deref(), Some("one"));
    assert_eq!(g.config_map_value("b").await.as_deref(), Some("one"));

    // A new commit changes a and drops b: applied, b pruned.
    let objects = config_maps(&[("a", "two")]);
    let second = g.repo.commit(&[
        ("deploy/kustomization.yaml", KUSTOMIZATION),
        ("deploy/objects.yaml", &objects),
    ]);
    g.wait_ready(
        "app",
        "True",
        &format!("Applied revision: {}", main_revision(&second)),
    )
    .await;
    assert_eq!(g.config_map_value("a").await.as_deref(), Some("two"));
    assert_eq!(
        g.config_map_value("b").await,
        None,
        "b was removed from Git and is pruned"
    );

    // The commit rewritten with a broken file and force-pushed: Ready=False naming the file, the
    // running objects stay as the last good revision left them.
    let broken = g.repo.amend_and_force_push(&[
        ("deploy/kustomization.yaml", KUSTOMIZATION),
        (
            "deploy/objects.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
        ),
    ]);
    assert_ne!(broken, second);
    let ks = g.wait_ready("app", "False", "objects.yaml").await;
    let status = ks.status.unwrap();
    assert_eq!(status.last_applied_revision, Some(main_revision(&second)));
    assert_eq!(status.last_attempted_revision, Some(main_revision(&broken)));
    assert_eq!(
        g.config_map_value("a").await.as_deref(),
        Some("two"),
        "running objects are kept"
    );
    g.delete().await;
}
