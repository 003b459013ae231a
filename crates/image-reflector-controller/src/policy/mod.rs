//! The ImagePolicy engine: from a repository's tags, the one `spec.policy` picks after
//! `spec.filterTags`, as Flux's `internal/policy` picks it. Pure: the caller reads the tags
//! (in the store's order, which decides ties) and writes the status.

mod constraint;
mod filter;
pub(crate) mod goregex;
mod order;
mod version;

use std::cmp::Ordering;

pub use filter::TagFilter;
use order::Order;

/// The `spec.policy` union as the API has it: the first present field wins, in this order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Choice<'a> {
    /// `semver.range`
    pub semver: Option<&'a str>,
    /// `alphabetical.order` (`""` when the object is present without an order)
    pub alphabetical: Option<&'a str>,
    /// `numerical.order` (`""` when the object is present without an order)
    pub numerical: Option<&'a str>,
}

/// Why no tag was picked. The texts are Flux's, so conditions and events read the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The policy cannot work on any tags (Flux: Stalled, reason `InvalidPolicy`).
    #[error("invalid policy: {0}")]
    InvalidPolicy(String),
    /// `filterTags.pattern` does not compile (Flux: Stalled, reason `InvalidPolicy`).
    #[error("failed to filter tags: invalid regular expression pattern '{pattern}': {reason}")]
    InvalidFilter { pattern: String, reason: String },
    /// No tag is left after the filter. (An empty tag store is the caller's own error,
    /// Flux's `no tags in database`, found before the policy runs.)
    #[error("version list argument cannot be empty")]
    NoTags,
    /// Tags are left but none is a version in the range.
    #[error("unable to determine latest version from provided list")]
    NoMatch,
    /// The numerical policy met a tag (or extracted key) that is not a number.
    #[error("failed to parse invalid numeric value '{0}'")]
    NotNumeric(String),
}

impl PolicyError {
    /// Retrying cannot help until the spec changes; the other errors wait for new tags.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            PolicyError::InvalidPolicy(_) | PolicyError::InvalidFilter { .. }
        )
    }
}

/// A validated `spec.policy`.
#[derive(Debug, Clone)]
pub struct Policy(Kind);

#[derive(Debug, Clone)]
enum Kind {
    SemVer(constraint::Constraints),
    Alphabetical(Order),
    Numerical(Order),
}

impl Policy {
    /// Flux's `PolicerFromSpec`.
    pub fn new(choice: &Choice<'_>) -> Result<Policy, PolicyError> {
        let kind = match (choice.semver, choice.alphabetical, choice.numerical) {
            (Some(range), _, _) => constraint::parse(range).map(Kind::SemVer),
            (None, Some(order), _) => Order::parse(order).map(Kind::Alphabetical),
            (None, None, Some(order)) => Order::parse(order).map(Kind::Numerical),
            (None, None, None) => Err("given ImagePolicyChoice object is invalid".to_string()),
        };
        kind.map(Policy).map_err(PolicyError::InvalidPolicy)
    }

    /// The picked tag: with a filter the policy runs on the keys it produced and the result
    /// is the original tag behind the winning key.
    pub fn latest(&self, filter: Option<&TagFilter>, tags: &[&str]) -> Result<String, PolicyError> {
        let Some(filter) = filter else {
            return self.pick(tags).map(str::to_string);
        };
        let kept = filter.apply(tags);
        let keys: Vec<&str> = kept.iter().map(|(key, _)| key.as_str()).collect();
        let winner = self.pick(&keys)?;
        let original = kept.iter().find(|(key, _)| key == winner).map(|(_, tag)| *tag);
        Ok(original.expect("the winner is one of the keys").to_string())
    }

    fn pick<'a>(&self, tags: &[&'a str]) -> Result<&'a str, PolicyError> {
        if tags.is_empty() {
            return Err(PolicyError::NoTags);
        }
        match &self.0 {
            Kind::SemVer(constraints) => latest_semver(constraints, tags).ok_or(PolicyError::NoMatch),
            Kind::Alphabetical(order) => Ok(order::alphabetical(*order, tags).expect("not empty")),
            Kind::Numerical(order) => order::numerical(*order, tags)
                .map_err(|bad| PolicyError::NotNumeric(bad.to_string()))
                .map(|t| t.expect("not empty")),
        }
    }
}

/// The highest version in the range; of equal versions (`v1.0.0`, `1.0.0`, `1.0.0+b`) the
/// first one seen. Tags that are not versions are skipped.
fn latest_semver<'a>(constraints: &constraint::Constraints, tags: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(&str, version::Version)> = None;
    for &tag in tags {
        let Some(v) = version::parse_tag(tag) else {
            continue;
        };
        let better = best
            .as_ref()
            .is_none_or(|(_, b)| v.compare(b) == Ordering::Greater);
        if better && constraints.check(&v) {
            best = Some((tag, v));
        }
    }
    best.map(|(tag, _)| tag)
}

#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod tests;
