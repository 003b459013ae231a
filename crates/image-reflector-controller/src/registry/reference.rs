//! `spec.image` as go-containerregistry's `name.ParseReference` reads a repository, with Flux's
//! two refusals on top (a URL scheme, a tag): the canonical name written to status, the
//! registry and repository the scan talks to, and whether plain HTTP may be used.

use std::net::Ipv4Addr;

use thiserror::Error;

/// Docker Hub's API host: the registry of names without one, and what `docker.io` means.
const DOCKER_HUB: &str = "index.docker.io";
const DOCKER_HUB_ALIAS: &str = "docker.io";
/// Docker Hub's implicit namespace for single-component names (`alpine` is `library/alpine`).
const DOCKER_HUB_NAMESPACE: &str = "library";
const REPOSITORY_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789_-./";
const MAX_TAG_LEN: usize = 128;

/// Why `spec.image` is refused; each is terminal (Flux's `ImageURLInvalid`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("image '{image}' should not include URL scheme; remove '{scheme}://'")]
    Scheme { image: String, scheme: String },
    #[error("image '{image}' should not include a tag; remove ':{tag}'")]
    Tag { image: String, tag: String },
    /// ggcr's message for anything its parser rejects.
    #[error("could not parse reference: {image}")]
    Invalid { image: String },
}

/// A repository in a registry, as the scan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    registry: String,
    repository: String,
    insecure: bool,
}

impl ImageRef {
    /// Parses `spec.image`; `insecure` is `spec.insecure` (plain HTTP allowed for any host).
    pub fn parse(image: &str, insecure: bool) -> Result<Self, ImageError> {
        if let Some((scheme, _)) = image.split_once("://") {
            return Err(ImageError::Scheme {
                image: image.into(),
                scheme: scheme.into(),
            });
        }
        let invalid = || ImageError::Invalid { image: image.into() };
        let (registry, repository) = parse_reference(image).ok_or_else(invalid)?;
        // Flux looks for a colon after the registry as written, so a digest is refused too.
        let rest = image.strip_prefix(registry.as_str()).unwrap_or(image);
        if let Some(tag) = rest.split(':').nth(1) {
            return Err(ImageError::Tag {
                image: image.into(),
                tag: tag.into(),
            });
        }
        Ok(Self {
            registry,
            repository,
            insecure,
        })
    }

    /// The registry's host and port (`index.docker.io`, `127.0.0.1:5000`).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository path in the registry (`library/alpine`).
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// `status.canonicalImageName`: ggcr's `ref.Context().String()`.
    pub fn canonical_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Whether the registry may be reached over plain HTTP when HTTPS does not connect: with
    /// `spec.insecure`, or for the local and private hosts ggcr treats so by default.
    pub fn plain_http_allowed(&self) -> bool {
        self.insecure || is_local_registry(&self.registry)
    }

    /// The token scope for reading tags and manifests.
    pub(crate) fn pull_scope(&self) -> String {
        format!("repository:{}:pull", self.repository)
    }
}

/// Whether `tag` is a valid tag (`[A-Za-z0-9_.-]`, at most 128 characters), so that it can be
/// put in a URL path and a line of the tag store.
pub(crate) fn is_valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= MAX_TAG_LEN
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// ggcr's `ParseReference`: a tagged reference, else a digest one; the registry and the full
/// repository path of its context, or `None` when neither parses.
fn parse_reference(s: &str) -> Option<(String, String)> {
    parse_tagged(s).or_else(|| parse_digested(s))
}

fn parse_tagged(s: &str) -> Option<(String, String)> {
    // A last `:` followed by a `/` is a registry port, not a tag.
    let base = match s.rsplit_once(':') {
        Some((base, tag)) if !tag.contains('/') => {
            if !is_valid_tag(tag) {
                return None;
            }
            base
        }
        _ => s,
    };
    parse_repository(base)
}

fn parse_digested(s: &str) -> Option<(String, String)> {
    let (base, digest) = s.split_once('@')?;
    let hex = digest.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    parse_tagged(base)
}

fn parse_repository(name: &str) -> Option<(String, String)> {
    let (registry, repository) = match name.split_once('/') {
        // The first component is a registry only if it looks like a host: a dot or a port.
        Some((first, rest)) if first.contains(['.', ':']) => (first, rest),
        _ => ("", name),
    };
    if !valid_repository(repository) || !valid_authority(registry) {
        return None;
    }
    let registry = match registry {
        "" | DOCKER_HUB_ALIAS => DOCKER_HUB,
        other => other,
    };
    let repository = if registry == DOCKER_HUB && !repository.contains('/') {
        format!("{DOCKER_HUB_NAMESPACE}/{repository}")
    } else {
        repository.to_string()
    };
    Some((registry.to_string(), repository))
}

fn valid_repository(repository: &str) -> bool {
    (2..=255).contains(&repository.len()) && repository.chars().all(|c| REPOSITORY_CHARS.contains(c))
}

/// An RFC 3986 authority as Go's URL parser keeps it whole: host characters and an optional
/// numeric port (an IPv6 literal in brackets).
fn valid_authority(authority: &str) -> bool {
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], &authority[i + 1..]),
        _ => (authority, ""),
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        host.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    };
    host_ok && port.bytes().all(|b| b.is_ascii_digit())
}

/// ggcr's `Registry.Scheme()` rule for plain HTTP: localhost names, the IPv4 and IPv6 loopback
/// addresses written exactly so, and RFC 1918 addresses.
fn is_local_registry(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !registry.starts_with('[') || host.ends_with(']') => (host, Some(port)),
        _ => (registry, None),
    };
    let port_ok = port.is_none_or(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    if registry == "localhost" || registry.starts_with("localhost:") || registry == "::1" {
        return true;
    }
    if port_ok && (host.ends_with(".localhost") || host == "127.0.0.1" || host == "[::1]") {
        return true;
    }
    let ip = registry.split(':').next().unwrap_or_default();
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_private())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names() {
        // (spec.image, canonical name, registry, repository)
        let table = [
            ("alpine", "index.docker.io/library/alpine"),
            ("docker.io/alpine", "index.docker.io/library/alpine"),
            ("docker.io/x/y", "index.docker.io/x/y"),
            ("index.docker.io/x/y", "index.docker.io/x/y"),
            ("stefanprodan/podinfo", "index.docker.io/stefanprodan/podinfo"),
            ("ghcr.io/stefanprodan/podinfo", "ghcr.io/stefanprodan/podinfo"),
            ("127.0.0.1:5000/foo", "127.0.0.1:5000/foo"),
            ("localhost:5000/a/b/c", "localhost:5000/a/b/c"),
            ("registry.local/team/app", "registry.local/team/app"),
            ("[::1]:5000/foo", "[::1]:5000/foo"),
            // No dot or port: the first component is part of the repository on Docker Hub.
            ("localhost/foo", "index.docker.io/localhost/foo"),
            ("my_org/my-app.x", "index.docker.io/my_org/my-app.x"),
        ];
        for (image, canonical) in table {
            let parsed = ImageRef::parse(image, false).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(parsed.canonical_name(), canonical, "{image}");
            assert_eq!(
                format!("{}/{}", parsed.registry(), parsed.repository()),
                canonical,
                "{image}"
            );
        }
    }

    #[test]
    fn pull_scope_uses_the_full_repository() {
        let parsed = ImageRef::parse("alpine", false).unwrap();
        assert_eq!(parsed.pull_scope(), "repository:library/alpine:pull");
    }

    #[test]
    fn refusals_with_flux_messages() {
        let table = [
            (
                "https://127.0.0.1:5000/r",
                "image 'https://127.0.0.1:5000/r' should not include URL scheme; remove 'https://'",
            ),
            (
                "oci://ghcr.io/x/y:1.0",
                "image 'oci://ghcr.io/x/y:1.0' should not include URL scheme; remove 'oci://'",
            ),
            (
                "127.0.0.1:5000/rr:1.0.0",
                "image '127.0.0.1:5000/rr:1.0.0' should not include a tag; remove ':1.0.0'",
            ),
            // ggcr wants repositories of two characters or more.
            (
                "127.0.0.1:5000/r:1.0.0",
                "could not parse reference: 127.0.0.1:5000/r:1.0.0",
            ),
            ("localhost:5000/r", "could not parse reference: localhost:5000/r"),
            (
                "alpine:3.20",
                "image 'alpine:3.20' should not include a tag; remove ':3.20'",
            ),
            (
                "docker.io/x/y:latest",
                "image 'docker.io/x/y:latest' should not include a tag; remove ':latest'",
            ),
            (
                "x/y@sha256:0123456789012345678901234567890123456789012345678901234567890123",
                "image 'x/y@sha256:0123456789012345678901234567890123456789012345678901234567890123' \
                 should not include a tag; remove ':0123456789012345678901234567890123456789012345678901234567890123'",
            ),
            ("", "could not parse reference: "),
            ("Alpine", "could not parse reference: Alpine"),
            ("a", "could not parse reference: a"),
            ("x/y:", "could not parse reference: x/y:"),
            ("x/y:bad tag", "could not parse reference: x/y:bad tag"),
            ("reg istry.io/x", "could not parse reference: reg istry.io/x"),
            ("host:port/x", "could not parse reference: host:port/x"),
            ("user@host.io/x", "could not parse reference: user@host.io/x"),
            ("x/y@sha256:short", "could not parse reference: x/y@sha256:short"),
        ];
        for (image, message) in table {
            let err = ImageRef::parse(image, false).expect_err(image);
            assert_eq!(err.to_string(), message, "{image}");
        }
    }

    #[test]
    fn plain_http_rule() {
        let table = [
            ("localhost:5000/xx", false, true),
            ("registry.localhost/xx", false, true),
            ("registry.localhost:5000/xx", false, true),
            ("127.0.0.1:5000/xx", false, true),
            ("127.0.0.1.nip.io/xx", false, false),
            ("127.0.0.2:5000/xx", false, false),
            ("[::1]:5000/xx", false, true),
            ("10.1.2.3:5000/xx", false, true),
            ("172.16.0.1/xx", false, true),
            ("172.32.0.1/xx", false, false),
            ("192.168.1.10:443/xx", false, true),
            ("8.8.8.8/xx", false, false),
            ("ghcr.io/x/y", false, false),
            ("alpine", false, false),
            ("ghcr.io/x/y", true, true),
        ];
        for (image, insecure, plain) in table {
            let parsed = ImageRef::parse(image, insecure).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(parsed.plain_http_allowed(), plain, "{image} insecure={insecure}");
        }
    }

    #[test]
    fn tag_grammar() {
        for tag in ["1.0.0", "v1", "latest", "a_b-c.d", &"x".repeat(128)] {
            assert!(is_valid_tag(tag), "{tag}");
        }
        for tag in ["", "a/b", "a b", "a\nb", "ü", &"x".repeat(129)] {
            assert!(!is_valid_tag(tag), "{tag:?}");
        }
    }
}
