//! Keeping decrypted values out of messages: an API server's validation error may echo a
//! value it rejected, and conditions, events and logs all carry the step's message. The
//! masking rule is the applier's, the one that also hides Secret values in its errors.

use std::time::Duration;

use crate::api::conditions::reason;
use crate::applier::mask;
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

    // A decrypted value an API error echoed JSON-escaped: before, only the exact bytes were
    // masked, so the condition and the event showed it.
    #[test]
    fn messages_mask_decrypted_values_as_errors_quote_them() {
        let masked = Masked {
            error: Refused(r#"Invalid value: "s3cr\"t\\value": bad"#.to_string()),
            secrets: vec![r#"s3cr"t\value"#.to_string()],
        };
        assert_eq!(masked.to_string(), r#"Invalid value: "***": bad"#);
        assert_eq!(
            masked.condition_message(Duration::ZERO),
            r#"Invalid value: "***": bad"#
        );
    }
}
