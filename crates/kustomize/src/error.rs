//! Why a build failed: the one error type of the engine.

use std::path::PathBuf;

/// Why a build failed. Every variant names the file, field or resource involved; none of
/// them carries file contents, so Secret data never leaks into messages.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: no such file or directory (referenced from {from})")]
    Missing { path: PathBuf, from: PathBuf },
    #[error("{path}: path is outside the artifact root (security constraint)")]
    OutsideRoot { path: PathBuf },
    #[error("{path}: file is larger than the limit of {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{file}:{line}: malformed YAML: {message}")]
    Yaml {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: document {index} is not an object (found {found})")]
    NotObject {
        file: String,
        index: usize,
        found: &'static str,
    },
    #[error("{file}: invalid field '{field}': {message}")]
    Invalid {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: field '{field}' is not supported by this engine")]
    Unsupported { file: String, field: String },
    #[error("{file}: remote resource '{url}' is not supported (remote bases are disabled)")]
    Remote { file: String, url: String },
    #[error("{file}: remote resource '{url}': {message}")]
    RemoteFetch {
        file: String,
        url: String,
        message: String,
    },
    #[error("{file}: may not add resource with an already registered id: {id}")]
    DuplicateId { file: String, id: String },
    #[error("cycle detected: candidate root '{path}' contains a visited root")]
    Cycle { path: PathBuf },
    #[error("{file}: {message}")]
    Kustomization { file: String, message: String },
    #[error("{file}: generator '{name}': {message}")]
    Generator {
        file: String,
        name: String,
        message: String,
    },
    #[error("{file}: {field}: {message}")]
    Transform {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: patch: {message}")]
    Patch { file: String, message: String },
    #[error("name reference in {referrer} at '{path}': {message}")]
    NameReference {
        referrer: String,
        path: String,
        message: String,
    },
    #[error("resource {id} is missing {field}")]
    MissingField { id: String, field: &'static str },
}
