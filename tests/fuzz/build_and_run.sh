#!/usr/bin/env bash
# Builds the libFuzzer targets in this directory with clang++ and runs each for
# a bounded time:
#
#   tests/fuzz/build_and_run.sh [SECONDS_PER_TARGET]     (default 20)
#
# Targets (each fuzzes code that reads bytes from the network):
#   store_protocol  core/src/store/store_protocol.cpp  ParseHeader/ParseRequest/ParseReply
#   tcp_frame       backends/tcp/frame.cpp             ValidateHeader
#   auth_message    auth/src/handshake.cpp             ParseMessage + Responder
#
# They are compiled straight from the sources with clang++ -fsanitize=fuzzer,
# address,undefined into a temporary directory (the main build uses g++,
# which has no libFuzzer), seeded from corpus/<target>/ (never written to;
# new inputs go to the temporary directory). A crash, leak or sanitizer report
# fails the script; the crashing input is kept in $FUZZ_ARTIFACT_DIR (default:
# a new directory under /tmp) and its path printed.
#
# Exit status: 0 all targets ran clean, 1 a target failed (or did not build),
# 77 clang++ or its libFuzzer runtime is missing (Debian: apt-get install clang
# libclang-rt-14-dev), which meson reports as a skipped test.
set -uo pipefail

seconds=${1:-20}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cxx=${FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found; skipping (install clang and libclang-rt-14-dev)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/plexus-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address "$work/probe.cpp" -o "$work/probe" >"$work/probe.log" 2>&1; then
  echo "fuzz: $cxx cannot link libFuzzer; skipping (install libclang-rt-14-dev):"
  cat "$work/probe.log"
  exit 77
fi
sodium_flags=$(pkg-config --cflags --libs libsodium 2>/dev/null || echo "-lsodium")

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/api/include")

build() {  # name, then sources and flags
  local name=$1
  shift
  echo "fuzz: building $name"
  if ! "$cxx" "${flags[@]}" "$@" -o "$work/fuzz_$name" >"$work/build_$name.log" 2>&1; then
    echo "fuzz: FAILED to build $name:"
    cat "$work/build_$name.log"
    return 1
  fi
}

status=0
build store_protocol "$here/fuzz_store_protocol.cpp" \
  "$root/core/src/store/store_protocol.cpp" "$root/core/src/status.cpp" \
  -I"$root/core/include" -I"$root/core/src/store" || status=1
build tcp_frame "$here/fuzz_tcp_frame.cpp" \
  "$root/backends/tcp/frame.cpp" "$root/algos/src/dtype.cpp" "$root/algos/src/describe.cpp" \
  "$root/api/src/types.cpp" -I"$root/algos/include" -I"$root/api/include" \
  -I"$root/backends/tcp" || status=1
# shellcheck disable=SC2086  # sodium_flags is a list of flags
build auth_message "$here/fuzz_auth_message.cpp" "$root/auth/src/handshake.cpp" \
  -I"$root/auth/include" $sodium_flags || status=1
[ "$status" -eq 0 ] || exit 1

artifacts=""
for name in store_protocol tcp_frame auth_message; do
  mkdir -p "$work/corpus_$name" "$work/artifacts_$name"
  echo "fuzz: running $name for ${seconds}s"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a blow-up is a failure.
  if "$work/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts_$name/" \
      "$work/corpus_$name" "$here/corpus/$name" >"$work/run_$name.log" 2>&1; then
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|INFO: .*corpus" \
      "$work/run_$name.log" | tail -n 4 | sed "s/^/fuzz: $name: /"
  else
    status=1
    echo "fuzz: $name FAILED:"
    tail -n 60 "$work/run_$name.log"
    if [ -z "$artifacts" ]; then
      artifacts=${FUZZ_ARTIFACT_DIR:-$(mktemp -d /tmp/plexus-fuzz-artifacts.XXXXXX)}
      mkdir -p "$artifacts"
    fi
    cp -r "$work/artifacts_$name" "$artifacts/" 2>/dev/null
    echo "fuzz: crashing inputs kept in $artifacts/artifacts_$name"
  fi
done
[ "$status" -eq 0 ] && echo "fuzz: all targets ran ${seconds}s clean"
exit "$status"
