#!/usr/bin/env bash
# A rank that posts an allreduce 2.5 timeouts late, under mpirun on the mpi
# backend (issue 13, item 8): rank 0 must fail with TIMEOUT naming rank 1,
# and its error must come within 1.5 x PLEXUS_TIMEOUT + 3 s of its start,
# teardown included (the Work's teardown once waited a second full timeout).
#   late_rank_check.sh MPIRUN_SH MPIRUN FAULT_RANK
set -u
mpirun_sh=$1
mpirun=$2
prog=$3
out=$(mktemp -d "${TMPDIR:-/tmp}/plexus-late.XXXXXX")
trap 'rm -rf "$out"' EXIT
export PLEXUS_BACKEND=mpi PLEXUS_TIMEOUT=3 OMPI_MCA_orte_allowed_exit_without_sync=1
timeout -k 5 60 bash "$mpirun_sh" "$mpirun" 2 "$prog" "$out" late >"$out/job.log" 2>&1
rc=$?
cat "$out/job.log"
failures=0
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0"; failures=$((failures + 1)); }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { echo "FAIL: the job hung"; failures=$((failures + 1)); }
# Under mpirun fault_rank does not know its rank (PLEXUS_RANK is unset): the
# error of rank 0 is the one that names rank 1.
err=$(grep -l "rank 1" "$out"/*.err 2>/dev/null | head -1)
if [ -z "$err" ]; then
  echo "FAIL: no rank's error names rank 1:"
  cat "$out"/*.err 2>/dev/null
  failures=$((failures + 1))
else
  echo "error: $(cat "$err")"
  t=$(cut -d' ' -f1 "$err")
  grep -q "TIMEOUT" "$err" || { echo "FAIL: not a TIMEOUT"; failures=$((failures + 1)); }
  awk -v t="$t" 'BEGIN { exit !(t < 1.5 * 3 + 3) }' ||
    { echo "FAIL: the error came after ${t}s, more than 1.5 x PLEXUS_TIMEOUT + 3 s"; failures=$((failures + 1)); }
fi
[ "$failures" -eq 0 ] && echo "late rank: ok"
[ "$failures" -eq 0 ]
