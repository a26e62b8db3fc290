#!/usr/bin/env bash
# The back-to-back guard (a regression guard, not a benchmark): a loop of
# pipelined all-reduces on one node must not be more than 3x slower than the
# same loop unpipelined (BC_CHUNK=0).
#
# Why: every operation used to allocate its scratch anew, and glibc handed it
# back to the kernel after each call, so back-to-back calls page-faulted it in
# again: 4 MiB at np 2 took 9.5 ms pipelined (1 MiB chunks x 4, the one-node
# default then) against 0.8 ms unpipelined. Benchmarks that interleaved
# BlueConnect with MPI call by call hid it. The 3x bound is loose so that a
# busy 2-core CI machine does not trip it.
#
# Each configuration runs as its own job (heap state is per process), three
# times, alternating; the medians are compared, at np 2 and np 4.
# Environment (tests/guard/meson.build): MPIRUN, MPIRUN_ARGS, EXE.
# Exit 0 on pass, 1 on failure.
set -u
read -r -a ARGS <<< "$MPIRUN_ARGS"
BYTES=$((4 << 20))
CALLS=10
LIMIT=3
status=0

run() {  # np, BC_CHUNK, BC_PIPELINE_DEPTH -> microseconds per call on stdout
  local out
  out=$("$MPIRUN" "${ARGS[@]}" -x BC_CHUNK="$2" -x BC_PIPELINE_DEPTH="$3" -np "$1" "$EXE" "$BYTES" "$CALLS" 2>&1)
  local rc=$?
  local us
  us=$(awk '$1 == "us_per_call" { print $2 }' <<< "$out")
  if [ $rc -ne 0 ] || [ -z "$us" ]; then
    echo "FAIL: np $1 BC_CHUNK=$2 BC_PIPELINE_DEPTH=$3 exited with $rc:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "$us"
}

median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }

for np in 2 4; do
  pipe=() whole=()
  for rep in 1 2 3; do
    if [ $((rep % 2)) -eq 1 ]; then
      p=$(run "$np" 1M 4) || { status=1; continue 2; }
      w=$(run "$np" 0 1) || { status=1; continue 2; }
    else
      w=$(run "$np" 0 1) || { status=1; continue 2; }
      p=$(run "$np" 1M 4) || { status=1; continue 2; }
    fi
    pipe+=("$p") whole+=("$w")
  done
  mp=$(median "${pipe[@]}") mw=$(median "${whole[@]}")
  verdict=$(awk -v p="$mp" -v w="$mw" -v l="$LIMIT" 'BEGIN { printf "%.2f %s", p / w, (p <= l * w) ? "ok" : "FAIL" }')
  echo "np $np, 4 MiB int32 sum, $CALLS calls back to back: pipelined (1 MiB x 4) ${pipe[*]} us," \
       "unpipelined ${whole[*]} us; median ratio ${verdict% *} (limit $LIMIT): ${verdict#* }"
  [ "${verdict#* }" = ok ] || status=1
done
exit $status
