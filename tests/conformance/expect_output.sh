#!/usr/bin/env bash
# Runs a command and checks its exit status and output, for the conformance
# suite's own tests:
#
#   expect_output.sh EXIT|nonzero REGEX [REGEX...] -- COMMAND [ARGS...]
#
# Passes when COMMAND exits with EXIT (or with anything but 0 for
# "nonzero") and its stdout matches every REGEX (grep -E, per line).
set -uo pipefail
want=$1
shift
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns+=("$1")
  shift
done
[ "${1:-}" = "--" ] || { echo "usage: expect_output.sh EXIT REGEX... -- COMMAND..."; exit 2; }
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out"
rc=$?
cat "$out"
if [ "$want" = nonzero ]; then
  [ "$rc" -ne 0 ] || { echo "expect_output.sh: exit status 0, want non-zero"; exit 1; }
else
  [ "$rc" -eq "$want" ] || { echo "expect_output.sh: exit status $rc, want $want"; exit 1; }
fi
for p in "${patterns[@]}"; do
  grep -Eq -- "$p" "$out" || { echo "expect_output.sh: no line matches '$p'"; exit 1; }
done
echo "expect_output.sh: exit status $rc and every pattern matched"
