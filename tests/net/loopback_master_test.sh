#!/usr/bin/env bash
# plexus-run --nnodes > 1 refuses a loopback rendezvous point or listening
# address, which the other nodes could never connect to (issue 15):
#
#   loopback_master_test.sh PLEXUS_RUN
#
# --master-addr missing (the default 127.0.0.1), 127.0.0.1, 127.3.4.5, ::1 and
# localhost; PLEXUS_SOCKET_IFNAME=lo and PLEXUS_TCP_ADDR=127.0.0.1 with a
# routable master: each is a usage error (exit 2) at once, saying why and
# what to pass instead, before anything listens or waits. The master used
# for the last two is 192.0.2.1 (TEST-NET-1): it is only checked, never
# contacted. Also this host's own name where /etc/hosts maps it to a loopback
# address. No root needed.
set -u
run=${1:?plexus-run}
dir=$(mktemp -d "${TMPDIR:-/tmp}/plexus-loopback.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
"$run" --make-token "$dir/token" >/dev/null || { echo "FAIL: --make-token"; exit 1; }

fail=0
# refused WHAT EXPECTED [ENV...] -- plexus-run ARGS...
refused() {
  local what=$1 expected=$2 rc=0
  shift 2
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  env PLEXUS_TIMEOUT=5 "${env[@]}" timeout -k 2 30 "$run" --nnodes 2 --master-port 29400 \
    --token-file "$dir/token" "$@" -n 1 true >"$dir/out" 2>"$dir/err" || rc=$?
  sed 's/^/    /' "$dir/err" | head -n 2
  if [ $rc != 2 ]; then
    echo "FAIL: $what: exit $rc, expected 2 (a usage error) at once"
    fail=1
  elif ! grep -qF -- "$expected" "$dir/err"; then
    echo "FAIL: $what: the error does not say '$expected'"
    fail=1
  else
    echo "ok: $what: refused, saying '$expected'"
  fi
}

refused "no --master-addr" "--nnodes 2 needs --master-addr ADDR: the default, 127.0.0.1, is a loopback address" --
refused "--master-addr 127.0.0.1" "--master-addr 127.0.0.1 is a loopback address: the other nodes (--nnodes 2) cannot reach node 0's rendezvous store there; give node 0's address on the network the nodes share" -- --master-addr 127.0.0.1
refused "--master-addr 127.3.4.5" "--master-addr 127.3.4.5 is a loopback address" -- --master-addr 127.3.4.5
refused "--master-addr ::1" "--master-addr ::1 is a loopback address" -- --master-addr ::1
refused "--master-addr localhost" "--master-addr localhost " -- --master-addr localhost
refused "--node-rank 1 --master-addr 127.0.0.1" "is a loopback address" -- --node-rank 1 --master-addr 127.0.0.1
refused "PLEXUS_SOCKET_IFNAME=lo" "PLEXUS_SOCKET_IFNAME=lo is a loopback interface (127.0.0.1)" \
  PLEXUS_SOCKET_IFNAME=lo -- --master-addr 192.0.2.1
refused "PLEXUS_TCP_ADDR=127.0.0.1" "PLEXUS_TCP_ADDR=127.0.0.1 is a loopback address" \
  PLEXUS_TCP_ADDR=127.0.0.1 -- --master-addr 192.0.2.1
# "localhost" says which loopback address it is, and every refusal names the
# way to run all nodes on one host on purpose.
check_localhost=$(env PLEXUS_TIMEOUT=5 timeout 30 "$run" --nnodes 2 --master-port 29400 \
  --token-file "$dir/token" --master-addr localhost -n 1 true 2>&1)
if grep -Eq -- "--master-addr localhost (is|resolves to (127\.[0-9.]+|::1), which is) a loopback address" <<<"$check_localhost" &&
  grep -qF -- "add --local-nodes" <<<"$check_localhost"; then
  echo "ok: localhost: names the loopback address and --local-nodes"
else
  echo "FAIL: localhost: $check_localhost"
  fail=1
fi
# This host's own name, where /etc/hosts maps it to a loopback address (as
# Debian and Ubuntu do, 127.0.1.1): `--master-addr $(hostname)` is caught.
name=$(hostname)
addr=$(getent hosts "$name" 2>/dev/null | awk '{ print $1; exit }')
case $addr in
127.* | ::1)
  refused "--master-addr \$(hostname) ($name -> $addr)" "--master-addr $name resolves to $addr, which is a loopback address" \
    -- --master-addr "$name"
  ;;
*) echo "(this host's name, $name, resolves to '${addr:-nothing}', not a loopback address: not checked)" ;;
esac
exit $fail
