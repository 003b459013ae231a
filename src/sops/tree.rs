//! A SOPS document as an ordered tree, and its decryption: each encrypted leaf is
//! `ENC[AES256_GCM,data:..,iv:..,tag:..,type:..]`, sealed with the 32-byte data key, a 32-byte
//! nonce and the leaf's path (`a:b:c:`) as associated data. The MAC is SHA-512 over the
//! plaintext leaves in document order (only the encrypted ones with `mac_only_encrypted`),
//! stored as an encrypted upper-case hex string whose associated data is `lastmodified`.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use regex::Regex;
use sha2::{Digest, Sha512};

use super::SopsError;

/// One value of a document; maps keep their order, which the MAC depends on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    Map(Vec<(String, Node)>),
    List(Vec<Node>),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
}

/// The rules that say which leaves the author's `sops` call encrypted, from the metadata.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    pub(crate) unencrypted_suffix: Option<String>,
    pub(crate) encrypted_suffix: Option<String>,
    pub(crate) unencrypted_regex: Option<Regex>,
    pub(crate) encrypted_regex: Option<Regex>,
    /// With a comment regex the decision rode on comments, which a kustomize build drops:
    /// then a leaf counts as encrypted exactly when it has the encrypted form.
    pub(crate) by_comment: bool,
    pub(crate) mac_only_encrypted: bool,
}

/// Written first into the MAC of a `mac_only_encrypted` document, so its MAC never equals
/// the MAC of the same document without that setting.
const MAC_ONLY_ENCRYPTED_PREFIX: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b, 0x0b,
    0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

impl Rules {
    /// Whether the leaf at `path` was encrypted; the later rules override the earlier ones.
    fn encrypted(&self, path: &[String], leaf: &Node) -> bool {
        if self.by_comment {
            return matches!(leaf, Node::Str(s) if s.starts_with("ENC[AES256_GCM,"));
        }
        let mut encrypted = true;
        if let Some(suffix) = &self.unencrypted_suffix
            && path.iter().any(|p| p.ends_with(suffix.as_str()))
        {
            encrypted = false;
        }
        if let Some(suffix) = &self.encrypted_suffix {
            encrypted = path.iter().any(|p| p.ends_with(suffix.as_str()));
        }
        if let Some(re) = &self.unencrypted_regex
            && path.iter().any(|p| re.is_match(p))
        {
            encrypted = false;
        }
        if let Some(re) = &self.encrypted_regex {
            encrypted = path.iter().any(|p| re.is_match(p));
        }
        encrypted
    }
}

/// Decrypts every encrypted leaf of `node` in place and returns the MAC of the plaintext
/// (upper-case hex) and the plaintext strings that were encrypted (to be masked).
pub(crate) fn decrypt_tree(
    node: &mut Node,
    key: &[u8; 32],
    rules: &Rules,
) -> Result<(String, Vec<String>), SopsError> {
    let mut hasher = Sha512::new();
    if rules.mac_only_encrypted {
        hasher.update(MAC_ONLY_ENCRYPTED_PREFIX);
    }
    let mut secrets = Vec::new();
    walk(node, &mut Vec::new(), key, rules, &mut hasher, &mut secrets)?;
    Ok((hex::encode_upper(hasher.finalize()), secrets))
}

fn walk(
    node: &mut Node,
    path: &mut Vec<String>,
    key: &[u8; 32],
    rules: &Rules,
    hasher: &mut Sha512,
    secrets: &mut Vec<String>,
) -> Result<(), SopsError> {
    match node {
        Node::Map(entries) => {
            for (name, value) in entries {
                path.push(name.clone());
                walk(value, path, key, rules, hasher, secrets)?;
                path.pop();
            }
        }
        // List items share their list's path.
        Node::List(items) => {
            for item in items {
                walk(item, path, key, rules, hasher, secrets)?;
            }
        }
        Node::Null => {}
        leaf => {
            let encrypted = rules.encrypted(path, leaf);
            if encrypted {
                let Node::Str(text) = &*leaf else {
                    return Err(SopsError::Value(format!(
                        "expected an encrypted value as string at '{}'",
                        path.join(":")
                    )));
                };
                let aad = format!("{}:", path.join(":"));
                *leaf = decrypt_value(text, key, &aad)?;
                if let Node::Str(plain) = &*leaf {
                    secrets.push(plain.clone());
                }
            }
            if !rules.mac_only_encrypted || encrypted {
                hasher.update(mac_bytes(leaf));
            }
        }
    }
    Ok(())
}

/// A leaf as the MAC sees it: Go's shortest float form without exponent, `True`/`False`.
fn mac_bytes(leaf: &Node) -> Vec<u8> {
    match leaf {
        Node::Str(s) => s.as_bytes().to_vec(),
        Node::Int(i) => i.to_string().into_bytes(),
        Node::Float(f) => f.to_string().into_bytes(),
        Node::Bool(true) => b"True".to_vec(),
        Node::Bool(false) => b"False".to_vec(),
        Node::Map(_) | Node::List(_) | Node::Null => Vec::new(),
    }
}

/// The parts of one `ENC[...]` value.
struct Sealed {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    kind: String,
}

fn parse_sealed(text: &str) -> Option<Sealed> {
    let inner = text.strip_prefix("ENC[AES256_GCM,")?.strip_suffix(']')?;
    let mut fields = inner.split(',');
    let mut take = |name: &str| fields.next()?.strip_prefix(name).map(str::to_string);
    let (data, iv, tag, kind) = (take("data:")?, take("iv:")?, take("tag:")?, take("type:")?);
    Some(Sealed {
        data: STANDARD.decode(data).ok()?,
        iv: STANDARD.decode(iv).ok()?,
        tag: STANDARD.decode(tag).ok()?,
        kind,
    })
}

/// Opens one sealed value; `aad` binds it to its place in the document.
pub(crate) fn decrypt_value(text: &str, key: &[u8; 32], aad: &str) -> Result<Node, SopsError> {
    if text.is_empty() {
        return Ok(Node::Str(String::new()));
    }
    // The value itself stays out of the message: it may be a plaintext secret.
    let sealed = parse_sealed(text)
        .ok_or_else(|| SopsError::Value("Input string <redacted> does not match sops' data format".into()))?;
    if sealed.iv.len() != 32 {
        return Err(SopsError::Value(format!(
            "unexpected nonce length {}",
            sealed.iv.len()
        )));
    }
    let cipher = AesGcm::<Aes256, U32>::new(key.into());
    let mut sealed_data = sealed.data;
    sealed_data.extend_from_slice(&sealed.tag);
    let plain = cipher
        .decrypt(
            Nonce::<U32>::from_slice(&sealed.iv),
            Payload {
                msg: &sealed_data,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| {
            SopsError::Value(format!(
                "could not decrypt the value at '{aad}' with AES_GCM: message authentication failed"
            ))
        })?;
    let text = || String::from_utf8_lossy(&plain).into_owned();
    let bad = |kind: &str| SopsError::Value(format!("decrypted value at '{aad}' is not a valid {kind}"));
    Ok(match sealed.kind.as_str() {
        "str" | "bytes" | "time" => Node::Str(text()),
        "int" => Node::Int(text().parse().map_err(|_| bad("int"))?),
        "float" => Node::Float(text().parse().map_err(|_| bad("float"))?),
        "bool" => Node::Bool(match text().as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            _ => return Err(bad("bool")),
        }),
        "comment" => Node::Null,
        other => return Err(SopsError::Value(format!("unknown datatype '{other}'"))),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Seals `plain` as sops does (random nonce), for tests that need ciphertext of their own.
    pub(crate) fn seal(plain: &str, kind: &str, key: &[u8; 32], aad: &str) -> String {
        let iv: [u8; 32] = rand::random();
        let cipher = AesGcm::<Aes256, U32>::new(key.into());
        let mut out = cipher
            .encrypt(
                Nonce::<U32>::from_slice(&iv),
                Payload {
                    msg: plain.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .unwrap();
        let tag = out.split_off(out.len() - 16);
        format!(
            "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]",
            STANDARD.encode(out),
            STANDARD.encode(iv),
            STANDARD.encode(tag)
        )
    }

    #[test]
    fn values_open_only_at_their_own_path() {
        let key = [7u8; 32];
        let sealed = seal("42", "int", &key, "spec:replicas:");
        assert_eq!(
            decrypt_value(&sealed, &key, "spec:replicas:").unwrap(),
            Node::Int(42)
        );
        let moved = decrypt_value(&sealed, &key, "spec:other:").unwrap_err();
        assert!(
            moved.to_string().contains("message authentication failed"),
            "{moved}"
        );
        let wrong_key = decrypt_value(&sealed, &[8u8; 32], "spec:replicas:").unwrap_err();
        assert!(wrong_key.to_string().contains("message authentication failed"));
    }

    #[test]
    fn a_malformed_value_is_not_echoed() {
        let error = decrypt_value("hunter2", &[0u8; 32], "a:")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "error decrypting sops tree: Input string <redacted> does not match sops' data format"
        );
    }

    #[test]
    fn rules_follow_the_metadata() {
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let leaf = Node::Str("x".into());
        let regex = Rules {
            encrypted_regex: Some(Regex::new("^(data|stringData)$").unwrap()),
            ..Rules::default()
        };
        assert!(regex.encrypted(&path(&["stringData", "password"]), &leaf));
        assert!(!regex.encrypted(&path(&["metadata", "name"]), &leaf));
        let suffix = Rules {
            unencrypted_suffix: Some("_unencrypted".into()),
            ..Rules::default()
        };
        assert!(!suffix.encrypted(&path(&["user_unencrypted"]), &leaf));
        assert!(suffix.encrypted(&path(&["password"]), &leaf));
        let comment = Rules {
            by_comment: true,
            ..Rules::default()
        };
        assert!(!comment.encrypted(&path(&["a"]), &leaf));
        assert!(comment.encrypted(&path(&["a"]), &Node::Str(seal("v", "str", &[1; 32], "a:"))));
    }

    #[test]
    fn the_mac_covers_plaintext_in_document_order() {
        let key = [3u8; 32];
        let mut doc = Node::Map(vec![
            ("name".into(), Node::Str("plain".into())),
            ("secret".into(), Node::Str(seal("s3", "str", &key, "secret:"))),
            ("n".into(), Node::Int(2)),
            ("ok".into(), Node::Bool(true)),
        ]);
        let rules = Rules {
            encrypted_regex: Some(Regex::new("^secret$").unwrap()),
            ..Rules::default()
        };
        let (mac, secrets) = decrypt_tree(&mut doc, &key, &rules).unwrap();
        assert_eq!(mac, hex::encode_upper(Sha512::digest(b"plains32True")));
        assert_eq!(secrets, ["s3"]);
    }
}
