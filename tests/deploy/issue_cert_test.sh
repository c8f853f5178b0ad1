#!/usr/bin/env bash
# ctest issue_cert_test: deploy/image/gasloc-issue-cert, the script every
# Kubernetes pod's init container runs to issue its own certificate, under
# dash (the image's /bin/sh) against a fresh CA:
#   - a worker certificate: CN worker:<name>, the given IPs and names as
#     subjectAltName, client and server use, signed by the CA, key 0600, and
#     ca.crt beside it;
#   - two issues give two different keys;
#   - refusals that write nothing: a CA key that is not the CA's, a missing
#     CA, a name or address that would inject configuration, no address.
#
#   issue_cert_test.sh SOURCE_DIR
set -euo pipefail
script="$1/deploy/image/gasloc-issue-cert"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
issue() { dash "$script" "$@"; }

mkdir ca other out
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=issue_cert_test CA" -keyout ca/ca.key -out ca/ca.crt \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2> /dev/null
cp ca/ca.crt other/ca.crt
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out other/ca.key

issue --ca ca --out out --file tls --name worker:gasloc-worker-7 \
  --ip 10.88.0.12 --ip 127.0.0.1 --dns localhost > /dev/null
text="$(openssl x509 -in out/tls.crt -noout -subject -ext subjectAltName,extendedKeyUsage)"
grep -q "subject=CN = worker:gasloc-worker-7" <<< "$text" || fail "subject: $text"
grep -q "IP Address:10.88.0.12, IP Address:127.0.0.1, DNS:localhost" <<< "$text" ||
  fail "subjectAltName: $text"
grep -q "TLS Web Server Authentication, TLS Web Client Authentication" <<< "$text" ||
  fail "extended key usage: $text"
openssl verify -CAfile ca/ca.crt out/tls.crt > /dev/null || fail "does not verify"
cmp -s <(openssl x509 -in ca/ca.crt) out/ca.crt || fail "ca.crt is not the CA's"
[ "$(stat -c %a out/tls.key)" = 600 ] || fail "key mode $(stat -c %a out/tls.key)"
[ "$(openssl x509 -in out/tls.crt -noout -pubkey)" = \
  "$(openssl pkey -in out/tls.key -pubout)" ] || fail "the key is not the certificate's"
[ -z "$(ls -A out | grep -v -x -e tls.crt -e tls.key -e ca.crt)" ] ||
  fail "left files behind: $(ls -A out)"

issue --ca ca --out out --file second --name worker:b --ip 10.88.0.13 > /dev/null
cmp -s out/tls.key out/second.key && fail "two issues gave the same key"

refused() {  # refused EXPECTED-MESSAGE ARGS...: exit 2, the message, no file
  local want="$1"; shift
  rm -rf refused && mkdir refused
  if err="$(issue "$@" --out refused 2>&1)"; then fail "accepted: $*"; fi
  grep -q -- "$want" <<< "$err" || fail "for '$*' said: $err (wanted: $want)"
  [ -z "$(ls -A refused)" ] || fail "'$*' left $(ls -A refused)"
}
refused "is it the key of" --ca other --file tls --name worker:x --ip 10.0.0.1
refused "ca.crt missing" --ca nowhere --file tls --name worker:x --ip 10.0.0.1
refused "only letters" --ca ca --file tls --name 'worker:x/CN=operator' --ip 10.0.0.1
refused "only letters" --ca ca --file tls --name worker:x --dns 'a,DNS:evil'
refused "at least one --ip or --dns" --ca ca --file tls --name worker:x
refused "plain file name stem" --ca ca --file ../tls --name worker:x --ip 10.0.0.1
refused "positive whole number" --ca ca --file tls --name worker:x --ip 10.0.0.1 --days 0
echo "issue_cert_test: passed"
