//! Shared metadata watches of the applied objects: one per (apiVersion, resource), not one per
//! Kustomization, over every object carrying the owner label `kustomize.toolkit.fluxcd.io/name`.
//! A kind's watch starts the first time a successful apply contains it.
//!
//! Per object a watch keeps only its live print (32 bytes, see the `fingerprint` module) under
//! `namespace/name`. While a watch is synced the fast path reads the prints from it instead of
//! listing, so a quiet interval sends no request. A watch is synced from its first complete list
//! until a watch error; the next event or relist (kube-runtime's watcher relists after 410 Gone)
//! syncs it again. Unsynced, or over [`MAX_OBJECTS_PER_KIND`], the fast path lists as before.
//!
//! A change of an object's print, or its deletion, that its owner did not write is announced
//! with the owner on the change channel, so that the controller can reconcile the owner at once.
//! A write is the owner's when the owner's field manager holds the newest managedFields entry of
//! the object: an edit by anyone else (kubectl, another controller) adds or renews an entry of
//! its own manager. Deletions are always announced; the owner's own prune costs it one extra
//! no-op pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::fingerprint::live_digest;
use super::inspect::Planning;
use super::plan::Desired;
use super::{Applier, Owner};
use crate::api::conditions::keys;

/// Objects kept per kind at most (about 180 bytes each with a 35-byte `namespace/name`); a kind
/// with more is listed instead.
const MAX_OBJECTS_PER_KIND: usize = 100_000;

/// Owner announcements waiting for the controller; when full, an announcement is dropped and the
/// owner's interval catches the change.
const CHANGES_BUFFER: usize = 4096;

/// One kind's live prints, by `namespace/name`.
#[derive(Default)]
struct KindStore {
    synced: AtomicBool,
    prints: Mutex<HashMap<String, [u8; 32]>>,
}

/// The shared watches of one cluster, and where they announce out-of-band changes.
pub struct LiveWatches {
    client: Client,
    kinds: Mutex<HashMap<String, Arc<KindStore>>>,
    changes: mpsc::Sender<Owner>,
}

fn object_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn kind_key(resource: &ApiResource) -> String {
    format!("{}/{}", resource.api_version, resource.plural)
}

/// The owner named by an object's owner labels.
fn owner_of(meta: &ObjectMeta) -> Option<Owner> {
    let labels = meta.labels.as_ref()?;
    Some(Owner::new(
        labels.get(keys::NAME_LABEL)?,
        labels.get(keys::NAMESPACE_LABEL)?,
    ))
}

/// Whether the newest managedFields entry of the main resource is ours alone: then the write
/// that produced this state was one of our applies.
fn written_by_us(meta: &ObjectMeta) -> bool {
    let entries: Vec<_> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or_default().is_empty())
        .collect();
    let newest = entries.iter().filter_map(|e| e.time.as_ref()).max();
    let Some(newest) = newest else { return false };
    let at_newest: Vec<_> = entries
        .iter()
        .filter(|e| e.time.as_ref() == Some(newest))
        .collect();
    at_newest
        .iter()
        .all(|e| e.manager.as_deref() == Some(keys::APPLY_FIELD_MANAGER))
}

/// The print a watch keeps for one object's metadata.
fn digest_of(meta: &ObjectMeta) -> [u8; 32] {
    live_digest(&serde_json::to_value(meta).unwrap_or(Value::Null))
}

impl LiveWatches {
    /// Watches of `client`'s cluster; owners of out-of-band changes arrive on the receiver.
    pub fn new(client: Client) -> (Arc<Self>, mpsc::Receiver<Owner>) {
        let (changes, receiver) = mpsc::channel(CHANGES_BUFFER);
        let watches = Self {
            client,
            kinds: Mutex::default(),
            changes,
        };
        (Arc::new(watches), receiver)
    }

    /// Starts the watch of `resource` unless it runs already.
    fn ensure(&self, resource: &ApiResource) {
        let mut kinds = self.kinds.lock().expect("live watches lock");
        let key = kind_key(resource);
        if kinds.contains_key(&key) {
            return;
        }
        let store = Arc::new(KindStore::default());
        kinds.insert(key.clone(), store.clone());
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(self.client.clone(), resource);
        tokio::spawn(watch_kind(api, key, store, self.changes.clone()));
    }

    /// The store of `resource` when its watch is synced.
    fn synced(&self, resource: &ApiResource) -> Option<Arc<KindStore>> {
        let kinds = self.kinds.lock().expect("live watches lock");
        kinds
            .get(&kind_key(resource))
            .filter(|s| s.synced.load(Ordering::Acquire))
            .cloned()
    }
}

/// Runs one kind's watch until its resource goes away or it grows past the bound.
async fn watch_kind(
    api: Api<PartialObjectMeta<DynamicObject>>,
    key: String,
    store: Arc<KindStore>,
    changes: mpsc::Sender<Owner>,
) {
    let config = flux_runtime::watch_retry::config().labels(keys::NAME_LABEL);
    let mut events = std::pin::pin!(flux_runtime::watch_retry::with_backoff(watcher(api, config)));
    let mut relisted: Option<HashMap<String, [u8; 32]>> = None;
    let announce = |meta: &ObjectMeta| {
        if let Some(owner) = owner_of(meta) {
            // full: dropped, the owner's interval catches the change
            let _ = changes.try_send(owner);
        }
    };
    while let Some(event) = events.next().await {
        let event: watcher::Event<PartialObjectMeta<DynamicObject>> = match event {
            Ok(event) => event,
            Err(error) => {
                store.synced.store(false, Ordering::Release);
                tracing::debug!(kind = %key, %error, "live metadata watch failed");
                continue;
            }
        };
        let mut prints = store.prints.lock().expect("live prints lock");
        match event {
            watcher::Event::Init => {
                store.synced.store(false, Ordering::Release);
                relisted = Some(HashMap::new());
            }
            watcher::Event::InitApply(obj) => {
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(
                        object_key(&obj.namespace().unwrap_or_default(), &obj.name_any()),
                        digest_of(&obj.metadata),
                    );
                }
            }
            watcher::Event::InitDone => {
                let listed = relisted.take().unwrap_or_default();
                if listed.len() > MAX_OBJECTS_PER_KIND {
                    prints.clear();
                    tracing::info!(kind = %key, objects = listed.len(), "too many objects to keep their metadata: listing them instead");
                    return;
                }
                *prints = listed;
                store.synced.store(true, Ordering::Release);
                tracing::info!(kind = %key, objects = prints.len(), "live metadata watch synced");
            }
            watcher::Event::Apply(obj) => {
                let object = object_key(&obj.namespace().unwrap_or_default(), &obj.name_any());
                let digest = digest_of(&obj.metadata);
                let before = prints.insert(object, digest);
                if before.is_some_and(|b| b != digest) && !written_by_us(&obj.metadata) {
                    announce(&obj.metadata);
                }
                if prints.len() > MAX_OBJECTS_PER_KIND {
                    store.synced.store(false, Ordering::Release);
                    prints.clear();
                    return;
                }
                store.synced.store(true, Ordering::Release);
            }
            watcher::Event::Delete(obj) => {
                prints.remove(&object_key(&obj.namespace().unwrap_or_default(), &obj.name_any()));
                announce(&obj.metadata);
                store.synced.store(true, Ordering::Release);
            }
        }
    }
}

impl Applier {
    /// Starts the shared watches of the kinds in this apply.
    pub(super) fn watch_kinds(&self, desired: &[Desired]) {
        if let Some(watches) = &self.watches {
            for d in desired {
                watches.ensure(&d.kind.resource);
            }
        }
    }

    /// The objects at `indices` whose kind's watch is synced and holds none of that kind's
    /// objects here: a LIST of ours would show none of them either, so they are planned as
    /// unlisted (the dry-run's answer tells if one exists after all). The others come second.
    pub(super) fn unseen_kinds(
        &self,
        p: &Planning<'_>,
        indices: impl Iterator<Item = usize>,
    ) -> (Vec<usize>, Vec<usize>) {
        let mut by_kind: HashMap<String, Vec<usize>> = HashMap::new();
        for i in indices {
            by_kind
                .entry(kind_key(&p.desired[i].kind.resource))
                .or_default()
                .push(i);
        }
        let (mut unseen, mut seen) = (Vec::new(), Vec::new());
        for indices in by_kind.into_values() {
            let resource = &p.desired[indices[0]].kind.resource;
            let store = self.watches.as_ref().and_then(|w| w.synced(resource));
            let none_held = store.is_some_and(|store| {
                let prints = store.prints.lock().expect("live prints lock");
                indices.iter().all(|i| {
                    let o = &p.desired[*i].object;
                    !prints.contains_key(&object_key(&o.namespace, &o.name))
                })
            });
            if none_held {
                unseen.extend(indices)
            } else {
                seen.extend(indices)
            }
        }
        (unseen, seen)
    }

    /// The live prints of the objects at `indices` whose kind's watch is synced (objects it does
    /// not hold are left out, as a LIST leaves them out), and the indices of the other kinds.
    pub(super) fn watched_prints(
        &self,
        p: &Planning<'_>,
        indices: impl Iterator<Item = usize>,
    ) -> (Vec<(usize, String)>, Vec<usize>) {
        let Some(watches) = &self.watches else {
            return (Vec::new(), indices.collect());
        };
        let mut stores: HashMap<String, Option<Arc<KindStore>>> = HashMap::new();
        let mut watched = Vec::new();
        let mut unwatched = Vec::new();
        for i in indices {
            let d = &p.desired[i];
            let resource = &d.kind.resource;
            let store = stores
                .entry(kind_key(resource))
                .or_insert_with(|| watches.synced(resource));
            let Some(store) = store else {
                unwatched.push(i);
                continue;
            };
            let prints = store.prints.lock().expect("live prints lock");
            if let Some(print) = prints.get(&object_key(&d.object.namespace, &d.object.name)) {
                watched.push((i, hex::encode(print)));
            }
        }
        (watched, unwatched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applier::fingerprint::live_print;
    use serde_json::json;

    fn meta(value: Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_watch_print_is_the_print_of_the_raw_metadata() {
        // what the API server sends, as a LIST or an apply response carries it
        let raw = json!({"name": "web", "namespace": "apps", "uid": "u-1", "resourceVersion": "42",
        "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"kustomize.toolkit.fluxcd.io/name": "app", "kustomize.toolkit.fluxcd.io/namespace": "apps"},
        "annotations": {"a": "b"},
        "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
             "time": "2026-01-01T00:00:01Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {}}}, "f:spec": {"f:replicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
             "time": "2026-01-01T00:00:02Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {}}}
        ]});
        assert_eq!(hex::encode(digest_of(&meta(raw.clone()))), live_print(&raw));
        let plain = json!({"name": "cm", "uid": "u-2", "resourceVersion": "7"});
        assert_eq!(hex::encode(digest_of(&meta(plain.clone()))), live_print(&plain));
    }

    #[test]
    fn a_write_is_ours_only_when_we_hold_the_newest_entry_alone() {
        let entry = |manager: &str, time: &str| json!({"manager": manager, "operation": "Update", "time": time, "fieldsType": "FieldsV1", "fieldsV1": {}});
        let with = |entries: Vec<Value>| meta(json!({"name": "x", "managedFields": entries}));
        let ours = entry(keys::APPLY_FIELD_MANAGER, "2026-01-01T00:00:05Z");
        assert!(written_by_us(&with(vec![
            entry("kubectl-edit", "2026-01-01T00:00:01Z"),
            ours.clone()
        ])));
        assert!(!written_by_us(&with(vec![
            ours.clone(),
            entry("kubectl-edit", "2026-01-01T00:00:09Z")
        ])));
        assert!(
            !written_by_us(&with(vec![ours.clone(), entry("e2e", "2026-01-01T00:00:05Z")])),
            "a tie is not ours"
        );
        let mut status = entry("kubelet", "2026-01-01T00:00:09Z");
        status["subresource"] = "status".into();
        assert!(
            written_by_us(&with(vec![ours.clone(), status])),
            "status writes do not count"
        );
        assert!(!written_by_us(&with(Vec::new())));
    }
}
