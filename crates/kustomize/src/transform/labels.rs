//! Labels and annotations written at field-spec paths (`labels`, `commonLabels`,
//! `commonAnnotations`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::BuildError;
use crate::file::FieldSpec;
use crate::resmap::ResMap;

use super::{path_segments, selects, visit_path};

/// Writes every pair into the maps found at `specs` of every object.
pub(crate) fn apply(
    map: &mut ResMap,
    pairs: &BTreeMap<String, String>,
    specs: &[FieldSpec],
    file: &str,
    field: &str,
) -> Result<(), BuildError> {
    if pairs.is_empty() {
        return Ok(());
    }
    map.try_each(|res| {
        let id = res.id();
        res.edit(|obj| {
            specs.iter().filter(|s| selects(s, &id)).try_for_each(|spec| {
                visit_path(
                    obj,
                    &path_segments(&spec.path),
                    spec.create,
                    &|| Value::Object(Map::new()),
                    &mut |v| {
                        if v.is_null() {
                            *v = Value::Object(Map::new());
                        }
                        let Value::Object(m) = v else {
                            return Err(BuildError::Transform {
                                file: file.to_string(),
                                field: field.to_string(),
                                message: format!("{id}: '{}' is not a map", spec.path),
                            });
                        };
                        for (k, val) in pairs {
                            m.insert(k.clone(), Value::String(val.clone()));
                        }
                        Ok(())
                    },
                )
            })
        })
    })
}
