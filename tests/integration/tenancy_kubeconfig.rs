//! A tenant's kubeconfig (`spec.kubeConfig.secretRef`) cannot make the controller send its own
//! credentials, or the tenant's over unverified TLS, to a server the tenant names.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::controller::{Scenario, condition};
use crate::support::tls::RecordingServer;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const TENANT_TOKEN: &str = "tenant-own-token";
/// Stands for the controller's ServiceAccount token, a file on the controller's host.
const CONTROLLER_TOKEN: &str = "controller-own-token";

fn kubeconfig(port: u16, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\"{cluster}}}}}]\n\
         users: [{{name: u, user: {{{user}}}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
    )
}

async fn kubeconfig_secret(s: &Scenario, name: &str, value: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": {"value": value}
    }))
    .unwrap();
    Api::<Secret>::namespaced(s.client.clone(), s.namespace())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_tenant_kubeconfig_never_sends_the_controllers_credentials() {
    let s = Scenario::new("kc-tenancy-kc").await;
    let server = RecordingServer::start();
    let host = tempfile::tempdir().unwrap();
    let token_file = host.path().join("token");
    std::fs::write(&token_file, CONTROLLER_TOKEN).unwrap();
    let ca_data = serde_json::to_value(ByteString(server.ca_pem.clone().into_bytes())).unwrap();
    let ca = format!(", certificate-authority-data: {ca_data}");
    let exec = format!(
        "exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'cat {}']}}",
        token_file.display()
    );
    // (Kustomization and Secret name, kubeconfig, the field it is refused for)
    let cases = [
        (
            "allowed",
            kubeconfig(server.port, &ca, &format!("token: {TENANT_TOKEN}")),
            None,
        ),
        (
            "token-file",
            kubeconfig(server.port, &ca, &format!("tokenFile: {}", token_file.display())),
            Some("tokenFile"),
        ),
        (
            "skip-tls",
            kubeconfig(
                server.port,
                ", insecure-skip-tls-verify: true",
                &format!("token: {TENANT_TOKEN}-insecure"),
            ),
            Some("insecure-skip-tls-verify"),
        ),
        ("exec", kubeconfig(server.port, &ca, &exec), Some("exec")),
    ];
    s.publish_objects(
        "repo",
        REV1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\ndata:\n  value: \"1\"\n",
    )
    .await;
    let controller = s.start_controller(&[]);
    for (name, value, _) in &cases {
        kubeconfig_secret(&s, name, value).await;
        s.apply(name, json!({"kubeConfig": {"secretRef": {"name": name}}}))
            .await;
    }
    s.apply(
        "missing",
        json!({"kubeConfig": {"secretRef": {"name": "absent"}}}),
    )
    .await;
    for (name, _, _) in &cases {
        s.wait_ready(&controller, name, "False", "").await;
    }
    // A client that cannot be built is a failed reconcile, never Ready=Unknown.
    let missing = format!(
        "failed to build kube client: unable to read KubeConfig secret '{}/absent'",
        s.namespace()
    );
    let ks = s.wait_ready(&controller, "missing", "False", &missing).await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "ReconciliationFailed");

    let heads = server.heads();
    assert!(
        heads.iter().any(|h| h
            .to_lowercase()
            .contains(&format!("authorization: bearer {TENANT_TOKEN}\r\n"))),
        "the accepted kubeconfig reached the listener with its own token: {heads:?}"
    );
    for head in &heads {
        assert!(
            !head.contains(CONTROLLER_TOKEN),
            "the controller's token left the host: {head}"
        );
        let authorizations: Vec<&str> = head
            .lines()
            .filter(|l| l.to_lowercase().starts_with("authorization:"))
            .collect();
        assert_eq!(
            authorizations,
            [format!("authorization: Bearer {TENANT_TOKEN}").as_str()],
            "only the accepted kubeconfig's own token is sent: {head}"
        );
    }
    for (name, _, field) in &cases {
        let Some(field) = field else { continue };
        let ks = s.get(name).await.unwrap();
        let ready = condition(&ks, "Ready").unwrap();
        let expected = format!(
            "failed to build kube client: the kubeconfig in secret '{}/{name}' sets '{field}'",
            s.namespace()
        );
        assert!(ready.message.starts_with(&expected), "{name}: {}", ready.message);
        assert_eq!(ready.reason, "ReconciliationFailed", "{name}");
        assert!(
            !ready.message.contains(CONTROLLER_TOKEN)
                && !ready.message.contains(TENANT_TOKEN)
                && !ready.message.contains(&token_file.display().to_string()),
            "{name}: the message quotes the kubeconfig: {}",
            ready.message
        );
        assert_eq!(
            condition(&ks, "Stalled").map(|c| c.status).as_deref(),
            Some("True"),
            "{name}"
        );
    }
    s.delete().await;
}
