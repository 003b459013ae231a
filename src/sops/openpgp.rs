//! The data key wrapped for an OpenPGP key, read within fixed bounds. A wrapped 32-byte key
//! is a few hundred bytes, so a message that holds more is hostile: a tenant can encrypt a
//! compression bomb to its own key, which read whole took gigabytes on every retry.

use std::io::Read;

use pgp::composed::{Message, SignedSecretKey};
use pgp::types::Password;

/// The most armored text a wrapped data key may take (one wrapped for RSA-4096 takes under
/// 1 KiB). It also bounds what rpgp buffers to check a SEIPDv1 packet before decrypting it.
const MAX_ARMORED: usize = 64 * 1024;
/// The most a compressed packet may inflate to: a literal packet's header (at most 267 bytes)
/// and the key fit in it many times over.
const MAX_INFLATED: usize = 4096;
const KEY_LEN: usize = 32;

/// The data key in `enc` (an armored OpenPGP message) for the first of `keys` that opens it,
/// `None` when none does. A message one of them opens but that holds anything other than the
/// key (more literal data, compression inside compression) is refused with the reason.
pub(crate) fn unwrap(enc: &str, keys: &[SignedSecretKey]) -> Result<Option<[u8; KEY_LEN]>, String> {
    if keys.is_empty() {
        return Ok(None);
    }
    if enc.len() > MAX_ARMORED {
        return Err(format!(
            "the wrapped data key takes {} bytes, more than {MAX_ARMORED}",
            enc.len()
        ));
    }
    for key in keys {
        let Ok((message, _)) = Message::from_string(enc) else {
            return Ok(None);
        };
        if let Ok(plain) = message.decrypt(&Password::empty(), key) {
            return literal_key(plain).map(Some);
        }
    }
    Ok(None)
}

/// The key in a decrypted message: literal data, compressed at most once (GnuPG compresses
/// what it encrypts). rpgp would parse and drain all a compressed packet inflates to, so at
/// most `MAX_INFLATED` bytes are inflated, one more to tell a bomb, then parsed from memory.
fn literal_key(plain: Message<'_>) -> Result<[u8; KEY_LEN], String> {
    let inflated;
    let message = match plain {
        Message::Compressed { reader, .. } => {
            let mut prefix = Vec::new();
            reader
                .decompress()
                .and_then(|inflating| inflating.take(MAX_INFLATED as u64 + 1).read_to_end(&mut prefix))
                .map_err(|e| format!("cannot decompress: {e}"))?;
            if prefix.len() > MAX_INFLATED {
                return Err(format!(
                    "compressed data inflates to more than {MAX_INFLATED} bytes"
                ));
            }
            inflated = prefix;
            let inner = Message::from_bytes(&inflated[..]).map_err(|e| e.to_string())?;
            if inner.is_compressed() {
                return Err("compressed data inside compressed data".into());
            }
            inner
        }
        other => other,
    };
    read_key(message)
}

/// Exactly `KEY_LEN` bytes of literal data; one more is read to tell a longer literal.
fn read_key(message: Message<'_>) -> Result<[u8; KEY_LEN], String> {
    if message.literal_data_header().is_none() {
        return Err("the message holds no literal data".into());
    }
    let mut data = Vec::with_capacity(KEY_LEN + 1);
    message
        .take(KEY_LEN as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    <[u8; KEY_LEN]>::try_from(data).map_err(|data| {
        if data.len() > KEY_LEN {
            format!("literal data longer than {KEY_LEN} bytes")
        } else {
            format!("literal data of {} bytes, not {KEY_LEN}", data.len())
        }
    })
}

#[cfg(test)]
mod tests {
    //! Messages sealed here by hand to a key made here: the shape GnuPG gives a wrapped key,
    //! and the hostile ones only a tenant encrypting to its own key would make.

    use std::collections::BTreeMap;
    use std::io::Write;

    use flate2::Compression;
    use pgp::composed::{ArmorOptions, EncryptionCaps, KeyType, SecretKeyParamsBuilder, SubkeyParamsBuilder};
    use pgp::crypto::ecc_curve::ECCCurve;
    use pgp::crypto::sym::SymmetricKeyAlgorithm;
    use pgp::packet::{PacketTrait, PublicKeyEncryptedSessionKey, SymEncryptedProtectedData};
    use pgp::types::KeyDetails;
    use rand_core::OsRng;

    use super::super::Keys;
    use super::super::tree::Node;
    use super::*;

    const ZIP: u8 = 1;
    const ZLIB: u8 = 2;
    const MIB: usize = 1 << 20;

    fn secret_key() -> SignedSecretKey {
        let encryption = SubkeyParamsBuilder::default()
            .key_type(KeyType::ECDH(ECCCurve::Curve25519Legacy))
            .can_encrypt(EncryptionCaps::All)
            .build()
            .unwrap();
        SecretKeyParamsBuilder::default()
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .primary_user_id("tenant <tenant@example.test>".into())
            .subkeys(vec![encryption])
            .build()
            .unwrap()
            .generate(OsRng)
            .unwrap()
    }

    /// A new-format packet with a five-octet length.
    fn packet(tag: u8, body: &[u8]) -> Vec<u8> {
        packet_claiming(tag, body.len() as u32, body)
    }

    /// A packet whose header claims `len` bytes, whatever `body` holds.
    fn packet_claiming(tag: u8, len: u32, body: &[u8]) -> Vec<u8> {
        let mut out = vec![0xC0 | tag, 0xFF];
        out.extend(len.to_be_bytes());
        out.extend(body);
        out
    }

    /// A literal data packet's header and the fields before its data (binary, no name).
    fn literal_head(data_len: u32) -> Vec<u8> {
        packet_claiming(11, data_len + 6, &[b'b', 0, 0, 0, 0, 0])
    }

    fn literal(data: &[u8]) -> Vec<u8> {
        let mut out = literal_head(data.len() as u32);
        out.extend(data);
        out
    }

    fn compressed(algorithm: u8, stream: &[u8]) -> Vec<u8> {
        let mut body = vec![algorithm];
        body.extend(stream);
        packet(8, &body)
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn deflate(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    /// `plaintext` (packets) sealed to `key` as GnuPG seals: PKESK and SEIPDv1, armored.
    fn sealed(key: &SignedSecretKey, plaintext: &[u8]) -> String {
        struct Raw(Vec<u8>);
        impl pgp::ser::Serialize for Raw {
            fn to_writer<W: Write>(&self, writer: &mut W) -> pgp::errors::Result<()> {
                Ok(writer.write_all(&self.0)?)
            }
            fn write_len(&self) -> usize {
                self.0.len()
            }
        }
        let session_key: [u8; 32] = rand::random();
        let algorithm = SymmetricKeyAlgorithm::AES256;
        let recipient = &key.to_public_key().public_subkeys[0];
        let esk = PublicKeyEncryptedSessionKey::from_session_key_v3(
            OsRng,
            &session_key[..].into(),
            algorithm,
            recipient,
        )
        .unwrap();
        let data =
            SymEncryptedProtectedData::encrypt_seipdv1(OsRng, algorithm, &session_key, plaintext).unwrap();
        let mut packets = Vec::new();
        esk.to_writer_with_header(&mut packets).unwrap();
        data.to_writer_with_header(&mut packets).unwrap();
        let mut armored = Vec::new();
        pgp::armor::write(
            &Raw(packets),
            pgp::armor::BlockType::Message,
            &mut armored,
            None,
            true,
        )
        .unwrap();
        String::from_utf8(armored).unwrap()
    }

    /// The data key of a document whose only key entry is `enc`, for `key`'s fingerprint,
    /// as a decryption Secret holding `key` unwraps it.
    fn unwrapped(key: &SignedSecretKey, enc: &str) -> Result<[u8; 32], String> {
        let armored = key.to_armored_bytes(ArmorOptions::default()).unwrap();
        let keys = Keys::from_secret(
            "ns/keys",
            &BTreeMap::from([("tenant.asc".to_string(), armored)]),
            None,
        )
        .unwrap();
        let entry = Node::Map(vec![
            ("fp".into(), Node::Str(key.fingerprint().to_string())),
            ("enc".into(), Node::Str(enc.into())),
        ]);
        let metadata = Node::Map(vec![("pgp".into(), Node::List(vec![entry]))]);
        keys.data_key(&metadata).map_err(|e| e.to_string())
    }

    #[test]
    fn a_key_compressed_as_gnupg_does_unwraps() {
        let key = secret_key();
        let data_key: [u8; 32] = rand::random();
        for (algorithm, stream) in [
            (ZLIB, zlib(&literal(&data_key))),
            (ZIP, deflate(&literal(&data_key))),
        ] {
            let enc = sealed(&key, &compressed(algorithm, &stream));
            assert_eq!(unwrapped(&key, &enc), Ok(data_key), "algorithm {algorithm}");
        }
        assert_eq!(unwrapped(&key, &sealed(&key, &literal(&data_key))), Ok(data_key));
    }

    /// Before: a literal packet claiming 1 GiB, inflated from 16 KB, was read whole (the
    /// controller reached 3.2 GB per retry on a bigger one). Here the stream breaks off after
    /// 16 MiB with an invalid block: a reader that got that far fails on it instead.
    #[test]
    fn a_compression_bomb_is_refused_after_its_first_kilobytes_naming_the_key() {
        let key = secret_key();
        let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(&literal_head(1 << 30)).unwrap();
        encoder.write_all(&[0; MIB]).unwrap();
        encoder.flush().unwrap();
        let first = encoder.get_ref().len();
        encoder.write_all(&[0; MIB]).unwrap();
        encoder.flush().unwrap();
        // Each flush ends on a byte boundary, and every later MiB of zeros follows zeros: the
        // second MiB's blocks repeated inflate to more zeros.
        let (head, zeros) = encoder.get_ref().split_at(first);
        let mut stream = head.to_vec();
        for _ in 1..16 {
            stream.extend(zeros);
        }
        stream.push(0xFF); // a final block of the reserved type
        let enc = sealed(&key, &compressed(ZIP, &stream));
        assert!(enc.len() < 64 * 1024, "the attack is small: {} bytes", enc.len());

        let refused = unwrapped(&key, &enc).unwrap_err();
        let expected = format!(
            "OpenPGP key {}: compressed data inflates to more than 4096 bytes",
            key.fingerprint()
        );
        assert!(refused.ends_with(&expected), "{refused}");
    }

    #[test]
    fn compression_inside_compression_is_refused() {
        let key = secret_key();
        let data_key: [u8; 32] = rand::random();
        let inner = compressed(ZLIB, &zlib(&literal(&data_key)));
        let enc = sealed(&key, &compressed(ZLIB, &zlib(&inner)));
        let refused = unwrapped(&key, &enc).unwrap_err();
        assert!(
            refused.ends_with("compressed data inside compressed data"),
            "{refused}"
        );
    }

    #[test]
    fn a_literal_longer_than_a_key_or_a_huge_wrapping_is_refused() {
        let key = secret_key();
        let refused = unwrapped(&key, &sealed(&key, &literal(&[7; 33]))).unwrap_err();
        assert!(
            refused.ends_with("literal data longer than 32 bytes"),
            "{refused}"
        );
        let short = unwrapped(&key, &sealed(&key, &literal(&[7; 31]))).unwrap_err();
        assert!(short.ends_with("literal data of 31 bytes, not 32"), "{short}");
        let huge = sealed(&key, &literal(&vec![7; 64 * 1024]));
        let refused = unwrapped(&key, &huge).unwrap_err();
        assert!(refused.contains("more than 65536"), "{refused}");
    }
}
