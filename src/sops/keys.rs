//! The keys a Kustomization decrypts with, as Flux reads them from its decryption Secret, and
//! the document's data key unwrapped with them (age identities or OpenPGP secret keys).

use std::collections::BTreeMap;
use std::io::Read;
use std::str::FromStr;

use pgp::composed::{Deserializable, SignedSecretKey};

use super::SopsError;
use super::openpgp;
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

    /// The 32-byte data key of a document with `metadata` (its `sops` map).
    pub(crate) fn data_key(&self, metadata: &Node) -> Result<[u8; 32], SopsError> {
        let groups = key_groups(metadata)?;
        let mut tried = Vec::new();
        let mut services = Vec::new();
        for group in &groups {
            for entry in list(group, "age") {
                let enc = field(entry, "enc").unwrap_or_default();
                tried.push(format!("age {}", field(entry, "recipient").unwrap_or_default()));
                if let Some(key) = self.unwrap_age(&enc) {
                    return Ok(key);
                }
            }
            for entry in list(group, "pgp") {
                let enc = field(entry, "enc").unwrap_or_default();
                let fingerprint = field(entry, "fp").unwrap_or_default();
                tried.push(format!("pgp {fingerprint}"));
                let unwrapped = openpgp::unwrap(&enc, &self.pgp)
                    .map_err(|reason| SopsError::DataKey(format!("OpenPGP key {fingerprint}: {reason}")))?;
                if let Some(key) = unwrapped {
                    return Ok(key);
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
        Err(SopsError::DataKey(if tried.is_empty() {
            "the document names no age or pgp key".into()
        } else {
            format!(
                "no key in the decryption Secret unwraps it (tried {})",
                tried.join(", ")
            )
        }))
    }

    fn unwrap_age(&self, enc: &str) -> Option<[u8; 32]> {
        if self.age.is_empty() {
            return None;
        }
        let reader = age::armor::ArmoredReader::new(enc.as_bytes());
        let decryptor = age::Decryptor::new(reader).ok()?;
        let identities = self.age.iter().map(|i| i as &dyn age::Identity);
        let mut plain = Vec::new();
        decryptor.decrypt(identities).ok()?.read_to_end(&mut plain).ok()?;
        plain.try_into().ok()
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
