//! The waits of an apply: until what a waited-for stage wrote is Current, and until an object
//! being recreated is gone.

use kube::api::DeleteParams;
use tokio::time::Instant;

use super::http::{api_message, api_url, delete, get, is_not_found};
use super::plan::Desired;
use super::{Applier, FailureKind, ObjectError};
use crate::health::kstatus::{self, ObjectStatus};

impl Applier {
    /// Deletes the object in the background and waits, bounded by `wait_timeout`, until it is
    /// gone, so that it can be created anew.
    pub(super) async fn delete_and_wait(&self, url: &str, name: &str) -> Result<(), String> {
        match delete(self.client(), url, name, &DeleteParams::background()).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_message("failed to delete object", &e)),
        }
        let deadline = Instant::now() + self.options.wait_timeout;
        loop {
            match get(self.client(), url, name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(self.options.retry_interval / 4).await
                }
                Ok(Some(_)) => {
                    return Err(format!(
                        "failed to wait for object to be deleted: still present after {:?}",
                        self.options.wait_timeout
                    ));
                }
                Err(e) => return Err(api_message("failed to wait for object to be deleted", &e)),
            }
        }
    }

    /// Waits until every object written in a waited-for stage is kstatus Current: CRDs
    /// Established, namespaces not terminating, a *Class accepted by its controller where it
    /// reports a status (polled every `retry_interval`, bounded by `wait_timeout`, like Flux's
    /// 2 s and 60 s). Objects still not Current are reported with their status.
    pub(super) async fn wait_until_current(&self, objects: &[&Desired]) -> Result<(), Vec<ObjectError>> {
        let deadline = Instant::now() + self.options.wait_timeout;
        loop {
            let mut pending = Vec::new();
            for d in objects {
                let url = api_url(&d.kind, &d.object.namespace);
                let status = match get(self.client(), &url, &d.object.name).await {
                    Ok(Some(live)) => kstatus::compute(&live),
                    Ok(None) => ObjectStatus::new(kstatus::Status::NotFound, "not found"),
                    Err(e) => ObjectStatus::new(kstatus::Status::Unknown, api_message("query failed", &e)),
                };
                if status.status != kstatus::Status::Current {
                    pending.push((d, status));
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(pending
                    .into_iter()
                    .map(|(d, status)| ObjectError {
                        subject: d.subject(),
                        kind: FailureKind::Api,
                        message: format!(
                            "not ready after {:?} (applied in an earlier stage, waited for before the next): {}: {}",
                            self.options.wait_timeout, status.status, status.message
                        ),
                    })
                    .collect());
            }
            tokio::time::sleep(self.options.retry_interval).await;
        }
    }
}
