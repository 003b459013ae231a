#!/usr/bin/env bash
# Benchmark (not a test): builds a generated tree of >= 1000 resources (a base plus overlays
# with patches, generators, prefixes, labels, images, configurations and replacements) with our engine and with Go
# kustomize in the same run, and reports wall time and peak RSS of both, plus the ratios.
# Usage: benches/kustomize.sh ["overlay counts"] [resources-per-overlay] [repeats]
# The default measures two trees (20 and 40 overlays: 1860 and 3720 objects), because our
# fixed cost (the binary's resident pages) weighs most on the smaller one.
# Env: E2E_BIN (directory holding the kustomize oracle; default: e2e/controlplane/build.sh).
set -euo pipefail

overlay_counts=${1:-20 40}
per=${2:-30}
repeats=${3:-3}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=${E2E_BIN:-$("$here/e2e/controlplane/build.sh")}
kustomize="$bin/kustomize"
cargo build --quiet --release --manifest-path "$here/Cargo.toml" --bin kustomize-controller
ours="$here/target/release/kustomize-controller"

trees=$(mktemp -d)
trap 'rm -rf "$trees"' EXIT

# Writes a tree with $2 overlays of $3 resources each into $1.
generate() {
python3 - "$1" "$2" "$3" <<'PY'
import os, sys
root, overlays, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def w(path, text):
    path = os.path.join(root, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").write(text)
res = []
for i in range(per):
    res.append(f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: app{i}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: app{i}}}
  template:
    metadata:
      labels: {{app: app{i}}}
    spec:
      serviceAccountName: sa
      containers:
      - name: main
        image: nginx:1.25
        envFrom:
        - configMapRef: {{name: settings}}
        - secretRef: {{name: creds}}
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: app{i}
spec:
  selector: {{app: app{i}}}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: example.com/v1
kind: AppMonitor
metadata:
  name: app{i}
spec:
  service: app{i}
  selector: {{app: app{i}}}
""")
w("base/resources.yaml", "---\n".join(res) + "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n")
w("base/kustomization.yaml", "resources:\n- resources.yaml\nconfigurations:\n- kustomizeconfig.yaml\nconfigMapGenerator:\n- name: settings\n  literals: [A=1, B=2]\nsecretGenerator:\n- name: creds\n  literals: [password=secret]\n")
w("base/kustomizeconfig.yaml", """nameReference:
- kind: Service
  version: v1
  fieldSpecs:
  - kind: AppMonitor
    path: spec/service
commonLabels:
- kind: AppMonitor
  path: spec/selector
  create: true
""")
top = []
for o in range(overlays):
    w(f"overlays/o{o}/kustomization.yaml", f"""resources:
- ../../base
namespace: ns{o}
namePrefix: o{o}-
commonLabels:
  overlay: o{o}
images:
- name: nginx
  newTag: "1.27"
configMapGenerator:
- name: settings
  behavior: merge
  literals: [OVERLAY=o{o}]
replacements:
- source:
    kind: ConfigMap
    name: settings
    fieldPath: data.OVERLAY
  targets:
  - select:
      kind: Deployment
    fieldPaths:
    - spec.template.spec.containers.[name=main].env.[name=FROM_SETTINGS].value
    options:
      create: true
patches:
- target:
    kind: Deployment
  patch: |-
    - op: replace
      path: /spec/replicas
      value: 2
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: app0
    spec:
      template:
        spec:
          containers:
          - name: main
            env:
            - name: OVERLAY
              value: o{o}
""")
    top.append(f"- overlays/o{o}")
w("kustomization.yaml", "resources:\n" + "\n".join(top) + "\n")
PY
}

# Runs a command $repeats times under /usr/bin/time -v; prints the best wall seconds and the
# largest peak RSS (KiB).
measure() {
  local best="" rss=0 out
  for _ in $(seq "$repeats"); do
    out=$( { /usr/bin/time -v "$@" >/dev/null; } 2>&1 )
    local wall kib
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' <<<"$out")
    kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' <<<"$out")
    if [[ -z "$best" ]] || awk "BEGIN{exit !($wall < $best)}"; then best=$wall; fi
    (( kib > rss )) && rss=$kib
  done
  echo "$best $rss"
}

for overlays in $overlay_counts; do
  tree="$trees/$overlays"
  generate "$tree" "$overlays" "$per"
  count=$("$ours" build --root "$tree" "$tree" | grep -c '^kind:')
  echo "tree: $overlays overlays x $((per * 3 + 3)) objects = $count objects"
  read -r ours_wall ours_rss < <(measure "$ours" build --root "$tree" "$tree")
  read -r k_wall k_rss < <(measure "$kustomize" build --load-restrictor LoadRestrictionsNone "$tree")
  printf '%-10s wall %8.3fs  peak RSS %8d KiB\n' engine "$ours_wall" "$ours_rss" kustomize "$k_wall" "$k_rss"
  awk -v a="$k_wall" -v b="$ours_wall" -v c="$k_rss" -v d="$ours_rss" \
    'BEGIN { printf "engine vs kustomize: %.1fx faster, %.2fx the memory\n", a / (b > 0 ? b : 0.001), d / c }'
done
