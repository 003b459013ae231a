#!/usr/bin/env bash
# Builds the Flux peers of the tests into a versioned cache directory and prints it:
# event-receiver (decodes --events-addr POSTs with Flux's own event type) and logcheck
# (reads log lines as `flux logs` does), beside Flux's own kustomize-controller Deployment
# (flux-kustomize-controller/deployment.yaml, from the pinned module) whose arguments the tests
# start our controller with. A second run with the same inputs prints the
# directory at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"
# github.com/fluxcd/pkg/apis/event v0.32 needs Go 1.27, fetched from the module proxy once.
export GOTOOLCHAIN=go1.27.3
# The Flux release whose Deployment the drop-in tests reproduce.
FLUX_KC_VERSION=v1.10.1

command -v go >/dev/null || { echo "build.sh: Go is required (see README)" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh";
        find "$here/cmd" -type f -print0 | sort -z | xargs -0 cat; go version) | sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/fluxpeer-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
start=$(date +%s)
echo "build.sh: building the Flux peers into $bin" >&2
(cd "$here" && go build -pgo=off -ldflags "-s -w" -o "$tmp/" ./cmd/event-receiver ./cmd/logcheck) >&2
module=$(cd "$here" && go mod download -json "github.com/fluxcd/kustomize-controller@$FLUX_KC_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -f "$module/config/manager/deployment.yaml" ] || { echo "build.sh: no deployment.yaml in $module" >&2; exit 1; }
mkdir -p "$tmp/flux-kustomize-controller"
cp "$module/config/manager/deployment.yaml" "$tmp/flux-kustomize-controller/"
echo "$FLUX_KC_VERSION" > "$tmp/flux-kustomize-controller/version"
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
