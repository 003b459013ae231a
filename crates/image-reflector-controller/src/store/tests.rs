use super::*;

const KEY: RepoKey<'static> = RepoKey {
    namespace: "apps",
    name: "podinfo",
    uid: "0b6c0f1e-8d2a-4a57-9d55-3b1f5d0c9a11",
};

fn tags(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| t.to_string()).collect()
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn uid_dir(root: &Path, key: RepoKey<'_>) -> PathBuf {
    root.join("imagerepository")
        .join(key.namespace)
        .join(key.name)
        .join(key.uid)
}

#[test]
fn tags_survive_a_restart_sorted_with_a_stable_revision() {
    let root = tempfile::tempdir().unwrap();
    let written = TagStore::new(root.path(), 64)
        .unwrap()
        .write(KEY, tags(&["b", "d", "a", "c"]))
        .unwrap();
    // FluxStorage's revision for [d c b a]: sha256 of "d\nc\nb\na\n" (sha256sum).
    let expected = "sha256:5c6861a52da9e6bfd5f0b37a8c51af173d7550443bb36253b18b2caf57987f53";
    assert_eq!(written.tags, tags(&["d", "c", "b", "a"]));
    assert_eq!(written.revision, expected);

    // A new store on the same path: the controller after a restart.
    let reread = TagStore::new(root.path(), 64).unwrap().read(KEY).unwrap();
    assert_eq!(reread, Some(written));
    let file = uid_dir(root.path(), KEY).join("tags.txt");
    assert_eq!(fs::read_to_string(file).unwrap(), "d\nc\nb\na\n");
}

#[test]
fn revision_does_not_depend_on_the_registry_order() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    let one = store
        .write(KEY, tags(&["1.0.0", "0.1.0", "1.1.0-alpha"]))
        .unwrap();
    let two = store
        .write(KEY, tags(&["1.1.0-alpha", "1.0.0", "0.1.0"]))
        .unwrap();
    assert_eq!(one.revision, two.revision);
    let three = store.write(KEY, tags(&["1.1.0-alpha", "1.0.0"])).unwrap();
    assert_ne!(one.revision, three.revision);
}

#[test]
fn byte_order_not_semver() {
    let mut list = tags(&["73", "101", "1.1.0", "1.1.0-alpha", "-62", "15", "-88"]);
    sort_tags(&mut list);
    assert_eq!(
        list,
        tags(&["73", "15", "101", "1.1.0-alpha", "1.1.0", "-88", "-62"])
    );
}

#[test]
fn compressed_from_the_threshold_on_and_back() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 1).unwrap();
    let dir = uid_dir(root.path(), KEY);
    // 255 tags of 3 characters and a newline: 1020 bytes, under 1 KiB.
    let small: Vec<String> = (0..255).map(|i| format!("{i:03}")).collect();
    store.write(KEY, small.clone()).unwrap();
    assert_eq!(file_names(&dir), ["tags.txt"]);
    assert_eq!(fs::metadata(dir.join("tags.txt")).unwrap().len(), 1020);

    // 256 of them: exactly 1024 bytes, the threshold itself is compressed (`>=`).
    let at_threshold: Vec<String> = (0..256).map(|i| format!("{i:03}")).collect();
    let written = store.write(KEY, at_threshold.clone()).unwrap();
    assert_eq!(file_names(&dir), ["tags.txt.gz"]);
    let raw = fs::read(dir.join("tags.txt.gz")).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "gzip magic");
    assert!(raw.len() < 1024);
    let reread = store.read(KEY).unwrap().unwrap();
    assert_eq!(reread, written);
    assert_eq!(reread.tags.len(), 256);
    assert_eq!(reread.tags.first().map(String::as_str), Some("255"));
    // The revision is of the text, not of the compressed bytes.
    let plain_text: String = reread.tags.iter().map(|t| format!("{t}\n")).collect();
    assert_eq!(
        reread.revision,
        format!("sha256:{}", hex::encode(Sha256::digest(plain_text.as_bytes())))
    );

    store.write(KEY, small).unwrap();
    assert_eq!(file_names(&dir), ["tags.txt"]);
}

#[test]
fn the_newer_variant_wins_after_a_crash_between_write_and_remove() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    let dir = uid_dir(root.path(), KEY);
    store.write(KEY, tags(&["old"])).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(dir.join("tags.txt.gz"), gzip(b"new\n")).unwrap();
    assert_eq!(store.read(KEY).unwrap().unwrap().tags, tags(&["new"]));
}

#[test]
fn keyed_per_object_and_uid() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    let other = RepoKey {
        name: "podinfo-private",
        uid: "ffffffff-0000-0000-0000-000000000000",
        ..KEY
    };
    store.write(KEY, tags(&["public"])).unwrap();
    store.write(other, tags(&["secret"])).unwrap();
    assert_eq!(store.read(KEY).unwrap().unwrap().tags, tags(&["public"]));
    assert_eq!(store.read(other).unwrap().unwrap().tags, tags(&["secret"]));

    // The object recreated under the same name: a new uid sees nothing, and its first write
    // removes the predecessor's tags.
    let recreated = RepoKey {
        uid: "11111111-2222-3333-4444-555555555555",
        ..KEY
    };
    assert_eq!(store.read(recreated).unwrap(), None);
    store.write(recreated, tags(&["fresh"])).unwrap();
    assert_eq!(store.read(KEY).unwrap(), None);
    let name_dir = root.path().join("imagerepository/apps/podinfo");
    assert_eq!(file_names(&name_dir), [recreated.uid]);
}

#[test]
fn deleted_with_the_object() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    store.write(KEY, tags(&["1.0.0"])).unwrap();
    store.delete(KEY).unwrap();
    assert_eq!(store.read(KEY).unwrap(), None);
    assert!(!root.path().join("imagerepository/apps/podinfo").exists());
    assert!(root.path().join("imagerepository/apps").exists());
    // Idempotent: the finalizer may run again.
    store.delete(KEY).unwrap();
}

#[test]
fn no_temporary_files_are_left() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    for round in 0..3 {
        store.write(KEY, tags(&[&format!("v{round}")])).unwrap();
    }
    assert_eq!(file_names(&uid_dir(root.path(), KEY)), ["tags.txt"]);
}

#[test]
fn an_empty_list_is_stored_as_empty() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    let written = store.write(KEY, Vec::new()).unwrap();
    assert_eq!(
        written.revision,
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(store.read(KEY).unwrap(), Some(written));
}

#[test]
fn bad_keys_and_tags_are_refused_and_nothing_is_written() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    store.write(KEY, tags(&["kept"])).unwrap();
    let err = store.write(KEY, tags(&["ok", "evil\ninjected"])).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"tag "evil\ninjected" cannot be stored: it is empty or holds a line break"#
    );
    assert!(err.is_terminal());
    assert_eq!(store.read(KEY).unwrap().unwrap().tags, tags(&["kept"]));

    for (key, message) in [
        (
            RepoKey { name: "..", ..KEY },
            "invalid name '..' for the tag store",
        ),
        (
            RepoKey {
                namespace: "a/b",
                ..KEY
            },
            "invalid namespace 'a/b' for the tag store",
        ),
        (RepoKey { uid: "", ..KEY }, "invalid uid '' for the tag store"),
    ] {
        assert_eq!(store.read(key).unwrap_err().to_string(), message);
        assert_eq!(store.write(key, tags(&["x"])).unwrap_err().to_string(), message);
        assert_eq!(store.delete(key).unwrap_err().to_string(), message);
    }
    assert_eq!(
        TagStore::new(root.path(), 0)
            .err()
            .map(|e| e.to_string())
            .as_deref(),
        Some("storage compression threshold must be greater than 0")
    );
}

#[test]
fn a_damaged_file_is_reported_with_its_path() {
    let root = tempfile::tempdir().unwrap();
    let store = TagStore::new(root.path(), 64).unwrap();
    let dir = uid_dir(root.path(), KEY);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("tags.txt.gz"), b"not gzip").unwrap();
    let err = store.read(KEY).unwrap_err();
    assert!(!err.is_terminal());
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "tag file {} is damaged: ",
            dir.join("tags.txt.gz").display()
        )),
        "{message}"
    );
}
