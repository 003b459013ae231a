#!/usr/bin/env bash
# Builds every conformance case with the real kustomize (the oracle) and checks that
# it succeeds, or fails with the substring in expect-error.txt.
# Usage: check-oracle.sh [case-name...]   (default: every case)
# Env: KUSTOMIZE (path to the binary), else $E2E_BIN/kustomize, else
#      $(cat /work/main/.e2e/bin)/kustomize, else `kustomize` on PATH.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${KUSTOMIZE:-}" ]]; then
  if [[ -n "${E2E_BIN:-}" ]]; then
    KUSTOMIZE="$E2E_BIN/kustomize"
  elif [[ -f /work/main/.e2e/bin ]]; then
    KUSTOMIZE="$(cat /work/main/.e2e/bin)/kustomize"
  else
    KUSTOMIZE=kustomize
  fi
fi

cases=()
if [[ $# -gt 0 ]]; then
  cases=("$@")
else
  for d in "$here"/*/; do
    d="${d%/}"
    name="${d##*/}"
    if [[ -f "$d/kustomization.yaml" || -f "$d/kustomization.yml" || -f "$d/Kustomization" ]]; then
      cases+=("$name")
    fi
  done
fi

pass=0
fail=0
for name in "${cases[@]}"; do
  dir="$here/$name"
  out="$("$KUSTOMIZE" build --load-restrictor LoadRestrictionsNone "$dir" 2>&1 >/dev/null)"
  rc=$?
  if [[ -f "$dir/expect-error.txt" ]]; then
    want="$(head -n1 "$dir/expect-error.txt")"
    if [[ $rc -eq 0 ]]; then
      echo "FAIL $name: expected an error containing '$want', but the build succeeded"
      fail=$((fail + 1))
    elif [[ "$out" != *"$want"* ]]; then
      echo "FAIL $name: error does not contain '$want':"
      echo "$out" | sed 's/^/    /'
      fail=$((fail + 1))
    else
      pass=$((pass + 1))
    fi
  else
    if [[ $rc -ne 0 ]]; then
      echo "FAIL $name: build failed:"
      echo "$out" | sed 's/^/    /'
      fail=$((fail + 1))
    else
      pass=$((pass + 1))
    fi
  fi
done

echo "oracle: $pass passed, $fail failed, $((pass + fail)) cases ($("$KUSTOMIZE" version 2>/dev/null))"
[[ $fail -eq 0 ]]
