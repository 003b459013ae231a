//! Expected conditions, messages and events from Flux's `imagepolicy_controller.go`, fluxcd/pkg
//! `runtime/reconcile` and the reference's conformance list (items 16 to 25).

use super::*;
use crate::policy::PolicyError;
use k8s_openapi::jiff::Timestamp;

const IMAGE: &str = "ghcr.io/stefanprodan/podinfo";
const NO_TAGS: &str = "retrying in 30s error: no tags in database";

fn stamp(generation: i64, second: i64) -> Stamp {
    Stamp {
        generation,
        now: Timestamp::from_second(1_767_225_600 + second).unwrap(),
    }
}

fn image(tag: &str, digest: &str) -> ImageRef {
    ImageRef {
        name: IMAGE.into(),
        tag: tag.into(),
        digest: digest.into(),
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(1),
        last_transition_time: stamp(1, 0).time(),
    }
}

/// A status Flux left after generation 1 resolved `tag`.
fn ready(tag: &str, digest: &str, previous: Option<ImageRef>) -> ImagePolicyStatus {
    let latest = image(tag, digest);
    ImagePolicyStatus {
        conditions: vec![condition(
            READY,
            TRUE,
            "Succeeded",
            &ready_message(&latest, previous.as_ref()),
        )],
        latest_ref: Some(latest),
        observed_previous_ref: previous,
        observed_generation: 1,
        last_handled_reconcile_at: None,
    }
}

fn failed(conditions: Vec<Condition>) -> ImagePolicyStatus {
    ImagePolicyStatus {
        conditions,
        ..ImagePolicyStatus::default()
    }
}

fn evaluation(outcome: Result<ImageRef, PolicyFailure>) -> Evaluation<'static> {
    Evaluation {
        requested_at: None,
        interval: None,
        requeue_dependency: Duration::from_secs(30),
        outcome,
    }
}

type Conditions = Vec<(&'static str, &'static str, &'static str, String)>;

struct Case {
    name: &'static str,
    old: ImagePolicyStatus,
    generation: i64,
    evaluation: Evaluation<'static>,
    conditions: Conditions,
    latest: Option<ImageRef>,
    previous: Option<ImageRef>,
    observed_generation: i64,
    event: Option<(EventType, &'static str, String)>,
    requeue: Requeue,
}

fn conditions_of(status: &ImagePolicyStatus) -> Conditions {
    status
        .conditions
        .iter()
        .map(|c| {
            let type_ = [READY, RECONCILING, STALLED]
                .into_iter()
                .find(|t| *t == c.type_)
                .expect("an owned condition");
            let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
            (type_, leak(&c.status), leak(&c.reason), c.message.clone())
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let resolved_102 = format!("Latest image tag for {IMAGE} resolved to 1.0.2");
    let resolved_103 = format!("Latest image tag for {IMAGE} resolved to 1.0.3 (previously {IMAGE}:1.0.2)");
    let denied = PolicyFailure::AclMissing {
        namespace: "flux-system".into(),
        name: "podinfo".into(),
    };
    let denied_msg = denied.to_string();
    let invalid = PolicyFailure::Policy(PolicyError::InvalidPolicy("improper constraint: *-*".into()));
    let digest = PolicyFailure::Digest {
        reference: format!("{IMAGE}:1.0.3"),
        reason: "failed fetching descriptor: 404".into(),
    };
    let digest_msg = format!("failed fetching digest of {IMAGE}:1.0.3: failed fetching descriptor: 404");
    let always = |outcome| Evaluation {
        interval: Some(Duration::from_secs(600)),
        ..evaluation(outcome)
    };
    vec![
        Case {
            name: "first resolution",
            old: ImagePolicyStatus::default(),
            generation: 1,
            evaluation: evaluation(Ok(image("1.0.2", ""))),
            conditions: vec![(READY, TRUE, "Succeeded", resolved_102.clone())],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Normal, "Succeeded", resolved_102.clone())),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "a new tag",
            old: ready("1.0.2", "", None),
            generation: 1,
            evaluation: evaluation(Ok(image("1.0.3", ""))),
            conditions: vec![(READY, TRUE, "Succeeded", resolved_103.clone())],
            latest: Some(image("1.0.3", "")),
            previous: Some(image("1.0.2", "")),
            observed_generation: 1,
            event: Some((EventType::Normal, "Succeeded", resolved_103.clone())),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "the same result again keeps the previous ref and traces",
            old: ready("1.0.3", "", Some(image("1.0.2", ""))),
            generation: 2,
            evaluation: evaluation(Ok(image("1.0.3", ""))),
            conditions: vec![(READY, TRUE, "Succeeded", resolved_103.clone())],
            latest: Some(image("1.0.3", "")),
            previous: Some(image("1.0.2", "")),
            observed_generation: 2,
            event: Some((EventType::Trace, "Succeeded", resolved_103.clone())),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "Always: a re-pushed tag",
            old: ready("1.0.3", "sha256:d1", None),
            generation: 1,
            evaluation: always(Ok(image("1.0.3", "sha256:d2"))),
            conditions: vec![(
                READY,
                TRUE,
                "Succeeded",
                format!(
                    "Latest image tag for {IMAGE} resolved to 1.0.3 with digest sha256:d2 (previously {IMAGE}:1.0.3@sha256:d1)"
                ),
            )],
            latest: Some(image("1.0.3", "sha256:d2")),
            previous: Some(image("1.0.3", "sha256:d1")),
            observed_generation: 1,
            event: Some((
                EventType::Normal,
                "Succeeded",
                format!(
                    "Latest image tag for {IMAGE} resolved to 1.0.3 with digest sha256:d2 (previously {IMAGE}:1.0.3@sha256:d1)"
                ),
            )),
            requeue: Requeue::After(Duration::from_secs(600)),
        },
        Case {
            name: "Always to Never drops the digest",
            old: ready("1.0.3", "sha256:d1", None),
            generation: 2,
            evaluation: evaluation(Ok(image("1.0.3", ""))),
            conditions: vec![(
                READY,
                TRUE,
                "Succeeded",
                format!(
                    "Latest image tag for {IMAGE} resolved to 1.0.3 (previously {IMAGE}:1.0.3@sha256:d1)"
                ),
            )],
            latest: Some(image("1.0.3", "")),
            previous: Some(image("1.0.3", "sha256:d1")),
            observed_generation: 2,
            event: Some((
                EventType::Normal,
                "Succeeded",
                format!(
                    "Latest image tag for {IMAGE} resolved to 1.0.3 (previously {IMAGE}:1.0.3@sha256:d1)"
                ),
            )),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "an empty store keeps the refs and waits for the dependency",
            old: ready("1.0.2", "", None),
            generation: 1,
            evaluation: evaluation(Err(PolicyFailure::NoTags)),
            conditions: vec![
                (RECONCILING, TRUE, "ProgressingWithRetry", IN_PROGRESS.into()),
                (READY, FALSE, "DependencyNotReady", NO_TAGS.into()),
            ],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Warning, "DependencyNotReady", NO_TAGS.into())),
            requeue: Requeue::After(Duration::from_secs(30)),
        },
        Case {
            name: "access denied on a new object",
            old: ImagePolicyStatus::default(),
            generation: 1,
            evaluation: evaluation(Err(denied.clone())),
            conditions: vec![
                (
                    RECONCILING,
                    TRUE,
                    "ProgressingWithRetry",
                    "processing object: new generation -1 -> 1".into(),
                ),
                (READY, FALSE, "AccessDenied", denied_msg.clone()),
            ],
            latest: None,
            previous: None,
            observed_generation: -1,
            event: Some((EventType::Warning, "AccessDenied", denied_msg.clone())),
            requeue: Requeue::Backoff,
        },
        Case {
            name: "an invalid policy stalls",
            old: ready("1.0.2", "", None),
            generation: 2,
            evaluation: evaluation(Err(invalid.clone())),
            conditions: vec![
                (
                    STALLED,
                    TRUE,
                    "InvalidPolicy",
                    "invalid policy: improper constraint: *-*".into(),
                ),
                (
                    READY,
                    FALSE,
                    "InvalidPolicy",
                    "invalid policy: improper constraint: *-*".into(),
                ),
            ],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 2,
            event: Some((
                EventType::Warning,
                "InvalidPolicy",
                "invalid policy: improper constraint: *-*".into(),
            )),
            requeue: Requeue::AwaitChange,
        },
        Case {
            // ProgressiveStatus leaves a known Ready alone, and the finalizer copies Stalled
            // only over Ready=True or Unknown.
            name: "a stall after a failure keeps the failure's Ready, as Flux does",
            old: failed(vec![condition(READY, FALSE, "AccessDenied", &denied_msg)]),
            generation: 1,
            evaluation: evaluation(Err(invalid)),
            conditions: vec![
                (
                    STALLED,
                    TRUE,
                    "InvalidPolicy",
                    "invalid policy: improper constraint: *-*".into(),
                ),
                (READY, FALSE, "AccessDenied", denied_msg.clone()),
            ],
            latest: None,
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Warning, "AccessDenied", denied_msg.clone())),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "a digest failure reaches Ready through the finalizer",
            old: ready("1.0.2", "", None),
            generation: 1,
            evaluation: evaluation(Err(digest)),
            conditions: vec![
                (RECONCILING, TRUE, "ProgressingWithRetry", IN_PROGRESS.into()),
                (READY, FALSE, "Failed", digest_msg.clone()),
            ],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Warning, "Failed", digest_msg)),
            requeue: Requeue::Backoff,
        },
        Case {
            name: "recovery from an empty store",
            old: failed(vec![
                condition(RECONCILING, TRUE, "ProgressingWithRetry", IN_PROGRESS),
                condition(READY, FALSE, "DependencyNotReady", NO_TAGS),
            ]),
            generation: 1,
            evaluation: evaluation(Ok(image("1.0.2", ""))),
            conditions: vec![(READY, TRUE, "Succeeded", resolved_102.clone())],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Normal, "Succeeded", resolved_102)),
            requeue: Requeue::AwaitChange,
        },
        Case {
            name: "Always without interval stalls before any progress",
            old: ImagePolicyStatus::default(),
            generation: 1,
            evaluation: always(Err(PolicyFailure::IntervalNotConfigured)),
            conditions: vec![
                (
                    STALLED,
                    TRUE,
                    "IntervalNotConfigured",
                    "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'".into(),
                ),
                (
                    READY,
                    FALSE,
                    "IntervalNotConfigured",
                    "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'".into(),
                ),
            ],
            latest: None,
            previous: None,
            observed_generation: 1,
            event: Some((
                EventType::Warning,
                "IntervalNotConfigured",
                "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'".into(),
            )),
            requeue: Requeue::AwaitChange,
        },
        Case {
            // Flux's finalizer counts a requeue equal to the interval as success, then turns
            // the explicit Ready=False into an error.
            name: "an empty store when the interval equals --requeue-dependency",
            old: ready("1.0.2", "", None),
            generation: 1,
            evaluation: Evaluation {
                interval: Some(Duration::from_secs(30)),
                ..evaluation(Err(PolicyFailure::NoTags))
            },
            conditions: vec![(READY, FALSE, "DependencyNotReady", NO_TAGS.into())],
            latest: Some(image("1.0.2", "")),
            previous: None,
            observed_generation: 1,
            event: Some((EventType::Warning, "DependencyNotReady", NO_TAGS.into())),
            requeue: Requeue::Backoff,
        },
    ]
}

#[test]
fn evaluations_leave_fluxs_status_event_and_requeue() {
    for case in cases() {
        let verdict = compute(&case.old, &case.evaluation, &stamp(case.generation, 60));
        let name = case.name;
        assert_eq!(
            conditions_of(&verdict.status),
            case.conditions,
            "{name}: conditions"
        );
        assert_eq!(verdict.status.latest_ref, case.latest, "{name}: latestRef");
        assert_eq!(
            verdict.status.observed_previous_ref, case.previous,
            "{name}: previous"
        );
        assert_eq!(
            verdict.status.observed_generation, case.observed_generation,
            "{name}: observedGeneration"
        );
        let event = verdict
            .event
            .map(|e| (e.type_, Box::leak(e.reason.into_boxed_str()) as &str, e.message));
        assert_eq!(event, case.event, "{name}: event");
        assert_eq!(verdict.requeue, case.requeue, "{name}: requeue");
    }
}

/// Flux deletes Ready before its finalizer marks it True again, and its patch compares whole
/// conditions: every evaluation moves Ready's time, an unchanged one too (only a revision that
/// did not change, which evaluates nothing, keeps it). A failure's Ready that stays keeps it.
#[test]
fn ready_moves_on_every_success_and_stays_on_a_repeated_failure() {
    let old = ready("1.0.3", "", Some(image("1.0.2", "")));
    let verdict = compute(&old, &evaluation(Ok(image("1.0.3", ""))), &stamp(1, 600));
    let ready = find(&verdict.status.conditions, READY).unwrap();
    assert_eq!(ready.last_transition_time, stamp(1, 600).time());

    let first = compute(&old, &evaluation(Err(PolicyFailure::NoTags)), &stamp(1, 600)).status;
    let again = compute(&first, &evaluation(Err(PolicyFailure::NoTags)), &stamp(1, 900)).status;
    let ready = find(&again.conditions, READY).unwrap();
    assert_eq!(ready.last_transition_time, stamp(1, 600).time());
}

#[test]
fn the_handled_request_is_recorded_whatever_the_outcome() {
    for outcome in [Ok(image("1.0.2", "")), Err(PolicyFailure::NoTags)] {
        let evaluation = Evaluation {
            requested_at: Some("2026-01-01T00:00:00Z"),
            ..evaluation(outcome)
        };
        let verdict = compute(&ImagePolicyStatus::default(), &evaluation, &stamp(1, 0));
        assert_eq!(
            verdict.status.last_handled_reconcile_at.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
    }
    let kept = ImagePolicyStatus {
        last_handled_reconcile_at: Some("before".into()),
        ..ready("1.0.2", "", None)
    };
    let verdict = compute(&kept, &evaluation(Ok(image("1.0.2", ""))), &stamp(1, 0));
    assert_eq!(
        verdict.status.last_handled_reconcile_at.as_deref(),
        Some("before")
    );
}

#[test]
fn a_new_generation_is_persisted_as_progress_first() {
    let old = ready("1.0.2", "", None);
    assert_eq!(progress(&old, &stamp(1, 0)), None);
    let written = progress(&old, &stamp(2, 0)).unwrap();
    // Ready is known, so only Reconciling says what is going on.
    assert_eq!(
        conditions_of(&written),
        vec![
            (
                RECONCILING,
                TRUE,
                "Progressing",
                "processing object: new generation 1 -> 2".to_string()
            ),
            (
                READY,
                TRUE,
                "Succeeded",
                format!("Latest image tag for {IMAGE} resolved to 1.0.2")
            ),
        ]
    );
    let fresh = progress(&ImagePolicyStatus::default(), &stamp(1, 0)).unwrap();
    assert_eq!(
        conditions_of(&fresh),
        vec![
            (
                RECONCILING,
                TRUE,
                "Progressing",
                "processing object: new generation -1 -> 1".to_string()
            ),
            (
                READY,
                UNKNOWN,
                "Progressing",
                "processing object: new generation -1 -> 1".to_string()
            ),
        ]
    );
}

#[test]
fn ready_messages_are_fluxs() {
    // Flux's `TestComposeImagePolicyReadyMessage` shapes.
    let cases = [
        (
            image("1.0.0", ""),
            None,
            format!("Latest image tag for {IMAGE} resolved to 1.0.0"),
        ),
        (
            image("1.0.0", "sha256:a"),
            None,
            format!("Latest image tag for {IMAGE} resolved to 1.0.0 with digest sha256:a"),
        ),
        (
            image("1.0.0", ""),
            Some(image("1.0.0", "")),
            format!("Latest image tag for {IMAGE} resolved to 1.0.0"),
        ),
        (
            image("1.0.1", "sha256:b"),
            Some(image("1.0.0", "sha256:a")),
            format!(
                "Latest image tag for {IMAGE} resolved to 1.0.1 with digest sha256:b (previously {IMAGE}:1.0.0@sha256:a)"
            ),
        ),
    ];
    for (latest, previous, expected) in cases {
        assert_eq!(ready_message(&latest, previous.as_ref()), expected);
    }
}
