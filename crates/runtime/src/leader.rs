//! Leader election with a coordination.k8s.io/v1 Lease, so that of several replicas only one
//! reconciles. The decision is pure; the loop around it reads and writes the Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};

pub mod fence;

use fence::WriteFence;

/// What a candidate should do with the Lease as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nobody holds it, or the holder stopped renewing: take it over.
    TakeOver,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds it and renews it: wait.
    Wait,
}

/// Decides from the Lease spec. A holder whose last renewal is older than the lease duration
/// it announced has lost the Lease.
pub(crate) fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::TakeOver;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::TakeOver,
        Some(holder) if holder == identity => Decision::Renew,
        Some(_) => {
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            let expired = match &spec.renew_time {
                Some(MicroTime(renewed)) => renewed.as_second() + duration < now.as_second(),
                None => true,
            };
            if expired {
                Decision::TakeOver
            } else {
                Decision::Wait
            }
        }
    }
}

/// Holds (or waits for) one Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    /// Held open until "last renewal sent + renew deadline": the clients' writes stop there.
    fence: WriteFence,
}

/// How long a replica holds and renews its Lease.
pub struct LeaseTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: String,
        identity: String,
        timings: LeaseTimings,
        fence: WriteFence,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name,
            identity,
            lease_duration: timings.lease_duration,
            renew_deadline: timings.renew_deadline,
            retry_period: timings.retry_period,
            fence,
        }
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_hold().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired leader lease");
                    return;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, lease = %self.name, "leader election failed, retrying"),
            }
            tokio::time::sleep(self.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when it could not be renewed within the
    /// renew deadline, i.e. leadership is lost and this replica must stop reconciling. The
    /// deadline is checked before each renewal and bounds it, so a replica resumed after a
    /// pause (SIGSTOP, a frozen VM) or stuck on a hanging API server gives up at once; its
    /// writes already stopped at the deadline (the fence).
    pub async fn hold(&self) {
        loop {
            tokio::time::sleep(self.retry_period).await;
            let Some(left) = self.fence.remaining(std::time::Instant::now()) else {
                break;
            };
            match tokio::time::timeout(left, self.try_hold()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.name, "leader lease taken by another replica");
                    return;
                }
                Ok(Err(error)) => tracing::warn!(%error, lease = %self.name, "failed to renew leader lease"),
                Err(_) => break,
            }
        }
        tracing::error!(lease = %self.name, "leader lease not renewed within the renew deadline");
    }

    /// Gives the Lease up so another replica can take over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(error) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(%error, lease = %self.name, "failed to release leader lease");
        }
    }

    /// One round: true when we hold the Lease afterwards. Writes use the read resourceVersion,
    /// so two candidates racing for an expired Lease cannot both win.
    async fn try_hold(&self) -> Result<bool, kube::Error> {
        let sent = std::time::Instant::now();
        let held = self.write_lease().await?;
        if held {
            self.fence.allow_until(sent + self.renew_deadline);
        }
        Ok(held)
    }

    /// Reads the Lease and takes it over or renews it when `decide` says so.
    async fn write_lease(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let existing = self.api.get_opt(&self.name).await?;
        let decision = decide(
            existing.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            now,
        );
        let seconds = i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX);
        match (decision, existing) {
            (Decision::Wait, _) => Ok(false),
            (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                conflict_is_false(self.api.create(&PostParams::default(), &lease).await)
            }
            (decision, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if decision == Decision::TakeOver {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(MicroTime(now));
                conflict_is_false(self.api.replace(&self.name, &PostParams::default(), &lease).await)
            }
        }
    }
}

/// A write conflict means another candidate won this round.
fn conflict_is_false(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_at: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed_at).unwrap())),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::from_second(1000).unwrap();
        assert_eq!(decide(None, "me", now), Decision::TakeOver);
        // (holder, renewed at, lease duration, what "me" decides at 1000)
        let cases = [
            (None, 990, 35, Decision::TakeOver),
            (Some("me"), 990, 35, Decision::Renew),
            (Some("other"), 990, 35, Decision::Wait),
            // exactly at expiry
            (Some("other"), 965, 35, Decision::Wait),
            (Some("other"), 964, 35, Decision::TakeOver),
            // A released Lease (holder cleared) is free at once.
            (Some(""), 999, 1, Decision::TakeOver),
        ];
        for (holder, renewed_at, duration, expected) in cases {
            assert_eq!(
                decide(Some(&lease(holder, renewed_at, duration)), "me", now),
                expected,
                "holder {holder:?}, renewed at {renewed_at}, duration {duration}"
            );
        }
    }
}
