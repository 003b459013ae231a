//! What wakes a controller's reconcile of its own objects: their watch, in every namespace or
//! the runtime one and label-selected, filtered by Flux's predicates.

use std::hash::{Hash, Hasher};

use futures::{Stream, TryStreamExt};
use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use crate::options::RuntimeOptions;
use crate::watch_retry;

/// The annotation that asks for a reconcile now (`flux reconcile`).
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// What makes an object worth reconciling again (Flux's generation and requested-at
/// predicates), plus finalizer changes and deletion. Status writes and label edits do not.
pub fn trigger_hash(object: &impl Resource) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.meta().generation.hash(&mut hasher);
    object
        .annotations()
        .get(REQUESTED_AT_ANNOTATION)
        .hash(&mut hasher);
    object.finalizers().hash(&mut hasher);
    object.meta().deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// An API for every namespace, or only the runtime namespace when not watching them all.
pub fn watched<K>(client: &Client, runtime: &RuntimeOptions) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if runtime.watch_all_namespaces {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), &runtime.runtime_namespace)
    }
}

/// The watch settings of a controller's own kinds: `--watch-label-selector` shards them.
pub fn watch_config(runtime: &RuntimeOptions) -> watcher::Config {
    let config = watch_retry::config();
    if runtime.watch_label_selector.is_empty() {
        config
    } else {
        config.labels(&runtime.watch_label_selector)
    }
}

/// The controller's own objects of kind `K`: their cache, and the changes that trigger a
/// reconcile ([`trigger_hash`]). `seen` is told of every object the cache takes in (status
/// writes of ours the cache shows).
pub fn own_objects<K>(
    client: &Client,
    runtime: &RuntimeOptions,
    mut seen: impl FnMut(&K) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let objects = watch_retry::with_backoff(watcher(watched::<K>(client, runtime), watch_config(runtime)))
        .modify(|object: &mut K| object.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .inspect_ok(move |object| seen(object))
        .predicate_filter(trigger_hash, Default::default());
    (reader, objects)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn status_writes_and_labels_do_not_trigger_but_requests_spec_and_finalizers_do() {
        let mut base = ConfigMap::default();
        base.metadata.generation = Some(1);
        let mut labelled = base.clone();
        labelled.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        labelled.metadata.resource_version = Some("2".into());
        assert_eq!(trigger_hash(&base), trigger_hash(&labelled));

        let mut requested = base.clone();
        requested.metadata.annotations =
            Some([("reconcile.fluxcd.io/requestedAt".to_string(), "1".to_string())].into());
        assert_ne!(trigger_hash(&base), trigger_hash(&requested));

        let mut new_generation = base.clone();
        new_generation.metadata.generation = Some(2);
        assert_ne!(trigger_hash(&base), trigger_hash(&new_generation));

        let mut finalized = base.clone();
        finalized.metadata.finalizers = Some(vec!["finalizers.fluxcd.io".into()]);
        assert_ne!(trigger_hash(&base), trigger_hash(&finalized));

        let mut deleted = finalized.clone();
        deleted.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_ne!(trigger_hash(&finalized), trigger_hash(&deleted));
    }
}
