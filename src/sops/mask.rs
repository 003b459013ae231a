//! Keeping decrypted values out of messages: an API server's validation error may echo a
//! value it rejected, and conditions, events and logs all carry the step's message.

use std::time::Duration;

use crate::api::conditions::reason;
use crate::error::{Retry, StepError};

/// A step error whose messages show `***` for every decrypted value.
#[derive(Debug)]
pub(crate) struct Masked<E> {
    pub(crate) error: E,
    pub(crate) secrets: Vec<String>,
}

impl<E: StepError> std::fmt::Display for Masked<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&mask(&self.error.to_string(), &self.secrets))
    }
}

impl<E: StepError> std::error::Error for Masked<E> {}

impl<E: StepError> StepError for Masked<E> {
    fn reason(&self) -> &'static str {
        self.error.reason()
    }

    fn retry(&self) -> Retry {
        self.error.retry()
    }

    fn condition_message(&self, requeue_dependency: Duration) -> String {
        mask(&self.error.condition_message(requeue_dependency), &self.secrets)
    }

    fn warns(&self) -> bool {
        self.error.warns()
    }
}

/// `text` with every decrypted value replaced by `***`, the longest first so a value that
/// contains another is masked whole. Values of one or two characters would mask ordinary
/// text and reveal little, so they stay.
pub(crate) fn mask(text: &str, secrets: &[String]) -> String {
    let mut sorted: Vec<&String> = secrets.iter().filter(|s| s.len() > 2).collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for secret in sorted {
        out = out.replace(secret.as_str(), "***");
    }
    out
}

/// A Secret still SOPS-encrypted at apply time; Flux refuses it before applying anything.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(pub(crate) String);

impl StepError for Refused {
    fn reason(&self) -> &'static str {
        reason::RECONCILIATION_FAILED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_replaces_the_longest_value_first() {
        let secrets = vec!["abc".to_string(), "abcdef".to_string(), "ab".to_string()];
        assert_eq!(mask("x abcdef y abc ab", &secrets), "x *** y *** ab");
    }
}
