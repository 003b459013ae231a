//! The source objects the controller's source watches keep, so that a pass reads its source
//! without a request. A store not yet synced, whose watch failed since its last good event, or
//! without the object, leaves the read to the API: a watch that keeps failing (an API server
//! restarted, resource versions expired) must not freeze a source at an old revision.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures::FutureExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::api::kustomization::SourceKind;

/// The reflector stores of the watched source kinds.
#[derive(Default)]
pub(crate) struct SourceCache {
    stores: Mutex<HashMap<SourceKind, Store<DynamicObject>>>,
    /// Kinds whose watch failed, or is relisting, since its last complete list or event.
    unsure: Mutex<HashSet<SourceKind>>,
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
            Err(_) | Ok(watcher::Event::Init) => {
                unsure.insert(kind);
            }
            Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                unsure.remove(&kind);
            }
            Ok(watcher::Event::InitApply(_)) => {}
        }
    }

    /// The source object, when the store of its kind is synced, its watch healthy, and it holds
    /// the object.
    pub(crate) fn get(&self, kind: SourceKind, namespace: &str, name: &str) -> Option<DynamicObject> {
        if self.unsure.lock().expect("source cache lock").contains(&kind) {
            return None;
        }
        let store = self.stores.lock().expect("source cache lock").get(&kind)?.clone();
        store.wait_until_ready().now_or_never()?.ok()?;
        let key = ObjectRef::new_with(name, kind.api_resource()).within(namespace);
        store.get(&key).map(|object| (*object).clone())
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
}
