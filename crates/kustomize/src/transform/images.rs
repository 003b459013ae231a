//! `images:`: rewrites the image of every container and init container, at any depth
//! (so custom resources embedding pod specs are covered too), except in CRDs.

use regex::Regex;
use serde_json::Value;

use crate::error::BuildError;
use crate::file::{FieldSpec, Image};
use crate::resmap::ResMap;

use super::{path_segments, selects, visit_path};

/// Applies one `images` entry to every object.
/// `extra` are the `images` field specs of `configurations`.
pub(crate) fn apply(
    map: &mut ResMap,
    image: &Image,
    file: &str,
    extra: &[FieldSpec],
) -> Result<(), BuildError> {
    let specs: Vec<FieldSpec> = FIELD_SPEC_PATHS
        .iter()
        .map(|path| FieldSpec {
            path: (*path).into(),
            ..FieldSpec::default()
        })
        .collect();
    apply_specs(map, image, &specs, file, extra)
}

/// Applies one image entry with its own field specs (an ImageTagTransformer config): the
/// deep walk over containers first, then the field specs, then `extra` (from `configurations`).
pub(crate) fn apply_specs(
    map: &mut ResMap,
    image: &Image,
    specs: &[FieldSpec],
    file: &str,
    extra: &[FieldSpec],
) -> Result<(), BuildError> {
    // kustomize v0.21.1 builds this pattern from the unescaped name.
    let pattern = format!("^{}(:[a-zA-Z0-9_.{{}}-]*)?(@sha256:[a-zA-Z0-9]*)?$", image.name);
    let re = Regex::new(&pattern).map_err(|e| BuildError::Transform {
        file: file.into(),
        field: "images".into(),
        message: format!("name '{}' is not a valid pattern: {e}", image.name),
    })?;
    map.each(|res| {
        if res.id().kind == "CustomResourceDefinition" {
            return;
        }
        for (key, value) in res.obj_mut().iter_mut() {
            if key != "apiVersion" && key != "kind" {
                walk(value, &re, image);
            }
        }
        // kustomize then runs its field-spec pass over the same containers; for most entries
        // that is idempotent, but a tagSuffix is appended a second time there.
        let id = res.id();
        res.edit(|obj| {
            for spec in specs.iter().filter(|s| selects(s, &id)) {
                let path = path_segments(&spec.path);
                let _ = visit_path::<()>(obj, &path, spec.create, &|| Value::Null, &mut |v| {
                    if let Value::String(s) = v
                        && re.is_match(s)
                    {
                        *s = rewrite(s, image);
                    }
                    Ok(())
                });
            }
        });
    });
    crate::configurations::images(map, &re, &|s| rewrite(s, image), extra);
    Ok(())
}

/// kustomize's images field specs (image volumes are reached only through these).
const FIELD_SPEC_PATHS: [&str; 6] = [
    "spec/containers[]/image",
    "spec/initContainers[]/image",
    "spec/template/spec/containers[]/image",
    "spec/template/spec/initContainers[]/image",
    "spec/volumes[]/image/reference",
    "spec/template/spec/volumes[]/image/reference",
];

fn walk(node: &mut Value, re: &Regex, image: &Image) {
    match node {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if (key == "containers" || key == "initContainers")
                    && let Value::Array(items) = value
                {
                    for c in items.iter_mut().filter_map(Value::as_object_mut) {
                        if let Some(Value::String(s)) = c.get_mut("image")
                            && re.is_match(s)
                        {
                            *s = rewrite(s, image);
                        }
                    }
                }
                walk(value, re, image);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, re, image)),
        _ => {}
    }
}

/// Splits an image reference into name, tag and digest; a `:` before the first `/` is a
/// registry port, not a tag.
pub(crate) fn split(image: &str) -> (&str, &str, &str) {
    let offset = match image.find('/') {
        Some(i) if i > 0 => i,
        _ => 0,
    };
    let search = &image[offset..];
    let at = search.find('@').map(|i| i + offset);
    let colon = search.find(':').map(|i| i + offset);
    match (colon, at) {
        (None, None) => (image, "", ""),
        (c, Some(a)) if c.is_none_or(|c| a < c) => (&image[..a], "", &image[a + 1..]),
        (Some(c), Some(a)) => (&image[..c], &image[c + 1..a], &image[a + 1..]),
        (Some(c), None) => (&image[..c], &image[c + 1..], ""),
        (None, Some(_)) => unreachable!("covered by the digest-only arm"),
    }
}

fn rewrite(current: &str, image: &Image) -> String {
    let (name, tag, digest) = split(current);
    let name = if image.new_name.is_empty() {
        name
    } else {
        &image.new_name
    };
    let (mut tag, digest) = match (image.new_tag.is_empty(), image.digest.is_empty()) {
        (false, false) => (image.new_tag.clone(), image.digest.clone()),
        (false, true) => (image.new_tag.clone(), String::new()),
        (true, false) => (String::new(), image.digest.clone()),
        (true, true) => (tag.to_string(), digest.to_string()),
    };
    if !image.tag_suffix.is_empty() {
        tag.push_str(&image.tag_suffix);
    }
    let mut out = name.to_string();
    if !tag.is_empty() {
        out.push(':');
        out.push_str(&tag);
    }
    if !digest.is_empty() {
        out.push('@');
        out.push_str(&digest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_registry_ports() {
        assert_eq!(split("localhost:5000/app:1.0"), ("localhost:5000/app", "1.0", ""));
        assert_eq!(split("nginx@sha256:abc"), ("nginx", "", "sha256:abc"));
        assert_eq!(split("nginx:1@sha256:abc"), ("nginx", "1", "sha256:abc"));
        assert_eq!(split("nginx"), ("nginx", "", ""));
    }

    #[test]
    fn new_tag_drops_digest_and_digest_drops_tag() {
        let img = |t: &str, d: &str| Image {
            name: "nginx".into(),
            new_tag: t.into(),
            digest: d.into(),
            ..Default::default()
        };
        assert_eq!(rewrite("nginx:1@sha256:abc", &img("2", "")), "nginx:2");
        assert_eq!(rewrite("nginx:1", &img("", "sha256:def")), "nginx@sha256:def");
        assert_eq!(rewrite("nginx:1", &img("2", "sha256:def")), "nginx:2@sha256:def");
    }
}
