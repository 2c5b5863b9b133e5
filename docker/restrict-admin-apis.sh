#!/bin/sh
# Runs the command it is given (tritonserver and its arguments) with Triton's model-repository and
# model-config APIs restricted to requests carrying the admin key in the header ernie-deploy-admin-key.
# The image's CMD and the Kubernetes Deployment start tritonserver through it.
#
# The key is a secret of the place the container runs, never part of the image:
#   ERNIE_DEPLOY_ADMIN_KEY_FILE  a file holding it (a Docker or Kubernetes secret mount), or
#   ERNIE_DEPLOY_ADMIN_KEY       the key itself.
# Without a key it refuses to start: in a container the server listens on every interface.
# The flags are those of ernie_deploy.server.args.restricted_args (tests/test_admin_key.py runs this script
# and compares). tritonserver takes the key only on its command line: whoever can list the container's
# processes can read it.
#
# gRPC over TLS, when these name PEM files (a mounted Secret; `ernie-deploy serve --grpc-tls-*` alike):
#   ERNIE_DEPLOY_GRPC_TLS_CERT, ERNIE_DEPLOY_GRPC_TLS_KEY  the server's certificate and key, both or neither;
#   ERNIE_DEPLOY_GRPC_TLS_CA                               also: mutual TLS, clients need a certificate it signed.
# The flags are ernie_deploy.server.args.grpc_tls_args (tests/test_tls.py compares). HTTP stays plain.
set -eu

fail() {
    echo "restrict-admin-apis: error: $1" >&2
    echo "  fix: $2" >&2
    exit 2
}

generate="python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
if [ -n "${ERNIE_DEPLOY_ADMIN_KEY_FILE:-}" ]; then
    [ -r "$ERNIE_DEPLOY_ADMIN_KEY_FILE" ] \
        || fail "admin key file $ERNIE_DEPLOY_ADMIN_KEY_FILE cannot be read" "mount the secret at that path"
    origin="the file $ERNIE_DEPLOY_ADMIN_KEY_FILE"
    key=$(cat "$ERNIE_DEPLOY_ADMIN_KEY_FILE")  # $(...) drops the trailing newline
    key=${key%"$(printf '\r')"}  # and a file written on Windows ends the line with CR first
elif [ -n "${ERNIE_DEPLOY_ADMIN_KEY+set}" ]; then
    origin="the environment variable ERNIE_DEPLOY_ADMIN_KEY"
    key=$ERNIE_DEPLOY_ADMIN_KEY
else
    fail "no admin key for the model-repository and model-config APIs" \
        "set ERNIE_DEPLOY_ADMIN_KEY_FILE to a mounted secret, or ERNIE_DEPLOY_ADMIN_KEY (make one: $generate)"
fi
# The same rule as ernie_deploy.core.admin_key: 16+ characters a header and Triton's flag can carry.
case "$key" in
    "") fail "the admin key from $origin is empty" "put a key in it (make one: $generate)" ;;
    *[!A-Za-z0-9._~+/=:@-]*) fail "the admin key from $origin has characters other than A-Z a-z 0-9 . _ ~ + / = : @ -" \
        "make one: $generate" ;;
esac
[ "${#key}" -ge 16 ] || fail "the admin key from $origin is shorter than 16 characters" "make one: $generate"
[ "$#" -gt 0 ] || fail "no command to run" "give the server's command line, e.g. tritonserver --model-repository=/models"
# The server's own processes (and the python models) have no use for the key: keep it out of their environment.
unset ERNIE_DEPLOY_ADMIN_KEY ERNIE_DEPLOY_ADMIN_KEY_FILE

tls_cert=${ERNIE_DEPLOY_GRPC_TLS_CERT:-}
tls_key=${ERNIE_DEPLOY_GRPC_TLS_KEY:-}
tls_ca=${ERNIE_DEPLOY_GRPC_TLS_CA:-}
if [ -n "$tls_cert$tls_key$tls_ca" ]; then
    [ -n "$tls_cert" ] && [ -n "$tls_key" ] \
        || fail "gRPC TLS needs ERNIE_DEPLOY_GRPC_TLS_CERT and ERNIE_DEPLOY_GRPC_TLS_KEY, and one is not set" \
            "set both to the server's certificate and key (on Kubernetes: the tls.crt and tls.key of a TLS Secret)"
    for file in "$tls_cert" "$tls_key" ${tls_ca:+"$tls_ca"}; do
        [ -r "$file" ] || fail "gRPC TLS file $file cannot be read" "mount the TLS Secret at that path"
    done
    set -- "$@" --grpc-use-ssl=true "--grpc-server-cert=$tls_cert" "--grpc-server-key=$tls_key"
    [ -z "$tls_ca" ] || set -- "$@" --grpc-use-ssl-mutual=true "--grpc-root-cert=$tls_ca"
fi

apis=model-repository,model-config
exec "$@" "--http-restricted-api=$apis:ernie-deploy-admin-key=$key" \
    "--grpc-restricted-protocol=$apis:ernie-deploy-admin-key=$key"
