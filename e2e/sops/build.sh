#!/usr/bin/env bash
# Builds the real sops CLI and age-keygen (pinned in go.mod) into a versioned cache directory
# and prints that directory. The integration tests encrypt their fixtures with this sops.
# A second run with the same inputs prints the directory at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"

command -v go >/dev/null || { echo "build.sh: Go is required (see README)" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh"; go version) | sha256sum | cut -c1-16)
version=$(sed -n 's/^\s*github.com\/getsops\/sops\/v3 \(v[^ ]*\).*/\1/p' "$here/go.mod")
bin="$E2E_CACHE/bin/sops-$version-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building sops $version into $bin (first time on this machine: a few minutes)" >&2
(
  cd "$here"
  nice -n 10 go build -pgo=off -ldflags "-s -w" -o "$tmp/" \
    github.com/getsops/sops/v3/cmd/sops filippo.io/age/cmd/age-keygen
) >&2
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
