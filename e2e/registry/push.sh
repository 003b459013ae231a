#!/usr/bin/env bash
# Pushes tags to a registry with raw distribution API calls (curl): the config and layer
# blobs first (the registry checks they exist), then one OCI manifest per tag, made distinct
# by an annotation so each tag has its own digest. Prints "TAG DIGEST" per tag, the digest
# being sha256 of the manifest bytes as sent.
#
#   push.sh REGISTRY_URL REPOSITORY [--user USER:PASSWORD] [--cacert FILE] [--cert FILE --key FILE]
#           [--salt S] TAG...
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: push.sh REGISTRY_URL REPOSITORY [--user U:P] [--cacert F] [--salt S] TAG..." >&2; exit 2; }
registry=${1%/} repo=$2
shift 2
curl_opts=(-sS --fail-with-body)
salt=''
while [ $# -gt 0 ]; do
  case $1 in
    --user) curl_opts+=(-u "$2"); shift 2 ;;
    --cacert) curl_opts+=(--cacert "$2"); shift 2 ;;
    --cert) curl_opts+=(--cert "$2"); shift 2 ;;
    --key) curl_opts+=(--key "$2"); shift 2 ;;
    --salt) salt=$2; shift 2 ;;
    *) break ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

push_blob() { # FILE -> prints the digest
  local file=$1 digest location sep
  digest=sha256:$(sha256sum "$file" | cut -d' ' -f1)
  location=$(curl "${curl_opts[@]}" -D - -o /dev/null -X POST "$registry/v2/$repo/blobs/uploads/" |
    tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
  case $location in http*) ;; *) location=$registry$location ;; esac
  case $location in *\?*) sep='&' ;; *) sep='?' ;; esac
  curl "${curl_opts[@]}" -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    --data-binary @"$file" "$location${sep}digest=$digest"
  echo "$digest"
}

printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}' >"$work/config"
printf 'layer %s\n' "$repo" >"$work/layer"
config_digest=$(push_blob "$work/config")
layer_digest=$(push_blob "$work/layer")
config_size=$(stat -c %s "$work/config")
layer_size=$(stat -c %s "$work/layer")

for tag in "$@"; do
  manifest=$work/manifest
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}],"annotations":{"test.tag":"%s","test.salt":"%s"}}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" "$tag" "$salt" >"$manifest"
  curl "${curl_opts[@]}" -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary @"$manifest" "$registry/v2/$repo/manifests/$tag"
  echo "$tag sha256:$(sha256sum "$manifest" | cut -d' ' -f1)"
done
