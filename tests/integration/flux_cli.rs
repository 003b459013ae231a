//! The real flux CLI against our controller (and the real source-controller): the commands a
//! Flux user runs on a Kustomization give the answers they give with Flux's own controller.

use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kustomize_controller::api::Kustomization;

use crate::support::config_map;
use crate::support::controller::events_about;
use crate::support::eventually;
use crate::support::flux::{GitOps, main_revision};
use test_support::{flux, flux_text};

const KUSTOMIZATION: &str = "resources: [objects.yaml]\n";

/// The revision as `flux get` shows it: the commit cut to 8 characters.
fn shown_revision(commit: &str) -> String {
    main_revision(&commit[..8])
}

/// The command's output; panics with it unless the command exited 0.
fn succeeded(what: &str, out: Output) -> String {
    let text = flux_text(&out);
    assert!(
        out.status.success(),
        "`flux {what}` failed ({}):\n{text}",
        out.status
    );
    text
}

/// The output line naming `name` in its first column.
fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{text}"))
}

/// Column `header` of the row for `name` in a `flux get` table; only the columns before
/// MESSAGE, which hold no spaces.
fn cell<'a>(text: &'a str, name: &str, header: &str) -> &'a str {
    let headers = text
        .lines()
        .find(|l| l.starts_with("NAME"))
        .unwrap_or_else(|| panic!("no header in:\n{text}"));
    let index = headers
        .split_whitespace()
        .position(|h| h == header)
        .unwrap_or_else(|| panic!("no {header} column in:\n{text}"));
    row(text, name).split_whitespace().nth(index).unwrap_or_default()
}

#[tokio::test]
async fn flux_get_reconcile_suspend_resume_tree_events_and_delete() {
    // source-controller polls rarely: only `--with-source` brings the second commit in.
    let g = GitOps::start("flux-cli", "10m").await;
    let first = g.repo.commit(&[
        ("kustomization.yaml", KUSTOMIZATION),
        ("objects.yaml", &config_map("a", "one")),
    ]);
    g.apply_kustomization("app", "./").await;
    g.wait_ready("app", "True", &main_revision(&first)).await;
    let ns = g.namespace().to_string();

    let text = succeeded("get ks", g.flux(&["get", "ks"]));
    assert_eq!(cell(&text, "app", "REVISION"), shown_revision(&first), "{text}");
    assert_eq!(cell(&text, "app", "READY"), "True", "{text}");
    assert_eq!(cell(&text, "app", "SUSPENDED"), "False", "{text}");

    let second = g.repo.commit(&[
        ("kustomization.yaml", KUSTOMIZATION),
        ("objects.yaml", &config_map("a", "two")),
    ]);
    let text = succeeded(
        "reconcile ks --with-source",
        g.flux(&["reconcile", "ks", "app", "--with-source"]),
    );
    assert!(
        text.contains(&main_revision(&second)),
        "new revision reported:\n{text}"
    );
    let ks = g.wait_ready("app", "True", &main_revision(&second)).await;
    assert_eq!(
        ks.status.unwrap().last_applied_revision,
        Some(main_revision(&second))
    );
    assert_eq!(g.config_map_value("a").await.as_deref(), Some("two"));

    succeeded("suspend ks", g.flux(&["suspend", "ks", "app"]));
    assert_eq!(suspended(&g).await, Some(true));
    let text = succeeded("get ks", g.flux(&["get", "ks"]));
    assert_eq!(cell(&text, "app", "SUSPENDED"), "True", "{text}");
    // resume waits for the reconcile it requests.
    let text = succeeded("resume ks", g.flux(&["resume", "ks", "app"]));
    assert_eq!(suspended(&g).await, Some(false));
    assert!(
        text.contains(&main_revision(&second)),
        "resume reports the applied revision:\n{text}"
    );

    let text = succeeded("tree ks", g.flux(&["tree", "ks", "app"]));
    assert!(
        text.contains(&format!("ConfigMap/{ns}/a")),
        "the inventory in `flux tree ks`:\n{text}"
    );

    let text = succeeded("events", g.flux(&["events", "--for", "Kustomization/app"]));
    let ours = events_about(&g.client, &ns, "app").await;
    assert!(!ours.is_empty(), "our controller recorded events");
    for (_, reason, note, _) in &ours {
        assert!(
            text.contains(reason.as_str()),
            "reason {reason} in `flux events`:\n{text}"
        );
        let first_line = note.lines().next().unwrap_or_default();
        assert!(
            text.contains(first_line),
            "event {first_line:?} in `flux events`:\n{text}"
        );
    }
    assert!(text.contains("Kustomization/app"), "{text}");

    let text = succeeded("get all", g.flux(&["get", "all"]));
    assert!(
        text.contains("gitrepository/repo"),
        "the source in `flux get all`:\n{text}"
    );
    assert_eq!(
        cell(&text, "kustomization/app", "REVISION"),
        shown_revision(&second),
        "{text}"
    );

    succeeded("delete ks --silent", g.flux(&["delete", "ks", "app", "--silent"]));
    let config_maps = Api::<ConfigMap>::namespaced(g.client.clone(), &ns);
    eventually(
        "ConfigMap a pruned on delete",
        std::time::Duration::from_secs(60),
        || async { config_maps.get_opt("a").await.unwrap().is_none().then_some(()) },
    )
    .await;
    let kustomizations = Api::<Kustomization>::namespaced(g.client.clone(), &ns);
    eventually(
        "Kustomization app gone",
        std::time::Duration::from_secs(60),
        || async {
            kustomizations
                .get_opt("app")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    g.delete().await;
}

async fn suspended(g: &GitOps) -> Option<bool> {
    let ks = Api::<Kustomization>::namespaced(g.client.clone(), g.namespace())
        .get("app")
        .await
        .unwrap();
    Some(ks.spec.suspend)
}

#[test]
fn flux_check_pre_passes_against_the_test_control_plane() {
    let text = succeeded("check --pre", flux(&["check", "--pre"]));
    assert!(text.contains("prerequisites checks passed"), "{text}");
}
