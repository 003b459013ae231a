//! Conformance: builds every case under tests/cases/ with this engine and with the real
//! kustomize (`$E2E_BIN/kustomize`), and compares the printed YAML byte for byte (a
//! difference in values is reported as such, one only in printing with a text diff). See
//! tests/cases/README.md.
//! The artifact root of every build is tests/cases, so cases may share files.
//!
//! Flux builds in FIFO order while the kustomize CLI sorts by default, so the oracle runs on
//! a copy of the case whose root kustomization gets `sortOptions: {order: fifo}` (unless the
//! case sets its own sortOptions).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use kustomize::{BuildOptions, packed, yaml};
use serde_json::Value;

fn main() -> ExitCode {
    let Some(bin) = std::env::var_os("E2E_BIN") else {
        eprintln!(
            "conformance: E2E_BIN is not set (it must point at the directory holding the kustomize oracle; see e2e/controlplane/build.sh)"
        );
        return ExitCode::FAILURE;
    };
    let kustomize = PathBuf::from(bin).join("kustomize");
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let cases_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&cases_dir)
        .expect("tests/cases exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| {
            filter.is_empty()
                || filter
                    .iter()
                    .any(|f| p.file_name().unwrap().to_string_lossy().contains(f.as_str()))
        })
        .collect();
    cases.sort();
    // Cases may share files with sibling cases, so the oracle gets a copy of the whole tree.
    let tmp = tempfile::tempdir().expect("temporary directory");
    let copy = tmp.path().join("kustomize");
    copy_tree(&cases_dir, &copy).expect("copying tests/cases");
    let (mut passed, mut failed, mut refused) = (0, Vec::new(), Vec::new());
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        match run_case(&kustomize, &cases_dir, &copy, case) {
            Ok(Outcome::Same) => passed += 1,
            Ok(Outcome::Refused) => refused.push(name),
            Err(why) => {
                println!("FAIL {name}: {why}\n");
                failed.push(name);
            }
        }
    }
    if !refused.is_empty() {
        println!(
            "refused as unsupported (allowed by unsupported.txt): {}",
            refused.join(" ")
        );
    }
    println!(
        "conformance: {passed} passed, {} refused as unsupported, {} failed",
        refused.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failed: {}", failed.join(" "));
        return ExitCode::FAILURE;
    }
    if passed == 0 {
        println!("conformance: no cases found in {}", cases_dir.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The directory to build inside a case: `path:` from case.yaml, else the case itself.
fn build_dir(case: &Path) -> Result<PathBuf, String> {
    let spec = case.join("case.yaml");
    if !spec.exists() {
        return Ok(case.to_path_buf());
    }
    let text = std::fs::read_to_string(&spec).map_err(|e| e.to_string())?;
    let v: Value = serde_yaml::from_str(&text).map_err(|e| format!("case.yaml: {e}"))?;
    Ok(case.join(v.get("path").and_then(Value::as_str).unwrap_or(".")))
}

/// How a case that did not fail ended.
enum Outcome {
    /// Both sides agree (same objects, or both failed).
    Same,
    /// The case is marked `unsupported.txt` and the engine refused it as unsupported.
    Refused,
}

fn run_case(kustomize: &Path, cases_dir: &Path, copy: &Path, case: &Path) -> Result<Outcome, String> {
    let dir = build_dir(case)?;
    let rel = dir
        .strip_prefix(cases_dir)
        .map_err(|_| "case.yaml path leaves the corpus".to_string())?;
    let oracle = run_oracle(kustomize, &copy.join(rel))?;
    let ours = kustomize::build(cases_dir, &dir, &BuildOptions::new())
        .map(|built| kustomize::to_yaml(&packed::values(&built.objects)));
    let expect_error = std::fs::read_to_string(case.join("expect-error.txt"))
        .ok()
        .map(|s| s.lines().next().unwrap_or("").to_string());
    if case.join("unsupported.txt").exists() && matches!(ours, Err(kustomize::BuildError::Unsupported { .. }))
    {
        return Ok(Outcome::Refused);
    }
    match (oracle, ours) {
        (Err(theirs), Err(_)) => match expect_error {
            Some(want) if !theirs.contains(&want) => {
                Err(format!("kustomize failed, but without '{want}': {theirs}"))
            }
            _ => Ok(Outcome::Same),
        },
        (Err(theirs), Ok(_)) => Err(format!(
            "kustomize failed but this engine succeeded; kustomize said: {}",
            theirs.trim()
        )),
        (Ok(_), Err(ours)) => Err(format!("this engine failed: {ours}")),
        (Ok(_), Ok(_)) if expect_error.is_some() => {
            Err("expect-error.txt is present but kustomize succeeded".into())
        }
        (Ok(theirs), Ok(ours)) => compare(&theirs, &ours).map(|()| Outcome::Same),
    }
}

/// Runs kustomize on `copy_dir` (in the copy of the corpus) with FIFO order forced.
fn run_oracle(kustomize: &Path, copy_dir: &Path) -> Result<Result<String, String>, String> {
    let mut restore = None;
    for name in ["kustomization.yaml", "kustomization.yml", "Kustomization"] {
        let file = copy_dir.join(name);
        if let Ok(text) = std::fs::read_to_string(&file) {
            let empty = text
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
            if !empty && !text.contains("sortOptions") {
                // A flow-style mapping cannot take a block key after it: add the key inside.
                let forced = match text.trim_start().strip_prefix('{') {
                    Some(rest) => format!("{{sortOptions: {{order: fifo}}, {rest}"),
                    None => format!("{}\nsortOptions:\n  order: fifo\n", text.trim_end()),
                };
                std::fs::write(&file, forced).map_err(|e| e.to_string())?;
                restore = Some((file, text));
            }
            break;
        }
    }
    let out = Command::new(kustomize)
        .args(["build", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(copy_dir)
        .output()
        .map_err(|e| format!("running {}: {e}", kustomize.display()));
    if let Some((file, text)) = restore {
        std::fs::write(file, text).map_err(|e| e.to_string())?;
    }
    let out = out?;
    if !out.status.success() {
        return Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let ty = entry.file_type()?;
        if ty.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn compare(theirs_text: &str, ours_text: &str) -> Result<(), String> {
    if theirs_text == ours_text {
        return Ok(());
    }
    let parse = |text: &str, origin: &str| yaml::parse_documents(text, origin).map_err(|e| e.to_string());
    let theirs = parse(theirs_text, "kustomize output")?;
    let ours = parse(ours_text, "engine output")?;
    let ids = |v: &[Value]| v.iter().map(id).collect::<Vec<_>>();
    if ids(&theirs) != ids(&ours) {
        return Err(format!(
            "objects differ:\n  kustomize: {:?}\n  engine:    {:?}",
            ids(&theirs),
            ids(&ours)
        ));
    }
    let what = match theirs.iter().zip(&ours).find(|(t, o)| t != o) {
        Some((t, _)) => format!("{} differs", id(t)),
        None => "the values agree but the printed text differs".to_string(),
    };
    let diff = similar::TextDiff::from_lines(theirs_text, ours_text)
        .unified_diff()
        .context_radius(2)
        .header("kustomize", "engine")
        .to_string();
    Err(format!("{what}:\n{diff}"))
}

fn id(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    format!(
        "{}/{}/{}",
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name")
    )
}
