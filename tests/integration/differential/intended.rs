//! The one table of differences between Flux's kustomize-controller and ours that the
//! differential suite accepts, each with its reason. Patterns are globs (`*`) over the
//! scenario name, the difference's path and each side's masked JSON value (`(absent)` where
//! a side has nothing). An entry that matches no difference fails the suite: the table says
//! what is true today, no more. Every entry is a deliberate difference a user is better off
//! with; a gap the suite finds is fixed, not listed.

pub(super) struct Entry {
    pub(super) id: &'static str,
    pub(super) scenario: &'static str,
    pub(super) path: &'static str,
    pub(super) flux: &'static str,
    pub(super) ours: &'static str,
    /// Why a user is better off.
    pub(super) reason: &'static str,
}

const fn entry(
    id: &'static str,
    scenario: &'static str,
    path: &'static str,
    flux: &'static str,
    ours: &'static str,
    reason: &'static str,
) -> Entry {
    Entry {
        id,
        scenario,
        path,
        flux,
        ours,
        reason,
    }
}

/// Where a message shows: events, notifications, condition messages.
const MESSAGES: &str = "events.*|notifications.*|*.conditions[*].message";

pub(super) const TABLE: &[Entry] = &[
    // Intended: deliberate, and better for a user.
    entry(
        "build-error-text",
        "build-*|broken-revision-keeps-objects",
        MESSAGES,
        "*kustomize build failed: accumulating resources*|(absent)",
        "*kustomize build failed: *|(absent)",
        "our kustomize engine names the file (and line) at fault, without Go kustomize's accumulation chain and its temporary directory",
    ),
    entry(
        "path-not-found-text",
        "*",
        MESSAGES,
        "*kustomization path not found: stat /*/kustomization-*|(absent)",
        "*kustomization path not found: stat *|(absent)",
        "the missing path is named relative to the artifact, not inside a random temporary directory",
    ),
    entry(
        "sops-refused-unconfigured",
        "sops-not-configured",
        "*",
        "*",
        "*",
        "a SOPS-encrypted Secret is refused with a clear error when no decryption is configured; Flux applies the ciphertext as the Secret's value",
    ),
    entry(
        "deletion-policy-left-in-place",
        "deletion-policy-orphan|deletion-policy-mirror-prune",
        "events.app[+2]|notifications.app[+2]",
        "(absent)",
        "*objects left in place (deletionPolicy *",
        "a deletion that leaves objects behind says which ones and why (deletionPolicy); Flux says nothing about them",
    ),
    entry(
        "kstatus-message",
        "wait-fails|wait-times-out|health-checks-missing-object",
        MESSAGES,
        "*",
        "*",
        "a failed health check names each object's own status message ('Deployment/ns/web: Failed: Progress deadline exceeded', Flux: \"Deployment/ns/web status: 'Failed'\"), and a health check of an object that does not exist fails at once with 'NotFound' instead of holding the run until the timeout",
    ),
    entry(
        "substitute-from-missing-text",
        "substitute-from-missing",
        MESSAGES,
        "*post build failed for '*': substitute from 'Secret/vars-secret' error: secrets *vars-secret* not found*|(absent)",
        "*substitute from 'Secret/vars-secret' error: Secret '<ns>/vars-secret' not found*|(absent)",
        "the missing Secret is named with the namespace it was looked up in, without Flux's prefix naming whichever built object was substituted first ('ConfigMap.v1.[noGrp]/vars'), which has nothing to do with the Secret",
    ),
    entry(
        "immutable-text",
        "immutable-without-force",
        MESSAGES,
        "*dry-run failed (Invalid): *field is immutable*|(absent)",
        "*immutable field detected (data): *field is immutable*; set spec.force or the annotation kustomize.toolkit.fluxcd.io/force: enabled to recreate it*|(absent)",
        "an immutable field names the field and says how to recreate the object (spec.force or the force annotation)",
    ),
];
