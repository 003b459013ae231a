//! Fuzzes the kustomization parser and the whole engine behind it: the input is a small tree of
//! files, the first being `kustomization.yaml`, built with the production file-size limit.
//! Invariants: no panic, reads never leave the tree, and a successful build prints to YAML that
//! parses back.
#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;

#[path = "tree.rs"]
mod tree;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let files = tree::files(text);
    let Some((first, _)) = files.first() else { return };
    if *first != "kustomization.yaml" {
        return;
    }
    let parent = tempfile::tempdir().expect("temp dir");
    let root = parent.path().join("root");
    for (path, content) in &files {
        let path = root.join(path);
        // A path that is both a file and a directory of another cannot be written: no tree.
        if fs::create_dir_all(path.parent().unwrap()).is_err() || fs::write(path, content).is_err() {
            return;
        }
    }
    let options = kustomize::BuildOptions::new();
    if let Ok(built) = kustomize::build(&root, &root, &options) {
        let objects = kustomize::packed::values(&built.objects);
        let printed = kustomize::to_yaml(&objects);
        kustomize::yaml::parse_documents(&printed, "printed.yaml")
            .unwrap_or_else(|e| panic!("printed build does not parse: {e}\n{printed}"));
    }
});
