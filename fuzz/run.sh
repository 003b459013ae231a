#!/usr/bin/env bash
# Runs the fuzz targets one after another (all, or those named), each for its own time budget
# (`target=seconds`, else $FUZZ_SECONDS, default 600) at the lowest priority with one job and
# one worker, from its committed seeds plus the generated corpus in corpus/<target> (not
# committed). Prints per target the executions, exec/s and crashes; crashing inputs land in
# artifacts/<target>/. The controller's targets live here, the kustomize engine's in
# crates/kustomize/fuzz (two fuzz crates); seeds, corpus, artifacts and logs sit in the
# target's own fuzz directory.
#
#   fuzz/run.sh                                  every target, 600 s each
#   FUZZ_SECONDS=60 fuzz/run.sh yaml             one target for a minute
#   fuzz/run.sh kustomization=1800 extract=900   two targets with their own budgets
#   FUZZ_SANITIZER=none fuzz/run.sh              without AddressSanitizer (throughput)
#
# FUZZ_SANITIZER (default `address`) is passed to `cargo fuzz build -s`. The code under test
# is safe Rust, so `none` loses little: ASan would find memory errors only in unsafe code
# (unsafe-libyaml), and panics, overflows in debug assertions and the invariants are checked
# either way. FUZZ_FLAGS adds libFuzzer flags.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/../crates/kustomize/fuzz" && pwd)
seconds=${FUZZ_SECONDS:-600}
sanitizer=${FUZZ_SANITIZER:-address}
all=(extract yaml kustomization strategic_merge json6902 envsubst inventory git_pack)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# The longest input per target. Production limits are far larger (16 MiB per file, the
# artifact's byte and entry limits), so these only keep each execution short enough to explore
# structure; the targets apply the production limits themselves where there is one.
max_len() {
  case $1 in
    extract) echo 65536 ;;
    kustomization) echo 16384 ;;
    yaml | strategic_merge | json6902 | git_pack) echo 16384 ;;
    envsubst) echo 8192 ;;
    inventory) echo 1024 ;;
    *) echo "unknown target $1" >&2; return 1 ;;
  esac
}

# The fuzz crate of a target.
dir_of() {
  case $1 in
    yaml | kustomization | strategic_merge | json6902) echo "$engine" ;;
    *) echo "$here" ;;
  esac
}

# The tree targets (extract, kustomization, git_pack) write a temporary directory per execution; on a
# disk file system the kernel's block and inode work took half the time, so they go to
# memory when the machine has a tmpfs.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

dirs=()
for spec in "${targets[@]}"; do
  max_len "${spec%%=*}" >/dev/null
  d=$(dir_of "${spec%%=*}")
  [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
done
for d in "${dirs[@]}"; do
  (cd "$d" && nice -n 19 cargo +nightly fuzz build -O -s "$sanitizer")
done
for spec in "${targets[@]}"; do
  t=${spec%%=*}
  budget=$seconds
  [ "$spec" = "$t" ] || budget=${spec#*=}
  d=$(dir_of "$t")
  cd "$d"
  bin=$d/target/x86_64-unknown-linux-gnu/release
  mkdir -p "corpus/$t" "artifacts/$t" "logs/$t"
  rm -f "logs/$t"/fuzz-*.log
  started=$(date +%s)
  # shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
  (cd "logs/$t" && nice -n 19 "$bin/$t" "$d/corpus/$t" "$d/seeds/$t" \
    -max_len="$(max_len "$t")" -max_total_time="$budget" -timeout=10 -rss_limit_mb=2048 \
    -jobs=1 -workers=1 -artifact_prefix="$d/artifacts/$t/" ${FUZZ_FLAGS:-} >/dev/null 2>&1) || true
  log=logs/$t/fuzz-0.log
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -1)
  if [ -z "$runs" ]; then # stopped by a crash: the last status line has the count
    runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    secs=$(( $(date +%s) - started ))
  fi
  crashes=$(find "artifacts/$t" -type f | wc -l)
  echo "$t: $(date -u +%FT%TZ) sanitizer $sanitizer, ${runs:-0} executions in ${secs:-0} s ($(( ${runs:-0} / (${secs:-1} > 0 ? ${secs:-1} : 1) )) exec/s), crash/timeout/oom inputs: $crashes"
done
