#!/usr/bin/env bash
# Builds Flux's image-reflector-controller (the release go.mod pins) from its Go module into a
# versioned cache directory and prints that directory; the tests run it as the peer of ours
# (crates/image-reflector-controller/tests/flux_peer.rs). A second run with the same inputs
# prints the directory at once, offline.
#
# go.mod pins v1.2.0, the newest release the module proxy of this workplace serves (see
# crds.sh). Every module it needs is served, so unlike e2e/fluxkc no stand-in is replaced in;
# its go.mod's `replace …/api => ./api` applies only inside its own repository, and the
# published api module v1.2.0 is what it requires anyway.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"

command -v go >/dev/null || { echo "fluxirc/build.sh: Go is required (see README)" >&2; exit 1; }
version=$(sed -n 's|^[[:space:]]*github.com/fluxcd/image-reflector-controller \(v[^ ]*\).*|\1|p' "$here/go.mod")
[ -n "$version" ] || { echo "fluxirc/build.sh: go.mod requires no image-reflector-controller" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh"; go version) | sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/fluxirc-$version-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "fluxirc/build.sh: building Flux image-reflector-controller $version into $bin (first time: 5-10 min)" >&2
(
  cd "$here"
  # pgo=off: a default.pgo in a main package would recompile every dependency with it.
  nice -n 10 go build -pgo=off -ldflags "-s -w" -o "$tmp/image-reflector-controller" \
    github.com/fluxcd/image-reflector-controller
) >&2
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "fluxirc/build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
