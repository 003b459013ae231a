//! The source objects the controller's source watches keep, so that a pass reads its source
//! without a request. A store not yet synced, or without the object, leaves the read to the API.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::FutureExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::kustomization::SourceKind;

/// The reflector stores of the watched source kinds.
#[derive(Default)]
pub(crate) struct SourceCache {
    stores: Mutex<HashMap<SourceKind, Store<DynamicObject>>>,
}

impl SourceCache {
    pub(crate) fn register(&self, kind: SourceKind, store: Store<DynamicObject>) {
        self.stores.lock().expect("source cache lock").insert(kind, store);
    }

    /// The source object, when the store of its kind is synced and holds it.
    pub(crate) fn get(&self, kind: SourceKind, namespace: &str, name: &str) -> Option<DynamicObject> {
        let store = self.stores.lock().expect("source cache lock").get(&kind)?.clone();
        store.wait_until_ready().now_or_never()?.ok()?;
        let key = ObjectRef::new_with(name, kind.api_resource()).within(namespace);
        store.get(&key).map(|object| (*object).clone())
    }
}
