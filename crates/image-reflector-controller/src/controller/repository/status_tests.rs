use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;

fn pass(generation: i64, requested_at: Option<&str>) -> Pass<'_> {
    Pass {
        generation,
        requested_at,
        stamp: Stamp {
            generation,
            now: Timestamp::from_second(1_767_225_600).unwrap(),
        },
    }
}

/// (type, status, reason, message) of each condition, in order.
fn summary(status: &ImageRepositoryStatus) -> Vec<(String, String, String, String)> {
    status
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        })
        .collect()
}

fn row(t: &str, s: &str, r: &str, m: &str) -> (String, String, String, String) {
    (t.into(), s.into(), r.into(), m.into())
}

fn scan(count: i64, revision: &str, latest: &[&str]) -> ScanResult {
    ScanResult {
        revision: Some(revision.into()),
        tag_count: count,
        scan_time: Some(Time(Timestamp::from_second(1_767_225_600).unwrap())),
        latest_tags: latest.iter().map(|t| t.to_string()).collect(),
    }
}

fn done(scan: Option<ScanResult>) -> Outcome {
    Outcome::Done {
        canonical_name: "127.0.0.1:5000/app".into(),
        exclusion_list: vec![r"^.*\.sig$".into()],
        scan,
    }
}

#[test]
fn a_first_scan_is_ready_with_flux_message_and_observations() {
    let status = next_status(
        None,
        &pass(1, None),
        &done(Some(scan(3, "sha256:abc", &["c", "b", "a"]))),
    );
    assert_eq!(
        summary(&status),
        [row(
            "Ready",
            "True",
            "Succeeded",
            "successful scan: found 3 tags with checksum sha256:abc"
        )]
    );
    assert_eq!(status.observed_generation, 1);
    assert_eq!(status.canonical_image_name.as_deref(), Some("127.0.0.1:5000/app"));
    assert_eq!(status.observed_exclusion_list, [r"^.*\.sig$"]);
    assert_eq!(status.last_scan_result.unwrap().latest_tags, ["c", "b", "a"]);
    assert_eq!(status.last_handled_reconcile_at, None);
}

#[test]
fn a_pass_without_scan_keeps_the_result_and_records_the_request() {
    let first = next_status(
        None,
        &pass(1, None),
        &done(Some(scan(2, "sha256:1", &["b", "a"]))),
    );
    let second = next_status(Some(&first), &pass(1, Some("now")), &done(None));
    assert_eq!(second.last_scan_result, first.last_scan_result);
    assert_eq!(second.conditions, first.conditions, "same message: no transition");
    assert_eq!(second.last_handled_reconcile_at.as_deref(), Some("now"));
}

#[test]
fn an_invalid_image_stalls_and_observes_the_generation() {
    let message = "image 'x:1' should not include a tag; remove ':1'";
    let before = next_status(None, &pass(1, None), &done(Some(scan(1, "sha256:1", &["a"]))));
    let status = next_status(
        Some(&before),
        &pass(2, None),
        &Outcome::Stalled {
            reason: reason::IMAGE_URL_INVALID,
            message: message.into(),
        },
    );
    assert_eq!(
        summary(&status),
        [
            row("Stalled", "True", "ImageURLInvalid", message),
            row("Ready", "False", "ImageURLInvalid", message),
        ]
    );
    assert_eq!(status.observed_generation, 2);
}

#[test]
fn a_failure_keeps_reconciling_with_retry_and_the_old_generation() {
    let cases = [
        (None, 1, "reconciliation in progress"),
        (None, 2, "processing object: new generation 1 -> 2"),
        (Some(ScanReason::FirstScan), 2, "scanning: first scan"),
    ];
    let before = next_status(None, &pass(1, None), &done(Some(scan(1, "sha256:1", &["a"]))));
    for (scanning, generation, progress) in cases {
        let message = "scan failed: GET http://x/v2/app/tags/list?n=1000: connection refused";
        let status = next_status(
            Some(&before),
            &pass(generation, None),
            &Outcome::Failed {
                reason: reason::READ_OPERATION_FAILED,
                message: message.into(),
                scanning,
            },
        );
        assert_eq!(
            summary(&status),
            [
                row("Reconciling", "True", "ProgressingWithRetry", progress),
                row("Ready", "False", "ReadOperationFailed", message),
            ]
        );
        assert_eq!(status.observed_generation, 1);
        assert_eq!(status.last_scan_result, before.last_scan_result);
    }
}

#[test]
fn recovery_clears_reconciling_and_stalled() {
    let failed = next_status(
        None,
        &pass(1, None),
        &Outcome::Failed {
            reason: reason::AUTHENTICATION_FAILED,
            message: "failed to configure authentication options: secrets \"docker\" not found".into(),
            scanning: None,
        },
    );
    assert_eq!(
        failed.observed_generation, -1,
        "unobserved until Ready or Stalled"
    );
    let status = next_status(
        Some(&failed),
        &pass(1, None),
        &done(Some(scan(0, "sha256:e", &[]))),
    );
    assert_eq!(
        summary(&status),
        [row(
            "Ready",
            "True",
            "Succeeded",
            "successful scan: found 0 tags with checksum sha256:e"
        )]
    );
}

#[test]
fn events_only_when_ready_changes() {
    let ok = next_status(None, &pass(1, None), &done(Some(scan(1, "sha256:1", &["a"]))));
    let ok_again = next_status(Some(&ok), &pass(1, None), &done(None));
    let new_tags = next_status(
        Some(&ok),
        &pass(1, None),
        &done(Some(scan(2, "sha256:2", &["b", "a"]))),
    );
    let fail = |old: &ImageRepositoryStatus| {
        next_status(
            Some(old),
            &pass(1, None),
            &Outcome::Failed {
                reason: reason::READ_OPERATION_FAILED,
                message: "scan failed: x".into(),
                scanning: Some(ScanReason::Interval),
            },
        )
    };
    let failed = fail(&ok);
    let failed_again = fail(&failed);
    let info = |m: &str| Some((Severity::Info, "Succeeded".to_string(), m.to_string()));
    assert_eq!(
        announcement(&[], &ok.conditions),
        info("successful scan: found 1 tags with checksum sha256:1")
    );
    assert_eq!(announcement(&ok.conditions, &ok_again.conditions), None);
    assert_eq!(
        announcement(&ok.conditions, &new_tags.conditions),
        info("successful scan: found 2 tags with checksum sha256:2")
    );
    assert_eq!(
        announcement(&ok.conditions, &failed.conditions),
        Some((
            Severity::Error,
            "ReadOperationFailed".into(),
            "scan failed: x".into()
        ))
    );
    assert_eq!(announcement(&failed.conditions, &failed_again.conditions), None);
    assert_eq!(
        announcement(&failed.conditions, &ok.conditions),
        info("successful scan: found 1 tags with checksum sha256:1")
    );
}

#[test]
fn next_scan_messages_are_flux_trace_messages() {
    let five = Duration::from_secs(300);
    assert_eq!(
        next_scan_message(true, false, five),
        "tags did not change, next scan in 5m0s"
    );
    assert_eq!(
        next_scan_message(true, true, five),
        "successful scan, next scan in 5m0s"
    );
    assert_eq!(
        next_scan_message(false, false, Duration::from_millis(271_200)),
        "no change in repository configuration since last scan, next scan in 4m31.2s"
    );
}
