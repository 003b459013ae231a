//! SOPS decryption against the real control plane, with fixtures encrypted at test time by
//! the real `sops` CLI (built by e2e/sops/build.sh) for age and OpenPGP keys made here.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::controller::Scenario;

/// The directory of the real sops and age-keygen.
fn sops_dir() -> PathBuf {
    let dir = std::env::var("E2E_SOPS_BIN")
        .expect("E2E_SOPS_BIN is not set: `make test` exports it from e2e/sops/build.sh (the real sops CLI)");
    PathBuf::from(dir)
}

/// Keys made for one test: an age identity and an OpenPGP key in a private GnuPG home.
struct TestKeys {
    dir: tempfile::TempDir,
    age_identity: String,
    age_recipient: String,
    pgp_fingerprint: String,
    pgp_secret: String,
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn age_key(dir: &Path, name: &str) -> (String, String) {
    let file = dir.join(name);
    run(Command::new(sops_dir().join("age-keygen")).arg("-o").arg(&file));
    let identity = std::fs::read_to_string(&file).unwrap();
    let recipient = identity
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .unwrap()
        .to_string();
    (identity, recipient)
}

impl TestKeys {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (age_identity, age_recipient) = age_key(dir.path(), "age.txt");
        let gnupg = dir.path().join("gnupg");
        std::fs::create_dir(&gnupg).unwrap();
        std::fs::set_permissions(&gnupg, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let gpg = || {
            let mut c = Command::new("gpg");
            c.env("GNUPGHOME", &gnupg)
                .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""]);
            c
        };
        run(gpg().args([
            "--quick-gen-key",
            "sops test <sops@example.test>",
            "default",
            "default",
            "never",
        ]));
        let listing = run(gpg().args(["--with-colons", "--list-secret-keys"]));
        let pgp_fingerprint = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:::::::::"))
            .map(|f| f.trim_end_matches(':').to_string())
            .unwrap();
        let pgp_secret = run(gpg().args(["--armor", "--export-secret-keys", &pgp_fingerprint]));
        Self {
            dir,
            age_identity,
            age_recipient,
            pgp_fingerprint,
            pgp_secret,
        }
    }

    /// `plain` (a file named `name`) encrypted by the real sops with `args`.
    fn encrypt(&self, name: &str, plain: &str, args: &[&str]) -> String {
        self.encrypt_configured(name, plain, "creation_rules: [{}]\n", args)
    }

    /// [`TestKeys::encrypt`] with a `.sops.yaml` of `config` (some settings have no flag).
    fn encrypt_configured(&self, name: &str, plain: &str, config: &str, args: &[&str]) -> String {
        let file = self.dir.path().join(name);
        std::fs::write(&file, plain).unwrap();
        let config_file = self.dir.path().join(".sops.yaml");
        std::fs::write(&config_file, config).unwrap();
        run(Command::new(sops_dir().join("sops"))
            .env("GNUPGHOME", self.dir.path().join("gnupg"))
            .env_remove("SOPS_AGE_KEY_FILE")
            .arg("--config")
            .arg(&config_file)
            .arg("encrypt")
            .args(args)
            .arg(&file))
    }

    fn age(&self, name: &str, plain: &str, extra: &[&str]) -> String {
        let mut args = vec!["--age", &self.age_recipient];
        args.extend_from_slice(extra);
        self.encrypt(name, plain, &args)
    }

    fn pgp(&self, name: &str, plain: &str, extra: &[&str]) -> String {
        let mut args = vec!["--pgp", &self.pgp_fingerprint];
        args.extend_from_slice(extra);
        self.encrypt(name, plain, &args)
    }
}

const DATA_ONLY: &[&str] = &["--encrypted-regex", "^(data|stringData)$"];

fn secret_yaml(name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\nstringData:\n  {key}: {value}\n"
    )
}

async fn create_key_secret(s: &Scenario, name: &str, data: serde_json::Value) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(s.client.clone(), s.namespace())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn secret_data(s: &Scenario, name: &str) -> std::collections::BTreeMap<String, String> {
    let secret = Api::<Secret>::namespaced(s.client.clone(), s.namespace())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

fn decryption(secret: &str) -> serde_json::Value {
    json!({"decryption": {"provider": "sops", "secretRef": {"name": secret}}})
}

#[tokio::test]
async fn sops_decrypts_every_format_with_age_and_openpgp() {
    let keys = TestKeys::new();
    let s = Scenario::new("sops-formats").await;
    let by_comment = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: by-comment\nstringData:\n  # sops:enc\n  token: t0ken-by-comment\n  visible: plain\n";
    let json_config = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "json-config"}, "data": {"value": "from-json-pgp"}}"#;
    let mac_only = format!(
        "creation_rules:\n- age: {}\n  unencrypted_regex: '^(apiVersion|kind|metadata|type)$'\n  mac_only_encrypted: true\n",
        keys.age_recipient
    );
    let by_comment_rule = format!(
        "creation_rules:\n- age: {}\n  encrypted_comment_regex: 'sops:enc'\n",
        keys.age_recipient
    );
    let files = [
        ("kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [age.yaml, pgp.yaml, suffix.yaml, only-encrypted.yaml, comment.yaml, config.json]\ngeneratorOptions: {disableNameSuffixHash: true}\nsecretGenerator:\n- name: generated\n  files: [cert.yaml, conf.json, app.ini, key.bin]\n  envs: [app.env]\n".to_string()),
        ("age.yaml", keys.age("age.yaml", &secret_yaml("age", "password", "age-pa55"), DATA_ONLY)),
        ("pgp.yaml", keys.pgp("pgp.yaml", &secret_yaml("pgp", "password", "pgp-pa55"), DATA_ONLY)),
        ("suffix.yaml", keys.age("suffix.yaml", &secret_yaml("suffix", "password", "suffix-pa55"), &["--encrypted-suffix", "Data"])),
        ("only-encrypted.yaml", keys.encrypt_configured("only-encrypted.yaml", &secret_yaml("only-encrypted", "password", "mac-only-pa55"), &mac_only, &[])),
        ("comment.yaml", keys.encrypt_configured("comment.yaml", by_comment, &by_comment_rule, &[])),
        ("config.json", keys.pgp("config.json", json_config, &["--encrypted-regex", "^data$"])),
        ("cert.yaml", keys.age("cert.yaml", "cert: yaml-secret\n", &[])),
        ("conf.json", keys.age("conf.json", r#"{"conf": "json-secret"}"#, &[])),
        ("app.ini", keys.age("app.ini", "[server]\nini_key = ini-secret\n", &[])),
        ("key.bin", keys.age("key.bin", "binary-secret\u{1}\u{2}", &[])),
        ("app.env", keys.pgp("app.env", "ENV_KEY=env-secret\n", &[])),
    ];
    let published: Vec<(&'static str, &str)> = files.iter().map(|(n, c)| (*n, c.as_str())).collect();
    s.publish("repo", "main@sha1:f1", &published).await;
    create_key_secret(
        &s,
        "sops-keys",
        json!({"identity.agekey": keys.age_identity, "pgp.asc": keys.pgp_secret}),
    )
    .await;
    let controller = s.start_controller(&[]);
    s.apply("app", decryption("sops-keys")).await;
    s.wait_applied(&controller, "app", "main@sha1:f1").await;

    assert_eq!(secret_data(&s, "age").await["password"], "age-pa55");
    assert_eq!(secret_data(&s, "pgp").await["password"], "pgp-pa55");
    assert_eq!(secret_data(&s, "suffix").await["password"], "suffix-pa55");
    assert_eq!(
        secret_data(&s, "only-encrypted").await["password"],
        "mac-only-pa55"
    );
    let comment = secret_data(&s, "by-comment").await;
    assert_eq!(
        (comment["token"].as_str(), comment["visible"].as_str()),
        ("t0ken-by-comment", "plain")
    );
    let config = Api::<ConfigMap>::namespaced(s.client.clone(), s.namespace())
        .get("json-config")
        .await
        .unwrap();
    assert_eq!(config.data.unwrap()["value"], "from-json-pgp");
    let generated = secret_data(&s, "generated").await;
    assert!(generated["cert.yaml"].contains("yaml-secret"), "{generated:?}");
    assert!(generated["conf.json"].contains("json-secret"), "{generated:?}");
    assert!(
        generated["app.ini"].contains("ini_key = ini-secret"),
        "{generated:?}"
    );
    assert_eq!(generated["key.bin"], "binary-secret\u{1}\u{2}");
    assert_eq!(generated["ENV_KEY"], "env-secret");
    s.delete().await;
}

#[tokio::test]
async fn sops_failures_name_the_cause_and_change_nothing() {
    let keys = TestKeys::new();
    let s = Scenario::new("sops-failures").await;
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [secret.yaml, config.yaml]\ngeneratorOptions: {disableNameSuffixHash: true}\nsecretGenerator:\n- name: generated\n  envs: [app.env]\n";
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\ndata:\n  value: v1\n";
    let good = keys.age(
        "secret.yaml",
        &secret_yaml("app", "password", "first-pa55"),
        DATA_ONLY,
    );
    let env = keys.age(
        "app.env",
        "ENV_KEY=env-first\nPLAIN_unencrypted=x\n",
        &["--unencrypted-suffix", "_unencrypted"],
    );
    s.publish(
        "repo",
        "main@sha1:r1",
        &[
            ("kustomization.yaml", kustomization),
            ("secret.yaml", &good),
            ("config.yaml", config),
            ("app.env", &env),
        ],
    )
    .await;
    create_key_secret(&s, "sops-keys", json!({"identity.agekey": keys.age_identity})).await;
    let controller = s.start_controller(&[]);
    s.apply("app", decryption("sops-keys")).await;
    s.wait_applied(&controller, "app", "main@sha1:r1").await;
    assert_eq!(secret_data(&s, "app").await["password"], "first-pa55");

    // Each broken revision fails with its cause; the running objects stay as they were.
    let (_, other_recipient) = age_key(keys.dir.path(), "other.txt");
    let wrong_key = keys.encrypt(
        "secret.yaml",
        &secret_yaml("app", "password", "second-pa55"),
        &[
            "--age",
            &other_recipient,
            "--encrypted-regex",
            "^(data|stringData)$",
        ],
    );
    // sops' report: the key the file names, and that it failed.
    let wrong_key_message = format!(
        "cannot get sops data key: Failed to get the data key required to decrypt the SOPS \
         file.\n\nGroup 0: FAILED\n  {other_recipient}: FAILED\n    - | failed to create reader"
    );
    let tamper = |text: &str, marker: &str| {
        let at = text.find(marker).unwrap() + marker.len();
        let flipped = if &text[at..at + 1] == "A" { "B" } else { "A" };
        format!("{}{flipped}{}", &text[..at], &text[at + 1..])
    };
    let tampered_value = tamper(&good, "password: ENC[AES256_GCM,data:");
    let tampered_mac = tamper(&good, "mac: ENC[AES256_GCM,data:");
    let edited_env = env.replace("PLAIN_unencrypted=x", "PLAIN_unencrypted=y");
    let cases: [(&str, &str, &str, &str); 4] = [
        ("main@sha1:wrong-key", &wrong_key, &env, &wrong_key_message),
        (
            "main@sha1:tampered",
            &tampered_value,
            &env,
            "message authentication failed",
        ),
        (
            "main@sha1:bad-mac",
            &tampered_mac,
            &env,
            "failed to verify sops data integrity: the stored MAC does not open",
        ),
        (
            "main@sha1:edited-env",
            &good,
            &edited_env,
            "error decrypting sources: app.env: failed to verify sops data integrity: the MAC does not match",
        ),
    ];
    for (revision, secret, env, message) in cases {
        s.publish(
            "repo",
            revision,
            &[
                ("kustomization.yaml", kustomization),
                ("secret.yaml", secret),
                ("config.yaml", config),
                ("app.env", env),
            ],
        )
        .await;
        let ks = s.wait_ready(&controller, "app", "False", message).await;
        let ready = crate::support::controller::condition(&ks, "Ready").unwrap();
        assert_eq!(ready.reason, "BuildFailed", "{revision}: {}", ready.message);
        assert_eq!(
            secret_data(&s, "app").await["password"],
            "first-pa55",
            "{revision}"
        );
        assert_eq!(
            secret_data(&s, "generated").await["ENV_KEY"],
            "env-first",
            "{revision}"
        );
    }

    // A missing key Secret, then no decryption at all: the good revision is refused too.
    s.publish(
        "repo",
        "main@sha1:r2",
        &[
            ("kustomization.yaml", kustomization),
            ("secret.yaml", &good),
            ("config.yaml", config),
            ("app.env", &env),
        ],
    )
    .await;
    s.apply("app", decryption("missing-keys")).await;
    let ks = s
        .wait_ready(&controller, "app", "False", "secrets \"missing-keys\" not found")
        .await;
    assert_eq!(
        crate::support::controller::condition(&ks, "Ready")
            .unwrap()
            .reason,
        "BuildFailed"
    );
    let no_generator = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [secret.yaml, config.yaml]\n";
    s.publish(
        "repo",
        "main@sha1:r3",
        &[
            ("kustomization.yaml", no_generator),
            ("secret.yaml", &good),
            ("config.yaml", config),
        ],
    )
    .await;
    s.apply("app", json!({"decryption": null})).await;
    let expected = format!(
        "Secret/{}/app is SOPS encrypted, configuring decryption is required for this secret to be reconciled",
        s.namespace()
    );
    let ks = s.wait_ready(&controller, "app", "False", &expected).await;
    assert_eq!(
        crate::support::controller::condition(&ks, "Ready")
            .unwrap()
            .reason,
        "ReconciliationFailed"
    );
    assert_eq!(secret_data(&s, "app").await["password"], "first-pa55");
    assert_eq!(secret_data(&s, "generated").await["ENV_KEY"], "env-first");
    let kept = Api::<ConfigMap>::namespaced(s.client.clone(), s.namespace())
        .get_opt("kept")
        .await
        .unwrap();
    assert!(kept.is_some(), "nothing is pruned after a failure");
    s.delete().await;
}

#[tokio::test]
async fn sops_values_rejected_by_the_api_stay_masked() {
    let keys = TestKeys::new();
    let s = Scenario::new("sops-mask").await;
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  type: Hidden-Type-Value-7\n  ports:\n  - port: 80\n";
    let encrypted = keys.age("service.yaml", service, &["--encrypted-regex", "^type$"]);
    let files = [
        (
            "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [service.yaml]\n",
        ),
        ("service.yaml", encrypted.as_str()),
    ];
    s.publish("repo", "main@sha1:m1", &files).await;
    create_key_secret(&s, "sops-keys", json!({"identity.agekey": keys.age_identity})).await;
    let controller = s.start_controller(&[]);
    s.apply("app", decryption("sops-keys")).await;
    let ks = s.wait_ready(&controller, "app", "False", "***").await;
    let message = crate::support::controller::condition(&ks, "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains("Service/") && message.contains("Unsupported value"),
        "{message}"
    );
    assert!(!message.contains("Hidden-Type-Value-7"), "{message}");
    // events are sent after the status write, so they may arrive a moment later
    let events = crate::support::eventually(
        "an event about the failure",
        std::time::Duration::from_secs(30),
        || async {
            let events = s.events("app").await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    for (_, _, note, _) in &events {
        assert!(!note.contains("Hidden-Type-Value-7"), "{note}");
    }
    assert!(!controller.logs().contains("Hidden-Type-Value-7"));
    let live = Api::<Service>::namespaced(s.client.clone(), s.namespace())
        .get_opt("web")
        .await
        .unwrap();
    assert!(live.is_none());
    s.delete().await;
}

#[tokio::test]
async fn sops_age_secret_decrypts_without_a_secret_ref() {
    let keys = TestKeys::new();
    let s = Scenario::new("sops-global").await;
    let encrypted = keys.age(
        "secret.yaml",
        &secret_yaml("app", "password", "global-pa55"),
        DATA_ONLY,
    );
    let files = [
        (
            "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [secret.yaml]\n",
        ),
        ("secret.yaml", encrypted.as_str()),
    ];
    s.publish("repo", "main@sha1:g1", &files).await;
    // The controller's runtime namespace is the test's namespace.
    create_key_secret(&s, "global-age", json!({"global.agekey": keys.age_identity})).await;
    let controller = s.start_controller(&["--sops-age-secret=global-age"]);
    s.apply("app", json!({"decryption": {"provider": "sops"}})).await;
    s.wait_applied(&controller, "app", "main@sha1:g1").await;
    assert_eq!(secret_data(&s, "app").await["password"], "global-pa55");
    s.delete().await;
}

/// How far a controller's peak resident memory may rise while it refuses the bombs below.
const MAX_BOMB_RSS_GROWTH_KB: u64 = 64 * 1024;

/// `mib` MiB of zeros compressed by the real gpg (zlib, as GnuPG compresses what it encrypts)
/// and encrypted to the test's own key: what a tenant can put where a data key belongs.
fn gpg_bomb(keys: &TestKeys, mib: u32) -> String {
    run(Command::new("sh")
        .env("GNUPGHOME", keys.dir.path().join("gnupg"))
        .arg("-c")
        .arg(format!(
            "head -c {mib}M /dev/zero | gpg --batch --trust-model always --compress-algo zlib -z 9 --armor --encrypt -r {}",
            keys.pgp_fingerprint
        )))
}

/// The kernel's high-water mark of `pid`'s resident memory (`VmHWM`), in KiB.
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the controller (pid {pid}) is gone: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

#[tokio::test]
async fn sops_openpgp_compression_bombs_are_refused_in_little_memory_naming_the_file() {
    // Before: the data key's unwrap inflated and read whole the literal data a tenant had
    // encrypted to its own key; a 6 MB Secret took the controller to 3.2 GB on every retry.
    let keys = TestKeys::new();
    let s = Scenario::new("sops-bomb").await;
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ngeneratorOptions: {disableNameSuffixHash: true}\nsecretGenerator:\n- name: generated\n  envs: [app.env]\n";
    let env = keys.pgp("app.env", "ENV_KEY=env-first\n", &[]);
    s.publish(
        "repo",
        "main@sha1:b1",
        &[("kustomization.yaml", kustomization), ("app.env", &env)],
    )
    .await;
    create_key_secret(&s, "sops-keys", json!({"pgp.asc": keys.pgp_secret})).await;
    let controller = s.start_controller(&[]);
    s.apply("app", decryption("sops-keys")).await;
    s.wait_applied(&controller, "app", "main@sha1:b1").await;
    let before = peak_rss_kb(controller.pid());

    // The data key's entry in the dotenv file, its newlines escaped.
    let enc_entry = "sops_pgp__list_0__map_enc=";
    let with_data_key = |enc: &str| -> String {
        env.lines()
            .map(|line| match line.starts_with(enc_entry) {
                true => format!("{enc_entry}{}\n", enc.replace('\n', "\\n")),
                false => format!("{line}\n"),
            })
            .collect()
    };
    // 24 MiB inflate from under the 64 KiB a wrapped key may take; 512 MiB from 0.9 MB.
    let cases = [
        (
            "main@sha1:inflating",
            24,
            "compressed data inflates to more than 4096 bytes",
        ),
        ("main@sha1:large", 512, "the wrapped data key takes "),
    ];
    for (revision, mib, reason) in cases {
        let bombed = with_data_key(&gpg_bomb(&keys, mib));
        s.publish(
            "repo",
            revision,
            &[("kustomization.yaml", kustomization), ("app.env", &bombed)],
        )
        .await;
        let expected = format!(
            "app.env: cannot get sops data key: OpenPGP key {}: {reason}",
            keys.pgp_fingerprint
        );
        s.wait_ready(&controller, "app", "False", &expected).await;
        assert_eq!(secret_data(&s, "generated").await["ENV_KEY"], "env-first");
    }
    let after = peak_rss_kb(controller.pid());
    eprintln!("controller peak RSS: {before} KB before the bombs, {after} KB after");
    assert!(
        after - before < MAX_BOMB_RSS_GROWTH_KB,
        "peak RSS rose from {before} KB to {after} KB (bound: {MAX_BOMB_RSS_GROWTH_KB} KB more)"
    );
    s.delete().await;
}

#[tokio::test]
async fn sops_a_decryption_service_account_must_exist_as_in_flux() {
    // Flux (v1.10) reads spec.decryption.serviceAccountName before building and fails the
    // build when it cannot; it is not silently ignored.
    let s = Scenario::new("sops-sa").await;
    let n = s.namespace().to_string();
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  value: v1\n";
    s.publish_objects("repo", "main@sha1:r1", config).await;
    let controller = s.start_controller(&[]);
    s.apply(
        "app",
        json!({"decryption": {"provider": "sops", "serviceAccountName": "kms-reader"}}),
    )
    .await;
    let expected = format!(
        "failed to get decryption service account '{n}/kms-reader': serviceaccounts \"kms-reader\" not found"
    );
    let ks = s.wait_ready(&controller, "app", "False", &expected).await;
    let ready = crate::support::controller::condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "BuildFailed", "{ready:?}");
    assert_eq!(s.config_map_value("plain").await, None, "nothing applied");

    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kms-reader"}});
    Api::<ServiceAccount>::namespaced(s.client.clone(), &n)
        .create(&PostParams::default(), &serde_json::from_value(account).unwrap())
        .await
        .unwrap();
    s.apply(
        "app",
        json!({"decryption": {"provider": "sops", "serviceAccountName": "kms-reader"}, "retryInterval": "2s"}),
    )
    .await;
    s.wait_applied(&controller, "app", "main@sha1:r1").await;
    assert_eq!(s.config_map_value("plain").await.as_deref(), Some("v1"));
    s.delete().await;
}
