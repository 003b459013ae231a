#!/usr/bin/env bash
# Regenerates go.mod/go.sum for a Kubernetes release bump. Run on a machine with the Go proxy;
# commit the result. Normal builds never run this (they use -mod=readonly).
set -euo pipefail
cd "$(dirname "$0")"
V=${1:?usage: gen-gomod.sh 1.35.4}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init e2e/controlplane
GOMOD=$(go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*|\1|p' "$GOMOD" |
while read -r m; do go mod edit -replace="$m=$m@v0.${V#1.}"; done
go mod edit -require="k8s.io/kubernetes@v$V"
go mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver \
            -tool=k8s.io/kubernetes/cmd/kube-controller-manager \
            -tool=k8s.io/kubernetes/cmd/kubectl \
            -tool=go.etcd.io/etcd/server/v3
grep -E '^go |^godebug' "$GOMOD" || true
go build -o /dev/null k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3 2>&1 | tail -5 || true
