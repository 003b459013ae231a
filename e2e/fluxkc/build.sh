#!/usr/bin/env bash
# Builds Flux's kustomize-controller (the version go.mod pins) from its Go module into a
# versioned cache directory and prints that directory. Beside the binary, crds/ holds the CRDs
# the benchmark applies, from the same releases' modules: Flux's Kustomization CRD and
# source-controller's source CRDs (of the source API version the controller was built with).
# A second run with the same inputs prints the directory at once, offline.
#
# go.mod pins the newest release, v1.10.1. The module proxy of this workplace does not serve
# five of the fluxcd/pkg modules it requires; go.mod replaces each with a small stand-in of our
# own beside this script (see their package comments): fetch/ (http/fetch: the artifact
# download, working), masktoken/ (working), crypto/ (apis/crypto: cloud workload identity for
# SOPS KMS and remote kubeconfigs, stubbed), spiffe/ (SPIFFE mTLS and Broker, stubbed; its flag
# names are the real ones) and testserver/ (empty; only Flux's tests import it). The benchmark
# reaches none of the stubbed paths.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"
# kustomize-controller v1.10 needs Go 1.27; the go command fetches it from the module proxy once.
export GOTOOLCHAIN=go1.27.3

command -v go >/dev/null || { echo "fluxkc/build.sh: Go is required (see README)" >&2; exit 1; }
required() { sed -n "s|^\(require\)\{0,1\}[[:space:]]*$1 \(v[^ ]*\).*|\2|p" "$here/go.mod"; }
version=$(required github.com/fluxcd/kustomize-controller)
source_version=$(required github.com/fluxcd/source-controller/api)
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh";
        find "$here/fetch" "$here/masktoken" "$here/crypto" "$here/spiffe" "$here/testserver" -type f -print0 | sort -z | xargs -0 cat; go version) |
       sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/flux-kustomize-controller-$version-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp/crds"
start=$(date +%s)
echo "fluxkc/build.sh: building Flux kustomize-controller $version into $bin (first time: 5-15 min)" >&2
(
  cd "$here"
  # pgo=off: a default.pgo in a main package would recompile every dependency with it.
  nice -n 10 go build -pgo=off -ldflags "-s -w" -o "$tmp/kustomize-controller" github.com/fluxcd/kustomize-controller
  kc=$(go list -m -f '{{.Dir}}' github.com/fluxcd/kustomize-controller)
  cp "$kc/config/crd/bases/"*.yaml "$tmp/crds/"
  # source-controller is not a dependency of the build; only its CRDs are needed.
  sc=$(cd "$tmp" && GOFLAGS=-modcacherw go mod download -json "github.com/fluxcd/source-controller@$source_version" |
       sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$sc" ] || { echo "fluxkc/build.sh: could not download source-controller $source_version" >&2; exit 1; }
  cp "$sc/config/crd/bases/"source.toolkit.fluxcd.io_{gitrepositories,ocirepositories,buckets,externalartifacts}.yaml "$tmp/crds/"
) >&2
chmod -R u+w "$tmp"
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "fluxkc/build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
