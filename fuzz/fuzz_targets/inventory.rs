//! Fuzzes the decoding of inventory ids written by someone else (`status.inventory` of an
//! object taken over from Flux or edited by hand). Invariants: no panic; a decoded id without a
//! raw `:` encodes back to itself (Flux writes `:` in RBAC names as `__`, so a raw one can only
//! come from a hand edit); the version helpers keep the id.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/api/inventory.rs"]
mod inventory;

use inventory::{ObjectRef, ResourceRef};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (id, version) = text.split_once('\n').unwrap_or((text, "v1"));
    let entry = ResourceRef { id: id.to_string(), v: version.to_string() };
    let Ok(object) = entry.object_ref() else { return };
    if !id.contains(':') {
        assert_eq!(object.id(), id, "{object:?} did not encode back to its id");
    }
    assert_eq!(ObjectRef::parse_id(&object.id()).as_ref().map(ObjectRef::id), Ok(object.id()));
    let api_version = object.api_version(&entry.v);
    assert_eq!(object.to_entry(&api_version).id, object.id());
    let _ = object.to_string();
});
