//! SOPS decryption for `spec.decryption: {provider: sops}`, compatible with the `sops` CLI:
//! the data key unwrapped with age or OpenPGP, the values opened with AES-256-GCM.
//!
//! Two places decrypt, as in Flux: the files a `secretGenerator` reads, before the build
//! ([`sources`]), and every built object that carries `sops` metadata, after it. After the
//! build only the stored MAC is authenticated (it must open with the data key): a build
//! rewrites documents (names, labels, key order), so the MAC over their content no longer
//! holds there. Files read before the build are whole, and their MAC is checked as `sops`
//! checks it.

mod formats;
mod keys;
mod mask;
mod openpgp;
mod report;
pub(crate) mod secret;
pub(crate) mod sources;
mod tree;
pub(crate) mod workdir;

use serde_json::Value;
use thiserror::Error;

pub use formats::Format;
pub use keys::Keys;
pub(crate) use mask::{Masked, Refused};
use tree::Node;

/// The annotation that opts one object or file out of decryption.
const DECRYPT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/decrypt";

/// Why a document could not be decrypted. No variant carries a plaintext value.
#[derive(Debug, Error)]
pub enum SopsError {
    #[error("failed to import '{entry}' data from sops decryption Secret '{secret}': {reason}")]
    Import {
        entry: String,
        secret: String,
        reason: String,
    },
    #[error("failed to load encrypted {format} data: {reason}")]
    Load { format: &'static str, reason: String },
    #[error("failed to load encrypted data: {0}")]
    Metadata(String),
    #[error("cannot get sops data key: {0}")]
    DataKey(String),
    /// The data key is held only by a key service (KMS, Vault) this controller cannot call.
    #[error(
        "cannot get sops data key: the data key is held by {0}, a key service this controller does not support"
    )]
    UnsupportedService(String),
    /// As [`SopsError::UnsupportedService`], for a Kustomization that names the account Flux
    /// would authenticate the key service with (workload identity).
    #[error(
        "cannot get sops data key: the data key is held by {0}, a key service this controller does not support: \
         spec.decryption.serviceAccountName '{1}' would authenticate with it through workload identity, which is not implemented here"
    )]
    UnsupportedServiceAccount(String, String),
    #[error("error decrypting sops tree: {0}")]
    Value(String),
    #[error("failed to verify sops data integrity: {0}")]
    Mac(String),
    #[error("failed to emit decrypted {format} data: {reason}")]
    Emit { format: &'static str, reason: String },
}

impl SopsError {
    /// Retrying cannot help: the document needs a key service this controller lacks.
    pub(crate) fn is_unsupported(&self) -> bool {
        matches!(
            self,
            SopsError::UnsupportedService(_) | SopsError::UnsupportedServiceAccount(..)
        )
    }
}

/// Whether the object opted out with `kustomize.toolkit.fluxcd.io/decrypt: Disabled`.
pub(crate) fn is_disabled(object: &Value) -> bool {
    object["metadata"]["annotations"][DECRYPT_ANNOTATION]
        .as_str()
        .is_some_and(|v| v.eq_ignore_ascii_case("disabled"))
}

/// Flux's refusal of a Secret still encrypted at apply time (decryption not configured, or
/// the document was not decrypted).
pub(crate) fn refusal(objects: &[Value]) -> Option<String> {
    objects
        .iter()
        .find(|o| {
            o["kind"] == "Secret" && o["apiVersion"] == "v1" && o.get("sops").is_some() && !is_disabled(o)
        })
        .map(|o| {
            let (ns, name) = (
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            );
            let id = if ns.is_empty() {
                format!("Secret/{name}")
            } else {
                format!("Secret/{ns}/{name}")
            };
            format!(
                "{id} is SOPS encrypted, configuring decryption is required for this secret to be reconciled"
            )
        })
}

/// A decrypted object or file and the plaintext values it revealed (to be masked).
pub(crate) struct Decrypted<T> {
    pub(crate) value: T,
    pub(crate) secrets: Vec<String>,
}

/// Decrypts a document whose body and metadata are split; `check_mac` compares the MAC of
/// the plaintext with the stored one.
fn decrypt_document(
    body: &mut Node,
    metadata: &Node,
    keys: &Keys,
    check_mac: bool,
) -> Result<Vec<String>, SopsError> {
    let key = keys.data_key(metadata)?;
    let rules = keys::rules(metadata)?;
    let (mac, secrets) = tree::decrypt_tree(body, &key, &rules)?;
    let stored = keys::field(metadata, "mac").unwrap_or_default();
    let modified = keys::field(metadata, "lastmodified").unwrap_or_default();
    let stored = match tree::decrypt_value(&stored, &key, &modified) {
        Ok(Node::Str(mac)) => mac,
        _ => {
            return Err(SopsError::Mac(
                "the stored MAC does not open with the data key".into(),
            ));
        }
    };
    if check_mac && stored != mac {
        return Err(SopsError::Mac(
            "the MAC does not match the decrypted content".into(),
        ));
    }
    Ok(secrets)
}

/// Decrypts a whole file of `format` and writes it back in the same format.
pub(crate) fn decrypt_file(
    bytes: &[u8],
    format: Format,
    keys: &Keys,
) -> Result<Decrypted<Vec<u8>>, SopsError> {
    let (mut body, metadata) = formats::load(bytes, format)?;
    let secrets = decrypt_document(&mut body, &metadata, keys, true)?;
    Ok(Decrypted {
        value: formats::emit(body, format)?,
        secrets,
    })
}

/// Whether a built object is a SOPS document (a top-level `sops` with a `mac`).
pub(crate) fn is_encrypted(object: &Value) -> bool {
    object["sops"]["mac"].as_str().is_some_and(|m| !m.is_empty())
}

/// Decrypts a built object: the whole document when it carries `sops` metadata, else each
/// Secret `data` entry that is itself an encrypted file (formatted by its key's name).
/// `None` when there is nothing to decrypt.
pub(crate) fn decrypt_object(object: &Value, keys: &Keys) -> Result<Option<Decrypted<Value>>, SopsError> {
    if is_encrypted(object) {
        let yaml: serde_yaml::Value =
            serde_json::from_value(object.clone()).map_err(|e| SopsError::Load {
                format: "JSON",
                reason: e.to_string(),
            })?;
        let Node::Map(mut entries) = formats::from_yaml(yaml) else {
            unreachable!("an object is a map");
        };
        entries.retain(|(k, _)| k != "sops");
        let metadata = object
            .get("sops")
            .cloned()
            .map(|m| formats::from_yaml(serde_json::from_value(m).unwrap_or_default()))
            .unwrap_or(Node::Null);
        let mut body = Node::Map(entries);
        let secrets = decrypt_document(&mut body, &metadata, keys, false)?;
        let value = serde_json::to_value(formats::to_yaml(body)).map_err(|e| SopsError::Emit {
            format: "JSON",
            reason: e.to_string(),
        })?;
        return Ok(Some(Decrypted { value, secrets }));
    }
    if object["kind"] != "Secret" {
        return Ok(None);
    }
    let Some(data) = object["data"].as_object() else {
        return Ok(None);
    };
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = object.clone();
    let mut secrets = Vec::new();
    for (key, value) in data {
        let Some(bytes) = value.as_str().and_then(|v| b64.decode(v).ok()) else {
            continue;
        };
        let Some(input) = Format::detect(&bytes) else {
            continue;
        };
        let (mut body, metadata) = formats::load(&bytes, input).map_err(|e| in_field(key, e))?;
        secrets.extend(decrypt_document(&mut body, &metadata, keys, false).map_err(|e| in_field(key, e))?);
        let plain = formats::emit(body, Format::for_path(key)).map_err(|e| in_field(key, e))?;
        secrets.push(String::from_utf8_lossy(&plain).into_owned());
        out["data"][key] = Value::from(b64.encode(plain));
    }
    if secrets.is_empty() {
        return Ok(None);
    }
    Ok(Some(Decrypted { value: out, secrets }))
}

fn in_field(key: &str, error: SopsError) -> SopsError {
    match error {
        SopsError::Value(reason) => SopsError::Value(format!("Secret field '{key}': {reason}")),
        other => other,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod refusal_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_v1_secret_with_sops_metadata_is_refused() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}, "sops": {"mac": "x"}});
        assert_eq!(
            refusal(std::slice::from_ref(&secret)).unwrap(),
            "Secret/ns/s is SOPS encrypted, configuring decryption is required for this secret to be reconciled"
        );
        let mut disabled = secret.clone();
        disabled["metadata"]["annotations"] = json!({DECRYPT_ANNOTATION: "disabled"});
        assert_eq!(refusal(&[disabled]), None);
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "sops": {}});
        assert_eq!(refusal(&[config]), None);
    }
}
