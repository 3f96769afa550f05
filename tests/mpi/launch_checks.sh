#!/usr/bin/env bash
# How the mpi backend behaves with and without an MPI launcher:
#
#   launch_checks.sh no-mpirun PROG            PLEXUS_BACKEND=mpi without mpirun fails
#                                              fast (< 10 s) saying it needs mpirun; with
#                                              PLEXUS_BACKEND unset the automatic choice
#                                              passes over mpi without an error line; a
#                                              bad PLEXUS_MPI_ALLREDUCE fails, naming it
#   launch_checks.sh exports PLUGIN          the plugin's dynamic symbol table defines
#                                              exactly plexus_backend_get_v1
#   launch_checks.sh auto MPIRUN_SH MPIRUN PROG
#                                              PLEXUS_BACKEND unset under mpirun -np 2:
#                                              the automatic choice (rank 0 loads the
#                                              backend alone first) picks mpi and does not
#                                              deadlock in MPI_Init
#   launch_checks.sh layout MPIRUN_SH MPIRUN PROG
#                                              mpirun -np 2 on this host: both ranks say at
#                                              INFO that allreduce, reduce_scatter and
#                                              allgather go over the kit's shared memory,
#                                              whichever transports MPI itself uses (its
#                                              default, or OMPI_MCA_btl=self,tcp)
#
# PROG is tests/mpi/same_results, given an output directory.
set -uo pipefail
failures=0 passes=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
out=$(mktemp) dir=$(mktemp -d)
trap 'rm -rf "$out" "$dir"' EXIT
# None of the launcher variables the backend looks for.
clean_env=(env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK
           -u PMI_SIZE -u PLEXUS_RANK -u PLEXUS_WORLD_SIZE -u RANK -u WORLD_SIZE
           -u SLURM_PROCID -u SLURM_NTASKS)

case ${1:-} in
  no-mpirun)
    prog=$2
    start=$(date +%s%N)
    "${clean_env[@]}" PLEXUS_BACKEND=mpi timeout 60 "$prog" "$dir" >"$out" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    cat "$out"
    check "PLEXUS_BACKEND=mpi without mpirun exits non-zero (got $rc)" test $rc -ne 0 -a $rc -ne 124
    check "it fails within 10 s (took $ms ms)" test $ms -lt 10000
    check "the message says the backend needs mpirun" grep -q "needs to be launched by mpirun" "$out"
    check "the host names the backend" grep -q "backend 'mpi'" "$out"

    # A bad setting is refused before anything else, naming it.
    "${clean_env[@]}" PLEXUS_BACKEND=mpi PLEXUS_MPI_ALLREDUCE=fastest timeout 60 "$prog" "$dir" \
      >"$out" 2>&1
    rc=$?
    cat "$out"
    check "PLEXUS_MPI_ALLREDUCE=fastest exits non-zero (got $rc)" test $rc -ne 0 -a $rc -ne 124
    check "the message names the setting and its choices" \
      grep -q "PLEXUS_MPI_ALLREDUCE='fastest' is not one of auto, ring, rd, pair, mpi" "$out"

    "${clean_env[@]}" -u PLEXUS_BACKEND timeout 60 "$prog" "$dir" >"$out" 2>&1
    rc=$?
    cat "$out"
    check "PLEXUS_BACKEND unset without mpirun still runs (got $rc)" test $rc -eq 0
    check "it did not choose mpi" bash -c "! grep -q 'backend mpi$' '$out'"
    check "the mpi backend logged no error or warning" bash -c "! grep -q 'ERROR backend mpi\|WARN backend mpi' '$out'"
    ;;
  exports)
    plugin=$2
    if ! command -v nm >/dev/null; then echo "skipped: nm (binutils) not found"; exit 77; fi
    symbols=$(nm -D --defined-only "$plugin" | awk '{print $3}')
    echo "defined dynamic symbols of $plugin: $symbols"
    check "only plexus_backend_get_v1 is exported" test "$symbols" = "plexus_backend_get_v1"
    check "it links libmpi" bash -c "ldd '$plugin' | grep -q libmpi"
    check "it does not link libplexus" bash -c "! ldd '$plugin' | grep -q 'libplexus\.so'"
    ;;
  layout)
    mpirun_sh=$2 mpirun=$3 prog=$4
    for btl in default self,tcp; do
      rm -rf "${dir:?}"/*
      # (mpirun.sh's own --mca btl comes after the environment's and wins, so
      # the TCP-only run goes through mpirun directly.)
      if [ $btl = default ]; then
        PLEXUS_BACKEND=mpi PLEXUS_LOG_LEVEL=info PLEXUS_TIMEOUT=60 timeout 120 \
          bash "$mpirun_sh" "$mpirun" 2 "$prog" "$dir" >"$out" 2>&1
      else
        PLEXUS_BACKEND=mpi PLEXUS_LOG_LEVEL=info PLEXUS_TIMEOUT=60 PLEXUS_MASTER_ADDR=127.0.0.1 \
          PLEXUS_MASTER_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
          PLEXUS_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') \
          timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 \
          -x PLEXUS_BACKEND -x PLEXUS_LOG_LEVEL -x PLEXUS_TIMEOUT -x PLEXUS_MASTER_ADDR \
          -x PLEXUS_MASTER_PORT -x PLEXUS_TOKEN --mca btl "$btl" -np 2 "$prog" "$dir" >"$out" 2>&1
      fi
      rc=$?
      cat "$out"
      [ $rc -eq 77 ] && exit 77
      check "mpirun -np 2 (btl $btl) exits 0 (got $rc)" test $rc -eq 0
      want="rank [01]: allreduce, reduce_scatter and allgather over shared memory"
      check "both ranks log '$want' (btl $btl)" test "$(grep -c "$want" "$out")" -eq 2
    done
    ;;
  auto)
    mpirun_sh=$2 mpirun=$3 prog=$4
    "${clean_env[@]}" -u PLEXUS_BACKEND PLEXUS_TIMEOUT=60 timeout 120 \
      bash "$mpirun_sh" "$mpirun" 2 "$prog" "$dir" >"$out" 2>&1
    rc=$?
    cat "$out"
    [ $rc -eq 77 ] && exit 77
    check "mpirun -np 2 with PLEXUS_BACKEND unset exits 0 (got $rc)" test $rc -eq 0
    if grep -q "backend \(nccl\|ucx\)$" "$out"; then
      # A backend the order prefers to mpi is built here: it must be the
      # choice of both ranks (mpi's own path is then not exercised).
      preferred=$(grep -o "backend \(nccl\|ucx\)$" "$out" | sort -u)
      echo "note: the automatic choice found a backend it prefers to mpi ($preferred)"
      check "both ranks chose the same preferred backend" \
        test "$(grep -c "^rank [01] of 2: $preferred$" "$out")" -eq 2
    else
      check "both ranks chose mpi" test "$(grep -c 'backend mpi$' "$out")" -eq 2
    fi
    ;;
  *)
    echo "usage: launch_checks.sh no-mpirun PROG | exports PLUGIN | auto MPIRUN_SH MPIRUN PROG" >&2
    exit 2
    ;;
esac
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
