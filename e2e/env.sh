# Shared settings for the e2e scripts: sourced, never run.
# Everything built lands in a versioned cache outside the work tree, so any checkout on this
# machine (a developer's, CI's fresh clone) reuses one build.
K8S_VERSION=v1.35.4
E2E_CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kustomize-controller-e2e}
export GOMODCACHE="$E2E_CACHE/gomod" GOCACHE="$E2E_CACHE/gobuild"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -modcacherw -trimpath"
