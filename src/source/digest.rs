//! Artifact digests as source-controller writes them: `<algorithm>:<lowercase hex>`.

use sha2::Digest as _;

/// The algorithms Flux accepts in `status.artifact.digest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
    Blake3,
}

impl Algorithm {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "sha256" => Some(Self::Sha256),
            "sha384" => Some(Self::Sha384),
            "sha512" => Some(Self::Sha512),
            "blake3" => Some(Self::Blake3),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
            Self::Blake3 => "blake3",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha256 | Self::Blake3 => 64,
            Self::Sha384 => 96,
            Self::Sha512 => 128,
        }
    }
}

/// A parsed, well-formed digest. Its `Display` form is the canonical cache key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArtifactDigest {
    algorithm: Algorithm,
    hex: String,
}

/// Why a digest string was refused; texts follow Flux's fetcher.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestError {
    #[error("empty digest")]
    Empty,
    #[error("failed to parse digest '{0}': unsupported digest algorithm")]
    UnsupportedAlgorithm(String),
    #[error("failed to parse digest '{0}': invalid checksum digest format")]
    InvalidFormat(String),
    #[error("computed digest doesn't match provided '{expected}'")]
    Mismatch { expected: String },
}

impl DigestError {
    /// The artifact was read but is not the one the digest names.
    pub fn is_mismatch(&self) -> bool {
        matches!(self, Self::Mismatch { .. })
    }
}

impl ArtifactDigest {
    /// Parses `status.artifact.digest`. A bare hex string is read as sha256, as Flux does.
    pub fn parse(text: &str) -> Result<Self, DigestError> {
        if text.is_empty() {
            return Err(DigestError::Empty);
        }
        let (name, hex) = text.split_once(':').unwrap_or(("sha256", text));
        let algorithm =
            Algorithm::parse(name).ok_or_else(|| DigestError::UnsupportedAlgorithm(text.into()))?;
        let well_formed =
            hex.len() == algorithm.hex_len() && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !well_formed {
            return Err(DigestError::InvalidFormat(text.into()));
        }
        Ok(Self {
            algorithm,
            hex: hex.into(),
        })
    }

    /// A hasher for this digest's algorithm.
    pub(crate) fn hasher(&self) -> Hasher {
        match self.algorithm {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha384 => Hasher::Sha384(sha2::Sha384::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
            Algorithm::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }

    /// Checks what `hasher` saw against this digest.
    pub(crate) fn verify(&self, hasher: Hasher) -> Result<(), DigestError> {
        if hasher.finish_hex() == self.hex {
            Ok(())
        } else {
            Err(DigestError::Mismatch {
                expected: self.to_string(),
            })
        }
    }
}

impl std::fmt::Display for ArtifactDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

/// A running hash of a download.
pub(crate) enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
            Self::Blake3(h) => {
                h.update(data);
            }
        }
    }

    fn finish_hex(self) -> String {
        match self {
            Self::Sha256(h) => hex::encode(h.finalize()),
            Self::Sha384(h) => hex::encode(h.finalize()),
            Self::Sha512(h) => hex::encode(h.finalize()),
            Self::Blake3(h) => h.finalize().to_hex().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify(digest: &str, data: &[u8]) -> Result<(), DigestError> {
        let digest = ArtifactDigest::parse(digest)?;
        let mut hasher = digest.hasher();
        hasher.update(data);
        digest.verify(hasher)
    }

    // Expected values are the published test vectors for "abc" (FIPS 180-2 and the BLAKE3
    // reference test vectors), not outputs of this code.
    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const ABC_SHA384: &str =
        "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7";
    const ABC_SHA512: &str = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";
    const ABC_BLAKE3: &str = "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85";

    #[test]
    fn every_flux_algorithm_verifies() {
        for digest in [
            format!("sha256:{ABC_SHA256}"),
            format!("sha384:{ABC_SHA384}"),
            format!("sha512:{ABC_SHA512}"),
            format!("blake3:{ABC_BLAKE3}"),
            ABC_SHA256.to_string(),
        ] {
            assert_eq!(verify(&digest, b"abc"), Ok(()), "{digest}");
        }
    }

    #[test]
    fn a_mismatch_names_the_expected_digest() {
        let err = verify(&format!("sha256:{ABC_SHA256}"), b"abd").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("computed digest doesn't match provided 'sha256:{ABC_SHA256}'")
        );
    }

    #[test]
    fn malformed_digests_are_refused() {
        assert_eq!(ArtifactDigest::parse(""), Err(DigestError::Empty));
        assert!(matches!(
            ArtifactDigest::parse("md5:900150983cd24fb0d6963f7d28e17f72"),
            Err(DigestError::UnsupportedAlgorithm(_))
        ));
        assert!(matches!(
            ArtifactDigest::parse("sha256:abc"),
            Err(DigestError::InvalidFormat(_))
        ));
        let upper = format!("sha256:{}", ABC_SHA256.to_uppercase());
        assert!(matches!(
            ArtifactDigest::parse(&upper),
            Err(DigestError::InvalidFormat(_))
        ));
    }

    #[test]
    fn a_bare_hex_digest_is_sha256() {
        assert_eq!(
            ArtifactDigest::parse(ABC_SHA256).unwrap().to_string(),
            format!("sha256:{ABC_SHA256}")
        );
    }
}
