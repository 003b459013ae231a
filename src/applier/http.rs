//! The requests apply, preview and prune send: plain JSON bodies on raw URLs of the shared
//! client, so that any kind (also one served by a CRD of the same apply) is handled alike.

use std::collections::HashMap;

use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{Request, Status};
use kube::{Client, Resource};
use serde_json::Value;

use crate::api::conditions::keys;
use crate::kube_ext::ResolvedKind;

/// The collection URL of `kind`, in `namespace` when the kind is namespaced.
pub(super) fn api_url(kind: &ResolvedKind, namespace: &str) -> String {
    let ns = (kind.namespaced && !namespace.is_empty()).then_some(namespace);
    DynamicObject::url_path(&kind.resource, ns)
}

/// The Flux-style message of an API error: `<what> (<Reason>): <message>`.
pub(super) fn api_message(what: &str, err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.reason.is_empty() => {
            format!("{what} ({}): {}", status.reason, status.message)
        }
        kube::Error::Api(status) => format!("{what}: {}", status.message),
        other => format!("{what}: {other}"),
    }
}

/// The status the API server answered with, when the error is one.
pub(super) fn status_of(err: &kube::Error) -> Option<&Status> {
    match err {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

pub(super) fn is_not_found(err: &kube::Error) -> bool {
    status_of(err).is_some_and(|s| s.code == 404)
}

/// The object, or `None` when it does not exist.
pub(super) async fn get(client: &Client, url: &str, name: &str) -> Result<Option<Value>, kube::Error> {
    let req = Request::new(url)
        .get(name, &Default::default())
        .map_err(kube::Error::BuildRequest)?;
    match client.request::<Value>(req).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A forced server-side apply as our field manager; with `dry_run` nothing is stored and the
/// answer is the object as it would be.
pub(super) async fn server_side_apply(
    client: &Client,
    url: &str,
    name: &str,
    body: &Value,
    dry_run: bool,
) -> Result<Value, kube::Error> {
    let mut params = PatchParams::apply(keys::APPLY_FIELD_MANAGER).force();
    if dry_run {
        params = params.dry_run();
    }
    let req = Request::new(url)
        .patch(name, &params, &Patch::Apply(body))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

/// Validates `body` as a new object without storing it.
pub(super) async fn dry_run_create(client: &Client, url: &str, body: &Value) -> Result<Value, kube::Error> {
    let params = PostParams {
        dry_run: true,
        field_manager: Some(keys::APPLY_FIELD_MANAGER.into()),
    };
    let data = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let req = Request::new(url)
        .create(&params, data)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

/// Sends a JSON patch (a list of operations) as our field manager; returns the patched object.
pub(super) async fn json_patch(
    client: &Client,
    url: &str,
    name: &str,
    patch: &Value,
) -> Result<Value, kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(keys::APPLY_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let req = Request::new(url)
        .patch(name, &params, &Patch::<()>::Json(patch))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

/// Sends a JSON merge patch as our field manager.
pub(super) async fn merge_patch(
    client: &Client,
    url: &str,
    name: &str,
    patch: &Value,
) -> Result<Value, kube::Error> {
    let params = PatchParams {
        field_manager: Some(keys::APPLY_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let req = Request::new(url)
        .patch(name, &params, &Patch::Merge(patch))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await
}

pub(super) async fn delete(
    client: &Client,
    url: &str,
    name: &str,
    params: &DeleteParams,
) -> Result<(), kube::Error> {
    let req = Request::new(url)
        .delete(name, params)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Value>(req).await.map(|_| ())
}

/// Live objects (or their metadata only) by (namespace, name), from one LIST. List items carry
/// no `apiVersion`/`kind`; they are filled in so items compare like single reads.
pub(super) async fn list_objects(
    client: &Client,
    url: &str,
    selector: &str,
    metadata_only: bool,
    resource: &ApiResource,
) -> Result<HashMap<(String, String), Value>, kube::Error> {
    let params = ListParams::default().labels(selector);
    let req = if metadata_only {
        Request::new(url).list_metadata(&params)
    } else {
        Request::new(url).list(&params)
    };
    let list = client
        .request::<Value>(req.map_err(kube::Error::BuildRequest)?)
        .await?;
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(items
        .into_iter()
        .filter_map(|mut item| {
            let meta = item.get("metadata")?;
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let name = meta.get("name")?.as_str()?.to_string();
            let map = item.as_object_mut()?;
            map.insert("apiVersion".into(), resource.api_version.clone().into());
            map.insert("kind".into(), resource.kind.clone().into());
            Some(((ns, name), item))
        })
        .collect())
}
