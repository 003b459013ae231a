//! `vars:` (deprecated, still common): `$(NAME)` in the var-reference fields is replaced
//! by a field of a named object, once at the top after name references are fixed.
//!
//! A var is bound to its object when its kustomization finishes (so later renames are
//! followed); the var set of a tree is the union of its kustomizations' and a name may
//! appear once. `$$` escapes a `$`; a reference to a name that is not a var stays as written.

use serde_json::{Map, Value};

use super::error::BuildError;
use super::file::{FieldSpec, merge_specs};
use super::gvk::split_api_version;
use super::replacements::{lookup, split_path};
use super::resmap::{ResId, ResMap, Var, add_vars, is_cluster_scoped};
use super::transform::{path_segments, selects, visit_path};

/// Reads the `vars` entries of `file`; keys match case-insensitively, as Go's JSON decoding does.
pub(crate) fn parse(entries: &[Value], file: &str) -> Result<Vec<Var>, BuildError> {
    entries.iter().map(|e| parse_one(e, file)).collect()
}

fn invalid(file: &str, message: String) -> BuildError {
    BuildError::Invalid {
        file: file.to_string(),
        field: "vars".into(),
        message,
    }
}

/// The fields of `v` by lowercased key, refusing keys outside `known`.
fn fields(v: &Value, known: &[&str], file: &str) -> Result<Map<String, Value>, BuildError> {
    let Value::Object(m) = v else {
        return Err(invalid(
            file,
            format!("expected an object, found {}", super::yaml::kind_of(v)),
        ));
    };
    let mut out = Map::new();
    for (k, val) in m {
        let lower = k.to_ascii_lowercase();
        if !known.contains(&lower.as_str()) {
            return Err(invalid(file, format!("unknown field \"{k}\"")));
        }
        out.insert(lower, val.clone());
    }
    Ok(out)
}

fn text(m: &Map<String, Value>, key: &str, file: &str) -> Result<String, BuildError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid(
            file,
            format!("{key}: expected a string, found {}", super::yaml::kind_of(other)),
        )),
    }
}

fn parse_one(entry: &Value, file: &str) -> Result<Var, BuildError> {
    let top = fields(entry, &["name", "objref", "fieldref"], file)?;
    let objref = fields(
        top.get("objref").unwrap_or(&Value::Object(Map::new())),
        &["apiversion", "group", "version", "kind", "name", "namespace"],
        file,
    )?;
    let fieldref = fields(
        top.get("fieldref").unwrap_or(&Value::Object(Map::new())),
        &["fieldpath"],
        file,
    )?;
    let mut id = ResId {
        group: text(&objref, "group", file)?,
        version: text(&objref, "version", file)?,
        kind: text(&objref, "kind", file)?,
        name: text(&objref, "name", file)?,
        namespace: text(&objref, "namespace", file)?,
    };
    let api_version = text(&objref, "apiversion", file)?;
    if !api_version.is_empty() {
        let (g, v) = split_api_version(&api_version);
        if api_version.contains('/') {
            id.group = g.to_string();
        }
        id.version = v.to_string();
    }
    let mut field_path = text(&fieldref, "fieldpath", file)?;
    if field_path.is_empty() {
        field_path = "metadata.name".into();
    }
    Ok(Var {
        name: text(&top, "name", file)?,
        objref: id,
        field_path,
        bound: None,
    })
}

/// Binds the vars of one finished kustomization to its objects and adds them to the set.
pub(crate) fn merge(map: &mut ResMap, incoming: &[Var], file: &str) -> Result<(), BuildError> {
    let mut bound = Vec::with_capacity(incoming.len());
    for var in incoming {
        let want = &var.objref;
        let exact = !want.namespace.is_empty() || is_cluster_scoped(&want.group, &want.version, &want.kind);
        let same = |id: &ResId| {
            id.name == want.name
                && id.group == want.group
                && id.version == want.version
                && id.kind == want.kind
                && (!exact || id.effective_namespace() == want.effective_namespace())
        };
        let matched: Vec<ResId> = map
            .resources
            .iter()
            .filter(|r| r.any_id(same))
            .map(|r| r.id())
            .collect();
        if matched.len() > 1 {
            return Err(var_error(
                file,
                format!(
                    "found {} resId matches for var {} (unable to disambiguate)",
                    matched.len(),
                    var.describe()
                ),
            ));
        }
        bound.push(Var {
            bound: matched.into_iter().next(),
            ..var.clone()
        });
    }
    add_vars(&mut map.vars, bound).map_err(|m| var_error(file, m))
}

fn var_error(file: &str, message: String) -> BuildError {
    BuildError::Transform {
        file: file.to_string(),
        field: "vars".into(),
        message,
    }
}

/// kustomize's var-reference table: where `$(VAR)` is expanded in builtin kinds.
fn builtin_references() -> Vec<FieldSpec> {
    let spec = |kind: &str, path: String| FieldSpec {
        kind: kind.into(),
        path,
        ..FieldSpec::default()
    };
    let mut out = Vec::new();
    let pods = [
        (
            "CronJob",
            "spec/jobTemplate/spec/template/spec",
            "spec/jobTemplate/spec/template/volumes",
        ),
        ("DaemonSet", "spec/template/spec", "spec/template/spec/volumes"),
        ("Deployment", "spec/template/spec", "spec/template/spec/volumes"),
        ("Job", "spec/template/spec", "spec/template/spec/volumes"),
        ("Pod", "spec", "spec/volumes"),
        ("ReplicaSet", "spec/template/spec", "spec/template/spec/volumes"),
        (
            "StatefulSet",
            "spec/template/spec",
            "spec/volumeClaimTemplates/spec",
        ),
    ];
    for (kind, pod, volumes) in pods {
        for containers in ["containers", "initContainers"] {
            for field in ["args", "command", "env/value", "volumeMounts/mountPath"] {
                out.push(spec(kind, format!("{pod}/{containers}/{field}")));
            }
        }
        out.push(spec(kind, format!("{volumes}/nfs/server")));
    }
    out.push(spec("Deployment", "spec/template/metadata/annotations".into()));
    for path in ["spec/rules/host", "spec/tls/hosts", "spec/tls/secretName"] {
        out.push(spec("Ingress", path.into()));
    }
    out.push(spec("Service", "spec/ports/port".into()));
    out.push(spec("Service", "spec/ports/targetPort".into()));
    out.push(spec("PersistentVolume", "spec/nfs/server".into()));
    out.push(spec("", "metadata/labels".into()));
    out.push(spec("", "metadata/annotations".into()));
    out
}

/// Replaces `$(VAR)` in every var-reference field of the build.
pub(crate) fn resolve(map: &mut ResMap) -> Result<(), BuildError> {
    if map.vars.is_empty() {
        return Ok(());
    }
    let mut vars = std::mem::take(&mut map.vars);
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    let mut values: Vec<(String, Value)> = Vec::with_capacity(vars.len());
    for var in &vars {
        let err = |what: &str| BuildError::NameReference {
            referrer: format!("var {}", var.name),
            path: var.field_path.clone(),
            message: format!("var '{}' {what}", var.describe()),
        };
        let res = var
            .bound
            .as_ref()
            .and_then(|b| map.resources.iter().find(|r| r.any_id(|id| id == b)))
            .ok_or_else(|| err("cannot be mapped to a field in the set of known resources"))?;
        let obj = Value::Object(res.obj().into_owned());
        let value = lookup(&obj, &slice_indexes(split_path(&var.field_path)))
            .filter(|v| !v.is_null())
            .ok_or_else(|| err("field not found in corresponding resource"))?;
        values.push((var.name.clone(), value.clone()));
    }
    let mut specs = builtin_references();
    merge_specs(&mut specs, &map.config.var_reference)
        .map_err(|message| var_error("varReference", message))?;
    map.try_each(|res| {
        let id = res.id();
        let wanted: Vec<&FieldSpec> = specs.iter().filter(|s| selects(s, &id)).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        res.edit(|obj| {
            wanted.iter().try_for_each(|spec| {
                visit_path(
                    obj,
                    &path_segments(&spec.path),
                    false,
                    &|| Value::Null,
                    &mut |node| {
                        expand_node(node, &values).map_err(|message| BuildError::NameReference {
                            referrer: id.to_string(),
                            path: spec.path.clone(),
                            message,
                        })
                    },
                )
            })
        })
    })
}

/// `a.b[0].c` as `a.b.0.c`, as kyaml's field-value lookup reads it.
fn slice_indexes(parts: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        if let Some(open) = part.rfind('[')
            && part.ends_with(']')
            && part.len() > open + 2
            && part[open + 1..part.len() - 1].bytes().all(|b| b.is_ascii_digit())
        {
            if open > 0 {
                out.push(part[..open].to_string());
            }
            out.push(part[open + 1..part.len() - 1].to_string());
        } else {
            out.push(part);
        }
    }
    out
}

fn expand_node(node: &mut Value, values: &[(String, Value)]) -> Result<(), String> {
    match node {
        Value::String(s) => *node = expand(s, values),
        Value::Object(m) => {
            for v in m.values_mut() {
                if let Value::String(s) = v {
                    *v = expand(s, values);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                let Value::String(s) = item else {
                    return Err("invalid value type expect a string".into());
                };
                *item = expand(s, values);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The value of a var as text in a longer string.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Expands `$(NAME)` in `input`. A string that is exactly one reference takes the var's
/// value with its type; a var whose value is not a scalar is left as written.
fn expand(input: &str, values: &[(String, Value)]) -> Value {
    let lookup = |name: &str| {
        values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .filter(|v| !v.is_object() && !v.is_array())
    };
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut checkpoint = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            out.push_str(&input[checkpoint..i]);
            let rest = &input[i + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(v) if input.len() == name.len() + 3 => return v.clone(),
                            Some(v) => out.push_str(&as_text(v)),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // The `$` and the character after it are copied as they are.
                    let c = rest.chars().next().expect("not empty");
                    out.push('$');
                    out.push(c);
                    c.len_utf8()
                }
            };
            i += advance + 1;
            checkpoint = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    Value::String(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vals() -> Vec<(String, Value)> {
        vec![
            ("HOST".into(), json!("db.prod")),
            ("PORT".into(), json!(5432)),
            ("MAP".into(), json!({"a": 1})),
        ]
    }

    #[test]
    fn references_expand_escapes_stay_and_unknown_names_are_kept() {
        assert_eq!(
            expand("postgres://$(HOST):$(PORT)/x", &vals()),
            json!("postgres://db.prod:5432/x")
        );
        assert_eq!(
            expand("$$(HOST) $(NOPE) $x $(", &vals()),
            json!("$(HOST) $(NOPE) $x $(")
        );
        assert_eq!(expand("$(MAP)", &vals()), json!("$(MAP)"));
    }

    #[test]
    fn a_whole_reference_keeps_the_type_of_the_value() {
        assert_eq!(expand("$(PORT)", &vals()), json!(5432));
        assert_eq!(expand("$(HOST)", &vals()), json!("db.prod"));
    }

    fn service(name: &str) -> super::super::resmap::Resource {
        let obj = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
        super::super::resmap::Resource::new(obj.as_object().unwrap().clone())
    }

    #[test]
    fn vars_bind_follow_renames_and_refuse_a_second_declaration() {
        let var = |name: &str, obj: &str| {
            parse(&[json!({"name": name, "objref": {"apiVersion": "v1", "kind": "Service", "name": obj}, "fieldref": {"fieldPath": "spec.ports[0].port"}})], "k").unwrap()
        };
        let mut map = ResMap {
            resources: vec![service("api")],
            ..ResMap::default()
        };
        merge(&mut map, &var("PORT", "api"), "k").unwrap();
        assert_eq!(
            merge(&mut map, &var("PORT", "api"), "k2")
                .unwrap_err()
                .to_string(),
            "k2: vars: var 'PORT' already encountered"
        );
        merge(&mut map, &var("NOPE", "missing"), "k").unwrap();
        let err = resolve(&mut map.clone()).unwrap_err().to_string();
        assert!(
            err.contains("cannot be mapped to a field in the set of known resources"),
            "{err}"
        );
        map.vars.retain(|v| v.name == "PORT");
        map.resources[0].set_name("prod-api".into());
        map.resources.push(super::super::resmap::Resource::new(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"port": "$(PORT)"}}}).as_object().unwrap().clone(),
        ));
        resolve(&mut map).unwrap();
        assert_eq!(map.resources[1].obj()["metadata"]["labels"]["port"], json!(80));
    }

    #[test]
    fn keys_match_case_insensitively() {
        let v = parse(
            &[json!({"name": "N", "objref": {"kind": "Service", "name": "s", "apiVersion": "v1"}, "fieldref": {"fieldpath": "spec.ports[0].port"}})],
            "k",
        )
        .unwrap();
        assert_eq!(v[0].field_path, "spec.ports[0].port");
        assert_eq!(v[0].objref.version, "v1");
        assert_eq!(
            slice_indexes(split_path(&v[0].field_path)),
            vec!["spec", "ports", "0", "port"]
        );
        assert!(parse(&[json!({"name": "N", "objref": {"knd": "x"}})], "k").is_err());
    }
}
