#!/usr/bin/env bash
# Builds the semver oracle (main.go: Masterminds/semver, fluxcd/pkg/version, Go's regexp and
# strconv at the versions Flux's image-reflector-controller pins) into a versioned cache
# directory and prints that directory. The ImagePolicy engine's differential test runs it.
# A second run with the same inputs prints the directory at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"

command -v go >/dev/null || { echo "build.sh: Go is required (see README)" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$0" "$e2e/env.sh"; go version) | sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/semver-oracle-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
echo "build.sh: building the semver oracle into $bin" >&2
(cd "$here" && nice -n 10 go build -pgo=off -ldflags "-s -w" -o "$tmp/semver-oracle" .) >&2
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "$bin"
