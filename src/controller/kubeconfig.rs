//! What a tenant's kubeconfig (`spec.kubeConfig.secretRef`) may ask of the controller.
//!
//! The kubeconfig is written by a tenant but loaded on the controller's host, so anything that
//! points at the host (file paths for tokens, certificates or keys, an auth-provider or exec
//! plugin that runs a command) would let the tenant borrow the controller's own credentials
//! or files. Only a self-contained kubeconfig is accepted: inline certificate data, a bearer
//! token or basic auth. Exec plugins and disabled TLS verification need the operator's
//! `--insecure-kubeconfig-exec` / `--insecure-kubeconfig-tls`.
//!
//! Errors name the offending field, never a value: the kubeconfig holds credentials and error
//! texts end up in status, logs and events.

use kube::config::{Cluster, Kubeconfig};

/// What the operator allows beyond a self-contained kubeconfig.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KubeconfigPolicy {
    /// `--insecure-kubeconfig-exec`
    pub allow_exec: bool,
    /// `--insecure-kubeconfig-tls`
    pub allow_insecure_tls: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The parser's own message is not kept: it may quote the offending value.
    #[error("is not a valid kubeconfig")]
    Unparsable,
    #[error("has no current-context")]
    NoCurrentContext,
    #[error("has no {0} named by its current-context")]
    Missing(&'static str),
    #[error("sets '{field}', which is not allowed: {why}")]
    Field { field: &'static str, why: &'static str },
}

const HOST_FILE: &str = "it reads a file on the controller's host; inline the data instead";
const RUNS_COMMAND: &str = "it runs a command on the controller's host";

/// The kubeconfig reduced to its current context, cluster and user, once every field the
/// controller would act on is one a tenant may set.
pub(crate) fn checked(bytes: &[u8], policy: KubeconfigPolicy) -> Result<Kubeconfig, Refusal> {
    let text = std::str::from_utf8(bytes).map_err(|_| Refusal::Unparsable)?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| Refusal::Unparsable)?;
    let current = kubeconfig
        .current_context
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or(Refusal::NoCurrentContext)?;
    let named_context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .cloned()
        .ok_or(Refusal::Missing("context"))?;
    let context = named_context.context.clone().ok_or(Refusal::Missing("context"))?;
    let named_cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .cloned()
        .ok_or(Refusal::Missing("cluster"))?;
    let cluster = named_cluster
        .cluster
        .as_ref()
        .ok_or(Refusal::Missing("cluster"))?;
    check_cluster(cluster, policy)?;
    let user = match context.user.as_deref() {
        Some(name) => Some(
            kubeconfig
                .auth_infos
                .iter()
                .find(|u| u.name == name)
                .cloned()
                .ok_or(Refusal::Missing("user"))?,
        ),
        None => None,
    };
    if let Some(info) = user.as_ref().and_then(|u| u.auth_info.as_ref()) {
        let refused = user_fields(info)
            .into_iter()
            .find(|(_, set, allowed)| *set && !allowed(policy));
        if let Some((field, _, _)) = refused {
            return Err(Refusal::Field {
                field,
                why: why_user_field(field),
            });
        }
    }
    Ok(Kubeconfig {
        clusters: vec![named_cluster],
        auth_infos: user.into_iter().collect(),
        contexts: vec![named_context],
        current_context: Some(current),
        ..Kubeconfig::default()
    })
}

fn check_cluster(cluster: &Cluster, policy: KubeconfigPolicy) -> Result<(), Refusal> {
    if cluster.certificate_authority.is_some() {
        return Err(Refusal::Field {
            field: "certificate-authority",
            why: HOST_FILE,
        });
    }
    if cluster.insecure_skip_tls_verify == Some(true) && !policy.allow_insecure_tls {
        return Err(Refusal::Field {
            field: "insecure-skip-tls-verify",
            why: "TLS verification can only be disabled with --insecure-kubeconfig-tls",
        });
    }
    Ok(())
}

type Allowed = fn(KubeconfigPolicy) -> bool;

/// Every credential field of a user: its kubeconfig name, whether it is set, and when a
/// tenant may set it. Inline data, tokens and basic auth are always allowed.
fn user_fields(info: &kube::config::AuthInfo) -> [(&'static str, bool, Allowed); 9] {
    let never: Allowed = |_| false;
    [
        ("tokenFile", info.token_file.is_some(), never),
        ("client-certificate", info.client_certificate.is_some(), never),
        ("client-key", info.client_key.is_some(), never),
        ("auth-provider", info.auth_provider.is_some(), never),
        ("exec", info.exec.is_some(), |p| p.allow_exec),
        ("as", info.impersonate.is_some(), never),
        ("as-uid", info.impersonate_uid.is_some(), never),
        ("as-groups", info.impersonate_groups.is_some(), never),
        ("as-user-extra", info.impersonate_user_extra.is_some(), never),
    ]
}

fn why_user_field(field: &str) -> &'static str {
    match field {
        "tokenFile" | "client-certificate" | "client-key" => HOST_FILE,
        "auth-provider" => RUNS_COMMAND,
        "exec" => {
            "exec credential plugins run a command on the controller's host and need --insecure-kubeconfig-exec"
        }
        _ => "impersonation is set by spec.serviceAccountName, not by the kubeconfig",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "tenant-secret-token";

    /// A kubeconfig whose cluster and user carry the given extra fields.
    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            r#"
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://remote:6443", certificate-authority-data: "Q0E=" {cluster}}}}}]
users: [{{name: u, user: {{token: "{TOKEN}" {user}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"#
        )
    }

    fn refused_field(cluster: &str, user: &str, policy: KubeconfigPolicy) -> Option<&'static str> {
        match checked(kubeconfig(cluster, user).as_bytes(), policy) {
            Ok(_) => None,
            Err(Refusal::Field { field, .. }) => Some(field),
            Err(other) => panic!("unexpected refusal {other}"),
        }
    }

    #[test]
    fn fields_that_reach_the_controllers_host_are_refused_by_name() {
        let strict = KubeconfigPolicy::default();
        let exec = KubeconfigPolicy {
            allow_exec: true,
            ..strict
        };
        let tls = KubeconfigPolicy {
            allow_insecure_tls: true,
            ..strict
        };
        let exec_plugin = ", exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}";
        let cases: [(&str, &str, KubeconfigPolicy, Option<&str>); 16] = [
            ("", "", strict, None),
            (
                ", tls-server-name: api",
                ", username: a, password: b",
                strict,
                None,
            ),
            (", proxy-url: \"http://proxy:3128\"", "", strict, None),
            (
                "",
                ", client-certificate-data: Q0U=, client-key-data: S0U=",
                strict,
                None,
            ),
            (
                "",
                ", tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                strict,
                Some("tokenFile"),
            ),
            (
                "",
                ", client-certificate: /etc/admin.crt",
                strict,
                Some("client-certificate"),
            ),
            ("", ", client-key: /etc/admin.key", strict, Some("client-key")),
            (
                ", certificate-authority: /etc/ca.crt",
                "",
                strict,
                Some("certificate-authority"),
            ),
            (
                "",
                ", auth-provider: {name: oidc, config: {cmd-path: /bin/sh}}",
                strict,
                Some("auth-provider"),
            ),
            ("", exec_plugin, strict, Some("exec")),
            ("", exec_plugin, exec, None),
            (
                ", insecure-skip-tls-verify: true",
                "",
                strict,
                Some("insecure-skip-tls-verify"),
            ),
            (", insecure-skip-tls-verify: true", "", tls, None),
            (", insecure-skip-tls-verify: false", "", strict, None),
            ("", ", as: admin", strict, Some("as")),
            ("", ", as-groups: [system:masters]", strict, Some("as-groups")),
        ];
        for (cluster, user, policy, expected) in cases {
            assert_eq!(
                refused_field(cluster, user, policy),
                expected,
                "cluster {cluster:?} user {user:?} {policy:?}"
            );
        }
    }

    #[test]
    fn only_the_current_context_is_kept() {
        let text = format!(
            "{}\n{}",
            kubeconfig("", ""),
            "---\nclusters: [{name: other, cluster: {server: \"https://other\", certificate-authority: /etc/ca.crt}}]"
        );
        let kept = checked(text.as_bytes(), KubeconfigPolicy::default()).unwrap();
        assert_eq!(kept.clusters.len(), 1);
        assert_eq!(kept.clusters[0].name, "c");
        assert_eq!(kept.auth_infos.len(), 1);
    }

    #[test]
    fn refusals_never_quote_the_kubeconfig() {
        let broken = kubeconfig(&format!(", insecure-skip-tls-verify: \"{TOKEN}\""), "");
        let cases = [
            (broken.as_str(), Refusal::Unparsable),
            ("apiVersion: v1\nkind: Config\n", Refusal::NoCurrentContext),
            ("current-context: x\ncontexts: []\n", Refusal::Missing("context")),
        ];
        for (text, expected) in cases {
            let refusal = checked(text.as_bytes(), KubeconfigPolicy::default()).unwrap_err();
            assert!(!refusal.to_string().contains(TOKEN), "{refusal}");
            assert_eq!(refusal, expected);
        }
        let refusal = checked(
            kubeconfig("", ", tokenFile: /var/run/token").as_bytes(),
            KubeconfigPolicy::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            !refusal.contains("/var/run/token") && !refusal.contains(TOKEN),
            "{refusal}"
        );
    }
}
