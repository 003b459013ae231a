//! Whether an ImageRepository is scanned now (Flux's `shouldScan`), pure: the caller passes
//! the clock and what the store holds.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::ImageRepositoryStatus;

/// Why a scan runs now; the text is Flux's, shown as `scanning: <why>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanReason {
    FirstScan,
    ReconcileRequested,
    NewImageName,
    UpdatedExclusionList,
    NoTagsInDatabase,
    Interval,
}

impl ScanReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::FirstScan => "first scan",
            Self::ReconcileRequested => "reconcile requested",
            Self::NewImageName => "new image name",
            Self::UpdatedExclusionList => "updated exclusion list",
            Self::NoTagsInDatabase => "no tags in database",
            Self::Interval => "triggered by interval",
        }
    }
}

/// Scan now, or come back after the rest of the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    Now(ScanReason),
    After(Duration),
}

/// What the decision reads besides the status.
pub(crate) struct Observed<'a> {
    pub requested_at: Option<&'a str>,
    pub canonical_name: &'a str,
    pub exclusion_list: &'a [String],
    /// Tags in the store for this object (zero when it has no file).
    pub stored_tags: usize,
    pub interval: Duration,
    pub now: Timestamp,
}

/// Flux's order of reasons; the first that holds wins.
pub(crate) fn due(status: Option<&ImageRepositoryStatus>, seen: &Observed<'_>) -> Due {
    let Some(status) = status else {
        return Due::Now(ScanReason::FirstScan);
    };
    let Some(last) = &status.last_scan_result else {
        return Due::Now(ScanReason::FirstScan);
    };
    if let Some(requested) = seen.requested_at
        && Some(requested) != status.last_handled_reconcile_at.as_deref()
    {
        return Due::Now(ScanReason::ReconcileRequested);
    }
    if status.canonical_image_name.as_deref() != Some(seen.canonical_name) {
        return Due::Now(ScanReason::NewImageName);
    }
    // Compared as sets, as Flux does.
    let set = |list: &[String]| list.iter().cloned().collect::<BTreeSet<_>>();
    if set(seen.exclusion_list) != set(&status.observed_exclusion_list) {
        return Due::Now(ScanReason::UpdatedExclusionList);
    }
    if seen.stored_tags == 0 {
        return Due::Now(ScanReason::NoTagsInDatabase);
    }
    // A missing scan time is Go's zero time: long ago.
    let elapsed = last
        .scan_time
        .as_ref()
        .map(|t| seen.now.duration_since(t.0))
        .map_or(Duration::MAX, |d| Duration::try_from(d).unwrap_or(Duration::ZERO));
    match seen.interval.checked_sub(elapsed) {
        Some(remaining) if remaining >= Duration::from_secs(1) => Due::After(remaining),
        _ => Due::Now(ScanReason::Interval),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::image_repository::ScanResult;

    const T0: i64 = 1_767_225_600;

    /// (status, requested, canonical, exclusions, stored tags, now, expected)
    type Case<'a> = (
        Option<&'a ImageRepositoryStatus>,
        Option<&'a str>,
        &'a str,
        &'a [String],
        usize,
        i64,
        Due,
    );

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(T0 + second).unwrap()
    }

    fn scanned(second: i64) -> ImageRepositoryStatus {
        ImageRepositoryStatus {
            canonical_image_name: Some("index.docker.io/library/alpine".into()),
            observed_exclusion_list: vec![r"^.*\.sig$".into()],
            last_handled_reconcile_at: Some("a".into()),
            last_scan_result: Some(ScanResult {
                revision: Some("sha256:x".into()),
                tag_count: 3,
                scan_time: Some(Time(at(second))),
                latest_tags: vec![],
            }),
            ..ImageRepositoryStatus::default()
        }
    }

    #[test]
    fn reasons_in_flux_order_then_the_remaining_interval() {
        let sig = vec![r"^.*\.sig$".to_string()];
        let two = vec!["^x$".to_string(), r"^.*\.sig$".to_string()];
        let reordered = vec![r"^.*\.sig$".to_string(), "^x$".to_string()];
        let mut two_observed = scanned(0);
        two_observed.observed_exclusion_list = two.clone();
        let never = ImageRepositoryStatus::default();
        let (s0, s100) = (scanned(0), scanned(100));
        let five_min = Duration::from_secs(300);
        let cases: Vec<Case<'_>> = vec![
            (
                None,
                None,
                "index.docker.io/library/alpine",
                &sig,
                3,
                0,
                Due::Now(ScanReason::FirstScan),
            ),
            (
                Some(&never),
                Some("a"),
                "index.docker.io/library/alpine",
                &sig,
                3,
                0,
                Due::Now(ScanReason::FirstScan),
            ),
            (
                Some(&s0),
                Some("b"),
                "x.io/y",
                &[],
                0,
                10,
                Due::Now(ScanReason::ReconcileRequested),
            ),
            (
                Some(&s0),
                Some("a"),
                "ghcr.io/x/y",
                &sig,
                3,
                10,
                Due::Now(ScanReason::NewImageName),
            ),
            (
                Some(&s0),
                None,
                "index.docker.io/library/alpine",
                &two,
                3,
                10,
                Due::Now(ScanReason::UpdatedExclusionList),
            ),
            (
                Some(&two_observed),
                None,
                "index.docker.io/library/alpine",
                &reordered,
                3,
                10,
                Due::After(Duration::from_secs(290)),
            ),
            (
                Some(&s0),
                None,
                "index.docker.io/library/alpine",
                &sig,
                0,
                10,
                Due::Now(ScanReason::NoTagsInDatabase),
            ),
            (
                Some(&s0),
                Some("a"),
                "index.docker.io/library/alpine",
                &sig,
                3,
                60,
                Due::After(Duration::from_secs(240)),
            ),
            (
                Some(&s0),
                None,
                "index.docker.io/library/alpine",
                &sig,
                3,
                299,
                Due::After(Duration::from_secs(1)),
            ),
            (
                Some(&s0),
                None,
                "index.docker.io/library/alpine",
                &sig,
                3,
                300,
                Due::Now(ScanReason::Interval),
            ),
            (
                Some(&s0),
                None,
                "index.docker.io/library/alpine",
                &sig,
                3,
                9000,
                Due::Now(ScanReason::Interval),
            ),
            // A scan time in the future (clock skew) waits the whole interval, no more.
            (
                Some(&s100),
                None,
                "index.docker.io/library/alpine",
                &sig,
                3,
                0,
                Due::After(five_min),
            ),
        ];
        for (i, (status, requested_at, canonical_name, exclusion_list, stored_tags, now, want)) in
            cases.into_iter().enumerate()
        {
            let seen = Observed {
                requested_at,
                canonical_name,
                exclusion_list,
                stored_tags,
                interval: five_min,
                now: at(now),
            };
            assert_eq!(due(status, &seen), want, "case {i}");
        }
    }

    #[test]
    fn reasons_read_as_flux_writes_them() {
        assert_eq!(ScanReason::NoTagsInDatabase.as_str(), "no tags in database");
        assert_eq!(ScanReason::Interval.as_str(), "triggered by interval");
    }
}
