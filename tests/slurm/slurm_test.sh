#!/usr/bin/env bash
# Plexus under a real Slurm (slurm_lib.sh: slurmctld, slurmd and munged of the
# test's own, on network-namespace hosts). Every case starts its own cluster.
#
#   slurm_test.sh MODE BUILD_DIR SOURCE_DIR [BACKEND]
#
#   battery1 BACKEND  one node: `srun -n 2 collectives_check` (mpi: --mpi=pmix)
#                     with no Plexus variable set: srun exits 0, both ranks
#                     report their checks passed, none failed.
#   battery3 BACKEND  three nodes, 2 tasks each: `srun -N 3 --ntasks-per-node 2
#                     collectives_check` with nothing set, the same checks on 6
#                     ranks; every rank took the job secret from rank 0's MUNGE
#                     credential (PLEXUS_LOG_LEVEL=debug's line). With PLEXUS_SLURM_MUNGE=0
#                     and no PLEXUS_TOKEN_FILE it is refused, saying what to set.
#   counts            `srun -N 3 -n 5 plexus-info --launch`: every rank's local
#                     rank and count, node and node count agree with where Slurm
#                     ran the tasks (3,1,1 here), and all have one master (node
#                     0 and the step's port).
#   sbatch BACKEND    `sbatch -W` of samples/slurm/trainer.sbatch on 3 nodes x 2
#                     (mpi: --mpi=pmix), the digits at the trainer's default
#                     epochs: COMPLETED, and a test accuracy of at least 95 %.
#                     Skipped (77) without plexus-trainer (no LibTorch).
#   torch             `srun -n 2 python3 samples/slurm/torch_hello.py` (the
#                     torch.distributed "plexus" backend, nothing set), then the
#                     same on 2 nodes x 1: exits 0, both ranks print the right
#                     sum. Skipped without plexus_torch.
#   kill, stop        2 nodes x 2 ranks of plexus-demo's allreduce loop, plain
#                     srun (no -K), PLEXUS_TIMEOUT=15; rank 3 (node 1) gets SIGKILL
#                     or SIGSTOP. srun must end within PLEXUS_TIMEOUT + 10 s of it,
#                     non-zero, and the output must name rank 3 and its node (for
#                     the frozen one, Plexus's stall report: "rank 3 (node n1)").
#   concurrent        one node: two jobs (`srun -n 2` twice at once) and, in one
#                     allocation, two steps at once: all four exit 0 with their
#                     checks passed (each step has a port and a secret of its own).
#   nosrun            a batch script that forgets srun (`sbatch -n 2` running the
#                     program directly): it fails at once (well inside
#                     PLEXUS_TIMEOUT) saying to start the program with srun.
#   munge             2 nodes: the job secret that rank 0 hands out in a MUNGE
#                     credential (nothing set). While a job runs, its credential is
#                     fetched from its store on node 1 (it is public), but MUNGE
#                     will not open it for user nobody; the job's user opens it;
#                     refused by the job's user: a credential nobody made (its
#                     uid named), one of its own with a payload of its choosing
#                     (`munge -s`), one of its own made for another job; the right
#                     one opens twice on a node; the job then finishes right.
#   port-taken        2 nodes: another program listens on the port the step
#                     would use (job 1, step 0: 20064) on node 0. Rank 0 cannot
#                     host the store and says so, naming the port and MASTER_PORT;
#                     the step ends within 15 s (PLEXUS_TIMEOUT=60: rank 1, which
#                     waits on the squatter, is ended with the step).
#   plexus-run        `srun -N 3 --ntasks-per-node 1 plexus-run -n 2
#                     collectives_check`, nothing set: one launcher per node, its
#                     place from Slurm, the secret from node 0's MUNGE
#                     credential, the battery on 6 ranks; and `srun -n 2 plexus-run -n 2`
#                     on one node is refused, saying what to run.
#
# Exit 0 pass, 1 fail, 77 skipped (Slurm cannot start here).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/slurm_lib.sh"

mode=${1:?mode}
build=$(cd "${2:?build dir}" && pwd)
source_dir=$(cd "${3:?source dir}" && pwd)
backend=${4:-tcp}

battery=$build/tests/collectives_check
info=$build/tools/plexus-info/plexus-info
demo=$build/samples/demo/plexus-demo
run=$build/tools/plexus-run/plexus-run
trainer=$build/samples/trainer/plexus-trainer

fail=0
check() { # check DESCRIPTION COMMAND...: runs COMMAND, prints ok/FAIL
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi
}

# Nothing of Plexus's from the caller's environment: the point is that srun
# needs none. (The library and plugins are found from the build tree.)
for v in $(env | grep -oE '^(PLEXUS|MASTER|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)[A-Z_]*=' |
  tr -d =); do
  unset "$v"
done
export PLEXUS_BACKEND=$backend

case $mode in
  battery1 | battery3 | counts | sbatch | torch | kill | stop | concurrent | nosrun | plexus-run | munge | port-taken) ;;
  *) echo "unknown mode $mode" && exit 2 ;;
esac

nodes=1
case $mode in
  battery3 | counts | sbatch | plexus-run) nodes=3 ;;
  kill | stop | munge | torch | port-taken) nodes=2 ;;
esac
[ "$mode" = sbatch ] && [ ! -x "$trainer" ] && netns_skip "plexus-trainer is not built (no LibTorch)"
if [ "$mode" = torch ]; then
  [ -x "$source_dir/.venv/bin/python3" ] && [ -d "$build/plexus_torch/python/plexus_torch" ] ||
    netns_skip "plexus_torch is not built (no torch wheel in .venv)"
fi
if [ "$backend" = ucx ] && [ ! -e "$build/backends/ucx/libplexus-ucx.so" ]; then
  netns_skip "the ucx backend is not built"
fi
if [ "$backend" = mpi ] && [ ! -e "$build/backends/mpi/libplexus-mpi.so" ]; then
  netns_skip "the mpi backend is not built"
fi
slurm_cluster_setup "$nodes" 4
out=$SLURM_DIR/out
mkdir -p "$out"
mpi_opts=()
[ "$backend" = mpi ] && mpi_opts=(--mpi=pmix)
token=$SLURM_DIR/plexus-token

# The ranks' lines "rank R of N (B): K checks passed, 0 failed", one per rank.
battery_passed() { # battery_passed FILE N
  local n
  n=$(grep -cE "^rank [0-9]+ of $2 \($backend\): [0-9]+ checks passed, 0 failed$" "$1")
  [ "$n" = "$2" ] || { echo "  $n of $2 ranks passed:"; tail -n 20 "$1" | sed 's/^/  | /'; return 1; }
}

case $mode in
  battery1)
    slurm_in_host0 240 srun -n 2 "${mpi_opts[@]}" "$battery" --large-bytes 1048576 >"$out/b" 2>&1
    rc=$?
    check "srun -n 2 collectives_check on $backend, nothing set: exit $rc" [ $rc = 0 ]
    check "both ranks passed every check" battery_passed "$out/b" 2
    ;;

  battery3)
    PLEXUS_LOG_LEVEL=debug slurm_in_host0 400 srun -N 3 --ntasks-per-node 2 "${mpi_opts[@]}" \
      "$battery" --large-bytes 1048576 >"$out/b" 2>&1
    rc=$?
    check "srun -N 3 --ntasks-per-node 2 collectives_check on $backend, nothing set: exit $rc" \
      [ $rc = 0 ]
    check "all 6 ranks passed every check" battery_passed "$out/b" 6
    check "ranks 1-5 took the job's secret from rank 0's MUNGE credential" \
      [ "$(grep -c "the job's secret comes from rank 0 in a MUNGE credential" "$out/b")" = 6 ]
    # Without MUNGE's help and without a secret: refused at once, saying what
    # to do under srun.
    PLEXUS_SLURM_MUNGE=0 slurm_in_host0 60 srun -N 3 --ntasks-per-node 2 "${mpi_opts[@]}" \
      "$battery" >"$out/n" 2>&1
    rc=$?
    check "PLEXUS_SLURM_MUNGE=0, no PLEXUS_TOKEN_FILE: refused (exit $rc)" [ $rc != 0 ]
    grep -q "PLEXUS_TOKEN_FILE=~/.plexus-token srun" "$out/n" || sed "s/^/  | /" "$out/n" | tail -n 20
    check "... saying to set PLEXUS_TOKEN_FILE before srun" \
      grep -q "PLEXUS_TOKEN_FILE=~/.plexus-token srun" "$out/n"
    ;;

  counts)
    slurm_in_host0 60 srun -N 3 -n 5 -l "$info" --launch >"$out/c" 2>&1
    rc=$?
    check "srun -N 3 -n 5 plexus-info --launch: exit $rc" [ $rc = 0 ]
    sort -n "$out/c" | sed 's/^/  | /'
    port=$(grep -oE "master ${SLURM_NODES[0]}:[0-9]+" "$out/c" | sort -u)
    check "one master for all 5: ${port:-none}" [ "$(grep -c "${port:-x}," "$out/c")" = 5 ]
    # Slurm places the 5 tasks (cons_tres fills nodes in order: 3,1,1 here);
    # each rank's counts must agree with where the tasks really ran.
    for ((r = 0; r < 5; ++r)); do
      host=$(grep -E "^ *$r: " "$out/c" | grep -oE 'host [^,]+' | cut -d' ' -f2)
      on_host=$(grep -E ", host $host, " "$out/c" | sort -n | cut -d: -f1 | tr -d ' ')
      ls=$(wc -w <<<"$on_host")
      lr=$(tr ' ' '\n' <<<"$on_host" | grep -n "^$r$" | cut -d: -f1)
      nd=-1
      for ((k = 0; k < 3; ++k)); do [ "${SLURM_NODES[$k]}" = "$host" ] && nd=$k; done
      check "rank $r on $host: local rank $((lr - 1)) of $ls, node $nd of 3" \
        grep -qE "^ *$r: launch: rank $r of 5, local rank $((lr - 1)) of $ls, node $nd of 3, master [^ ]+, host $host, from Slurm$" "$out/c"
    done
    ;;

  sbatch)
    "$run" --make-token "$token" >/dev/null
    PLEXUS_TOKEN_FILE=$token PLEXUS_TRAINER=$trainer slurm_in_host0 600 sbatch -W -N 3 \
      --ntasks-per-node 2 -o "$out/trainer-%j.out" "$source_dir/samples/slurm/trainer.sbatch" \
      >"$out/s" 2>&1
    rc=$?
    cat "$out/s"
    job=$(grep -oE 'Submitted batch job [0-9]+' "$out/s" | grep -oE '[0-9]+$')
    state=$(slurm_in_host0 20 scontrol show job "${job:-0}" 2>/dev/null | grep -oE 'JobState=[A-Z_]+')
    check "sbatch -W samples/slurm/trainer.sbatch: exit $rc, ${state:-no state}" \
      [ $rc = 0 ] && [ "$state" = JobState=COMPLETED ]
    tail -n 6 "$out"/trainer-*.out | sed 's/^/  | /'
    check "the job ran on $backend" grep -qE "6 ranks, $backend\$" "$out"/trainer-*.out
    accuracy=$(grep -oE "test accuracy [0-9.]+ %" "$out"/trainer-*.out | tail -n 1 | grep -oE "[0-9.]+")
    check "the trainer reached a test accuracy of at least 95 %: ${accuracy:-none}" \
      awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 95) }'
    ;;

  torch)
    PYTHONPATH=$build/plexus_torch/python OMP_NUM_THREADS=1 slurm_in_host0 300 srun -n 2 \
      "$source_dir/.venv/bin/python3" "$source_dir/samples/slurm/torch_hello.py" >"$out/t" 2>&1
    rc=$?
    sed 's/^/  | /' "$out/t" | grep -v "hostname of the client socket" | tail -n 4
    check "srun -n 2 python3 torch_hello.py: exit $rc" [ $rc = 0 ]
    check "both ranks got the sum 3 over 2 ranks" [ "$(grep -c "all_reduce: 3.0 (expected 3.0)" "$out/t")" = 2 ]
    # Across nodes, still nothing set: the secret in rank 0's MUNGE credential,
    # through PyTorch's own store.
    PYTHONPATH=$build/plexus_torch/python OMP_NUM_THREADS=1 slurm_in_host0 300 srun -N 2 \
      --ntasks-per-node 1 "$source_dir/.venv/bin/python3" "$source_dir/samples/slurm/torch_hello.py" \
      >"$out/t2" 2>&1
    rc=$?
    sed 's/^/  | /' "$out/t2" | grep -v "hostname of the client socket" | tail -n 4
    check "srun -N 2 --ntasks-per-node 1 python3 torch_hello.py: exit $rc" [ $rc = 0 ]
    check "both ranks got the sum 3 over 2 ranks" [ "$(grep -c "all_reduce: 3.0 (expected 3.0)" "$out/t2")" = 2 ]
    ;;

  kill | stop)
    sig=KILL
    [ "$mode" = stop ] && sig=STOP
    "$run" --make-token "$token" >/dev/null
    PLEXUS_TOKEN_FILE=$token PLEXUS_TIMEOUT=15 slurm_in_host0 120 srun -N 2 --ntasks-per-node 2 -l "$demo" --count 1024 \
      --iters 1000000000 >"$out/k" 2>&1 &
    srun_pid=$!
    # Rank 3's process: the demo whose environment has our cluster and task 3.
    victim=""
    for ((i = 0; i < 300; ++i)); do
      [ -n "$victim" ] && break
      sleep 0.1
      for p in $(pgrep -f "$demo"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CLUSTER_NAME=$NETNS_PREFIX" &&
          tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=3"; then
          victim=$p
        fi
      done
    done
    [ -n "$victim" ] || { echo "FAIL rank 3 never started"; cat "$out/k"; exit 1; }
    sleep 2 # well inside the loop
    kill -"$sig" "$victim"
    echo "rank 3 (pid $victim, node ${SLURM_NODES[1]}) sent SIG$sig"
    netns_wait 25 "$srun_pid"
    rc=${NETNS_RC[$srun_pid]}
    sed 's/^/  | /' "$out/k" | tail -n 12
    check "plain srun ended ${NETNS_AT[$srun_pid]} s after SIG$sig (limit 25 s), exit $rc" \
      [ "$rc" != hung ] && [ "$rc" != 0 ]
    check "the output names rank 3" grep -qE "rank 3|task 3" "$out/k"
    check "the output names its node ${SLURM_NODES[1]}" grep -q "${SLURM_NODES[1]}" "$out/k"
    # A frozen rank is found by the others' stall report, which names its node
    # as Slurm does (a killed one by srun: "n1: task 3: Killed").
    if [ "$mode" = stop ]; then
      check "Plexus's stall report names rank 3 and its node" \
        grep -q "rank 3 (node ${SLURM_NODES[1]}) has not reached" "$out/k"
    fi
    # The frozen one, if Slurm has not taken it yet (and it is still ours).
    if [ "$mode" = stop ] && tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null |
      grep -qx "SLURM_CLUSTER_NAME=$NETNS_PREFIX"; then
      kill -KILL "$victim" 2>/dev/null
    fi
    ;;

  concurrent)
    slurm_in_host0 200 srun -n 2 "$battery" --large-bytes 1048576 >"$out/j1" 2>&1 &
    j1=$!
    slurm_in_host0 200 srun -n 2 "$battery" --large-bytes 1048576 >"$out/j2" 2>&1 &
    j2=$!
    netns_wait 200 "$j1" "$j2"
    check "two jobs at once on one node: exits ${NETNS_RC[$j1]}, ${NETNS_RC[$j2]}" \
      [ "${NETNS_RC[$j1]}" = 0 ] && [ "${NETNS_RC[$j2]}" = 0 ]
    check "job 1's ranks passed" battery_passed "$out/j1" 2
    check "job 2's ranks passed" battery_passed "$out/j2" 2
    cat >"$SLURM_DIR/two-steps.sh" <<EOF
#!/bin/sh
srun -n 2 --exact "$battery" --large-bytes 1048576 >"$out/s1" 2>&1 &
srun -n 2 --exact "$battery" --large-bytes 1048576 >"$out/s2" 2>&1 &
wait
grep -h "checks passed" "$out/s1" "$out/s2"
EOF
    slurm_in_host0 200 sbatch -W -n 4 -o "$out/steps" "$SLURM_DIR/two-steps.sh" >/dev/null 2>&1
    rc=$?
    check "two steps at once in one allocation: sbatch exit $rc" [ $rc = 0 ]
    check "step 0's ranks passed" battery_passed "$out/s1" 2
    check "step 1's ranks passed" battery_passed "$out/s2" 2
    ;;

  nosrun)
    cat >"$SLURM_DIR/forgot-srun.sh" <<EOF
#!/bin/sh
"$demo" --count 1024 --iters 2
EOF
    start=$(date +%s)
    PLEXUS_TIMEOUT=60 slurm_in_host0 120 sbatch -W -n 2 -o "$out/f" "$SLURM_DIR/forgot-srun.sh" \
      >/dev/null 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    sed 's/^/  | /' "$out/f"
    check "a batch script without srun fails (exit $rc) in ${took} s, not PLEXUS_TIMEOUT=60" \
      [ $rc != 0 ] && [ "$took" -lt 30 ]
    check "... saying to start the program with srun" grep -q "Start the program with srun" "$out/f"
    ;;

  munge)
    msc=$build/tests/slurm/munge_secret_check
    command -v su >/dev/null && id nobody >/dev/null 2>&1 || netns_skip "no su or no user nobody"
    chmod 755 "$SLURM_DIR/munge" # nobody may reach the socket (its parents are not on its path)
    # A job across both nodes, nothing set. Its store listens on node 0 at the
    # step's port: 20000 + (job * 64 + step) % 20000 (slurm_env.hpp, StepPort).
    slurm_in_host0 120 srun -N 2 --ntasks-per-node 1 "$demo" --count 1024 --iters 100000 \
      >"$out/job" 2>&1 &
    job=$!
    cred=""
    deadline=$(($(date +%s) + 30))
    while [ "$(date +%s)" -lt $deadline ]; do
      id=$(slurm_in_host0 10 squeue -h -o %i 2>/dev/null | head -n 1)
      if [ -n "$id" ]; then
        port=$((20000 + (id * 64) % 20000))
        cred=$(slurm_on_host 1 timeout 5 "$msc" fetch "${SLURM_NODES[0]}" "$port" 2>&1) && break
      fi
      sleep 0.2
    done
    binding="srun step ${id:-?}.0, store ${SLURM_NODES[0]}:${port:-?}"
    check "anyone on node 1 may fetch the job's credential: ${cred:0:32}..." \
      grep -q '^MUNGE:' <<<"$cred"
    said=$(slurm_on_host 1 su nobody -s /bin/sh -c unmunge <<<"$cred" 2>&1)
    echo "  unmunge as nobody: $said"
    check "... but MUNGE does not open it for another user (nobody)" \
      grep -q "Unauthorized credential" <<<"$said"
    said=$(slurm_on_host 1 "$msc" decode "$binding" <<<"$cred" 2>&1)
    check "the job's user opens it, made for its step and store: $said" grep -q "^secret: 64 bytes" <<<"$said"
    theirs=$(slurm_on_host 1 su nobody -s /bin/sh -c "munge -s not-the-secret" 2>&1)
    said=$(slurm_on_host 0 "$msc" decode "$binding" <<<"$theirs" 2>&1)
    echo "  a credential of nobody's: $said"
    check "a credential another user made is refused, naming its uid" \
      grep -q "made by uid $(id -u nobody), not by this user" <<<"$said"
    chosen=$(slurm_on_host 1 munge -s "chosen payload" 2>&1)
    said=$(slurm_on_host 0 "$msc" decode "$binding" <<<"$chosen" 2>&1)
    echo "  one of this user's with a payload of its choosing: $said"
    check "this user's credential that is not a Plexus secret is refused" \
      grep -q "not a Plexus job secret" <<<"$said"
    other=$(slurm_on_host 0 "$msc" encode "srun step 999.0, store ${SLURM_NODES[0]}:${port:-?}" 0123456789abcdef)
    said=$(slurm_on_host 1 "$msc" decode "$binding" <<<"$other" 2>&1)
    echo "  this user's, for another job: $said"
    check "this user's credential made for another job is refused" \
      grep -q "made for 'srun step 999.0" <<<"$said"
    mine=$(slurm_on_host 0 "$msc" encode "$binding" 0123456789abcdef)
    said=$(slurm_on_host 1 "$msc" decode "$binding" <<<"$mine" 2>&1)
    again=$(slurm_on_host 1 "$msc" decode "$binding" <<<"$mine" 2>&1)
    check "the right one opens twice on one node: $said / $again" \
      [ "$said" = "secret: 16 bytes" ] && [ "$again" = "secret: 16 bytes" ]
    netns_wait 120 "$job"
    sed 's/^/  | /' "$out/job" | tail -n 3
    check "the job finished, right, with strangers at its door: exit ${NETNS_RC[$job]}" \
      [ "${NETNS_RC[$job]}" = 0 ] && [ "$(grep -c '^tcp *ok' "$out/job")" = 1 ]
    ;;

  port-taken)
    # The first job of a fresh cluster is job 1: its step 0 gets port 20064.
    slurm_on_host 0 python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 20064)); s.listen(8); time.sleep(100)' &
    sleep 1
    start=$(date +%s)
    PLEXUS_TIMEOUT=60 slurm_in_host0 100 srun -N 2 --ntasks-per-node 1 "$demo" --count 1024 \
      --iters 2 >"$out/p" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    sed 's/^/  | /' "$out/p" | tail -n 4
    check "the step ended in ${took} s (limit 15, PLEXUS_TIMEOUT=60), exit $rc" \
      [ $rc != 0 ] && [ "$took" -lt 15 ]
    check "... rank 0 naming the port and MASTER_PORT" \
      grep -q "rendezvous store at ${SLURM_NODES[0]}:20064 (the port Plexus derives from the Slurm job and step ids; set MASTER_PORT" "$out/p"
    ;;

  plexus-run)
    slurm_in_host0 400 srun -N 3 --ntasks-per-node 1 "$run" -n 2 \
      "$battery" --large-bytes 1048576 >"$out/p" 2>&1
    rc=$?
    grep "plexus-run:" "$out/p" | sed 's/^/  | /'
    check "srun -N 3 --ntasks-per-node 1 plexus-run -n 2: exit $rc" [ $rc = 0 ]
    sed -i 's/^\[[0-9]*\] //' "$out/p"
    check "all 6 ranks passed every check" battery_passed "$out/p" 6
    for ((k = 0; k < 3; ++k)); do
      check "node $k's plexus-run took its place from Slurm" \
        grep -qE "plexus-run: Slurm step [0-9]+\.0: node $k of 3, master ${SLURM_NODES[0]}:[0-9]+" "$out/p"
    done
    slurm_in_host0 60 srun -N 1 -n 2 "$run" -n 2 "$battery" >"$out/r" 2>&1
    rc=$?
    check "srun -n 2 plexus-run -n 2 on one node: refused (exit $rc)" [ $rc != 0 ]
    check "... saying what to run instead" grep -q "srun --ntasks-per-node=1 plexus-run" "$out/r"
    ;;
esac

[ $fail = 0 ] || slurm_show_logs
exit $fail
