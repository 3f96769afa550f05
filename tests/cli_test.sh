#!/usr/bin/env bash
# Black-box checks of the command-line tools.
#   cli_test.sh PLEXUS_RUN PLEXUS_INFO PLEXUS_DEMO CRASHING_PLUGIN
set -uo pipefail
run=$1 info=$2 demo=$3 crashing=$4
failures=0 passes=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
out=$(mktemp); trap 'rm -f "$out"' EXIT

# An explicitly requested backend that does not exist fails fast, listing paths.
start=$(date +%s%N)
PLEXUS_BACKEND=nosuch PLEXUS_PLUGIN_PATH=/nonexistent/dir "$demo" >"$out" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$out"
check "nosuch exits non-zero" test $rc -ne 0
check "nosuch fails within 5 s (took $ms ms)" test $ms -lt 5000
check "nosuch names the backend" grep -q "cannot load backend 'nosuch'; tried:" "$out"
check "nosuch lists PLEXUS_PLUGIN_PATH" grep -q "/nonexistent/dir/libplexus-nosuch.so: no such file" "$out"
check "nosuch lists the build tree" grep -q "backends/tcp/libplexus-nosuch.so: no such file" "$out"

# The same under the launcher: every rank fails, plexus-run names one and exits non-zero.
PLEXUS_BACKEND=nosuch timeout 30 "$run" -n 2 "$demo" >"$out" 2>&1; rc=$?
check "plexus-run with nosuch exits non-zero (got $rc)" test $rc -ne 0 -a $rc -ne 124
check "plexus-run names the failed rank" grep -q "plexus-run: rank [01]" "$out"

# plexus-info finds the TCP plugin.
"$info" >"$out" 2>&1; rc=$?
check "plexus-info exits 0" test $rc -eq 0
check "plexus-info lists tcp" grep -q "^tcp$" "$out"
check "plexus-info shows the ABI" grep -q "ABI:          1.5" "$out"
check "plexus-info lists the 1.2 collectives" grep -q "collectives:.*gather scatter allgatherv alltoallv allreduce_coalesced" "$out"
check "plexus-info says how groups are made" grep -q "groups:       made by the host with comm_create" "$out"
"$info" --help >"$out" 2>&1
check "plexus-info --help" grep -q "Usage: plexus-info" "$out"
"$demo" --help >"$out" 2>&1
check "plexus-demo --help" grep -q "Usage: plexus-demo" "$out"

# A rejected plugin is listed with its reason.
dir=$(mktemp -d); echo "not ELF" >"$dir/libplexus-junk.so"
PLEXUS_PLUGIN_PATH=$dir "$info" >"$out" 2>&1
check "plexus-info lists a rejected plugin with the reason" grep -q "REJECTED $dir/libplexus-junk.so" "$out"
rm -rf "$dir"

# A plugin that segfaults in init is named by plexus-info, which goes on.
dir=$(mktemp -d); ln -s "$crashing" "$dir/libplexus-crashy.so"
PLEXUS_PLUGIN_PATH=$dir "$info" >"$out" 2>&1; rc=$?
cat "$out"
check "plexus-info survives a crashing plugin (exit $rc)" test $rc -eq 0
check "plexus-info names the crashing plugin" \
  grep -q "REJECTED $dir/libplexus-crashy.so" "$out"
check "plexus-info says where it crashed" grep -q "crashed with SIGSEGV .* in its init" "$out"
check "plexus-info still lists tcp" grep -q "^tcp$" "$out"
# ... and plexus-demo, which runs Plexus' own backends by name, never loads a
# plugin file it was not asked for. (Automatic selection skipping a crashing
# plugin of a name it tries is host_contract_test's.)
PLEXUS_PLUGIN_PATH=$dir PLEXUS_LOG_LEVEL=info timeout 60 "$run" -n 2 "$demo" --count 8 --iters 1 \
  >"$out" 2>&1; rc=$?
check "plexus-demo is untouched by a crashing plugin it was not asked to run (exit $rc)" \
  test $rc -eq 0
rm -rf "$dir"

# PLEXUS_LOG_LEVEL=trace logs every plugin call with its arguments and result.
PLEXUS_BACKEND=tcp PLEXUS_LOG_LEVEL=trace timeout 60 "$run" -n 2 "$demo" --count 8 --iters 1 \
  >"$out" 2>&1; rc=$?
check "trace run exits 0" test $rc -eq 0
for call in "init() -> OK" "get_capabilities() -> OK" "comm_create(name=" \
            "allreduce(comm=" "count=8" "wait(req=" "request_free(req=" "comm_destroy(comm="; do
  check "trace shows $call" grep -qF "$call" "$out"
done

echo "cli: $passes passed, $failures failed"
[ $failures -eq 0 ]
