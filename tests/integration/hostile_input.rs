//! Hostile trees and Git servers given to `kustomize-controller build`: each must be refused quickly and in
//! little memory, with an error naming the culprit, instead of taking the process down. The
//! child's peak RSS and CPU time come from the kernel's own counters (wait4's ru_maxrss,
//! ru_utime and ru_stime, reported by GNU time): CPU time, unlike elapsed time, does not grow
//! when other tests load the machine. For the same reason a runaway child is stopped by CPU
//! time and address space limits, and by wall-clock time only as a last resort.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;

use sha1::Digest;

/// Peak resident memory a refused build may reach.
const MAX_RSS_KB: u64 = 100 * 1024;
/// CPU time a refusal may take.
const MAX_SECONDS: f64 = 2.0;
/// CPU seconds after which the kernel stops a build (ulimit -t): ten times the bound, so
/// only a runaway meets it, however loaded the machine.
const CPU_LIMIT_SECONDS: &str = "20";
/// Address space a build may map (ulimit -v, KiB): far above the RSS bound, since threads
/// and malloc arenas reserve more than they touch, yet a runaway fails an allocation here
/// instead of taking the machine's memory.
const ADDRESS_SPACE_KB: &str = "4194304";
/// Wall-clock seconds after which a build is stopped: only for one that hangs without
/// using CPU, which the CPU limit cannot see.
const STOP_AFTER: &str = "120";

/// What the kernel counted for one `build` run.
struct Measured {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    max_rss_kb: u64,
    /// User plus system CPU time.
    cpu_seconds: f64,
    elapsed_seconds: f64,
}

fn measured_build(root: &Path, dir: &str) -> Measured {
    measured_build_with(root, dir, &[])
}

/// Runs `kustomize-controller build <dir> --root <root> <args>` under GNU time, which waits
/// for it with wait4 and reports the child's ru_maxrss and elapsed time; the shell sets the
/// limits and replaces itself with `timeout`, whose child the build is.
fn measured_build_with(root: &Path, dir: &str, args: &[&str]) -> Measured {
    let report = root.join("time-report");
    let limits = format!(
        "ulimit -t {CPU_LIMIT_SECONDS} && ulimit -v {ADDRESS_SPACE_KB} && exec timeout {STOP_AFTER} \"$@\""
    );
    let output = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M %U %S %e")
        .arg("-o")
        .arg(&report)
        .args(["sh", "-c", &limits, "sh"])
        .arg(env!("CARGO_BIN_EXE_kustomize-controller"))
        .arg("build")
        .arg(dir)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("GNU time (/usr/bin/time, Debian package `time`) runs the build");
    let report = std::fs::read_to_string(&report).expect("GNU time wrote its report");
    // A killed child adds a "Command terminated by signal" line before the figures.
    let figures = report.lines().last().unwrap_or_default();
    let numbers: Vec<f64> = figures
        .split(' ')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("unexpected GNU time report: {report}"))
        })
        .collect();
    let [rss, user, system, elapsed] = numbers[..] else {
        panic!("unexpected GNU time report: {report}")
    };
    Measured {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        max_rss_kb: rss as u64,
        cpu_seconds: user + system,
        elapsed_seconds: elapsed,
    }
}

/// The build was refused (not killed, not crashed) within the bounds, with an error that
/// mentions every one of `mentions`.
fn assert_refused_within_bounds(m: &Measured, mentions: &[&str]) {
    assert_exit_within_bounds(m, 1);
    for text in mentions {
        assert!(
            m.stderr.contains(text),
            "the error should mention {text:?}: {}",
            m.stderr
        );
    }
}

/// The build exited with `code` (not killed, not crashed) within the memory and CPU bounds.
fn assert_exit_within_bounds(m: &Measured, code: i32) {
    let figures = format!(
        "{:?}, peak RSS {} KB, {:.2} s CPU, {:.2} s elapsed",
        m.status, m.max_rss_kb, m.cpu_seconds, m.elapsed_seconds
    );
    eprintln!("build: {figures}");
    assert_eq!(
        m.status.code(),
        Some(code),
        "the build must exit with {code}, not run away or crash ({figures}); stderr: {}",
        m.stderr
    );
    assert!(
        m.max_rss_kb < MAX_RSS_KB,
        "peak RSS {} KB, bound {MAX_RSS_KB} KB",
        m.max_rss_kb
    );
    assert!(
        m.cpu_seconds < MAX_SECONDS,
        "{} s of CPU, bound {MAX_SECONDS} s",
        m.cpu_seconds
    );
}

#[test]
fn an_alias_bomb_is_refused_in_little_memory_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    // ~90 KB: one anchored list of 10^4 scalars, aliased 10^4 times (10^8 nodes expanded).
    let mut bomb = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\na: &a [");
    bomb.push_str(&vec!["x"; 10_000].join(", "));
    bomb.push_str("]\nb:\n");
    bomb.push_str(&"- *a\n".repeat(10_000));
    assert!(
        bomb.len() < 100_000,
        "the attack is a small file: {} bytes",
        bomb.len()
    );
    std::fs::create_dir(tmp.path().join("app")).unwrap();
    std::fs::write(tmp.path().join("app/bomb.yaml"), bomb).unwrap();
    std::fs::write(
        tmp.path().join("app/kustomization.yaml"),
        "resources: [bomb.yaml]\n",
    )
    .unwrap();

    let measured = measured_build(tmp.path(), "app");
    assert_refused_within_bounds(&measured, &["bomb.yaml", "aliases expand"]);
}

#[test]
fn a_chain_of_thirty_thousand_bases_is_refused_naming_the_path() {
    // In memory: 60,000 files on a busy disk take longer than the build.
    let tmp = tempfile::tempdir_in("/dev/shm").expect("a temporary directory in /dev/shm");
    const CHAIN: usize = 30_000;
    for i in 0..CHAIN {
        let dir = tmp.path().join(format!("d{i}"));
        std::fs::create_dir(&dir).unwrap();
        let text = if i + 1 < CHAIN {
            format!("resources: [../d{}]\n", i + 1)
        } else {
            "resources: [cm.yaml]\n".to_string()
        };
        std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
    }
    std::fs::write(
        tmp.path().join(format!("d{}/cm.yaml", CHAIN - 1)),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: end\n",
    )
    .unwrap();

    let measured = measured_build(tmp.path(), "d0");
    // The error names the kustomization where the limit was reached: 100 bases below d0.
    assert_refused_within_bounds(&measured, &["d100", "nested deeper than 100"]);
}

#[test]
fn deeply_nested_brackets_are_refused_before_the_scanner_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    // 400 KB of brackets: the YAML scanner alone takes minutes over it.
    let depth = 200_000;
    let deep = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\ndata: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    std::fs::create_dir(tmp.path().join("app")).unwrap();
    std::fs::write(tmp.path().join("app/deep.yaml"), deep).unwrap();
    std::fs::write(
        tmp.path().join("app/kustomization.yaml"),
        "resources: [deep.yaml]\n",
    )
    .unwrap();

    let measured = measured_build(tmp.path(), "app");
    assert_refused_within_bounds(&measured, &["deep.yaml", "nested deeper than 1000"]);
}

/// A Git smart-HTTP server on 127.0.0.1 that speaks protocol version 2 and answers every
/// fetch with `pack`; returns the URL of its one repository.
fn git_server_sending(pack: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    let pkt = |data: &[u8]| [format!("{:04x}", data.len() + 4).as_bytes(), data].concat();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some(request) = read_request(&mut stream) else {
                continue;
            };
            let (status, body) = if request.starts_with("GET /repo.git/info/refs?") {
                let advertisement = [pkt(b"version 2\n"), pkt(b"fetch\n"), b"0000".to_vec()];
                ("200 OK", advertisement.concat())
            } else if request.starts_with("POST /repo.git/git-upload-pack ") {
                // Side-band 1 packets, each within the pkt-line maximum of 65 520 bytes.
                let sideband = pack
                    .chunks(65_515)
                    .flat_map(|chunk| pkt(&[&[1u8][..], chunk].concat()));
                let body = pkt(b"packfile\n").into_iter().chain(sideband);
                ("200 OK", body.chain(*b"0000").collect())
            } else {
                ("404 Not Found", Vec::new())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&[head.as_bytes(), &body].concat());
        }
    });
    url
}

/// Reads one HTTP request, its body included (by Content-Length), as text.
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).ok().filter(|&n| n > 0)?;
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |(_, v)| v.trim().parse().unwrap_or(0));
            if body.len() >= length {
                return Some(text);
            }
        }
    }
}

/// One pack entry: the header for `type_code` and `payload`'s length, then `between` (a
/// delta's base offset or id), then `payload` zlib-compressed.
fn pack_entry(type_code: u8, between: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut size = payload.len();
    let mut out = vec![(type_code << 4) | (size & 0x0f) as u8];
    size >>= 4;
    while size > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((size & 0x7f) as u8);
        size >>= 7;
    }
    out.extend_from_slice(between);
    let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::best());
    z.write_all(payload).unwrap();
    z.finish().unwrap()
}

/// A pack of `count` entries made of `body`, with its header and checksum.
fn sealed_pack(count: u32, body: &[u8]) -> Vec<u8> {
    let mut pack = [&b"PACK"[..], &2u32.to_be_bytes(), &count.to_be_bytes(), body].concat();
    let checksum = sha1::Sha1::digest(&pack);
    pack.extend_from_slice(&checksum);
    pack
}

/// The id Git gives the object `data` of `kind` ("blob", "tree", "commit").
fn object_id(kind: &str, data: &[u8]) -> [u8; 20] {
    let mut h = sha1::Sha1::new();
    h.update(format!("{kind} {}\0", data.len()).as_bytes());
    h.update(data);
    h.finalize().into()
}

/// A directory `app` whose kustomization names `base` of the repository at `url` and `commit`.
fn app_using_remote_base(url: &str, commit: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("app")).unwrap();
    std::fs::write(
        tmp.path().join("app/kustomization.yaml"),
        format!("resources: [\"{url}//base?ref={commit}\"]\n"),
    )
    .unwrap();
    tmp
}

/// 55 bytes: an empty blob, then an OFS_DELTA against it whose delta (base size 0) announces a
/// target of 2^63 - 1 bytes.
fn exabyte_delta_pack() -> Vec<u8> {
    let blob = pack_entry(3, &[], b"");
    let delta = [0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    let ofs_delta = pack_entry(6, &[blob.len() as u8], &delta);
    sealed_pack(2, &[blob, ofs_delta].concat())
}

#[test]
fn a_pack_delta_announcing_an_exabyte_is_refused_naming_the_object() {
    // Before: the build fetched this 55-byte pack, allocated the delta's 2^63 - 1 byte target,
    // the allocation failed and the process aborted (SIGABRT; the controller crash-looped).
    let pack = exabyte_delta_pack();
    assert!(pack.len() < 64, "the attack is a tiny pack: {} bytes", pack.len());
    let url = git_server_sending(pack);
    let commit = "c0ffee".repeat(7)[..40].to_string();
    let tmp = app_using_remote_base(&url, &commit);

    let measured = measured_build(tmp.path(), "app");
    assert_refused_within_bounds(
        &measured,
        &[
            "app/kustomization.yaml",
            &format!("checking out {url} at {commit}"),
            "pack object 2: delta target of 9223372036854775807 bytes exceeds the remaining budget",
        ],
    );
}

#[test]
fn json6902_copies_that_double_an_object_are_refused_naming_the_patch() {
    // Before: every `copy` of /data into itself doubled the ConfigMap, and 40 of them, in a
    // 2 KB kustomization, took the build to 3.9 GB before it aborted. Small values cost the
    // most memory for their JSON (a map each), long ones the most JSON.
    for value in ["x".to_string(), "x".repeat(1000)] {
        let tmp = tempfile::tempdir().unwrap();
        let config_map =
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: doubled\ndata:\n  k: {value}\n");
        let copies: String = (0..40)
            .map(|i| format!("- {{op: copy, from: /data, path: /data/k{i}}}\n"))
            .collect();
        let kustomization =
            "resources: [cm.yaml]\npatches:\n- path: copies.yaml\n  target: {kind: ConfigMap}\n";
        let size = config_map.len() + copies.len() + kustomization.len();
        assert!(size < 4096, "the attack is small: {size} bytes");
        std::fs::create_dir(tmp.path().join("app")).unwrap();
        std::fs::write(tmp.path().join("app/cm.yaml"), config_map).unwrap();
        std::fs::write(tmp.path().join("app/copies.yaml"), copies).unwrap();
        std::fs::write(tmp.path().join("app/kustomization.yaml"), kustomization).unwrap();

        let measured = measured_build(tmp.path(), "app");
        assert_refused_within_bounds(
            &measured,
            &[
                "app/copies.yaml",
                "json patch operation",
                "(copy \"/data/k",
                "by more than 16777216 bytes",
            ],
        );
    }
}

#[test]
fn a_pack_of_a_million_empty_blobs_is_refused_by_its_object_count() {
    // Before: 7 million empty blobs (63 MB, within the 64 MiB download limit) took 1.1 GB
    // to parse, their bookkeeping charged to no budget. A million (9 MB here, so that the
    // download itself stays small) passed too, to fail on the missing commit afterwards.
    let blob = pack_entry(3, &[], b"");
    let pack = sealed_pack(1_000_000, &blob.repeat(1_000_000));
    let url = git_server_sending(pack);
    let commit = "c0ffee".repeat(7)[..40].to_string();
    let tmp = app_using_remote_base(&url, &commit);

    let measured = measured_build(tmp.path(), "app");
    assert_refused_within_bounds(
        &measured,
        &[
            &format!("checking out {url} at {commit}"),
            "the pack holds 1000000 objects, more than the limit of 200000",
        ],
    );
}

/// A repository whose `base` holds a kustomization and the ConfigMap at the end of the first
/// of `chains` chains of `len` REF_DELTAs each, every delta listed before its base, the whole
/// blobs they start from last. Returns the pack and the commit's id.
fn reversed_delta_chains(chains: usize, len: usize) -> (Vec<u8>, [u8; 20]) {
    let blob = |chain: usize, step: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: chain-{chain}\ndata:\n  step: \"{step}\"\n"
        )
    };
    let mut body = Vec::new();
    for chain in 0..chains {
        for step in (1..=len).rev() {
            let (base, target) = (blob(chain, step - 1), blob(chain, step));
            // Base size, target size, one instruction inserting all of the target.
            let delta = [
                &[base.len() as u8, target.len() as u8, target.len() as u8][..],
                target.as_bytes(),
            ]
            .concat();
            body.extend(pack_entry(7, &object_id("blob", base.as_bytes()), &delta));
        }
    }
    for chain in 0..chains {
        body.extend(pack_entry(3, &[], blob(chain, 0).as_bytes()));
    }
    let kustomization = b"resources: [cm.yaml]\n";
    let cm = object_id("blob", blob(0, len).as_bytes());
    let base = [
        &b"100644 cm.yaml\0"[..],
        &cm,
        b"100644 kustomization.yaml\0",
        &object_id("blob", kustomization),
    ]
    .concat();
    let root = [&b"40000 base\0"[..], &object_id("tree", &base)].concat();
    let commit = format!(
        "tree {}\nauthor t <t@e> 0 +0000\ncommitter t <t@e> 0 +0000\n\nchains\n",
        hex::encode(object_id("tree", &root))
    );
    body.extend(pack_entry(3, &[], kustomization));
    body.extend(pack_entry(2, &[], &base));
    body.extend(pack_entry(2, &[], &root));
    body.extend(pack_entry(1, &[], commit.as_bytes()));
    let count = chains * (len + 1) + 4;
    (
        sealed_pack(count as u32, &body),
        object_id("commit", commit.as_bytes()),
    )
}

#[test]
fn twenty_thousand_ref_deltas_listed_before_their_bases_resolve_in_linear_time() {
    // Before: a pass over the pending deltas resolved one step of each chain, so 20 000
    // REF_DELTAs in reverse took time quadratic in their number (12 s for one chain in the
    // issue's release build), outside any timeout. Five chains of 4 000, each within Git's
    // depth limit, are resolved here, the ConfigMap at the end of the first one built.
    let (pack, commit) = reversed_delta_chains(5, 4000);
    let url = git_server_sending(pack);
    let tmp = app_using_remote_base(&url, &hex::encode(commit));

    let measured = measured_build(tmp.path(), "app");
    assert_exit_within_bounds(&measured, 0);
    assert!(
        measured.stdout.contains("name: chain-0") && measured.stdout.contains("step: \"4000\""),
        "the ConfigMap at the end of the chain: {}",
        measured.stdout
    );
}

/// A tree with `app/cm.yaml` holding `data`, and `ks.yaml`: a Kustomization whose
/// postBuild.substitute sets `v` and `big` to these values.
fn substitution_tree(data: &str, v: &str, big: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("app")).unwrap();
    let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n{data}");
    std::fs::write(tmp.path().join("app/cm.yaml"), cm).unwrap();
    let ks = format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: app\nspec:\n  postBuild:\n    substitute:\n      v: \"{v}\"\n      big: \"{big}\"\n"
    );
    std::fs::write(tmp.path().join("ks.yaml"), ks).unwrap();
    tmp
}

fn measured_substitution(tmp: &tempfile::TempDir) -> Measured {
    let ks = tmp.path().join("ks.yaml");
    measured_build_with(tmp.path(), "app", &["--kustomization", ks.to_str().unwrap()])
}

#[test]
fn a_variable_repeated_thirty_thousand_times_is_refused_naming_object_and_variable() {
    // Before: the 210 KB ConfigMap below, with a 100 KB variable, expanded to 3 GB and the
    // build aborted on memory.
    let tmp = substitution_tree(
        &format!("  a: {}\n", "${big}".repeat(30_000)),
        "",
        &"x".repeat(100_000),
    );
    assert_refused_within_bounds(
        &measured_substitution(&tmp),
        &[
            "post build failed for 'ConfigMap.v1.[noGrp]/cm'",
            "expanding ${big} makes the object larger than the limit of 16777216 bytes",
        ],
    );
}

#[test]
fn trims_of_an_eighty_thousand_character_value_take_linear_time() {
    // Before: each trim matched the pattern on every prefix of the value on its own, and
    // one such trim of 80,000 characters took 9 s of CPU (release build).
    let value = "x".repeat(80_000);
    let tmp = substitution_tree("  a: ${v#*.}\n  b: ${v%.*}\n  c: ${v##*[.]}\n", &value, "");
    let measured = measured_substitution(&tmp);
    assert_exit_within_bounds(&measured, 0);
}

#[test]
fn trims_repeated_over_a_long_value_are_refused_naming_the_variable() {
    // Before: each of these 100,000 trims (1.1 MB of text) scanned the whole
    // 80,000-character value for its one `y` and wrote nothing, so the output limit alone
    // did not stop them: minutes of CPU.
    let tmp = substitution_tree(
        &format!("  a: x{}\n", "${v##*[y]*}".repeat(100_000)),
        &format!("{}y", "x".repeat(79_999)),
        "",
    );
    assert_refused_within_bounds(
        &measured_substitution(&tmp),
        &[
            "post build failed for 'ConfigMap.v1.[noGrp]/cm'",
            "expanding ${v} reads more than 16777216 bytes of values and patterns",
        ],
    );
}

/// An HTTP server on 127.0.0.1 that answers every request with a head announcing a large body,
/// then trickles the body one byte a second, until the client goes away; returns its URL.
fn trickling_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || -> Option<()> {
                read_request(&mut stream)?;
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                    .ok()?;
                loop {
                    stream.write_all(b"0").ok()?;
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            });
        }
    });
    url
}

/// Before, a tenant's `?timeout=1h` had no cap: a server trickling a byte a second (never
/// silent long enough for any read timeout) held the build for 60 s as an HTTP file, then for
/// the hour as a Git base, far past spec.timeout (reproduced at 15bcfc7 with one byte every
/// 5 s: over 200 s). Now every fetch gets at most what is left of the build's deadline, here
/// `--timeout 3s`. Without the cap, the wall-clock stop (120 s) kills the build instead.
#[test]
fn a_trickling_server_cannot_hold_a_build_past_its_deadline() {
    let url = trickling_server();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("app")).unwrap();
    std::fs::write(
        tmp.path().join("app/kustomization.yaml"),
        format!("resources: [\"{url}//base?ref=main&timeout=1h\"]\n"),
    )
    .unwrap();
    let measured = measured_build_with(tmp.path(), "app", &["--timeout", "3s"]);
    assert_refused_within_bounds(&measured, &[&url, "timed out", "deadline"]);
}
