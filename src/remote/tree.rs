//! Writing a commit's tree to disk from the objects of a pack. The tree is hostile: every
//! name is checked, each directory's entries must be unique and in Git's order (a second entry
//! of a name would land on, or through, the first), files are created new while the checkout
//! holds no symbolic link, and the links come last, under the rule artifact extraction uses
//! (`source::symlinks`): each is resolved on disk with all the others in place, so no chain of
//! them leads out. The written bytes and entries are bounded, and messages name entries by
//! their path in the repository, never by where the checkout lies on disk.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use super::pack::{Kind, Objects, Oid};
use crate::deadline::Deadline;
use crate::source::symlinks::{self, Symlink, SymlinkError};

/// Bounds of one checkout.
#[derive(Clone, Debug)]
pub(crate) struct TreeLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
    /// The build's: checked per entry, so an abandoned build stops writing.
    pub deadline: Deadline,
}

/// The tree id of the commit `id` (following annotated tags).
pub(crate) fn commit_tree(objects: &Objects, id: &Oid) -> Result<Oid, String> {
    let mut id = *id;
    for _ in 0..10 {
        let (kind, data) = objects
            .get(&id)
            .ok_or_else(|| format!("object {} is not in the fetched pack", hex::encode(id)))?;
        let header = match kind {
            Kind::Commit => "tree ",
            Kind::Tag => "object ",
            other => return Err(format!("{} is a {other:?}, not a commit", hex::encode(id))),
        };
        let text = std::str::from_utf8(data).map_err(|_| "commit is not valid UTF-8")?;
        let target = text
            .lines()
            .find_map(|l| l.strip_prefix(header))
            .ok_or("commit without a tree")?;
        id = parse_hex(target)?;
        if kind == Kind::Commit {
            return Ok(id);
        }
    }
    Err("tag chain too long".into())
}

fn parse_hex(text: &str) -> Result<Oid, String> {
    hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("invalid object id '{text}'"))
}

/// Writes the tree `tree` below `dest` (an existing, empty directory); returns the bytes written.
pub(crate) fn checkout(
    objects: &Objects,
    tree: &Oid,
    dest: &Path,
    limits: TreeLimits,
) -> Result<u64, String> {
    let root = dest
        .canonicalize()
        .map_err(|e| format!("checkout directory: {}", e.kind()))?;
    let mut walk = Walk {
        objects,
        root: &root,
        bytes: 0,
        entries: 0,
        limits,
        links: Vec::new(),
    };
    walk.tree(tree, Path::new(""), 0)?;
    symlinks::place(&root, walk.links).map_err(|e| e.to_string())?;
    Ok(walk.bytes)
}

/// One checkout in progress: what was written so far, and the links left for the end.
struct Walk<'a> {
    objects: &'a Objects,
    root: &'a Path,
    bytes: u64,
    entries: u64,
    limits: TreeLimits,
    links: Vec<Symlink>,
}

impl<'a> Walk<'a> {
    /// Writes the directories and files of tree `id`, which lies at `rel` in the repository.
    fn tree(&mut self, id: &Oid, rel: &Path, depth: usize) -> Result<(), String> {
        if depth > 64 {
            return Err("repository tree nested too deeply".into());
        }
        let (kind, data) = self
            .objects
            .get(id)
            .ok_or_else(|| format!("tree {} is not in the fetched pack", hex::encode(id)))?;
        if kind != Kind::Tree {
            return Err(format!("{} is not a tree", hex::encode(id)));
        }
        for entry in entries(data, rel)? {
            self.limits.deadline.check().map_err(|e| e.to_string())?;
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(format!(
                    "the repository tree has more than {} entries",
                    self.limits.max_entries
                ));
            }
            let child_rel = rel.join(entry.name);
            let shown = child_rel.display();
            let target = self.root.join(&child_rel);
            let io = |e: std::io::Error| format!("{shown}: {e}");
            match entry.mode {
                "40000" | "040000" => {
                    std::fs::create_dir(&target).map_err(io)?;
                    self.tree(&entry.id, &child_rel, depth + 1)?;
                }
                "100644" | "100755" | "100664" | "120000" => {
                    let blob = self.blob(&entry.id, &child_rel)?;
                    if entry.mode == "120000" {
                        let link = std::str::from_utf8(blob)
                            .map_err(|_| format!("{shown}: symlink target is not UTF-8"))?;
                        let entry = shown.to_string();
                        let target = link.to_string();
                        if !symlinks::lexically_inside(&child_rel, link) {
                            return Err(SymlinkError::Escape { entry, target }.to_string());
                        }
                        self.links.push(Symlink {
                            entry,
                            rel: child_rel.clone(),
                            target,
                        });
                    } else {
                        // A new file, never whatever may already be at that path.
                        std::fs::File::create_new(&target)
                            .and_then(|mut f| f.write_all(blob))
                            .map_err(io)?;
                    }
                }
                // Submodules (gitlinks) are not fetched.
                "160000" => {}
                other => return Err(format!("{shown}: unknown tree entry mode {other}")),
            }
        }
        Ok(())
    }

    /// The content of blob `id` at `rel`, charged to the byte budget.
    fn blob(&mut self, id: &Oid, rel: &Path) -> Result<&'a [u8], String> {
        let (kind, blob) = self
            .objects
            .get(id)
            .ok_or_else(|| format!("{}: blob is not in the fetched pack", rel.display()))?;
        if kind != Kind::Blob {
            return Err(format!("{}: not a blob", rel.display()));
        }
        self.bytes += blob.len() as u64;
        if self.bytes > self.limits.max_bytes {
            return Err(format!(
                "the repository tree is larger than the limit of {} bytes",
                self.limits.max_bytes
            ));
        }
        Ok(blob)
    }
}

/// One entry of a tree object.
#[derive(Debug)]
struct TreeEntry<'a> {
    mode: &'a str,
    name: &'a str,
    id: Oid,
}

/// The entries of tree object `data` (the tree at `rel`), each name checked, refused unless
/// every name is unique and they come in Git's order: byte order, a directory's name compared
/// as if it ended in '/'. That is the order `git fsck` insists on.
fn entries<'a>(data: &'a [u8], rel: &Path) -> Result<Vec<TreeEntry<'a>>, String> {
    let mut found = Vec::new();
    let mut names = HashSet::new();
    let mut previous: Option<Vec<u8>> = None;
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or("malformed tree entry")?;
        let nul = rest.iter().position(|&b| b == 0).ok_or("malformed tree entry")?;
        if nul < space || rest.len() < nul + 21 {
            return Err("malformed tree entry".into());
        }
        let mode = std::str::from_utf8(&rest[..space]).map_err(|_| "malformed tree mode")?;
        let name = std::str::from_utf8(&rest[space + 1..nul]).map_err(|_| "tree entry name is not UTF-8")?;
        let id: Oid = rest[nul + 1..nul + 21].try_into().expect("20 bytes");
        rest = &rest[nul + 21..];
        let shown = || rel.join(name).display().to_string();
        if name.is_empty() || name.contains('/') || name == "." || name == ".." || name == ".git" {
            return Err(format!("refusing tree entry '{}'", shown()));
        }
        if !names.insert(name) {
            return Err(format!("tree entry '{}' appears twice", shown()));
        }
        let mut key = name.as_bytes().to_vec();
        if matches!(mode, "40000" | "040000") {
            key.push(b'/');
        }
        if let Some(before) = previous.as_deref()
            && key.as_slice() <= before
        {
            let before = String::from_utf8_lossy(before.strip_suffix(b"/").unwrap_or(before));
            return Err(format!(
                "tree entry '{}' is not in Git's order (it follows '{}')",
                shown(),
                rel.join(before.as_ref()).display()
            ));
        }
        previous = Some(key);
        found.push(TreeEntry { mode, name, id });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "100644";
    const DIR: &str = "40000";
    const LINK: &str = "120000";

    /// A tree object listing `entries` (mode, name, object) exactly in the order given.
    fn tree(objects: &mut Objects, entries: &[(&str, &str, Oid)]) -> Oid {
        let mut data = Vec::new();
        for (mode, name, id) in entries {
            data.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            data.extend_from_slice(id);
        }
        objects.insert(Kind::Tree, data)
    }

    fn blob(objects: &mut Objects, text: &str) -> Oid {
        objects.insert(Kind::Blob, text.as_bytes().to_vec())
    }

    fn limits() -> TreeLimits {
        TreeLimits {
            max_bytes: 1 << 20,
            max_entries: 1000,
            deadline: Deadline::after(std::time::Duration::from_secs(3600)),
        }
    }

    /// Checks `root` out into `<fresh parent>/tree`; the parent shows what leaked out.
    fn check_out(objects: &Objects, root: &Oid) -> (tempfile::TempDir, Result<u64, String>) {
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join("tree");
        std::fs::create_dir(&dest).unwrap();
        let result = checkout(objects, root, &dest, limits());
        (parent, result)
    }

    fn refused(objects: &Objects, root: &Oid) -> String {
        let (parent, result) = check_out(objects, root);
        let names: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["tree"], "nothing may be written beside the checkout");
        let message = result.expect_err("the tree must be refused");
        let place = parent.path().to_str().unwrap();
        assert!(!message.contains(place), "the checkout's place leaks: {message}");
        message
    }

    /// Before, a build abandoned at spec.timeout wrote its checkout to the end on the
    /// blocking thread; now each entry checks the build's deadline.
    #[test]
    fn nothing_is_written_past_the_deadline() {
        let mut objects = Objects::default();
        let cm = blob(&mut objects, "kind: ConfigMap\n");
        let root = tree(&mut objects, &[(FILE, "cm.yaml", cm)]);
        let dest = tempfile::tempdir().unwrap();
        let passed = std::time::Instant::now() - std::time::Duration::from_secs(31);
        let limits = TreeLimits {
            deadline: Deadline::from(passed, std::time::Duration::from_secs(30)),
            ..limits()
        };
        assert_eq!(
            checkout(&objects, &root, dest.path(), limits).unwrap_err(),
            "the build ran out of time (spec.timeout 30s)"
        );
        assert!(std::fs::read_dir(dest.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_plain_tree_with_an_inner_symlink_is_checked_out() {
        let mut objects = Objects::default();
        let cm = blob(&mut objects, "kind: ConfigMap\n");
        let target = blob(&mut objects, "../base/cm.yaml");
        let base = tree(&mut objects, &[(FILE, "cm.yaml", cm)]);
        let overlay = tree(&mut objects, &[(LINK, "cm.yaml", target)]);
        let root = tree(&mut objects, &[(DIR, "base", base), (DIR, "overlay", overlay)]);
        let (parent, result) = check_out(&objects, &root);
        assert_eq!(result.unwrap(), 16 + 15);
        let dest = parent.path().join("tree");
        assert_eq!(
            std::fs::read_to_string(dest.join("overlay/cm.yaml")).unwrap(),
            "kind: ConfigMap\n"
        );
    }

    #[test]
    fn a_chain_of_symlinks_climbing_out_is_refused() {
        // Before: each link was checked by its name against its own folder, so `s/up -> ..`
        // (the root), `s/l1 -> up/..` (the checkout's parent) and `s/l2 -> l1/..` all passed
        // and the checkout held a link to two levels above itself.
        let mut objects = Objects::default();
        let up = blob(&mut objects, "..");
        let l1 = blob(&mut objects, "up/..");
        let l2 = blob(&mut objects, "l1/..");
        let s = tree(
            &mut objects,
            &[(LINK, "l1", l1), (LINK, "l2", l2), (LINK, "up", up)],
        );
        let root = tree(&mut objects, &[(DIR, "s", s)]);
        assert_eq!(
            refused(&objects, &root),
            "'s/l1': link target 'up/..' leads outside the tree"
        );
    }

    #[test]
    fn a_second_entry_of_a_name_is_refused_not_written_through_the_first() {
        // Before: `s/b -> a/../pwned` with `s/a -> ..` passed the name check, and the blob `b`
        // listed after it was written through the link, to `pwned` beside the checkout.
        let mut objects = Objects::default();
        let a = blob(&mut objects, "..");
        let b = blob(&mut objects, "a/../pwned");
        let content = blob(&mut objects, "written outside\n");
        let s = tree(
            &mut objects,
            &[(LINK, "a", a), (LINK, "b", b), (FILE, "b", content)],
        );
        let root = tree(&mut objects, &[(DIR, "s", s)]);
        assert_eq!(refused(&objects, &root), "tree entry 's/b' appears twice");
        // A file and a directory of one name are in Git's order, and still twice the name.
        let empty = tree(&mut objects, &[]);
        let root = tree(
            &mut objects,
            &[(FILE, "a", content), (FILE, "a.b", content), (DIR, "a", empty)],
        );
        assert_eq!(refused(&objects, &root), "tree entry 'a' appears twice");
    }

    #[test]
    fn entries_out_of_gits_order_are_refused() {
        // Before: entries were written in whatever order the tree listed them.
        let mut objects = Objects::default();
        let content = blob(&mut objects, "x\n");
        let empty = tree(&mut objects, &[]);
        let sub = tree(&mut objects, &[(FILE, "b", content), (FILE, "a", content)]);
        let root = tree(&mut objects, &[(DIR, "d", sub)]);
        assert_eq!(
            refused(&objects, &root),
            "tree entry 'd/a' is not in Git's order (it follows 'd/b')"
        );
        // A directory sorts as if its name ended in '/': after "a.txt" ('.' < '/').
        let root = tree(&mut objects, &[(DIR, "a", empty), (FILE, "a.txt", content)]);
        assert_eq!(
            refused(&objects, &root),
            "tree entry 'a.txt' is not in Git's order (it follows 'a')"
        );
    }

    #[test]
    fn git_writes_trees_in_the_order_we_require() {
        // The oracle: the order `git mktree` writes a tree in is accepted, its reverse is not.
        let repo = tempfile::tempdir().unwrap();
        let git = |args: &[&str], input: &str| {
            let mut child = std::process::Command::new("git")
                .args(args)
                .current_dir(repo.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("git runs");
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "git {args:?}");
            out.stdout
        };
        git(&["init", "--quiet"], "");
        let (blob, subtree) = ("1".repeat(40), "2".repeat(40));
        let listing = format!(
            "040000 tree {subtree}\ta\n100644 blob {blob}\ta.txt\n\
             100644 blob {blob}\ta-b\n100644 blob {blob}\ta0\n"
        );
        let id = String::from_utf8(git(&["mktree", "--missing"], &listing)).unwrap();
        let data = git(&["cat-file", "tree", id.trim()], "");
        let listed = entries(&data, Path::new("")).expect("git's own order");
        let names: Vec<_> = listed.iter().map(|e| e.name).collect();
        assert_eq!(names.len(), 4, "{names:?}");
        let mut objects = Objects::default();
        let reversed: Vec<_> = listed.iter().rev().map(|e| (e.mode, e.name, e.id)).collect();
        let reversed = tree(&mut objects, &reversed);
        let (_, data) = objects.get(&reversed).unwrap();
        assert!(entries(data, Path::new("")).is_err(), "{names:?} reversed");
    }
}
