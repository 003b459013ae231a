#!/usr/bin/env bash
# Builds the real Flux parts the integration tests and the demo run against: source-controller,
# the flux CLI and a Git smart-HTTP server, into a versioned cache directory, and prints that
# directory. The directory also holds source-controller's own CRDs (crds/). A second run with
# the same inputs prints the directory at once and needs no network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"

# The flux CLI is built from its own module (its go.sum pins its dependencies), not from ours:
# this pins the module itself.
FLUX_VERSION=v2.9.5
FLUX_SUM=h1:jwCccxvkD+2QnsjN+pl5QqM8KnFUwA8pIoQ1Lf0avkA=

command -v go >/dev/null || { echo "build.sh: Go is required (see README)" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh";
        find "$here/cmd" -type f -print0 | sort -z | xargs -0 cat; go version) | sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/flux-$FLUX_VERSION-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building source-controller, flux $FLUX_VERSION and git-http into $bin (first time on this machine: 10-20 min)" >&2
(
  cd "$here"
  go build -pgo=off -ldflags "-s -w" -o "$tmp/source-controller" github.com/fluxcd/source-controller
  go build -pgo=off -ldflags "-s -w" -o "$tmp/git-http" ./cmd/git-http
  sc=$(go list -m -f '{{.Dir}}' github.com/fluxcd/source-controller)
  mkdir "$tmp/crds"; cp "$sc"/config/crd/bases/*.yaml "$tmp/crds/"

  read -r fdir fsum < <(go mod download -json "github.com/fluxcd/flux2/v2@$FLUX_VERSION" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["Dir"], j["Sum"])')
  [ "$fsum" = "$FLUX_SUM" ] || { echo "build.sh: flux2 $FLUX_VERSION has sum $fsum, want $FLUX_SUM" >&2; exit 1; }
  # cmd/flux embeds manifests/*.yaml, which Flux's release generates from its install bundle and
  # the module does not ship. Build from a writable copy with one stub manifest: every command
  # works except those that install Flux from the embedded bundle (install/bootstrap without
  # --manifests).
  copy="$tmp/flux2-src"
  cp -r "$fdir" "$copy"; chmod -R u+w "$copy"
  mkdir -p "$copy/cmd/flux/manifests"
  printf '# stub: this flux build embeds no install manifests\n' > "$copy/cmd/flux/manifests/stub.yaml"
  cd "$copy"
  go build -pgo=off -ldflags "-s -w -X main.VERSION=${FLUX_VERSION#v}" -o "$tmp/flux" ./cmd/flux
  cd "$here"; rm -rf "$copy"
) >&2
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
