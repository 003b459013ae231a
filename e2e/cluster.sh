#!/usr/bin/env bash
# The local control plane for tests and the demo: etcd, kube-apiserver, kube-controller-manager
# and the fake kubelet, on loopback, with certificates generated per cluster.
#
#   cluster.sh up     build what is missing, start, wait until ready, write the admin kubeconfig
#   cluster.sh down   stop everything and delete the state directory
#   cluster.sh env    print the KUBECONFIG export and the PATH to the built kubectl
#   cluster.sh stop  etcd|apiserver|controller-manager|fake-kubelet
#                     stop one component of a running cluster (fault tests: an outage)
#   cluster.sh start etcd|apiserver|controller-manager|fake-kubelet
#                     start it again with the command line, ports and data it had
#
# State lives in $E2E_STATE (default: .e2e/ in the work tree, git-ignored).
#
# E2E_TRUST_STATE=<another cluster's state dir> makes this a "remote" cluster that accepts that
# cluster's ServiceAccount tokens (audience: this cluster's URL) as users named
# `trusted:system:serviceaccount:<namespace>:<name>`, the way a workload cluster trusts a
# management cluster's issuer. That cluster must be up; its issuer discovery is opened to
# unauthenticated readers so this API server can fetch the signing keys.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
state=${E2E_STATE:-$root/.e2e}

log() { echo "cluster: $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_for() { # what, seconds, command...
  local what=$1 limit=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$what did not become ready within ${limit}s; logs in $state"
      tail -n 30 "$state"/*.log >&2 || true
      return 1
    fi
    sleep 0.3
  done
}

certs() {
  local d=$1
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key"
  openssl req -x509 -new -key "$d/ca.key" -sha256 -days 7 -subj "/CN=e2e-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out "$d/ca.crt" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/apiserver.key"
  openssl req -new -key "$d/apiserver.key" -subj "/CN=kube-apiserver" -out "$d/apiserver.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1\n' >"$d/server.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 7 -sha256 \
    -extfile "$d/server.ext" -out "$d/apiserver.crt" 2>/dev/null
  # system:masters is cluster-admin; PKCS#8 so every TLS client reads the key.
  openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out "$d/admin.key"
  openssl req -new -key "$d/admin.key" -subj "/O=system:masters/CN=e2e-admin" -out "$d/admin.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$d/client.ext"
  openssl x509 -req -in "$d/admin.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 7 -sha256 \
    -extfile "$d/client.ext" -out "$d/admin.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub"
}

start() { # name, command...: own process group, so down (or a crashed run) can kill it whole
  local name=$1; shift
  # The command line is kept so `cluster.sh start <name>` can bring the component back as it was.
  printf '%q ' "$@" >"$state/$name.cmd"
  setsid "$@" >>"$state/$name.log" 2>&1 < /dev/null &
  echo $! >"$state/$name.pid"
}

stop() { # name: TERM to its process group, KILL what is left after 5 s
  local name=$1
  [ -f "$state/$name.pid" ] || return 0
  local pid; pid=$(cat "$state/$name.pid")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$state/$name.pid"
}

component() { # name: one of the components `up` starts, or a usage error
  case "${1:-}" in
    etcd|apiserver|controller-manager|fake-kubelet) ;;
    *) echo "usage: $0 stop|start etcd|apiserver|controller-manager|fake-kubelet" >&2; exit 2 ;;
  esac
  [ -f "$state/$1.cmd" ] || { log "no cluster in $state"; exit 1; }
}

apiserver_ready() { # waits until the API server of the admin kubeconfig is ready
  local server; server=$(sed -n 's/.*server: "\([^"]*\)".*/\1/p' "$state/admin.kubeconfig")
  wait_for kube-apiserver 90 curl -fs --cacert "$state/ca.crt" "$server/readyz"
}

restart_component() { # name: start it again from its saved command line, wait until it serves
  local name=$1
  if [ -f "$state/$name.pid" ] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then
    log "$name is already running"; return 0
  fi
  local cmd; cmd=$(cat "$state/$name.cmd")
  eval "start $name $cmd"
  case "$name" in
    etcd)
      local url; url=$(sed -n 's/.*--listen-client-urls=\([^ ]*\).*/\1/p' "$state/etcd.cmd")
      wait_for etcd 30 curl -fs "$url/health"
      # Back means serving: a running API server must have reconnected to it.
      if [ -f "$state/apiserver.pid" ] && kill -0 "$(cat "$state/apiserver.pid")" 2>/dev/null; then
        apiserver_ready
      fi ;;
    apiserver) apiserver_ready ;;
  esac
  log "$name started"
}

up() {
  if [ -f "$state/admin.kubeconfig" ] && kubectl_ready && trusts_current_issuer; then
    log "already running ($state)"; return 0
  fi
  down_quiet
  local bin; bin=$("$here/controlplane/build.sh")
  local t0; t0=$(date +%s.%N)
  mkdir -p "$state"
  echo "$bin" >"$state/bin"
  certs "$state"
  local etcd_port peer_port api_port
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)

  start etcd "$bin/etcd" --name=e2e --data-dir="$state/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="e2e=http://127.0.0.1:$peer_port" --unsafe-no-fsync=true --log-level=warn
  wait_for etcd 30 curl -fs "http://127.0.0.1:$etcd_port/health"

  local trust=()
  if [ -n "${E2E_TRUST_STATE:-}" ]; then
    trust_issuer "$bin" "$api_port"
    trust=(--authentication-config="$state/authentication.yaml")
  fi
  start apiserver "$bin/kube-apiserver" "${trust[@]}" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --secure-port="$api_port" --advertise-address=127.0.0.1 \
    --cert-dir="$state/apiserver-certs" \
    --tls-cert-file="$state/apiserver.crt" --tls-private-key-file="$state/apiserver.key" \
    --client-ca-file="$state/ca.crt" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --service-account-issuer="https://127.0.0.1:$api_port" \
    --service-account-key-file="$state/sa.pub" \
    --service-account-signing-key-file="$state/sa.key" \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --profiling=false --v=1
  cat >"$state/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$state/ca.crt"}}]
users: [{name: admin, user: {client-certificate: "$state/admin.crt", client-key: "$state/admin.key"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin, namespace: default}}]
current-context: e2e
KC
  wait_for kube-apiserver 90 curl -fs --cacert "$state/ca.crt" "https://127.0.0.1:$api_port/readyz"

  # Its client's default rate (20 requests/s) would make it the bottleneck of every rollout:
  # 100 one-replica Deployments took 23.6 s to become available at that rate, 4.0 s at this one.
  start controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/admin.kubeconfig" \
    --leader-elect=false --secure-port=0 \
    --use-service-account-credentials=false \
    --service-account-private-key-file="$state/sa.key" \
    --root-ca-file="$state/ca.crt" \
    --kube-api-qps=500 --kube-api-burst=1000 \
    --controllers=namespace-controller,garbage-collector-controller,deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller,job-controller,cronjob-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,resourcequota-controller,disruption-controller,endpointslice-controller,ttl-after-finished-controller \
    --v=1
  start fake-kubelet "$bin/fake-kubelet" --kubeconfig="$state/admin.kubeconfig"
  # The default ServiceAccount appearing means controller-manager is working.
  wait_for kube-controller-manager 60 "$bin/kubectl" --kubeconfig="$state/admin.kubeconfig" -n default get serviceaccount default
  log "ready in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))")s: export KUBECONFIG=$state/admin.kubeconfig"
}

# The trusted cluster's issuer is its API server URL (see --service-account-issuer above).
trusted_issuer() { sed -n 's/.*server: "\([^"]*\)".*/\1/p' "$E2E_TRUST_STATE/admin.kubeconfig" 2>/dev/null; }

# A running remote cluster is reused only if it trusts the trusted cluster running now.
trusts_current_issuer() {
  [ -z "${E2E_TRUST_STATE:-}" ] && return 0
  grep -qxF "    url: $(trusted_issuer)" "$state/authentication.yaml" 2>/dev/null
}

trust_issuer() { # bin, this cluster's API port
  local bin=$1 port=$2 trusted=$E2E_TRUST_STATE issuer
  issuer=$(trusted_issuer)
  [ -n "$issuer" ] || { log "no cluster is running in $trusted"; return 1; }
  "$bin/kubectl" --kubeconfig="$trusted/admin.kubeconfig" apply -f - >/dev/null <<RB
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-issuer-discovery-unauthenticated}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:service-account-issuer-discovery}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:unauthenticated}]
RB
  {
    echo "apiVersion: apiserver.config.k8s.io/v1"
    echo "kind: AuthenticationConfiguration"
    echo "jwt:"
    echo "- issuer:"
    echo "    url: $issuer"
    echo "    audiences: [\"https://127.0.0.1:$port\"]"
    echo "    certificateAuthority: |"
    sed 's/^/      /' "$trusted/ca.crt"
    echo "  claimMappings:"
    echo "    username: {claim: sub, prefix: \"trusted:\"}"
  } >"$state/authentication.yaml"
}

kubectl_ready() {
  local bin; bin=$(cat "$state/bin" 2>/dev/null) || return 1
  "$bin/kubectl" --kubeconfig="$state/admin.kubeconfig" get --raw=/readyz >/dev/null 2>&1
}

down_quiet() {
  [ -d "$state" ] || return 0
  for name in fake-kubelet controller-manager apiserver etcd; do stop "$name"; done
  rm -rf "$state"
}

case "${1:-}" in
  up) up ;;
  down) down_quiet; log "stopped" ;;
  env)
    echo "export KUBECONFIG=$state/admin.kubeconfig"
    [ -f "$state/bin" ] && echo "export PATH=$(cat "$state/bin"):\$PATH"
    ;;
  stop) component "${2:-}"; stop "$2"; log "$2 stopped" ;;
  start) component "${2:-}"; restart_component "$2" ;;
  *) echo "usage: $0 up|down|env|stop <component>|start <component>" >&2; exit 2 ;;
esac
