#!/usr/bin/env bash
# Prints the directory holding the CRDs of Flux's image-reflector-controller (config/crd/bases
# of its Go module, the release below), downloaded once into the Go module cache of e2e/env.sh;
# a second run answers from the cache, offline. The tests compare our generated CRDs with them
# (crates/image-reflector-controller/tests/flux_crds.rs); nothing of them is committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"
# The newest release the module proxy serves (v1.2.1 and later are not served here).
FLUX_IRC_VERSION=v1.2.0

command -v go >/dev/null || { echo "fluxirc/crds.sh: Go is required (see README)" >&2; exit 1; }
dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "github.com/fluxcd/image-reflector-controller@$FLUX_IRC_VERSION" |
      sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
crds="$dir/config/crd/bases"
[ -f "$crds/image.toolkit.fluxcd.io_imagerepositories.yaml" ] ||
  { echo "fluxirc/crds.sh: no CRDs in the module of image-reflector-controller $FLUX_IRC_VERSION ($crds)" >&2; exit 1; }
echo "$crds"
