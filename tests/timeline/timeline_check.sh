#!/usr/bin/env bash
# BC_TIMELINE_FILE end to end: jobs write one file per rank, and
# scripts/timeline-report --check finds every send paired with its receive,
# every chunk's steps present and the ranks agreeing on their calls.
#   1. bc_bench at np 4 as 2 virtual nodes of 2 (BC_TOPO=2x2), 64 KiB chunks,
#      checked results: both stages' reduce-scatter and all-gather steps must
#      be in the report, and every rank must have recorded its calls.
#   2. The sub-communicator tests (reversed and shuffled rank order) at np 5:
#      many communicators, whose keys must not collide and whose ranks map back
#      to world ranks; the pattern without %r gets '.RANK.json' appended.
#   3. A file that cannot be written is a warning, never a failed job.
#   4. BC_TIMELINE_FILE on 2 ranks of 4 only: no hang (the others never join
#      the clock measurement), a warning, and no communicator recorded.
# Environment (tests/timeline/meson.build): MPIRUN, MPIRUN_ARGS, MPIRUN_ENV, BENCH, MPI_TESTS, REPORT.
# Exit 0 on pass, 1 on failure.
set -u
read -r -a ARGS <<< "$MPIRUN_ARGS"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

# 1.
out=$("$MPIRUN" "${ARGS[@]}" -x BC_TIMELINE_FILE="$dir/bench.%r.json" -x BC_TOPO=2x2 -x BC_CHUNK=64K \
      -np 4 "$BENCH" -c -m 256K:1M -i 3 -x 1 2>&1) || fail "bc_bench exited with $?: $out"
for r in 0 1 2 3; do
  [ -s "$dir/bench.$r.json" ] || fail "no timeline from rank $r (bench.$r.json)"
done
report=$(python3 "$REPORT" --check --skip 0 "$dir"/bench.*.json 2>&1) || fail "timeline-report --check failed: $report"
for step in "stage 1 reduce-scatter" "stage 2 reduce-scatter" "stage 2 all-gather" "stage 1 all-gather"; do
  grep -q "$step" <<< "$report" || fail "the report has no '$step' steps: $report"
done
# 3 sizes x (1 warm-up + 3 timed calls; -c checks the last one) at least, on every rank.
for r in 0 1 2 3; do
  calls=$(grep -c '"cat":"call"' "$dir/bench.$r.json")
  [ "$calls" -ge 12 ] || fail "rank $r recorded $calls calls, expected at least 12"
done

# 2.
out=$("$MPIRUN" "${ARGS[@]}" -x BC_TIMELINE_FILE="$dir/sub" -np 5 "$MPI_TESTS" "[comm]" 2>&1) \
  || fail "the sub-communicator tests failed with the timeline on: $out"
n=$(ls "$dir"/sub.*.json 2>/dev/null | wc -l)
[ "$n" -eq 5 ] || fail "expected 5 files sub.RANK.json, found $n"
report=$(python3 "$REPORT" --check --skip 0 "$dir"/sub.*.json 2>&1) || fail "timeline-report --check failed on the sub-communicators: $report"

# 3.
out=$("$MPIRUN" "${ARGS[@]}" -x BC_TIMELINE_FILE="$dir/missing/x.%r.json" -np 2 "$BENCH" -m 1K:1K -i 3 2>&1) \
  || fail "an unwritable BC_TIMELINE_FILE failed the job: $out"
grep -q "BC_TIMELINE_FILE: cannot write" <<< "$out" || fail "no warning for an unwritable BC_TIMELINE_FILE: $out"

# 4. Two app contexts, the first with the variable. Open MPI 4.1 gives the -x
# options before the first context to that context only: MPIRUN_ENV (an ASan
# build's options) is repeated after the ':' (tests/meson.build, mpirun_env).
read -r -a ENVS <<< "${MPIRUN_ENV:-}"
out=$(timeout 120 "$MPIRUN" "${ARGS[@]}" -np 2 env BC_TIMELINE_FILE="$dir/half" "$BENCH" -m 1K:1K -i 3 \
      : -np 2 "${ENVS[@]}" "$BENCH" -m 1K:1K -i 3 2>&1) || fail "BC_TIMELINE_FILE on half the ranks failed the job: $out"
grep -q "set on some ranks of a communicator of 4 but not on others" <<< "$out" \
  || fail "no warning for BC_TIMELINE_FILE on half the ranks: $out"
if grep -q '"key"' "$dir"/half.*.json 2>/dev/null; then fail "a communicator was recorded with the timeline on half the ranks"; fi

[ $status -eq 0 ] && echo "timeline: bench, sub-communicators, an unwritable path and half the ranks all as expected"
exit $status
