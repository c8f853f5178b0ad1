#!/usr/bin/env bash
# Makes a test certificate authority and certificates for a gasloc cluster
# with openssl (Debian's openssl package): for tests, the local cluster and
# trying mutual TLS out. Not for production keys (no passphrase, 30 days).
#
#   scripts/make_test_certs.sh DIR [WORKERS] [HOST...]
#
# DIR/ca.pem, ca.key                   the test CA (--tls_ca everywhere)
# DIR/coordinator.pem, .key            CN "coordinator"
# DIR/worker1.pem ... workerN.pem, .key  CN "worker:worker<i>" (worker and
#                                      peer roles, bound to that name)
# DIR/operator.pem, .key               CN "operator" (gaslocctl)
# Every certificate is valid for localhost, 127.0.0.1, this host's name and
# the HOSTs given (subjectAltName), as client and server.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2
fi
dir="$1"; workers="${2:-2}"; shift $(( $# >= 2 ? 2 : 1 ))
[[ "$workers" =~ ^[0-9]+$ ]] ||
  { echo "make_test_certs: WORKERS must be a number, got '$workers'" >&2; exit 2; }
command -v openssl > /dev/null ||
  { echo "make_test_certs: openssl missing (apt-get install openssl)" >&2; exit 2; }
mkdir -p "$dir"
cd "$dir"
umask 077

san="DNS:localhost,IP:127.0.0.1,DNS:$(hostname)"
for host in "$@"; do
  if [[ "$host" =~ ^[0-9.]+$ ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
done

openssl req -x509 -newkey rsa:2048 -nodes -days 30 -sha256 \
  -subj "/CN=gasloc test CA" -keyout ca.key -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2> /dev/null

# issue NAME CN: NAME.pem / NAME.key signed by the CA.
issue() {
  local name="$1" cn="$2"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$cn" \
    -keyout "$name.key" -out "$name.csr" 2> /dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=$san" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key \
    -CAcreateserial -days 30 -sha256 -extfile "$name.ext" \
    -out "$name.pem" 2> /dev/null
  rm -f "$name.csr" "$name.ext"
}
issue coordinator coordinator
issue operator operator
for i in $(seq 1 "$workers"); do issue "worker$i" "worker:worker$i"; done
rm -f ca.srl
echo "make_test_certs: CA and certificates for coordinator, operator and $workers worker(s) in $(pwd)"
