//! The `image-reflector-controller` binary as a user runs it.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_image-reflector-controller"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn committed(file: &str) -> String {
    let path = format!("{}/../../crds/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const FILES: [&str; 2] = [
    "image.toolkit.fluxcd.io_imagerepositories.yaml",
    "image.toolkit.fluxcd.io_imagepolicies.yaml",
];

#[test]
fn crds_prints_the_committed_crds_as_one_stream() {
    let out = run(&["crds"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected: String = FILES.iter().map(|f| format!("---\n{}", committed(f))).collect();
    assert!(
        String::from_utf8(out.stdout).unwrap() == expected,
        "`crds` differs from crds/"
    );
}

#[test]
fn crds_writes_the_committed_files() {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-crds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = run(&["crds", "--output-dir", dir.to_str().unwrap()]);
    let written: Vec<String> = FILES
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (file, written) in FILES.iter().zip(written) {
        assert!(written == committed(file), "{file} differs from crds/");
    }
    // A directory that does not exist is named in the error.
    let out = run(&["crds", "--output-dir", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(dir.to_str().unwrap()), "{stderr}");
}

#[test]
fn help_names_the_commands_and_unknown_ones_are_refused() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("crds") && help.contains("run"), "{help}");
    // Anything but a subcommand is an argument of `run` (Flux's Deployment passes flags alone).
    let out = run(&["scan-everything"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unexpected argument 'scan-everything'"),
        "{stderr}"
    );
    let out = run(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}
