//! The source objects the controller's source watches keep, so that a pass reads its source
//! without a request. A store not yet synced, whose watch failed since its last good event, or
//! without the object, leaves the read to the API: a watch that keeps failing (an API server
//! restarted, resource versions expired) must not freeze a source at an old revision. Nor may a
//! store that is still catching up answer with an older state of an object than the API gave a
//! pass before: that pass's successor would apply an older revision, and prune.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::FutureExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::api::kustomization::SourceKind;
use crate::source::CachedSources;

/// The reflector stores of the watched source kinds.
#[derive(Default)]
pub(crate) struct SourceCache {
    stores: Mutex<HashMap<SourceKind, Store<DynamicObject>>>,
    /// Kinds whose watch failed, or is relisting, since its last complete list or event.
    unsure: Mutex<HashSet<SourceKind>>,
    /// The resourceVersion the API last answered for an object the store could not vouch for,
    /// until the store holds that version or a newer one.
    read_from_api: Mutex<HashMap<(SourceKind, String, String), u64>>,
}

fn resource_version(object: &DynamicObject) -> Option<u64> {
    object.metadata.resource_version.as_deref()?.parse().ok()
}

fn key_of(kind: SourceKind, object: &DynamicObject) -> (SourceKind, String, String) {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    (kind, namespace, object.metadata.name.clone().unwrap_or_default())
}

impl SourceCache {
    pub(crate) fn register(&self, kind: SourceKind, store: Store<DynamicObject>) {
        self.stores.lock().expect("source cache lock").insert(kind, store);
    }

    /// Follows the watch of `kind`: an error or the start of a relist makes its store unsure
    /// until the relist completes or a watch event arrives.
    pub(crate) fn observe<K>(&self, kind: SourceKind, item: &Result<watcher::Event<K>, watcher::Error>) {
        let mut unsure = self.unsure.lock().expect("source cache lock");
        match item {
            Err(error) => {
                tracing::debug!(kind = kind.as_str(), %error, "source watch failed");
                unsure.insert(kind);
            }
            Ok(watcher::Event::Init) => {
                unsure.insert(kind);
            }
            Ok(watcher::Event::InitDone) => {
                tracing::debug!(kind = kind.as_str(), "source watch synced");
                unsure.remove(&kind);
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                unsure.remove(&kind);
            }
            Ok(watcher::Event::InitApply(_)) => {}
        }
    }
}

impl CachedSources for SourceCache {
    /// The source object, when the store of its kind is synced, its watch healthy, and it holds
    /// the object at least as new as the API last answered for it.
    fn get(&self, kind: SourceKind, namespace: &str, name: &str) -> Option<DynamicObject> {
        if self.unsure.lock().expect("source cache lock").contains(&kind) {
            return None;
        }
        let store = self.stores.lock().expect("source cache lock").get(&kind)?.clone();
        store.wait_until_ready().now_or_never()?.ok()?;
        let key = ObjectRef::new_with(name, kind.api_resource()).within(namespace);
        let object = (*store.get(&key)?).clone();
        let mut read = self.read_from_api.lock().expect("source cache lock");
        let read_key = (kind, namespace.to_string(), name.to_string());
        if let Some(newest) = read.get(&read_key) {
            // A version that is no number cannot be ordered: the API answers again.
            if resource_version(&object).is_none_or(|held| held < *newest) {
                return None;
            }
            read.remove(&read_key);
        }
        Some(object)
    }

    fn read(&self, kind: SourceKind, object: &DynamicObject) {
        let Some(version) = resource_version(object) else {
            return;
        };
        let mut read = self.read_from_api.lock().expect("source cache lock");
        let newest = read.entry(key_of(kind, object)).or_insert(version);
        *newest = (*newest).max(version);
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;

    use super::*;

    #[test]
    fn a_failed_watch_leaves_the_read_to_the_api_until_it_recovers() {
        let kind = SourceKind::GitRepository;
        let source = DynamicObject::new("repo", &kind.api_resource()).within("ns");
        let mut writer = Writer::new(kind.api_resource());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(source.clone()));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let cache = SourceCache::default();
        cache.register(kind, writer.as_reader());
        assert!(cache.get(kind, "ns", "repo").is_some(), "a synced store is read");

        cache.observe::<DynamicObject>(kind, &Err(watcher::Error::NoResourceVersion));
        assert!(cache.get(kind, "ns", "repo").is_none(), "not after a watch error");
        cache.observe::<DynamicObject>(kind, &Ok(watcher::Event::Init));
        assert!(cache.get(kind, "ns", "repo").is_none(), "nor while relisting");
        cache.observe::<DynamicObject>(kind, &Ok(watcher::Event::InitDone));
        assert!(
            cache.get(kind, "ns", "repo").is_some(),
            "again once the relist is done"
        );
        cache.observe::<DynamicObject>(kind, &Err(watcher::Error::NoResourceVersion));
        cache.observe(kind, &Ok(watcher::Event::Apply(source)));
        assert!(
            cache.get(kind, "ns", "repo").is_some(),
            "or a watch event arrived"
        );
    }

    #[test]
    fn a_store_behind_what_the_api_answered_is_not_read() {
        let kind = SourceKind::GitRepository;
        let at = |version: &str| {
            let mut source = DynamicObject::new("repo", &kind.api_resource()).within("ns");
            source.metadata.resource_version = Some(version.into());
            source
        };
        let mut writer = Writer::new(kind.api_resource());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(at("90")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let cache = SourceCache::default();
        cache.register(kind, writer.as_reader());
        // the watch failed, a pass read the source from the API, then an event of another
        // object made the kind sure again while this object's update is still on its way
        cache.observe::<DynamicObject>(kind, &Err(watcher::Error::NoResourceVersion));
        cache.read(kind, &at("100"));
        cache.observe(kind, &Ok(watcher::Event::Apply(at("95"))));
        assert!(
            cache.get(kind, "ns", "repo").is_none(),
            "the store's version 90 is older than the 100 the API answered"
        );
        writer.apply_watcher_event(&watcher::Event::Apply(at("100")));
        assert_eq!(
            cache
                .get(kind, "ns", "repo")
                .and_then(|o| o.metadata.resource_version),
            Some("100".into()),
            "read again once the store holds what the API answered"
        );
        writer.apply_watcher_event(&watcher::Event::Apply(at("not-a-number")));
        assert!(
            cache.get(kind, "ns", "repo").is_some(),
            "nothing to compare with any more"
        );
    }
}
