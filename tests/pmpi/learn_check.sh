#!/usr/bin/env bash
# BC_PMPI_ROUTE=learn (the default): the preload learns, per communicator and
# size bucket, whether BlueConnect or the MPI library serves MPI_Allreduce.
# Runs `pmpi_check --latency 300` (340 8-byte MPI_Allreduce in all) on 4 ranks:
#   1. learn: the result is right; every rank's BC_PMPI_STATS has the bucket
#      of 8-15 bytes with 340 calls, at least 73 probes through each library,
#      and a decision; every rank took the same decision with the same times.
#      340 calls cover the longest learning, a first look and its second
#      look (SizeRoute::learning_calls: 324 up to 4 KiB, probes timed as runs
#      of 8 calls); with fewer a first look that went to MPI or was close
#      (medians within 2x, as on a loaded machine) may still be learning;
#   2. BC_PMPI_ROUTE=bc: every call served by BlueConnect, no route lines;
#   3. `pmpi_check --reuse 400`: three communicators made and freed in turn
#      (a freed handle is often the next one's), 8-byte calls with other
#      datatypes and in-place calls among them, results exact: each learns
#      its route anew (its own probes through BlueConnect), and the counts
#      add up, also for the calls a final route to MPI passes by the thread's
#      memo without the route's checks (lib/pmpi/pmpi.cc, PassMemo);
#   4. `pmpi_check --latency 4000` (4410 calls): the bucket's first late look
#      (SizeRoute::kLateLookCalls, at its 4096th call) runs on every rank at
#      the same call, memo or not: at least 146 probes through each library
#      (two looks), every call counted once, the same decision everywhere.
# The exact sweep (pmpi_np1..8) runs under learn too, so calls that switch
# library mid-run are checked bit for bit there.
# Environment (tests/pmpi/meson.build): MPIRUN, MPIRUN_ARGS, PRELOAD, EXE
# (pmpi_check), WORKDIR. Exit 0 on pass, 1 on failure.
set -u
NP=4
ITERS=300
CALLS=$((ITERS + ITERS / 10 + 10))  # pmpi_check's warm-up calls, then ITERS timed
. "$(dirname "$0")/../check_common.sh" pmpi_learn

# A count from one rank's BC_PMPI_STATS file (0 when absent); a route line's
# "blueconnect N, mpi M" as "N M".
stat_count() { awk -v name="$2" '$1 == "MPI_Allreduce" && $2 == name { n = $3 } END { print n + 0 }' "$1"; }
bucket_counts() { sed -E 's/^bytes [0-9]+-[0-9]+: blueconnect ([0-9]+), mpi ([0-9]+);.*/\1 \2/' <<< "$1"; }

# Every rank's 8-15 byte bucket in $W/PREFIX.RANK: CALLS calls, at least
# MIN_PROBES probes through each library, a decision that matches PATTERN (an
# extended regex), served and passed:learned counts that match the route
# line, and the same decision on every rank, which it prints after LABEL.
check_bucket() { # PREFIX CALLS MIN_PROBES PATTERN LABEL
  local prefix=$1 calls=$2 min=$3 pattern=$4 label=$5 r f line bc mpi served learned d decisions=()
  for ((r = 0; r < NP; ++r)); do
    f="$W/$prefix.$r"
    grep -q "^MPI_Allreduce route, communicator of $NP ranks:" "$f" 2>/dev/null || { fail "rank $r: no route section in $f"; continue; }
    line=$(grep '^bytes 8-15: ' "$f")
    [ -n "$line" ] || { fail "rank $r: no line for the 8-15 byte bucket"; cat "$f"; continue; }
    read -r bc mpi <<< "$(bucket_counts "$line")"
    [ $((bc + mpi)) -eq "$calls" ] || fail "rank $r: $((bc + mpi)) calls in the bucket, want $calls: $line"
    [ "$bc" -ge "$min" ] && [ "$mpi" -ge "$min" ] || fail "rank $r: fewer than $min probes of a library: $line"
    grep -q "learning" <<< "$line" && fail "rank $r: the bucket is still learning after $calls calls: $line"
    grep -Eq "$pattern" <<< "$line" || fail "rank $r: the decision does not match '$pattern': $line"
    decisions+=("${line#*; }")
    served=$(stat_count "$f" served) learned=$(stat_count "$f" passed:learned)
    [ "$served" -eq "$bc" ] && [ "$learned" -eq "$mpi" ] ||
      fail "rank $r: served $served / passed:learned $learned do not match the route line: $line"
  done
  [ ${#decisions[@]} -eq "$NP" ] || return
  for d in "${decisions[@]}"; do
    [ "$d" = "${decisions[0]}" ] || fail "$label: ranks decided differently: '${decisions[0]}' and '$d'"
  done
  echo "$label: ${decisions[0]}"
}

"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/learn.%r" -np "$NP" "$EXE" --latency "$ITERS" \
  > "$W/learn.out" 2>&1 || { fail "learn run exited with $?"; cat "$W/learn.out"; }
# 73: 1 + 9 runs of 8 probes of each library.
check_bucket learn "$CALLS" 73 "slowest rank's median" "learn: 8-byte bucket on $NP ranks"

"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x BC_PMPI_ROUTE=bc -x "BC_PMPI_STATS=$W/bc.%r" -np "$NP" "$EXE" \
  --latency "$ITERS" > "$W/bc.out" 2>&1 || { fail "BC_PMPI_ROUTE=bc run exited with $?"; cat "$W/bc.out"; }
for ((r = 0; r < NP; ++r)); do
  served=$(stat_count "$W/bc.$r" served)
  [ "$served" -eq "$CALLS" ] || fail "rank $r: BC_PMPI_ROUTE=bc served $served of $CALLS"
  grep -q "route" "$W/bc.$r" && fail "rank $r: route lines with BC_PMPI_ROUTE=bc"
done
REUSE=400
"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/reuse.%r" -np "$NP" "$EXE" --reuse "$REUSE" \
  > "$W/reuse.out" 2>&1 || { fail "--reuse run exited with $?"; cat "$W/reuse.out"; }
for ((r = 0; r < NP; ++r)); do
  f="$W/reuse.$r"
  mapfile -t lines < <(grep '^bytes 8-15: ' "$f" 2>/dev/null)
  [ ${#lines[@]} -eq 3 ] || { fail "rank $r: ${#lines[@]} routes for the 8-15 byte bucket, want 3 (one per communicator)"; continue; }
  sum_bc=0 sum_mpi=0
  for line in "${lines[@]}"; do
    read -r bc mpi <<< "$(bucket_counts "$line")"
    [ $((bc + mpi)) -eq "$REUSE" ] || fail "rank $r: $((bc + mpi)) calls, want $REUSE: $line"
    [ "$bc" -ge 73 ] || fail "rank $r: a communicator did not learn anew (fewer than 73 probes through BlueConnect): $line"
    sum_bc=$((sum_bc + bc)) sum_mpi=$((sum_mpi + mpi))
  done
  served=$(stat_count "$f" served) learned=$(stat_count "$f" passed:learned)
  [ "$served" -eq "$sum_bc" ] && [ "$learned" -eq "$sum_mpi" ] ||
    fail "rank $r: served $served / passed:learned $learned, the routes say $sum_bc / $sum_mpi"
done
[ $status = 0 ] && echo "reuse: 3 communicators, each learned anew: ${lines[*]#*; }"
LATE_ITERS=4000
LATE_CALLS=$((LATE_ITERS + LATE_ITERS / 10 + 10))
"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/late.%r" -np "$NP" "$EXE" \
  --latency "$LATE_ITERS" > "$W/late.out" 2>&1 || { fail "late-look run exited with $?"; cat "$W/late.out"; }
# 146: the first look's probes and the late look's; "1 late" from the route's own count.
check_bucket late "$LATE_CALLS" 146 "(lower of two|lowest of 3) looks, 1 late" \
  "late look: 8-byte bucket on $NP ranks after $LATE_CALLS calls"
exit $status
