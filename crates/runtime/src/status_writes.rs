//! Status writes: a merge patch of an object's status, and the writes this replica made that
//! its cache of the objects does not show yet.
//!
//! A pass triggered by another object (a source's new artifact, a parked wait's verdict) reads
//! the object from the cache, which lags the status the pass before it wrote by a watch round
//! trip. Started from that older status, a Kustomization pass took its own last revision for
//! new work and wrote "Fetching" over a Ready it had just written. Such a pass starts from the
//! status it wrote last instead; the cache showing that write ends the lag.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{Api, Patch, PatchParams};
use kube::core::object::HasStatus;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::conditions::reason;
use crate::error::{Retry, StepError};

/// `namespace/name`: how the runtime keys what it keeps per object.
pub fn object_key(object: &impl Resource) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

fn to_json(status: &impl Serialize) -> Value {
    serde_json::to_value(status).expect("a status serializes to JSON")
}

/// `new` as a merge patch that replaces any of `bases`: a key a base has and `new` lacks is
/// set to null (removed), in nested objects too. Lists are replaced whole by a merge patch.
fn removing_absent(mut new: Value, bases: &[Value]) -> Value {
    if let Value::Object(fields) = &mut new {
        for base in bases {
            let Value::Object(old) = base else { continue };
            for (name, old_value) in old {
                match fields.get_mut(name) {
                    None => {
                        fields.insert(name.clone(), Value::Null);
                    }
                    Some(value @ Value::Object(_)) if old_value.is_object() => {
                        *value = removing_absent(value.take(), std::slice::from_ref(old_value));
                    }
                    Some(_) => {}
                }
            }
        }
    }
    new
}

/// The status subresource could not be written.
#[derive(Debug, thiserror::Error)]
#[error("failed to update status: {0}")]
pub struct StatusWriteError(#[source] kube::Error);

impl StepError for StatusWriteError {
    fn reason(&self) -> &'static str {
        reason::RECONCILIATION_FAILED
    }

    fn retry(&self) -> Retry {
        Retry::Backoff
    }
}

/// The resource versions kept per object, so a cached object can be recognised as an earlier
/// write of ours (a Kustomization pass writes up to four statuses). Resource versions are opaque:
/// they are matched, never ordered.
const VERSIONS_KEPT: usize = 8;

/// The status writes of this replica to objects of the kind `K` by the controller's field
/// manager, per object key.
pub struct OwnWrites<K: HasStatus> {
    field_manager: &'static str,
    writes: Mutex<HashMap<String, Written<K::Status>>>,
}

impl<K: HasStatus> OwnWrites<K> {
    pub fn new(field_manager: &'static str) -> Self {
        Self {
            field_manager,
            writes: Mutex::default(),
        }
    }
}

impl<K> OwnWrites<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + HasStatus
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::Status: Serialize + Clone,
{
    /// A JSON merge patch of the status subresource of `object` by the controller's field
    /// manager (operation Update, as Flux's patch helper writes status; a write from an older
    /// view wins, as it does in Flux), remembered here until the cache shows it.
    pub async fn write_status(
        &self,
        client: &Client,
        object: &K,
        status: &K::Status,
    ) -> Result<(), StatusWriteError> {
        let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
        let key = object_key(object);
        // What the stored status may hold: the cached one and the last write the cache lags.
        let earlier = [object.status().cloned(), self.ahead(&key)];
        let bases: Vec<Value> = earlier.iter().flatten().map(to_json).collect();
        let body = serde_json::json!({"status": removing_absent(to_json(status), &bases)});
        let params = PatchParams {
            field_manager: Some(self.field_manager.into()),
            ..PatchParams::default()
        };
        match api
            .patch_status(&object.name_any(), &params, &Patch::Merge(&body))
            .await
        {
            Ok(written) => {
                self.wrote(
                    &key,
                    object.resource_version(),
                    written.resource_version(),
                    status,
                );
                Ok(())
            }
            // Gone while we worked: nothing left to report on.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(StatusWriteError(error)),
        }
    }
}

struct Written<S> {
    /// Versions behind the last write, oldest first; the last is the last write.
    versions: Vec<String>,
    /// The status of the last write, until the cache shows it.
    ahead: Option<S>,
}

impl<K> OwnWrites<K>
where
    K: Resource + HasStatus,
    K::Status: Clone,
{
    /// A status write of `key` by a pass that read version `read` returned version `version`:
    /// both are behind the status written.
    pub(crate) fn wrote(&self, key: &str, read: Option<String>, version: Option<String>, status: &K::Status) {
        let Some(version) = version else { return };
        let mut writes = self.writes.lock().expect("own writes lock");
        let written = writes.entry(key.to_string()).or_insert_with(|| Written {
            versions: Vec::new(),
            ahead: None,
        });
        for version in read.into_iter().chain([version]) {
            written.versions.retain(|v| *v != version);
            if written.versions.len() == VERSIONS_KEPT {
                written.versions.remove(0);
            }
            written.versions.push(version);
        }
        written.ahead = Some(status.clone());
    }

    /// The status of the last write while the cache does not show it.
    fn ahead(&self, key: &str) -> Option<K::Status> {
        let writes = self.writes.lock().expect("own writes lock");
        writes.get(key).and_then(|written| written.ahead.clone())
    }

    /// The cache shows `object`: once that is the last write, the cache is not behind.
    pub fn seen(&self, key: &str, object: &K) {
        let mut writes = self.writes.lock().expect("own writes lock");
        if let Some(written) = writes.get_mut(key)
            && written.versions.last() == object.resource_version().as_ref()
        {
            written.ahead = None;
        }
    }

    /// The status to start a pass of `object` from: the last one written, when `object` is an
    /// earlier write of ours (the cache lags); `None` when `object` is current or someone else
    /// wrote it.
    pub fn ahead_of(&self, key: &str, object: &K) -> Option<K::Status> {
        let writes = self.writes.lock().expect("own writes lock");
        let written = writes.get(key)?;
        let version = object.resource_version()?;
        let earlier = &written.versions[..written.versions.len().saturating_sub(1)];
        if earlier.contains(&version) {
            written.ahead.clone()
        } else {
            None
        }
    }

    pub fn forget(&self, key: &str) {
        self.writes.lock().expect("own writes lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use kube::core::{ApiResource, GroupVersionKind, Object};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_status_patch_removes_what_the_new_status_lacks() {
        let new = json!({"observedGeneration": 2, "inventory": {"entries": []},
            "conditions": [{"type": "Ready"}]});
        let cached = json!({"observedGeneration": 1, "lastAppliedRevision": "main@sha1:a",
            "inventory": {"entries": [{"id": "x"}], "old": true},
            "conditions": [{"type": "Ready"}, {"type": "Reconciling"}]});
        let written = json!({"lastHandledReconcileAt": "now"});
        assert_eq!(
            removing_absent(new.clone(), &[cached, written]),
            json!({"observedGeneration": 2, "lastAppliedRevision": null,
                "lastHandledReconcileAt": null,
                "inventory": {"entries": [], "old": null},
                "conditions": [{"type": "Ready"}]})
        );
        assert_eq!(
            removing_absent(new.clone(), &[]),
            new,
            "nothing stored, nothing removed"
        );
    }

    /// A kind's status, reduced to what tells the writes apart.
    #[derive(Clone, Debug, PartialEq)]
    struct Status {
        last_applied_revision: Option<String>,
    }

    fn at(version: &str) -> Object<(), Status> {
        let kind = GroupVersionKind::gvk("example.fluxcd.io", "v1", "Example");
        let mut object = Object::new("app", &ApiResource::from_gvk(&kind), ()).within("ns");
        object.metadata.resource_version = Some(version.into());
        object
    }

    fn status(revision: &str) -> Status {
        Status {
            last_applied_revision: Some(revision.into()),
        }
    }

    #[test]
    fn a_cached_earlier_write_of_ours_starts_from_the_last_one() {
        let writes = OwnWrites::new("gotk-example-controller");
        // A pass read version 7 (the finalizer added) and wrote 10, then 12.
        writes.wrote("ns/app", Some("7".into()), Some("10".into()), &status("fetching"));
        writes.wrote("ns/app", Some("7".into()), Some("12".into()), &status("applied"));

        for behind in ["7", "10"] {
            let ahead = writes.ahead_of("ns/app", &at(behind));
            assert_eq!(
                ahead.and_then(|s| s.last_applied_revision).as_deref(),
                Some("applied"),
                "{behind}"
            );
        }
        assert_eq!(
            writes.ahead_of("ns/app", &at("12")),
            None,
            "the cache shows the last write"
        );
        assert_eq!(
            writes.ahead_of("ns/app", &at("13")),
            None,
            "someone else's write since"
        );
        assert_eq!(writes.ahead_of("ns/other", &at("10")), None);

        writes.seen("ns/app", &at("10"));
        assert!(writes.ahead_of("ns/app", &at("10")).is_some(), "still behind");
        writes.seen("ns/app", &at("12"));
        assert_eq!(writes.ahead_of("ns/app", &at("10")), None, "caught up");

        // Caught up between two writes of a pass: the earlier ones still count as behind.
        writes.wrote(
            "ns/app",
            Some("12".into()),
            Some("14".into()),
            &status("fetching again"),
        );
        writes.seen("ns/app", &at("14"));
        writes.wrote(
            "ns/app",
            Some("12".into()),
            Some("16".into()),
            &status("applied again"),
        );
        let ahead = writes.ahead_of("ns/app", &at("14"));
        assert_eq!(
            ahead.and_then(|s| s.last_applied_revision).as_deref(),
            Some("applied again")
        );
    }
}
