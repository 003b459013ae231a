//! Decryption of documents sealed here with the age crate (the integration tests use the
//! real sops): the Secret-entry path, the opt-out, key services, MAC checks.

use std::collections::BTreeMap;

use age::secrecy::ExposeSecret;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use super::tree::tests::seal;
use super::*;

const MODIFIED: &str = "2026-01-02T03:04:05Z";

struct Fixture {
    keys: Keys,
    data_key: [u8; 32],
    age: Value,
}

fn fixture() -> Fixture {
    let identity = age::x25519::Identity::generate();
    let data_key: [u8; 32] = rand::random();
    let enc = age::encrypt_and_armor(&identity.to_public(), &data_key).unwrap();
    let secret = BTreeMap::from([(
        "id.agekey".to_string(),
        identity.to_string().expose_secret().as_bytes().to_vec(),
    )]);
    Fixture {
        keys: Keys::from_secret("ns/keys", &secret, None).unwrap(),
        data_key,
        age: json!([{"recipient": identity.to_public().to_string(), "enc": enc}]),
    }
}

impl Fixture {
    /// Metadata with `mac` sealed over `plain_values` (the leaves in document order).
    fn metadata(&self, plain_values: &str, extra: Value) -> Value {
        let mac = hex::encode_upper(Sha512::digest(plain_values.as_bytes()));
        let mut metadata = json!({
            "age": self.age, "lastmodified": MODIFIED,
            "mac": seal(&mac, "str", &self.data_key, MODIFIED), "version": "3.13.3",
        });
        metadata
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        metadata
    }
}

#[test]
fn a_secret_entry_that_is_an_encrypted_file_is_decrypted_in_its_format() {
    let f = fixture();
    let env = format!(
        "TOKEN={}\nsops_age__list_0__map_enc={}\nsops_age__list_0__map_recipient=r\nsops_lastmodified={MODIFIED}\nsops_mac={}\n",
        seal("t0ken", "str", &f.data_key, "TOKEN:"),
        f.age[0]["enc"].as_str().unwrap().replace('\n', "\\n"),
        seal(
            &hex::encode_upper(Sha512::digest(b"t0ken")),
            "str",
            &f.data_key,
            MODIFIED
        ),
    );
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"app.env": STANDARD.encode(&env), "plain": STANDARD.encode("as is")}});
    let decrypted = decrypt_object(&secret, &f.keys).unwrap().unwrap();
    let value = |key: &str| {
        String::from_utf8(
            STANDARD
                .decode(decrypted.value["data"][key].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(value("app.env"), "TOKEN=t0ken\n");
    assert_eq!(value("plain"), "as is");
    assert!(decrypted.secrets.contains(&"t0ken".to_string()));
}

#[test]
fn a_document_held_only_by_a_key_service_is_refused_naming_it() {
    let f = fixture();
    let mut metadata = f.metadata("", json!({}));
    metadata.as_object_mut().unwrap().remove("age");
    metadata["hc_vault"] = json!([{"vault_address": "http://vault:8200", "enc": "vault:v1:x"}]);
    let object =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "sops": metadata});
    let error = decrypt_object(&object, &f.keys).err().expect("fails");
    assert!(error.is_unsupported());
    assert!(error.to_string().contains("HashiCorp Vault"), "{error}");
    // A serviceAccountName set for the key service is named, not silently ignored.
    let keys = fixture().keys.with_service_account("kms-reader".into());
    let error = decrypt_object(&object, &keys).err().expect("fails");
    assert!(error.is_unsupported());
    assert!(
        error
            .to_string()
            .contains("HashiCorp Vault, a key service this controller does not support: spec.decryption.serviceAccountName 'kms-reader'"),
        "{error}"
    );
}

#[test]
fn a_file_whose_content_was_edited_fails_the_mac() {
    let f = fixture();
    let metadata = f.metadata("plainsecret", json!({"encrypted_regex": "^password$"}));
    let doc = |name: &str| {
        json!({"name": name, "password": seal("secret", "str", &f.data_key, "password:"), "sops": metadata})
            .to_string()
    };
    let plain = decrypt_file(doc("plain").as_bytes(), Format::Json, &f.keys).unwrap();
    let text = String::from_utf8(plain.value).unwrap();
    assert!(text.contains("\"password\": \"secret\""), "{text}");
    let error = decrypt_file(doc("edited").as_bytes(), Format::Json, &f.keys)
        .err()
        .expect("fails");
    assert!(matches!(error, SopsError::Mac(_)), "{error}");
}

#[test]
fn without_the_key_nothing_is_decrypted() {
    let f = fixture();
    let object = json!({"kind": "Secret", "stringData": {"a": seal("v", "str", &f.data_key, "stringData:a:")},
        "sops": f.metadata("", json!({}))});
    let error = decrypt_object(&object, &Keys::default()).err().expect("fails");
    assert!(
        error.to_string().starts_with(
            "cannot get sops data key: Failed to get the data key required to decrypt the SOPS file."
        ),
        "{error}"
    );
}
