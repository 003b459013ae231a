//! The input format of the tree targets: `### <path>` lines start files, the text up to the
//! next such line is the content. Paths are relative and plain, so the fuzzer spends its time on
//! the engine rather than on the file system; later files with the same path are dropped.

/// At most this many files per input: kustomize trees in tests are a handful of files.
const MAX_FILES: usize = 16;

pub fn files(text: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(path) = line.strip_prefix("### ") {
            let path = path.trim_end();
            if !plain(path) || out.iter().any(|(p, _)| *p == path) || out.len() == MAX_FILES {
                return out;
            }
            out.push((path, String::new()));
        } else if let Some((_, content)) = out.last_mut() {
            content.push_str(line);
        }
    }
    out
}

fn plain(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}
