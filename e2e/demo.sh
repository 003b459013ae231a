#!/usr/bin/env bash
# `make demo`: a GitOps loop on the local control plane. examples/ is committed to a Git
# repository served over HTTP; the real source-controller turns commits into artifacts, and our
# controller, started with Flux's own arguments, applies them.
#
#   demo.sh up     start everything and show the Kustomization Ready with its objects and events
#   demo.sh down   stop the controllers and the Git server
#
# The demo repository ($state/demo/repo) pushes on every commit (a post-commit hook), so
# `git commit` there is all it takes for the change to reach the cluster.
#
# Image reflection too: a local registry (Debian's docker-registry, e2e/registry/serve.sh) with
# tags of demo/podinfo, our image-reflector-controller, an ImageRepository and a semver
# ImagePolicy; a new tag pushed during the demo and the policy following it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
state=${E2E_STATE:-$root/.e2e}
demo="$state/demo"
target=${CARGO_TARGET_DIR:-$root/target}
export KUBECONFIG="$state/admin.kubeconfig"

log() { echo "demo: $*" >&2; }
kubectl() { "$(cat "$state/bin")/kubectl" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

stop_pid() {
  [ -f "$1" ] || return 0
  kill -TERM -- "-$(cat "$1")" 2>/dev/null || kill "$(cat "$1")" 2>/dev/null || true
  rm -f "$1"
}

# Starts "$@" in its own session, logging to $demo/$name.log, its pid in $demo/$name.pid.
daemon() {
  local name=$1; shift
  stop_pid "$demo/$name.pid"
  setsid "$@" >"$demo/$name.log" 2>&1 </dev/null & echo $! >"$demo/$name.pid"
}

# The demo repository: a clone of the bare repository the Git server serves, seeded once from
# examples/. Later runs keep it, with whatever the user committed.
demo_repository() {
  [ -d "$demo/repo/.git" ] && return 0
  git init --quiet --bare --initial-branch=main "$demo/git/demo.git"
  git init --quiet --initial-branch=main "$demo/repo"
  cp -r "$root/examples/." "$demo/repo/"
  git -C "$demo/repo" remote add origin "$demo/git/demo.git"
  git -C "$demo/repo" config user.name demo
  git -C "$demo/repo" config user.email demo@example.invalid
  printf '#!/bin/sh\nexec git push --quiet origin HEAD:main\n' >"$demo/repo/.git/hooks/post-commit"
  chmod +x "$demo/repo/.git/hooks/post-commit"
  git -C "$demo/repo" add --all
  git -C "$demo/repo" commit --quiet -m "examples/"
}

up() {
  "$here/cluster.sh" up
  log "building the Flux parts (source-controller, flux CLI, Git server) if missing"
  local flux; flux=$("$here/flux/build.sh")
  mkdir -p "$demo/git" "$demo/storage"
  log "building the controllers"
  (cd "$root" && cargo build --quiet --bin kustomize-controller &&
    cargo build --quiet -p image-reflector-controller --bin image-reflector-controller)
  "$target/debug/kustomize-controller" crds | kubectl apply --server-side -f - >/dev/null
  kubectl apply --server-side --force-conflicts -f "$flux/crds/" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s \
    crd/kustomizations.kustomize.toolkit.fluxcd.io crd/gitrepositories.source.toolkit.fluxcd.io >/dev/null
  kubectl create namespace flux-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  demo_repository
  local git_port storage_port; git_port=$(free_port); storage_port=$(free_port)
  daemon git-http "$flux/git-http" -root "$demo/git" -addr "127.0.0.1:$git_port"
  RUNTIME_NAMESPACE=flux-system daemon source-controller "$flux/source-controller" \
    --watch-all-namespaces --log-level=info --log-encoding=json --enable-leader-election=false \
    --storage-path="$demo/storage" --storage-addr="127.0.0.1:$storage_port" \
    --storage-adv-addr="127.0.0.1:$storage_port" \
    --metrics-addr="127.0.0.1:$(free_port)" --health-addr="127.0.0.1:$(free_port)"
  # Flux's Deployment args for kustomize-controller; the loopback ports keep it off :8080/:9440.
  RUNTIME_NAMESPACE=flux-system POD_NAME=kustomize-controller-demo daemon controller \
    "$target/debug/kustomize-controller" \
    --watch-all-namespaces --log-level=info --log-encoding=json --enable-leader-election \
    --metrics-addr="127.0.0.1:$(free_port)" --health-addr="127.0.0.1:$(free_port)"

  kubectl apply -f - >/dev/null <<YAML
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: demo, namespace: flux-system}
spec: {url: "http://127.0.0.1:$git_port/demo.git", interval: 5s, ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: demo, namespace: flux-system}
spec:
  interval: 1m
  path: ./podinfo/overlays/demo
  prune: true
  wait: true
  timeout: 2m
  sourceRef: {kind: GitRepository, name: demo}
  postBuild:
    substitute: {cluster_name: demo}
YAML
  log "waiting for Kustomization flux-system/demo to become Ready"
  if ! kubectl -n flux-system wait kustomization/demo --for=condition=Ready --timeout=180s >/dev/null; then
    kubectl -n flux-system get gitrepository,kustomization demo -o yaml >&2
    tail -n 20 "$demo/source-controller.log" "$demo/controller.log" >&2
    exit 1
  fi
  echo
  kubectl get gitrepositories,kustomizations -A
  echo
  kubectl -n demo get all,configmaps
  echo
  kubectl -n flux-system get events --field-selector involvedObject.name=demo,involvedObject.kind=Kustomization
  echo
  "$flux/flux" -n flux-system tree ks demo
  images
  cat <<TXT

The demo keeps running. Try:
  eval \$(make -s cluster-env)
  cd $demo/repo
  \$EDITOR podinfo/overlays/demo/kustomization.yaml               # e.g. replicas count: 3
  git commit -am "three replicas"                                 # pushed by a hook; applied in seconds
  $flux/flux get ks -A --watch
  $flux/flux events --for Kustomization/demo -n flux-system
  $root/e2e/registry/push.sh http://$registry demo/podinfo 6.3.0   # a newer tag
  $flux/flux get images all -n flux-system
Stop it with: make demo-down
TXT
}

# Image reflection: the registry, our controller, and a policy following a tag pushed now.
images() {
  local port; port=$(free_port)
  registry=127.0.0.1:$port
  mkdir -p "$demo/registry"
  daemon registry "$root/e2e/registry/serve.sh" "$demo/registry" "$port"
  for _ in $(seq 1 100); do curl -sf "http://$registry/v2/" >/dev/null && break; sleep 0.1; done
  "$root/e2e/registry/push.sh" "http://$registry" demo/podinfo 6.0.0 6.1.0 6.2.0 >/dev/null
  kubectl apply --server-side --force-conflicts \
    -f "$root/crds/image.toolkit.fluxcd.io_imagerepositories.yaml" \
    -f "$root/crds/image.toolkit.fluxcd.io_imagepolicies.yaml" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s \
    crd/imagerepositories.image.toolkit.fluxcd.io crd/imagepolicies.image.toolkit.fluxcd.io >/dev/null
  mkdir -p "$demo/image-data"
  # Flux's Deployment args for image-reflector-controller, on loopback ports.
  RUNTIME_NAMESPACE=flux-system POD_NAME=image-reflector-controller-demo daemon image-reflector-controller \
    "$target/debug/image-reflector-controller" \
    --watch-all-namespaces --log-level=info --log-encoding=json --enable-leader-election \
    --storage-path="$demo/image-data" \
    --metrics-addr="127.0.0.1:$(free_port)" --health-addr="127.0.0.1:$(free_port)"
  kubectl apply -f - >/dev/null <<YAML
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata: {name: podinfo, namespace: flux-system}
spec: {image: "$registry/demo/podinfo", interval: 1m}
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata: {name: podinfo, namespace: flux-system}
spec:
  imageRepositoryRef: {name: podinfo}
  policy: {semver: {range: ">=6.0.0"}}
YAML
  log "waiting for ImagePolicy flux-system/podinfo to pick 6.2.0"
  wait_policy 6.2.0
  echo
  kubectl get imagerepositories,imagepolicies -n flux-system
  echo
  log "pushing demo/podinfo:6.2.1 and asking for a scan"
  "$root/e2e/registry/push.sh" "http://$registry" demo/podinfo 6.2.1 >/dev/null
  kubectl -n flux-system annotate --overwrite imagerepository/podinfo \
    "reconcile.fluxcd.io/requestedAt=$(date +%s)" >/dev/null
  wait_policy 6.2.1
  kubectl get imagerepositories,imagepolicies -n flux-system
  echo
  kubectl -n flux-system get events --field-selector involvedObject.kind=ImagePolicy,involvedObject.name=podinfo
}

# Waits until the demo policy's latest tag is $1.
wait_policy() {
  for _ in $(seq 1 120); do
    [ "$(kubectl -n flux-system get imagepolicy podinfo -o 'jsonpath={.status.latestRef.tag}' 2>/dev/null)" = "$1" ] && return 0
    sleep 1
  done
  kubectl -n flux-system get imagerepository,imagepolicy podinfo -o yaml >&2
  tail -n 20 "$demo/image-reflector-controller.log" >&2
  exit 1
}

down() {
  for p in image-reflector-controller registry controller source-controller git-http; do stop_pid "$demo/$p.pid"; done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
