#!/usr/bin/env bash
# The same binary gives byte-identical results on the tcp backend under
# plexus-run and on the mpi backend under mpirun:
#
#   same_results.sh PLEXUS_RUN MPIRUN_SH MPIRUN NP SAME_RESULTS
#
# Runs SAME_RESULTS (tests/mpi/same_results.cpp) on NP ranks: tcp under
# plexus-run, mpi under mpirun, and mpi under mpirun in three variants:
# PLEXUS_DEBUG_MPI_MAX_COUNT=1000 (every operation of 2500 elements split into MPI
# calls of at most 1000), PLEXUS_MPI_ALLREDUCE=ring (the ring schedule at
# sizes where recursive doubling is the default) and PLEXUS_MPI_ALLREDUCE=mpi
# (MPI_Iallreduce instead of the backend's schedules). Each run writes
# OUTDIR/<collective>.<rank>; every file of the tcp run must be identical to
# the mpi run's file of the same name, and every variant must have the mpi
# run's files, identical. A collective the tcp backend does not support yet
# is listed as not compared.
set -uo pipefail
if [ $# -ne 5 ]; then
  echo "usage: same_results.sh PLEXUS_RUN MPIRUN_SH MPIRUN NP SAME_RESULTS" >&2
  exit 2
fi
plexus_run=$1 mpirun_sh=$2 mpirun=$3 np=$4 prog=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
variants=("mpi-chunked PLEXUS_DEBUG_MPI_MAX_COUNT=1000" "mpi-ring PLEXUS_MPI_ALLREDUCE=ring"
          "mpi-iallreduce PLEXUS_MPI_ALLREDUCE=mpi")
mkdir "$dir/tcp" "$dir/mpi"

echo "== tcp, plexus-run -n $np"
PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=60 "$plexus_run" -n "$np" "$prog" "$dir/tcp" || {
  echo "FAILED: the tcp run"; exit 1; }
echo "== mpi, mpirun -np $np"
PLEXUS_BACKEND=mpi PLEXUS_TIMEOUT=60 bash "$mpirun_sh" "$mpirun" "$np" "$prog" "$dir/mpi"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAILED: the mpi run"; exit 1; }
for v in "${variants[@]}"; do
  read -r name setting <<<"$v"
  mkdir "$dir/$name"
  echo "== mpi, mpirun -np $np, $setting"
  env PLEXUS_BACKEND=mpi "$setting" PLEXUS_TIMEOUT=60 \
    bash "$mpirun_sh" "$mpirun" "$np" "$prog" "$dir/$name" || {
    echo "FAILED: the mpi run with $setting"; exit 1; }
done

failures=0 identical=() missing=()
for f in "$dir"/tcp/*; do
  name=$(basename "$f")
  if [ ! -e "$dir/mpi/$name" ]; then
    echo "FAILED: the mpi run wrote no $name"
    failures=$((failures + 1))
    continue
  fi
  if cmp "$f" "$dir/mpi/$name"; then identical+=("$name"); else failures=$((failures + 1)); fi
done
for f in "$dir"/mpi/*; do
  name=$(basename "$f")
  for v in "${variants[@]}"; do
    read -r variant setting <<<"$v"
    if ! cmp "$f" "$dir/$variant/$name"; then
      echo "FAILED: mpi with $setting differs from plain mpi in $name"
      failures=$((failures + 1))
    fi
  done
  [ -e "$dir/tcp/$name" ] || missing+=("$name")
done
for v in "${variants[@]}"; do
  read -r variant setting <<<"$v"
  if [ "$(ls "$dir/mpi" | wc -l)" -ne "$(ls "$dir/$variant" | wc -l)" ]; then
    echo "FAILED: the mpi run with $setting wrote other files"
    failures=$((failures + 1))
  fi
done
colls() { printf '%s\n' "$@" | sed 's/\.[0-9]*$//' | sort -u | tr '\n' ' '; }
echo "identical on tcp and mpi (${#identical[@]} files of $np ranks): $(colls "${identical[@]}")"
[ ${#missing[@]} -eq 0 ] || echo "not compared (the tcp backend does not support them yet): $(colls "${missing[@]}")"
if [ ${#identical[@]} -eq 0 ]; then
  echo "FAILED: nothing was compared"
  failures=$((failures + 1))
fi
[ $failures -eq 0 ] && echo "same results: OK" || echo "same results: $failures failure(s)"
[ $failures -eq 0 ]
