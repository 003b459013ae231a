#!/usr/bin/env bash
# `make demo`: the controller reconciling examples/ on the local control plane.
#
#   demo.sh up     start everything and show the Kustomization Ready with its objects and events
#   demo.sh down   stop the controller, the artifact server and the publisher
#
# examples/ is published as the artifact of GitRepository flux-system/demo, as source-controller
# would: a tar.gz served over HTTP and its url/revision/digest written to the status subresource.
# A publisher loop republishes a new revision whenever a file under examples/ changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
state=${E2E_STATE:-$root/.e2e}
demo="$state/demo"
export KUBECONFIG="$state/admin.kubeconfig"

log() { echo "demo: $*" >&2; }
kubectl() { "$(cat "$state/bin")/kubectl" "$@"; }

stop_pid() {
  [ -f "$1" ] || return 0
  kill -TERM -- "-$(cat "$1")" 2>/dev/null || kill "$(cat "$1")" 2>/dev/null || true
  rm -f "$1"
}

# Prints the revision of the tree: a content hash, like a commit id.
tree_revision() { (cd "$root/examples" && find . -type f -print0 | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-40); }

publish() { # tarball + status patch; prints the revision
  local rev; rev=$(tree_revision)
  tar -C "$root/examples" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$demo/www/$rev.tar.gz" .
  local digest; digest="sha256:$(sha256sum "$demo/www/$rev.tar.gz" | cut -d' ' -f1)"
  local port; port=$(cat "$demo/port")
  kubectl -n flux-system patch gitrepository demo --subresource=status --type=merge -p "$(cat <<JSON
{"status": {"artifact": {"path": "gitrepository/flux-system/demo/$rev.tar.gz",
  "url": "http://127.0.0.1:$port/$rev.tar.gz", "revision": "main@sha1:$rev", "digest": "$digest",
  "lastUpdateTime": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "size": $(stat -c %s "$demo/www/$rev.tar.gz")},
  "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "stored artifact for revision 'main@sha1:$rev'",
  "lastTransitionTime": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}]}}
JSON
)" >/dev/null
  echo "main@sha1:$rev"
}

up() {
  "$here/cluster.sh" up
  mkdir -p "$demo/www"
  log "building the controller"
  (cd "$root" && cargo build --quiet --bin kustomize-controller)
  "$root/target/debug/kustomize-controller" crds | kubectl apply --server-side -f - >/dev/null
  kubectl apply --server-side -f "$here/source-crds.yaml" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s \
    crd/kustomizations.kustomize.toolkit.fluxcd.io crd/gitrepositories.source.toolkit.fluxcd.io >/dev/null

  stop_pid "$demo/http.pid"
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' >"$demo/port"
  setsid python3 -m http.server --bind 127.0.0.1 --directory "$demo/www" "$(cat "$demo/port")" \
    >"$demo/http.log" 2>&1 </dev/null & echo $! >"$demo/http.pid"

  kubectl create namespace flux-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: demo, namespace: flux-system}
spec: {url: "https://example.invalid/demo.git", interval: 1m, ref: {branch: main}}
YAML
  local rev; rev=$(publish)
  log "published examples/ as $rev"

  stop_pid "$demo/controller.pid"
  setsid "$root/target/debug/kustomize-controller" run --watch-all-namespaces=true \
    --metrics-addr=127.0.0.1:0 --health-addr=127.0.0.1:0 --log-encoding=json \
    >"$demo/controller.log" 2>&1 </dev/null & echo $! >"$demo/controller.pid"

  kubectl apply -f - >/dev/null <<YAML
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
    kubectl -n flux-system get kustomization demo -o yaml >&2
    tail -n 40 "$demo/controller.log" >&2
    exit 1
  fi
  echo
  kubectl get kustomizations -A
  echo
  kubectl -n demo get all,configmaps
  echo
  kubectl -n flux-system get events --field-selector involvedObject.name=demo,involvedObject.kind=Kustomization
  echo
  kubectl -n flux-system get kustomization demo -o jsonpath='{range .status.inventory.entries[*]}{.id}{"\n"}{end}'

  stop_pid "$demo/publisher.pid"
  setsid bash -c "while sleep 3; do \"$0\" republish; done" >"$demo/publisher.log" 2>&1 </dev/null &
  echo $! >"$demo/publisher.pid"
  cat <<TXT

The demo keeps running. Try:
  eval \$(make -s cluster-env)
  \$EDITOR examples/podinfo/overlays/demo/kustomization.yaml     # e.g. replicas count: 3
  kubectl get ks -A -w                                           # a new revision reconciles
  kubectl -n flux-system describe kustomization demo
  tail -f $demo/controller.log
Stop it with: make demo-down
TXT
}

republish() {
  local rev; rev=$(tree_revision)
  local current; current=$(kubectl -n flux-system get gitrepository demo -o jsonpath='{.status.artifact.revision}')
  [ "$current" = "main@sha1:$rev" ] || log "published $(publish)"
}

down() {
  for p in publisher controller http; do stop_pid "$demo/$p.pid"; done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  republish) republish ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
