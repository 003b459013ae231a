#!/usr/bin/env bash
# Runs a real OCI registry for the image reflector's tests and demo: Debian's docker-registry
# (CNCF distribution 2.8) on 127.0.0.1, its storage and config under STATE_DIR, in the
# foreground (the caller owns the process).
#
#   serve.sh STATE_DIR PORT [--htpasswd USER:PASSWORD | --token REALM CERT] [--tls [--mtls]]
#            [--access-log]
#
# --htpasswd  Basic auth from an htpasswd file (bcrypt, made with apache2-utils' htpasswd).
# --token     Bearer tokens from the service at REALM (service "test-registry", issuer
#             "test-token-issuer"), JWTs whose x5c certificate is CERT (PEM).
# --tls       HTTPS with a server certificate for 127.0.0.1 and localhost, signed by a CA made
#             here with openssl: STATE_DIR/ca.crt is the CA to trust.
# --mtls      With --tls, clients must show a certificate of that CA: STATE_DIR/client.crt
#             and client.key are one.
# --access-log One line per request on stdout (combined log format): the benchmark counts them.
set -euo pipefail

bin=${REGISTRY_BIN:-/usr/bin/docker-registry}
if [ ! -x "$bin" ]; then
  echo "serve.sh: $bin is missing: install Debian's docker-registry package" \
    "(apt-get install docker-registry apache2-utils; .ci/run does)" >&2
  exit 127
fi
[ $# -ge 2 ] || { echo "usage: serve.sh STATE_DIR PORT [--htpasswd USER:PASSWORD | --token REALM CERT] [--tls [--mtls]]" >&2; exit 2; }
state=$1 port=$2
shift 2
htpasswd_user='' tls='' mtls='' token_realm='' token_cert='' access_log_disabled=true
while [ $# -gt 0 ]; do
  case $1 in
    --htpasswd) htpasswd_user=$2; shift 2 ;;
    --token) token_realm=$2 token_cert=$3; shift 3 ;;
    --tls) tls=1; shift ;;
    --mtls) mtls=1; shift ;;
    --access-log) access_log_disabled=false; shift ;;
    *) echo "serve.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$state/data"
config=$state/config.yml
cat >"$config" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: $access_log_disabled
storage:
  filesystem:
    rootdirectory: $state/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML

if [ -n "$tls" ]; then
  command -v openssl >/dev/null || { echo "serve.sh: openssl is missing" >&2; exit 127; }
  (
    cd "$state"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -keyout ca.key -out ca.crt -subj /CN=image-reflector-test-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
      'keyUsage=digitalSignature' 'extendedKeyUsage=serverAuth' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -out server.crt -extfile server.ext 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout client.key -out client.csr -subj /CN=image-reflector-test-client 2>/dev/null
    printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=digitalSignature' \
      'extendedKeyUsage=clientAuth' >client.ext
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -out client.crt -extfile client.ext 2>/dev/null
  )
  cat >>"$config" <<YAML
  tls:
    certificate: $state/server.crt
    key: $state/server.key
YAML
  if [ -n "$mtls" ]; then
    cat >>"$config" <<YAML
    clientcas:
      - $state/ca.crt
YAML
  fi
fi

if [ -n "$htpasswd_user" ]; then
  command -v htpasswd >/dev/null || {
    echo "serve.sh: htpasswd is missing: install apache2-utils" >&2
    exit 127
  }
  htpasswd -Bbc "$state/htpasswd" "${htpasswd_user%%:*}" "${htpasswd_user#*:}" 2>/dev/null
  cat >>"$config" <<YAML
auth:
  htpasswd:
    realm: image-reflector-test
    path: $state/htpasswd
YAML
fi

if [ -n "$token_realm" ]; then
  cat >>"$config" <<YAML
auth:
  token:
    realm: $token_realm
    service: test-registry
    issuer: test-token-issuer
    rootcertbundle: $token_cert
YAML
fi

exec "$bin" serve "$config"
