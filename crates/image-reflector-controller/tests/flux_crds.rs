//! Our CRDs against Flux's own, in meaning: the CRDs of Flux's image-reflector-controller
//! (config/crd/bases of its Go module, the directory `e2e/fluxirc/crds.sh` prints, in
//! `$E2E_FLUX_IRC_CRDS`) and ours must accept, default, reject and print the same objects.
//! Every schema keyword is compared at every field path (descriptions and titles aside), as
//! are names, served versions, printer columns and subresources. The few differences we
//! intend are listed below with why; a listed difference that no longer occurs fails too.
//!
//! Not run by a bare `cargo test` (it needs Flux's module): `make test` runs it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use image_reflector::api::crd;
use serde_json::{Value, json};

/// Differences we intend, as (CRD, field path, schema keyword, why).
const INTENDED: &[(&str, &str, &str, &str)] = &[
    (
        "*",
        "",
        "required",
        "kube's derive requires `spec`; an object without one is useless (Flux's has required \
         fields inside spec but accepts no spec at all)",
    ),
    (
        "*",
        "apiVersion",
        "type",
        "the API server validates apiVersion, kind and metadata of every object itself",
    ),
    ("*", "kind", "type", "as apiVersion"),
    ("*", "metadata", "type", "as apiVersion"),
];

fn flux_crds_dir() -> PathBuf {
    let dir = std::env::var_os("E2E_FLUX_IRC_CRDS").expect(
        "E2E_FLUX_IRC_CRDS is not set: `make test` sets it from `e2e/fluxirc/crds.sh` \
         (or run `export E2E_FLUX_IRC_CRDS=$(e2e/fluxirc/crds.sh)`)",
    );
    PathBuf::from(dir)
}

/// Schema keywords by field path (`spec.policy.semver.range`, `status.conditions[].type`),
/// normalized where JSON allows two spellings of one meaning: numbers as floats, `enum` and
/// `required` as sets.
fn keywords(schema: &Value) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    walk(schema, String::new(), &mut out);
    out
}

fn walk(schema: &Value, path: String, out: &mut BTreeMap<String, BTreeMap<String, Value>>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    let child = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    let mut own = BTreeMap::new();
    for (key, value) in object {
        match key.as_str() {
            "description" | "title" => {}
            "properties" => {
                for (name, property) in value.as_object().into_iter().flatten() {
                    walk(property, child(name), out);
                }
            }
            "items" => walk(value, format!("{path}[]"), out),
            "additionalProperties" if value.is_object() => walk(value, format!("{path}{{}}"), out),
            _ => {
                own.insert(key.clone(), normalized(key, value));
            }
        }
    }
    out.insert(path, own);
}

fn normalized(key: &str, value: &Value) -> Value {
    match (key, value) {
        ("enum" | "required", Value::Array(items)) => {
            let mut items: Vec<String> = items.iter().map(Value::to_string).collect();
            items.sort();
            json!(items)
        }
        (_, Value::Number(n)) => json!(n.as_f64()),
        _ => value.clone(),
    }
}

/// The printer columns as kubectl uses them (the priority defaults to 0; descriptions aside).
fn columns(version: &Value) -> Vec<Value> {
    version["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"], "type": c["type"], "jsonPath": c["jsonPath"],
                "priority": c.get("priority").cloned().unwrap_or(json!(0)),
            })
        })
        .collect()
}

fn intended(crd: &str, path: &str, keyword: &str) -> bool {
    INTENDED
        .iter()
        .any(|(c, p, k, _)| (*c == "*" || *c == crd) && *p == path && *k == keyword)
}

/// Every difference in meaning between a version of ours and one of Flux's, as lines.
fn schema_differences(
    crd: &str,
    version: &str,
    ours: &Value,
    flux: &Value,
    seen: &mut Vec<(String, String)>,
) -> Vec<String> {
    let (ours, flux) = (keywords(ours), keywords(flux));
    let mut differences = Vec::new();
    let paths: std::collections::BTreeSet<&String> = ours.keys().chain(flux.keys()).collect();
    let empty = BTreeMap::new();
    for path in paths {
        let (o, f) = (ours.get(path).unwrap_or(&empty), flux.get(path).unwrap_or(&empty));
        let keys: std::collections::BTreeSet<&String> = o.keys().chain(f.keys()).collect();
        for key in keys {
            if o.get(key) == f.get(key) {
                continue;
            }
            if intended(crd, path, key) {
                seen.push((path.clone(), key.clone()));
                continue;
            }
            differences.push(format!(
                "{crd} {version}: {path:?} {key}: ours {} / Flux's v1 {}",
                o.get(key).map_or("(none)".into(), Value::to_string),
                f.get(key).map_or("(none)".into(), Value::to_string),
            ));
        }
    }
    differences
}

#[test]
fn our_crds_mean_what_fluxs_mean() {
    let dir = flux_crds_dir();
    let mut differences = Vec::new();
    let mut seen = Vec::new();
    for (file, ours) in crd::all() {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let flux: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ours = serde_json::to_value(&ours).unwrap();
        let name = flux["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(ours["metadata"]["name"], flux["metadata"]["name"], "{file}");
        for field in ["group", "scope"] {
            assert_eq!(ours["spec"][field], flux["spec"][field], "{name}: spec.{field}");
        }
        // Categories came with Flux v1.2.1 (after the release the module proxy serves): the
        // unit tests check ours are Flux's.
        for field in ["kind", "plural", "singular", "shortNames"] {
            assert_eq!(
                ours["spec"]["names"][field], flux["spec"]["names"][field],
                "{name}: names.{field}"
            );
        }
        let kind = flux["spec"]["names"]["kind"].as_str().unwrap();
        assert_eq!(
            flux["spec"]["names"]["listKind"].as_str(),
            Some(format!("{kind}List").as_str()),
            "{name}: the API server defaults our listKind to <kind>List, which must be Flux's"
        );

        let flux_versions = flux["spec"]["versions"].as_array().unwrap();
        let flux_v1 = flux_versions
            .iter()
            .find(|v| v["name"] == "v1")
            .unwrap_or_else(|| panic!("{name}: Flux serves no v1"));
        assert_eq!(
            (&flux_v1["served"], &flux_v1["storage"]),
            (&json!(true), &json!(true))
        );
        // Flux v1.2 serves v1 only; v1.0 and v1.1 also served v1beta2 with v1's schema, which
        // ours still does: both of ours are held to Flux's v1.
        for ours_version in ours["spec"]["versions"].as_array().unwrap() {
            let version = ours_version["name"].as_str().unwrap();
            let label = format!("{name} {version}");
            assert_eq!(
                columns(ours_version),
                columns(flux_v1),
                "{label}: printer columns"
            );
            assert_eq!(
                ours_version["subresources"], flux_v1["subresources"],
                "{label}: subresources"
            );
            assert_eq!(ours_version["served"], json!(true), "{label}: served");
            differences.extend(schema_differences(
                &name,
                version,
                &ours_version["schema"]["openAPIV3Schema"],
                &flux_v1["schema"]["openAPIV3Schema"],
                &mut seen,
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "our CRDs differ from Flux's in meaning:\n{}",
        differences.join("\n")
    );
    for (crd, path, keyword, why) in INTENDED {
        assert!(
            seen.iter().any(|(p, k)| p == path && k == keyword),
            "the intended difference {crd} {path:?} {keyword} ({why}) no longer occurs: remove it"
        );
    }
}
