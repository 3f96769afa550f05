#!/usr/bin/env bash
# Another user on the same host against a job that was given no secret, its
# ranks started by hand as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT; no PLEXUS_TOKEN, no
# PLEXUS_BACKEND). The stranger is uid 65534 (setpriv), speaking the store
# protocol with tests/security/store_client.py or running a rank of its own:
#
#   stranger_test.sh MODE FAULT_RANK STORE_CLIENT EVIL_PLUGIN PLEXUS_RUN
#
#   f1        the stranger writes the path of EVIL_PLUGIN (a library whose
#             constructor leaves a mark) as rank 0's choice of backend, under
#             the key of today and of before: it is refused (the job made
#             itself a secret the stranger cannot read), the library never
#             runs, the job's allreduce is right, and no secret file is left.
#   f1-netns  the same with the ranks on one network-namespace host, its own
#             address as the master, and the stranger on another.
#   f1-path   a process that does have the job's secret (plexus-run's) claims
#             rank 0 and writes that path as its choice: ranks 1 and 2 refuse
#             it, naming it, and load nothing (a backend chosen through the
#             store is a name, never a path).
#   f2        while rank 2 is late, the stranger starts a rank 2 of its own: it
#             is refused, and the real rank 2 then joins and the job is right.
#   f3-claim  the stranger claims rank 1 and bumps the old duplicate counter:
#             refused; the job goes on and is right.
#   f3-marks  rank 1 freezes (SIGSTOP) mid-allreduce while the stranger writes
#             stall marks saying rank 1 reached every collective: refused, and
#             the other ranks' errors name rank 1 as the one that did not, and
#             none says the ranks posted different collectives.
#
# Needs /usr/bin/python3, and but for f1-path root (to become uid 65534) and
# setpriv; skipped (exit 77) with the reason where they are missing. Exit 0
# pass, 1 fail.
set -u
mode=${1:?mode}
fault_rank=${2:?fault_rank}
client=${3:?store_client.py}
evil=${4:?evil plugin}
run=${5:?plexus-run}
python=/usr/bin/python3

skip() {
  echo "SKIP: $*"
  exit 77
}
[ -x "$python" ] || skip "$python is not installed"
stranger() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
if [ "$mode" != f1-path ]; then  # f1-path's attacker is no other user
  [ "$(id -u)" = 0 ] || skip "needs root, to run the stranger as another user (uid 65534)"
  command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
  stranger "$python" -c 'pass' 2>/dev/null || skip "uid 65534 cannot run $python"
  stranger test -r "$client" || skip "uid 65534 cannot read $client"
fi

tmp=$(mktemp -d /tmp/plexus-stranger-XXXXXX)
chmod 755 "$tmp"
stranger_dir_existed=0
[ -e /tmp/plexus-65534 ] && stranger_dir_existed=1
cleanup() {
  kill -9 $(jobs -p) 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
  [ $stranger_dir_existed = 1 ] || rm -rf /tmp/plexus-65534
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
check() {  # check WHAT COMMAND...: passes when the command succeeds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else fail "$what"; fi
}

port=$("$python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
secret_file=/tmp/plexus-$(id -u)/job-127.0.0.1-$port.secret
marker=$tmp/evil-ran
mkdir -p "$tmp/out"

# rank R [FAULT_RANK MODE]: one rank of 3 in the background, as torchrun starts it.
rank() {
  local r=$1 what=${2:-allreduce}
  env -u PLEXUS_TOKEN -u PLEXUS_TOKEN_FILE -u PLEXUS_BACKEND -u PLEXUS_RANK -u PLEXUS_WORLD_SIZE \
    -u PLEXUS_MASTER_ADDR -u PLEXUS_MASTER_PORT -u PLEXUS_INSECURE -u TORCHELASTIC_RUN_ID \
    ${backend:+PLEXUS_BACKEND=$backend} RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    PLEXUS_TIMEOUT=${timeout_s:-20} PLEXUS_TEST_EVIL_MARKER="$marker" \
    timeout -k 5 60 "$fault_rank" "$tmp/out" "$what" >"$tmp/rank$r.log" 2>&1 &
  eval "pid$r=$!"
}
ok_ranks() {  # ok_ranks R...: each rank finished its allreduce and checked it
  local r
  for r in "$@"; do [ -e "$tmp/out/rank$r.ok" ] || return 1; done
}
show() {
  local f
  for f in "$tmp"/*.log "$tmp"/out/*; do
    [ -f "$f" ] && { echo "--- $f"; sed 's/^/    /' "$f"; }
  done
}
no_mark() {
  if [ -e "$marker" ]; then
    echo "    $(cat "$marker")"
    return 1
  fi
}
all_refused() {  # all_refused LOG: every answer the stranger got was a refusal
  grep -q "^refused" "$1" && ! grep -q "^ok" "$1"
}

case "$mode" in
  f1)
    # The stranger keeps writing both the key of today and the one of before.
    # Each refusal closes the connection: a loop of connections, until the job ends.
    touch "$tmp/running"
    for key in plexus/rank/0/plexus/0/auto-backend plexus/0/auto-backend; do
      (while [ -e "$tmp/running" ]; do
        stranger "$python" "$client" --tries 25 127.0.0.1 "$port" repeat 50 10 set "$key" "$evil"
      done) >>"$tmp/stranger.log" 2>&1 &
    done
    sleep 0.2
    rank 0; rank 1; rank 2
    wait $pid0 $pid1 $pid2
    rm -f "$tmp/running"
    wait
    check "the ranks loaded nothing the stranger named" no_mark
    check "the job's allreduce on 3 ranks is right" ok_ranks 0 1 2
    check "every write of the stranger was refused" all_refused "$tmp/stranger.log"
    check "no job secret is left in /tmp/plexus-$(id -u)" test ! -e "$secret_file"
    check "/tmp/plexus-$(id -u) is root's, mode 700" \
      test "$(stat -c '%U %a' /tmp/plexus-$(id -u))" = "root 700"
    ;;
  f1-path)
    # Rank 0 under plexus-run is a store client with the job's secret that
    # claims rank 0 and says a path is its backend; ranks 1 and 2 are real.
    cat >"$tmp/rank.sh" <<EOF
#!/bin/sh
if [ "\$RANK" = 0 ]; then
  exec "$python" "$client" --token-env --as rank/0 127.0.0.1 "\$PLEXUS_MASTER_PORT" \
    set plexus/rank/0/join/card "\$(printf 'size=3\nbackend=-\nhost=h\npid=1\n')" ';' \
    set plexus/rank/0/plexus/0/auto-backend "$evil" ';' \
    add plexus/join/claims/0 1 ';' set plexus/join/card/0 "\$(printf 'size=3\nbackend=-\nhost=h\npid=1\n')" ';' \
    set plexus/0/auto-backend "$evil" ';' sleep 8
fi
exec "$fault_rank" "$tmp/out" allreduce
EOF
    chmod +x "$tmp/rank.sh"
    env -u PLEXUS_BACKEND PLEXUS_TIMEOUT=8 PLEXUS_TEST_EVIL_MARKER="$marker" \
      timeout -k 5 60 "$run" -n 3 "$tmp/rank.sh" >"$tmp/job.log" 2>&1
    check "ranks 1 and 2 loaded nothing rank 0 named" no_mark
    for r in 1 2; do
      check "rank $r refused the path, naming it" \
        grep -qF "is not one of the backends Plexus picks by itself" "$tmp/out/rank$r.err"
      check "rank $r's error names the path" grep -qF "'$evil'" "$tmp/out/rank$r.err"
    done
    ;;
  f2)
    rank 0; rank 1
    sleep 1
    mkdir -m 777 "$tmp/theirs"
    stranger env -i PATH=/usr/bin:/bin RANK=2 WORLD_SIZE=3 LOCAL_RANK=2 LOCAL_WORLD_SIZE=3 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PLEXUS_TIMEOUT=10 LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
      timeout -k 5 30 "$fault_rank" "$tmp/theirs" allreduce >"$tmp/stranger.log" 2>&1
    echo "the stranger's rank 2 exited with $?"
    check "the stranger's rank 2 did not finish an allreduce" test ! -e "$tmp/theirs/rank2.ok"
    check "the stranger's rank 2 was refused by the store" \
      grep -q "refused\|authentication" "$tmp/theirs/rank2.err"
    rank 2
    wait $pid0 $pid1 $pid2
    check "with the real rank 2, the job's allreduce on 3 ranks is right" ok_ranks 0 1 2
    ;;
  f3-claim)
    rank 0; rank 2
    sleep 1
    stranger "$python" "$client" --as rank/1 127.0.0.1 "$port" set plexus/rank/1/join/card x \
      >>"$tmp/stranger.log" 2>&1
    stranger "$python" "$client" 127.0.0.1 "$port" add plexus/join/claims/1 1 \
      >>"$tmp/stranger.log" 2>&1
    rank 1
    wait $pid0 $pid1 $pid2
    check "every claim of the stranger was refused" all_refused "$tmp/stranger.log"
    check "the job's allreduce on 3 ranks is right" ok_ranks 0 1 2
    ;;
  f3-marks)
    timeout_s=4
    backend=tcp
    rank 0 freeze; rank 1 freeze; rank 2 freeze
    # Marks saying rank 1 reached collectives 0..9 (today's keys and before's).
    args=()
    for seq in 0 1 2 3 4 5 6 7 8 9; do
      args+=(set "plexus/rank/1/plexus/0/stalled/$seq" x ';' set "plexus/0/stalled/$seq/1" x ';')
    done
    args+=(set plexus/rank/1/stalled "plexus/0 3 allreduce" ';' set plexus/stalled/1 "plexus/0 3 allreduce")
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      stranger "$python" "$client" --tries 5 127.0.0.1 "$port" "${args[@]}" >>"$tmp/stranger.log" 2>&1
      sleep 0.3
    done
    wait $pid0 $pid2
    kill -9 $pid1 2>/dev/null
    check "every mark of the stranger was refused" all_refused "$tmp/stranger.log"
    # Each survivor names rank 1: the stall report's words, or the backend's
    # own ("waiting for rank(s) 1") where rank 0, which hosts the store, had
    # exited before the report could read the marks.
    for r in 0 2; do
      check "rank $r's error names rank 1 as the one that did not reach the allreduce" \
        grep -q "rank 1 has not reached allreduce\|waiting for rank(s) 1 in allreduce" \
        "$tmp/out/rank$r.err"
      check "rank $r's error is not misled by the forged marks" \
        bash -c "! grep -q 'posted different collectives\|every rank reached' '$tmp/out/rank$r.err'"
    done
    ;;
  f1-netns)
    # The ranks on namespace host 0 with its network address as the master
    # (one host, not loopback: the job still makes its own secret); the
    # stranger on namespace host 1, as a process on another machine would be.
    # The ranks allreduce in a loop for 2 s: one allreduce ended the job in
    # under 0.1 s, sometimes before the stranger (python under ip netns exec
    # and setpriv) had reached the store at all (CI on 8ecb4f4: "cannot
    # connect", so nothing to refuse).
    . "$(dirname "$0")/../net/netns_lib.sh"
    netns_setup 2 || exit 1
    trap 'netns_cleanup; cleanup' EXIT  # netns_setup set its own
    master=${NETNS_ADDRS[0]}
    touch "$tmp/running"
    (while [ -e "$tmp/running" ]; do
      ip netns exec "${NETNS_HOSTS[1]}" setpriv --reuid=65534 --regid=65534 --clear-groups -- \
        "$python" "$client" --tries 25 "$master" "$port" repeat 50 10 \
        set plexus/rank/0/plexus/0/auto-backend "$evil"
    done) >>"$tmp/stranger.log" 2>&1 &
    for r in 0 1 2; do
      ip netns exec "${NETNS_HOSTS[0]}" env -u PLEXUS_TOKEN -u PLEXUS_TOKEN_FILE -u PLEXUS_BACKEND \
        -u PLEXUS_RANK -u PLEXUS_WORLD_SIZE -u PLEXUS_INSECURE -u TORCHELASTIC_RUN_ID \
        RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR="$master" \
        MASTER_PORT=$port PLEXUS_TIMEOUT=20 PLEXUS_TEST_EVIL_MARKER="$marker" \
        FAULT_RANK_SECONDS=2 timeout -k 5 60 "$fault_rank" "$tmp/out" loop >"$tmp/rank$r.log" 2>&1 &
      eval "pid$r=$!"
    done
    wait $pid0 $pid1 $pid2
    rm -f "$tmp/running"
    wait
    check "the ranks loaded nothing the stranger on host 1 named" no_mark
    check "the job's allreduce on 3 ranks is right" ok_ranks 0 1 2
    check "every write of the stranger on host 1 was refused" all_refused "$tmp/stranger.log"
    check "... for want of the job's secret" grep -q "requires authentication" "$tmp/stranger.log"
    check "no job secret is left" test ! -e "/tmp/plexus-$(id -u)/job-$master-$port.secret"
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac

if [ $failures -ne 0 ]; then show; fi
echo "stranger $mode: $failures failure(s)"
[ $failures -eq 0 ]
