//! The keys a Kustomization decrypts with, as Flux reads them from its decryption Secret, and
//! the document's data key unwrapped with them (age identities or OpenPGP secret keys).

use std::collections::BTreeMap;
use std::io::Read;
use std::str::FromStr;

use pgp::composed::{Deserializable, SignedSecretKey};

use super::SopsError;
use super::openpgp;
use super::report::{KeyFailure, report};
use super::tree::{Node, Rules};

/// Secret entries that name a key service this controller cannot reach.
const SERVICE_ENTRIES: &[(&str, &str)] = &[
    ("sops.vault-token", "HashiCorp Vault"),
    ("sops.aws-kms", "AWS KMS"),
    ("sops.azure-kv", "Azure Key Vault"),
    ("sops.gcp-kms", "GCP KMS"),
];

/// The metadata lists that wrap the data key for a key service, and the service's name.
const SERVICE_LISTS: &[(&str, &str)] = &[
    ("hc_vault", "HashiCorp Vault"),
    ("kms", "AWS KMS"),
    ("azure_kv", "Azure Key Vault"),
    ("gcp_kms", "GCP KMS"),
    ("hckms", "HuaweiCloud KMS"),
];

/// What one Kustomization may decrypt with.
#[derive(Default)]
pub struct Keys {
    age: Vec<age::x25519::Identity>,
    pgp: Vec<SignedSecretKey>,
    /// `spec.decryption.serviceAccountName`, which Flux authenticates key services with.
    service_account: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys {{ age: {}, pgp: {} }}", self.age.len(), self.pgp.len())
    }
}

impl Keys {
    /// The keys, for a Kustomization whose `spec.decryption.serviceAccountName` is `account`.
    pub fn with_service_account(self, account: String) -> Self {
        Self {
            service_account: Some(account),
            ..self
        }
    }

    /// The keys in a decryption Secret's data: `*.agekey` (age identities, any number per
    /// entry), `*.asc` (armored OpenPGP secret keys). `env_age` is the controller's
    /// `SOPS_AGE_KEY` fallback, used when the Secret holds no age identity.
    pub fn from_secret(
        secret: &str,
        data: &BTreeMap<String, Vec<u8>>,
        env_age: Option<&str>,
    ) -> Result<Keys, SopsError> {
        let mut keys = Keys::default();
        let import_error = |name: &str, reason: String| SopsError::Import {
            entry: name.to_string(),
            secret: secret.to_string(),
            reason,
        };
        for (name, value) in data {
            if name.ends_with(".agekey") {
                let text = String::from_utf8_lossy(value);
                keys.age
                    .extend(parse_age(&text).map_err(|reason| import_error(name, reason))?);
            } else if name.ends_with(".asc") {
                keys.pgp
                    .extend(parse_pgp(value).map_err(|reason| import_error(name, reason))?);
            } else if let Some((_, service)) = SERVICE_ENTRIES.iter().find(|(entry, _)| entry == name) {
                tracing::debug!(entry = %name, "decryption Secret names {service}, which is not supported");
            }
        }
        if keys.age.is_empty()
            && let Some(text) = env_age
        {
            keys.age
                .extend(parse_age(text).map_err(|reason| import_error("SOPS_AGE_KEY", reason))?);
        }
        Ok(keys)
    }

    /// The 32-byte data key of a document with `metadata` (its `sops` map). When no key
    /// unwraps it, the error is sops' report of each key tried and why it failed.
    pub(crate) fn data_key(&self, metadata: &Node) -> Result<[u8; 32], SopsError> {
        let groups = key_groups(metadata)?;
        let mut failed = Vec::new();
        let mut services = Vec::new();
        for group in &groups {
            // sops tries age keys first, then OpenPGP ones.
            for entry in list(group, "age") {
                let enc = field(entry, "enc").unwrap_or_default();
                match self.unwrap_age(&enc) {
                    Ok(key) => return Ok(key),
                    Err(reason) => failed.push(KeyFailure {
                        name: field(entry, "recipient").unwrap_or_default(),
                        reason,
                    }),
                }
            }
            for entry in list(group, "pgp") {
                let enc = field(entry, "enc").unwrap_or_default();
                let fingerprint = field(entry, "fp").unwrap_or_default();
                let unwrapped = openpgp::unwrap(&enc, &self.pgp)
                    .map_err(|reason| SopsError::DataKey(format!("OpenPGP key {fingerprint}: {reason}")))?;
                match unwrapped {
                    Some(key) => return Ok(key),
                    None => failed.push(KeyFailure {
                        name: fingerprint,
                        reason: "could not decrypt data key with PGP key: decryption failed: No secret key"
                            .into(),
                    }),
                }
            }
            for (list_name, service) in SERVICE_LISTS {
                if !list(group, list_name).is_empty() {
                    services.push(*service);
                }
            }
        }
        if !services.is_empty() {
            services.dedup();
            let services = services.join(", ");
            // Named, so that a user who set it knows it was read and why it cannot help.
            if let Some(account) = &self.service_account {
                return Err(SopsError::UnsupportedServiceAccount(services, account.clone()));
            }
            return Err(SopsError::UnsupportedService(services));
        }
        if failed.is_empty() {
            return Err(SopsError::DataKey("the document names no age or pgp key".into()));
        }
        let threshold = field(metadata, "shamir_threshold")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        Err(SopsError::DataKey(report(&[failed], threshold)))
    }

    /// The data key wrapped for an age recipient, or why none of the identities opens it (in
    /// the words of sops and Go's age, which users search for).
    fn unwrap_age(&self, enc: &str) -> Result<[u8; 32], String> {
        const OPENING: &str = "failed to create reader for decrypting sops data key with age";
        if self.age.is_empty() {
            return Err("failed to load age identities: the decryption Secret holds none".into());
        }
        let reader = age::armor::ArmoredReader::new(enc.as_bytes());
        let decryptor = age::Decryptor::new(reader).map_err(|e| format!("{OPENING}: {e}"))?;
        let identities = self.age.iter().map(|i| i as &dyn age::Identity);
        let mut plain = Vec::new();
        match decryptor.decrypt(identities) {
            Ok(mut reader) => reader
                .read_to_end(&mut plain)
                .map_err(|e| format!("failed to copy age decrypted data into bytes.Buffer: {e}"))?,
            // One failure per identity tried; Go's age names the cause only when there is one.
            Err(age::DecryptError::NoMatchingKeys) if self.age.len() == 1 => {
                return Err(format!(
                    "{OPENING}: identity did not match any of the recipients: incorrect identity for recipient block"
                ));
            }
            Err(age::DecryptError::NoMatchingKeys) => {
                return Err(format!("{OPENING}: no identity matched any of the recipients"));
            }
            Err(e) => return Err(format!("{OPENING}: {e}")),
        };
        plain
            .try_into()
            .map_err(|plain: Vec<u8>| format!("the age-wrapped data key has {} bytes, not 32", plain.len()))
    }
}

/// age identities, one `AGE-SECRET-KEY-1...` a line; `#` lines are comments.
fn parse_age(text: &str) -> Result<Vec<age::x25519::Identity>, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| age::x25519::Identity::from_str(line).map_err(|e| format!("invalid age identity: {e}")))
        .collect()
}

/// Armored OpenPGP secret keys.
fn parse_pgp(bytes: &[u8]) -> Result<Vec<SignedSecretKey>, String> {
    let (keys, _) = SignedSecretKey::from_armor_many(bytes).map_err(|e| e.to_string())?;
    keys.map(|key| key.map_err(|e| e.to_string())).collect()
}

/// The key groups: `key_groups` when present (several only with Shamir sharing), else the
/// top-level lists as one group.
fn key_groups(metadata: &Node) -> Result<Vec<&Node>, SopsError> {
    let groups = list(metadata, "key_groups");
    if groups.len() > 1 {
        return Err(SopsError::DataKey(
            "Shamir secret sharing over several key groups is not supported".into(),
        ));
    }
    Ok(if groups.is_empty() { vec![metadata] } else { groups })
}

pub(crate) fn get<'a>(map: &'a Node, key: &str) -> Option<&'a Node> {
    match map {
        Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        _ => None,
    }
}

fn list<'a>(map: &'a Node, key: &str) -> Vec<&'a Node> {
    match get(map, key) {
        Some(Node::List(items)) => items.iter().collect(),
        _ => Vec::new(),
    }
}

/// A scalar metadata field as text (the flat formats store every field as a string).
pub(crate) fn field(map: &Node, key: &str) -> Option<String> {
    match get(map, key)? {
        Node::Str(s) => Some(s.clone()),
        Node::Bool(b) => Some(b.to_string()),
        Node::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// The encryption rules a document's metadata records.
pub(crate) fn rules(metadata: &Node) -> Result<Rules, SopsError> {
    let text = |key: &str| field(metadata, key).filter(|s| !s.is_empty());
    let regex = |key: &str| {
        text(key)
            .map(|re| regex::Regex::new(&re).map_err(|e| SopsError::Metadata(format!("invalid {key}: {e}"))))
            .transpose()
    };
    Ok(Rules {
        unencrypted_suffix: text("unencrypted_suffix"),
        encrypted_suffix: text("encrypted_suffix"),
        unencrypted_regex: regex("unencrypted_regex")?,
        encrypted_regex: regex("encrypted_regex")?,
        by_comment: text("encrypted_comment_regex").is_some() || text("unencrypted_comment_regex").is_some(),
        mac_only_encrypted: text("mac_only_encrypted").is_some_and(|v| v.eq_ignore_ascii_case("true")),
    })
}
