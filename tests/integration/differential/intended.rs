//! The one table of differences between Flux's kustomize-controller and ours that the
//! differential suite accepts, each with its reason. Patterns are globs (`*`) over the
//! scenario name, the difference's path and each side's masked JSON value (`(absent)` where
//! a side has nothing). An entry that matches no difference fails the suite: the table says
//! what is true today, no more.
//!
//! Two kinds: `Intended`, a deliberate difference a user is better off with; `Pending`, a
//! known gap being fixed on the named branch (removed from this table when it merges).

pub(super) enum Status {
    Intended,
    Pending(&'static str),
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Intended => write!(f, "intended"),
            Status::Pending(branch) => write!(f, "pending fix on {branch}"),
        }
    }
}

pub(super) struct Entry {
    pub(super) id: &'static str,
    pub(super) status: Status,
    pub(super) scenario: &'static str,
    pub(super) path: &'static str,
    pub(super) flux: &'static str,
    pub(super) ours: &'static str,
    /// Why: for an intended difference, why a user is better off; for a pending one, the gap.
    pub(super) reason: &'static str,
}

pub(super) const TABLE: &[Entry] = &[];
