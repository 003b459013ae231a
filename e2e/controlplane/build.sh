#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kubectl, the fake kubelet and the
# kustomize oracle into a versioned cache directory and prints that directory. A second run
# with the same inputs prints the directory at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
e2e=$(dirname "$here")
# shellcheck source=../env.sh
. "$e2e/env.sh"

command -v go >/dev/null || { echo "build.sh: Go is required (see README)" >&2; exit 1; }
key=$( (cat "$here/go.mod" "$here/go.sum" "$0" "$e2e/env.sh" "$e2e/kustomize/go.mod" "$e2e/kustomize/go.sum";
        find "$here/cmd" -type f -print0 | sort -z | xargs -0 cat; go version) | sha256sum | cut -c1-16)
bin="$E2E_CACHE/bin/k8s-$K8S_VERSION-$key"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

mkdir -p "$E2E_CACHE/bin"
exec 9>"$E2E_CACHE/.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi

tmp="$bin.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldv="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ldv="$ldv -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
start=$(date +%s)
echo "build.sh: building the control plane $K8S_VERSION into $bin (first time on this machine: 15-30 min)" >&2
(
  cd "$here"
  # pgo=off: a default.pgo in a main package would recompile every dependency with it.
  go build -pgo=off -ldflags "-s -w $ldv" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl ./cmd/fake-kubelet
  go build -pgo=off -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  cd "$e2e/kustomize"
  go build -pgo=off -ldflags "-s -w" -o "$tmp/kustomize" sigs.k8s.io/kustomize/kustomize/v5
) >&2
rm -rf "$bin"; mv "$tmp" "$bin"; touch "$bin/.complete"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
