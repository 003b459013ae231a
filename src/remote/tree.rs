//! Writing a commit's tree to disk from the objects of a pack: regular files and
//! directories only, every name checked so nothing lands outside the destination, symlinks
//! kept only when they point inside the tree, and the written bytes bounded.

use std::path::{Component, Path};

use super::pack::{Kind, Objects, Oid};

/// Bounds of one checkout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TreeLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
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
    let mut budget = Budget {
        bytes: 0,
        entries: 0,
        limits,
    };
    write_tree(objects, tree, dest, Path::new(""), &mut budget, 0)?;
    Ok(budget.bytes)
}

struct Budget {
    bytes: u64,
    entries: u64,
    limits: TreeLimits,
}

fn write_tree(
    objects: &Objects,
    id: &Oid,
    dest: &Path,
    rel: &Path,
    budget: &mut Budget,
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Err("repository tree nested too deeply".into());
    }
    let (kind, data) = objects
        .get(id)
        .ok_or_else(|| format!("tree {} is not in the fetched pack", hex::encode(id)))?;
    if kind != Kind::Tree {
        return Err(format!("{} is not a tree", hex::encode(id)));
    }
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
        let child: Oid = rest[nul + 1..nul + 21].try_into().expect("20 bytes");
        rest = &rest[nul + 21..];
        let child_rel = rel.join(name);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." || name == ".git" {
            return Err(format!("refusing tree entry '{}'", child_rel.display()));
        }
        budget.entries += 1;
        if budget.entries > budget.limits.max_entries {
            return Err(format!(
                "the repository tree has more than {} entries",
                budget.limits.max_entries
            ));
        }
        let target = dest.join(&child_rel);
        let io = |e: std::io::Error| format!("{}: {e}", child_rel.display());
        match mode {
            "40000" | "040000" => {
                std::fs::create_dir(&target).map_err(io)?;
                write_tree(objects, &child, dest, &child_rel, budget, depth + 1)?;
            }
            "100644" | "100755" | "100664" | "120000" => {
                let (kind, blob) = objects
                    .get(&child)
                    .ok_or_else(|| format!("{}: blob is not in the fetched pack", child_rel.display()))?;
                if kind != Kind::Blob {
                    return Err(format!("{}: not a blob", child_rel.display()));
                }
                budget.bytes += blob.len() as u64;
                if budget.bytes > budget.limits.max_bytes {
                    return Err(format!(
                        "the repository tree is larger than the limit of {} bytes",
                        budget.limits.max_bytes
                    ));
                }
                if mode == "120000" {
                    let link = std::str::from_utf8(blob).map_err(|_| "symlink target is not UTF-8")?;
                    if !stays_inside(rel, Path::new(link)) {
                        return Err(format!(
                            "{}: symlink to '{link}' points outside the repository",
                            child_rel.display()
                        ));
                    }
                    std::os::unix::fs::symlink(link, &target).map_err(io)?;
                } else {
                    std::fs::write(&target, blob).map_err(io)?;
                }
            }
            // Submodules (gitlinks) are not fetched.
            "160000" => {}
            other => {
                return Err(format!(
                    "{}: unknown tree entry mode {other}",
                    child_rel.display()
                ));
            }
        }
    }
    Ok(())
}

/// Whether `link`, relative to directory `dir` (relative to the tree root), stays in the tree.
fn stays_inside(dir: &Path, link: &Path) -> bool {
    let mut depth = dir.components().count() as i64;
    for c in link.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_may_not_leave_the_tree() {
        assert!(stays_inside(Path::new("a/b"), Path::new("../c")));
        assert!(stays_inside(Path::new("a"), Path::new("../c")));
        assert!(!stays_inside(Path::new("a"), Path::new("../../c")));
        assert!(!stays_inside(Path::new(""), Path::new("/etc/passwd")));
    }
}
