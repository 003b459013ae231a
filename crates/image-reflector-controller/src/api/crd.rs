//! The CRDs as Flux ships them, from the derive output of our types: `v1` stored, `v1beta2`
//! served with the same schema and Flux's deprecation warning (what Flux v1.0 and v1.1 served,
//! so manifests written for v1beta2 keep applying; no conversion is needed between identical
//! schemas), the status default that makes kstatus report a fresh object as InProgress, and
//! `metav1.Condition`'s validations, which the generated condition schema lacks.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSON,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResourceExt;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Value, json};

use super::{ImagePolicy, ImageRepository};

/// The served, deprecated older version.
const V1BETA2: &str = "v1beta2";

/// The ImageRepository CRD (`crds/image.toolkit.fluxcd.io_imagerepositories.yaml`).
pub fn image_repository() -> CustomResourceDefinition {
    flux_shape(ImageRepository::crd())
}

/// The ImagePolicy CRD (`crds/image.toolkit.fluxcd.io_imagepolicies.yaml`).
pub fn image_policy() -> CustomResourceDefinition {
    flux_shape(ImagePolicy::crd())
}

/// Both CRDs, each with the file name it is committed under in `crds/` and `config/crd/`.
pub fn all() -> [(&'static str, CustomResourceDefinition); 2] {
    [
        (
            "image.toolkit.fluxcd.io_imagerepositories.yaml",
            image_repository(),
        ),
        ("image.toolkit.fluxcd.io_imagepolicies.yaml", image_policy()),
    ]
}

/// A CRD as the YAML committed in `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    serde_yaml::to_string(crd).expect("a CRD always serializes")
}

/// Both CRDs as one YAML stream, what `image-reflector-controller crds` prints.
pub fn all_yaml() -> String {
    all()
        .iter()
        .map(|(_, crd)| format!("---\n{}", to_yaml(crd)))
        .collect()
}

/// Writes each CRD to its file in `dir`, as `make crds` commits them.
pub fn write_files(dir: &Path) -> std::io::Result<()> {
    for (file, crd) in all() {
        let path = dir.join(file);
        std::fs::write(&path, to_yaml(&crd))
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

fn flux_shape(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let mut value = serde_json::to_value(&*schema).expect("a schema always serializes");
            without_nulls(&mut value);
            *schema = serde_json::from_value(value).expect("removing keys keeps a schema");
        }
        let status = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"));
        if let Some(status) = status {
            status.default = Some(JSON(json!({"observedGeneration": -1})));
        }
    }
    let kind = crd.spec.names.kind.clone();
    let deprecated = crd
        .spec
        .versions
        .first()
        .map(|v1| CustomResourceDefinitionVersion {
            name: V1BETA2.into(),
            served: true,
            storage: false,
            deprecated: Some(true),
            deprecation_warning: Some(format!("{V1BETA2} {kind} is deprecated, upgrade to v1")),
            ..v1.clone()
        });
    crd.spec.versions.extend(deprecated);
    crd
}

/// Flux's fields are Go values with `omitempty`, never null: without `nullable` the API server
/// drops a null instead of storing it, as with Flux's CRDs. (The derive marks every `Option`
/// nullable, and an optional enum's values with null.)
fn without_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            map.values_mut().for_each(without_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(without_nulls),
        _ => {}
    }
}

/// `status.conditions`: the schema of `[]metav1.Condition` with the validations Kubernetes
/// declares on it (which controller-gen copies into every Flux CRD).
pub(crate) fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<Condition>>::json_schema(generator);
    let properties = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(Value::as_object_mut);
    if let Some(properties) = properties {
        let rules = [
            ("message", json!({"maxLength": 32768})),
            ("observedGeneration", json!({"minimum": 0})),
            (
                "reason",
                json!({"maxLength": 1024, "minLength": 1, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"}),
            ),
            ("status", json!({"enum": ["True", "False", "Unknown"]})),
            (
                "type",
                json!({"maxLength": 316, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"}),
            ),
        ];
        for (field, rule) in rules {
            if let (Some(Value::Object(property)), Value::Object(rule)) = (properties.get_mut(field), rule) {
                property.extend(rule);
            }
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd_json(crd: &CustomResourceDefinition) -> Value {
        serde_json::to_value(crd).unwrap()
    }

    #[test]
    fn committed_crds_are_in_sync_with_the_types() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        for (file, crd) in all() {
            for dir in ["crds", "config/crd"] {
                let path = format!("{root}/{dir}/{file}");
                let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                assert!(
                    committed == to_yaml(&crd),
                    "{path} is stale: run `make crds` and commit the result"
                );
            }
        }
    }

    #[test]
    fn names_and_versions_are_fluxs() {
        for (crd, plural, kind, short_names) in [
            (
                image_repository(),
                "imagerepositories",
                "ImageRepository",
                ["imgrepo", "imagerepo"],
            ),
            (
                image_policy(),
                "imagepolicies",
                "ImagePolicy",
                ["imgpol", "imagepol"],
            ),
        ] {
            let crd = crd_json(&crd);
            assert_eq!(
                crd["metadata"]["name"],
                format!("{plural}.image.toolkit.fluxcd.io")
            );
            assert_eq!(
                crd["metadata"]["annotations"],
                json!({"kustomize.toolkit.fluxcd.io/substitute": "disabled"})
            );
            assert_eq!(crd["spec"]["scope"], "Namespaced");
            let names = &crd["spec"]["names"];
            assert_eq!(names["kind"], kind);
            assert_eq!(names["plural"], plural);
            assert_eq!(names["singular"], kind.to_lowercase());
            assert_eq!(names["shortNames"], json!(short_names));
            assert_eq!(names["categories"], json!(["all", "fluxcd", "fluxcd-images"]));

            let versions = crd["spec"]["versions"].as_array().unwrap();
            assert_eq!(versions.len(), 2, "{kind}: v1 and v1beta2");
            let (v1, v1beta2) = (&versions[0], &versions[1]);
            assert_eq!(
                (&v1["name"], &v1["served"], &v1["storage"], v1.get("deprecated")),
                (&json!("v1"), &json!(true), &json!(true), None)
            );
            assert_eq!(
                (
                    &v1beta2["name"],
                    &v1beta2["served"],
                    &v1beta2["storage"],
                    &v1beta2["deprecated"]
                ),
                (&json!("v1beta2"), &json!(true), &json!(false), &json!(true))
            );
            assert_eq!(
                v1beta2["deprecationWarning"],
                format!("v1beta2 {kind} is deprecated, upgrade to v1")
            );
            // Manifests written for v1beta2 keep applying: the same schema, columns, subresources.
            for field in ["schema", "additionalPrinterColumns", "subresources"] {
                assert_eq!(v1[field], v1beta2[field], "{kind}: {field}");
            }
            assert_eq!(v1["subresources"], json!({"status": {}}));
            let status = &v1["schema"]["openAPIV3Schema"]["properties"]["status"];
            assert_eq!(status["default"], json!({"observedGeneration": -1}));
            assert_eq!(status["properties"]["observedGeneration"].get("default"), None);
        }
    }

    #[test]
    fn printer_columns_are_fluxs() {
        let ready = r#".status.conditions[?(@.type=="Ready")]"#;
        let columns = |crd: &CustomResourceDefinition| {
            crd_json(crd)["spec"]["versions"][0]["additionalPrinterColumns"].clone()
        };
        assert_eq!(
            columns(&image_repository()),
            json!([
                {"name": "Image", "type": "string", "jsonPath": ".spec.image"},
                {"name": "Tags", "type": "string", "jsonPath": ".status.lastScanResult.tagCount"},
                {"name": "Ready", "type": "string", "jsonPath": format!("{ready}.status")},
                {"name": "Status", "type": "string", "jsonPath": format!("{ready}.message")},
                {"name": "Last scan", "type": "string", "jsonPath": ".status.lastScanResult.scanTime", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ])
        );
        assert_eq!(
            columns(&image_policy()),
            json!([
                {"name": "Image", "type": "string", "jsonPath": ".status.latestRef.name"},
                {"name": "Tag", "type": "string", "jsonPath": ".status.latestRef.tag"},
                {"name": "Ready", "type": "string", "jsonPath": format!("{ready}.status")},
                {"name": "Status", "type": "string", "jsonPath": format!("{ready}.message")},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ])
        );
    }

    #[test]
    fn image_repository_validation_is_fluxs() {
        let crd = crd_json(&image_repository());
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], json!(["image", "interval"]));
        let p = &spec["properties"];
        assert_eq!(p["interval"]["pattern"], r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$");
        assert_eq!(p["timeout"]["pattern"], r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$");
        assert_eq!(p["serviceAccountName"]["maxLength"], 253);
        assert_eq!(p["exclusionList"]["maxItems"], 25);
        assert_eq!(p["exclusionList"]["default"], json!([r"^.*\.sig$"]));
        assert_eq!(p["provider"]["default"], "generic");
        let mut providers: Vec<_> = p["provider"]["enum"].as_array().unwrap().iter().collect();
        providers.sort_by_key(|v| v.as_str());
        assert_eq!(
            providers,
            [&json!("aws"), &json!("azure"), &json!("gcp"), &json!("generic")]
        );
        assert_eq!(p["accessFrom"]["required"], json!(["namespaceSelectors"]));
        for reference in ["secretRef", "certSecretRef", "proxySecretRef"] {
            assert_eq!(p[reference]["required"], json!(["name"]), "{reference}");
        }
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        assert_eq!(
            status["properties"]["lastScanResult"]["required"],
            json!(["tagCount"])
        );
        let text = to_yaml(&image_repository());
        assert!(
            !text.contains("nullable"),
            "Flux's fields are never null:\n{text}"
        );
    }

    #[test]
    fn image_policy_validation_is_fluxs() {
        let crd = crd_json(&image_policy());
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], json!(["imageRepositoryRef", "policy"]));
        assert_eq!(
            spec["x-kubernetes-validations"],
            json!([
                {
                    "rule": "!has(self.interval) || (has(self.digestReflectionPolicy) && self.digestReflectionPolicy == 'Always')",
                    "message": "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'",
                },
                {
                    "rule": "has(self.interval) || !has(self.digestReflectionPolicy) || self.digestReflectionPolicy != 'Always'",
                    "message": "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'",
                },
            ])
        );
        let p = &spec["properties"];
        assert_eq!(p["digestReflectionPolicy"]["default"], "Never");
        assert_eq!(
            p["digestReflectionPolicy"]["enum"],
            json!(["Always", "IfNotPresent", "Never"])
        );
        assert_eq!(p["interval"]["pattern"], r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$");
        assert_eq!(p["imageRepositoryRef"]["required"], json!(["name"]));
        let policy = &p["policy"]["properties"];
        assert_eq!(policy["semver"]["required"], json!(["range"]));
        for order in ["alphabetical", "numerical"] {
            let order = &policy[order]["properties"]["order"];
            assert_eq!(
                (&order["default"], &order["enum"]),
                (&json!("asc"), &json!(["asc", "desc"]))
            );
        }
        assert_eq!(p["filterTags"].get("required"), None);
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        for reference in ["latestRef", "observedPreviousRef"] {
            assert_eq!(
                status["properties"][reference]["required"],
                json!(["name", "tag"])
            );
        }
    }

    #[test]
    fn conditions_carry_the_validations_of_metav1_condition() {
        let crd = crd_json(&image_policy());
        let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let condition = &status["properties"]["conditions"]["items"];
        assert_eq!(
            condition["required"],
            json!(["lastTransitionTime", "message", "reason", "status", "type"])
        );
        let p = &condition["properties"];
        assert_eq!(p["status"]["enum"], json!(["True", "False", "Unknown"]));
        assert_eq!(p["reason"]["minLength"], 1);
        assert_eq!(p["reason"]["maxLength"], 1024);
        assert_eq!(p["message"]["maxLength"], 32768);
        assert_eq!(p["type"]["maxLength"], 316);
        assert_eq!(p["observedGeneration"]["minimum"], 0.0);
    }

    #[test]
    fn crds_print_as_one_stream_and_write_as_files() {
        let stream = all_yaml();
        assert_eq!(
            stream.matches("\n---\n").count() + usize::from(stream.starts_with("---\n")),
            2
        );
        let dir = std::env::temp_dir().join(format!("irc-crds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_files(&dir).unwrap();
        let written =
            std::fs::read_to_string(dir.join("image.toolkit.fluxcd.io_imagepolicies.yaml")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(written, to_yaml(&image_policy()));
        let err = write_files(&dir).unwrap_err().to_string();
        assert!(
            err.contains("image.toolkit.fluxcd.io_imagerepositories.yaml"),
            "{err}"
        );
    }
}
