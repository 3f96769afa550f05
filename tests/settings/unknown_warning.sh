#!/usr/bin/env bash
# A PLEXUS_* variable that is not a setting (a typo) gets one warning naming
# the nearest setting: once in a 2-rank job (rank 0 says it), and listed by
# plexus-info --settings. A known variable gets none.
# Usage: unknown_warning.sh PLEXUS_RUN PLEXUS_DEMO PLEXUS_INFO
set -euo pipefail
run=$1 demo=$2 info=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT

PLEXUS_BACKEND=tcp PLEXUS_BAKCEND=ucx PLEXUS_TIMEOUT=60 \
  "$run" -n 2 "$demo" --count 8 --iters 1 >"$out" 2>&1 || { cat "$out"; exit 1; }
n=$(grep -c "PLEXUS_BAKCEND is not a Plexus setting (did you mean PLEXUS_BACKEND?)" "$out" || true)
if [ "$n" != 1 ]; then
  cat "$out"
  echo "FAIL: expected one warning about PLEXUS_BAKCEND, got $n"
  exit 1
fi

PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=60 "$run" -n 2 "$demo" --count 8 --iters 1 >"$out" 2>&1 ||
  { cat "$out"; exit 1; }
if grep -q "is not a Plexus setting" "$out"; then
  cat "$out"
  echo "FAIL: a warning without an unknown variable"
  exit 1
fi

PLEXUS_TRACE_OPZ=3 PLEXUS_TIMEOUT=7 "$info" --settings >"$out"
grep -q "PLEXUS_TRACE_OPZ is not a Plexus setting (did you mean PLEXUS_TRACE_OPS?)" "$out" ||
  { cat "$out"; echo "FAIL: plexus-info --settings does not name the typo"; exit 1; }
grep -Eq "^PLEXUS_TIMEOUT +7 +environment +core" "$out" ||
  { cat "$out"; echo "FAIL: plexus-info --settings does not show PLEXUS_TIMEOUT=7 from the environment"; exit 1; }
grep -Eq "^PLEXUS_LOG_LEVEL +\(warn\) +default" "$out" ||
  { cat "$out"; echo "FAIL: plexus-info --settings does not show PLEXUS_LOG_LEVEL's default"; exit 1; }
echo "one warning for PLEXUS_BAKCEND in a 2-rank job, none without; plexus-info --settings lists values and the typo"
