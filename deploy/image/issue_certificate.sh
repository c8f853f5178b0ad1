#!/bin/sh
# gasloc-issue-certificate: a fresh private key and a certificate signed by
# the cluster's CA, for one process's mutual TLS (docs/security.md). In the
# image as /usr/local/bin/gasloc-issue-certificate: each pod of
# deploy/kubernetes/gasloc.yaml runs it in its init container, so every
# pod has a key of its own that never leaves the pod, and the daemon's
# container never sees the CA's key.
#
#   gasloc-issue-certificate CA_DIR OUT_DIR NAME CN SAN [DAYS]
#     CA_DIR   holds ca.pem and ca.key (the Secret gasloc-ca)
#     OUT_DIR  receives NAME.key, NAME.pem and ca.pem
#     NAME     file name: coordinator, operator, worker
#     CN       the certificate's name, which is the identity the servers
#              see: coordinator, operator or worker:<name>
#     SAN      subjectAltName: every address clients dial this process at,
#              e.g. IP:10.0.0.7,IP:127.0.0.1,DNS:localhost
#     DAYS     validity in days (default 30)
#
# The image has no tools besides /bin/sh (dash) and openssl, so this uses
# only shell builtins and openssl. P-256 key, serverAuth and clientAuth.
set -eu
me=gasloc-issue-certificate
if [ $# -lt 5 ] || [ $# -gt 6 ]; then
  echo "usage: $me CA_DIR OUT_DIR NAME CN SAN [DAYS]" >&2
  exit 2
fi
ca="$1"; out="$2"; name="$3"; cn="$4"; san="$5"; days="${6:-30}"
for file in ca.pem ca.key; do
  [ -r "$ca/$file" ] ||
    { echo "$me: cannot read $ca/$file (the CA: the Secret gasloc-ca)" >&2; exit 1; }
done
[ -d "$out" ] && [ -w "$out" ] ||
  { echo "$me: $out is not a writable folder" >&2; exit 1; }
case "$name" in
  ''|*/*|.*) echo "$me: NAME '$name' must be a plain file name" >&2; exit 2 ;;
esac
case "$cn" in
  ''|*/*|*,*|*=*) echo "$me: CN '$cn' must not be empty nor hold / , =" >&2; exit 2 ;;
esac
case "$days" in
  ''|*[!0-9]*) echo "$me: DAYS '$days' must be a number" >&2; exit 2 ;;
esac

umask 077
key="$out/$name.key"
cert="$out/$name.pem"
# The request carries the extensions; the CA copies them (this script made
# the request, so it asks for nothing the CA would not grant).
serial="0x$(openssl rand -hex 16)"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$cn" -keyout "$key" \
    -addext "subjectAltName=$san" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=critical,digitalSignature,keyEncipherment" \
    -addext "extendedKeyUsage=serverAuth,clientAuth" 2> /dev/null |
  openssl x509 -req -CA "$ca/ca.pem" -CAkey "$ca/ca.key" \
    -copy_extensions copyall -set_serial "$serial" -days "$days" -sha256 \
    -out "$cert" 2> /dev/null ||
  { echo "$me: openssl could not sign $cert (is $ca/ca.key the key of ca.pem?)" >&2; exit 1; }
# A pipeline's status is its last command's: check both halves.
openssl verify -CAfile "$ca/ca.pem" "$cert" > /dev/null 2>&1 ||
  { echo "$me: $cert does not verify against $ca/ca.pem" >&2; exit 1; }
[ "$(openssl x509 -in "$cert" -noout -pubkey)" = "$(openssl pkey -in "$key" -pubout)" ] ||
  { echo "$me: $cert is not the certificate of $key" >&2; exit 1; }
openssl x509 -in "$ca/ca.pem" -out "$out/ca.pem"
echo "$me: $cert (CN $cn, $san, serial $serial, $days days) and $key"
