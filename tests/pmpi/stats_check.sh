#!/usr/bin/env bash
# Shows that the interposer really intercepts, and that it is silent.
#
# Runs `pmpi_check --stats` (a fixed list of calls, see run_stats in
# pmpi_check.c) on 4 ranks:
#   1. without the interposer: the program's own output, the reference;
#   2. with it and BC_PMPI_STATS: the same output, and every rank's stats file
#      lists exactly the served and passed-through calls (with the reasons);
#   3. with BC_DISABLE=1: the same output, nothing served;
#   4. with BC_DEBUG=PMPI and BC_DEBUG_FILE: the same output, the log in files;
#   5. with an invalid BC_* value: the program still passes on MPI alone, and
#      rank 0 alone says why (two lines on stderr);
#   6. with BC_PMPI_STATS=1: the counts on stderr, no file named "1";
#   7. with a path without %r: one file per rank, PATH.RANK, none named PATH.
#
# Environment (set by tests/pmpi/meson.build): MPIRUN, MPIRUN_ARGS (space
# separated), PRELOAD (libblueconnect_mpi.so), EXE (pmpi_check), WORKDIR.
# Exit 0 on pass, 1 on failure.
set -u
NP=4
. "$(dirname "$0")/../check_common.sh" pmpi_stats

run() {  # run NAME [mpirun -x options...]: output (stdout + stderr) in $W/NAME.out
  local name=$1
  shift
  # BC_PMPI_ROUTE=bc: the counts below are the routing rules'; learning is pmpi_learn's.
  "$MPIRUN" "${ARGS[@]}" -x BC_PMPI_ROUTE=bc "$@" -np "$NP" "$EXE" --stats > "$W/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: run '$name' exited with $rc:"
    cat "$W/$name.out"
    status=1
  fi
}

same_output() {  # same_output NAME: NAME.out equals the run without the interposer
  if ! cmp -s "$W/plain.out" "$W/$1.out"; then
    echo "FAIL: run '$1' printed something else than the program alone:"
    diff "$W/plain.out" "$W/$1.out"
    status=1
  fi
}

check_stats() {  # check_stats PREFIX EXPECTED: every rank's file, comments aside, is EXPECTED
  local prefix=$1 expected=$2 r
  for ((r = 0; r < NP; ++r)); do
    local f="$W/$prefix.$r"
    if [ ! -s "$f" ]; then
      echo "FAIL: no statistics file $f"
      status=1
      continue
    fi
    if ! diff <(grep -v '^#' "$f") <(printf '%s\n' "$expected") > "$W/$prefix.$r.diff"; then
      echo "FAIL: $f differs from the expected counts (< got, > expected):"
      cat "$W/$prefix.$r.diff"
      status=1
    fi
  done
}

# 1. The program alone.
run plain
if [ "$(cat "$W/plain.out")" != "pmpi_check: all checks passed" ]; then
  echo "FAIL: the program alone printed:"
  cat "$W/plain.out"
  status=1
fi

# 2. Interposed, with statistics. BC_PMPI_MIN_BYTES=64 sends the 8-byte
#    all-reduce and the 16-byte all-gather to MPI.
run stats -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/stats.%r" -x BC_PMPI_MIN_BYTES=64
same_output stats
check_stats stats "MPI_Allreduce served 3
MPI_Allreduce passed 6
MPI_Allreduce passed:user-op 1
MPI_Allreduce passed:op 2
MPI_Allreduce passed:dtype 1
MPI_Allreduce passed:intercomm 1
MPI_Allreduce passed:small 1
MPI_Reduce_scatter_block served 2
MPI_Reduce_scatter_block passed 1
MPI_Reduce_scatter_block passed:user-op 1
MPI_Allgather served 2
MPI_Allgather passed 2
MPI_Allgather passed:derived-dtype 1
MPI_Allgather passed:small 1
MPI_Iallreduce served 4
MPI_Iallreduce passed 1
MPI_Iallreduce passed:user-op 1"

# 3. BC_DISABLE=1: every call goes to MPI.
run disabled -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/disabled.%r" -x BC_DISABLE=1
same_output disabled
check_stats disabled "MPI_Allreduce served 0
MPI_Allreduce passed 9
MPI_Allreduce passed:disabled 9
MPI_Reduce_scatter_block served 0
MPI_Reduce_scatter_block passed 3
MPI_Reduce_scatter_block passed:disabled 3
MPI_Allgather served 0
MPI_Allgather passed 4
MPI_Allgather passed:disabled 4
MPI_Iallreduce served 0
MPI_Iallreduce passed 5
MPI_Iallreduce passed:disabled 5"

# 4. BC_DEBUG: logs go to the files, nothing to the terminal.
run debug -x "LD_PRELOAD=$PRELOAD" -x BC_DEBUG=PMPI -x "BC_DEBUG_FILE=$W/log.%r"
same_output debug
for ((r = 0; r < NP; ++r)); do
  if ! grep -q "PMPI interposer ready" "$W/log.$r" 2> /dev/null; then
    echo "FAIL: BC_DEBUG_FILE $W/log.$r has no PMPI log lines"
    status=1
  fi
done

# 5. An invalid parameter: the run still passes, on MPI alone; rank 0 says so.
run badparam -x "LD_PRELOAD=$PRELOAD" -x BC_PMPI_MIN_BYTES=lots -x "BC_PMPI_STATS=$W/badparam.%r"
if [ "$(grep -c '^BlueConnect: ' "$W/badparam.out")" != 2 ] ||
   [ "$(grep -v '^BlueConnect: ' "$W/badparam.out")" != "pmpi_check: all checks passed" ]; then
  echo "FAIL: with BC_PMPI_MIN_BYTES=lots the run printed:"
  cat "$W/badparam.out"
  status=1
fi
if ls "$W"/badparam.[0-9]* > /dev/null 2>&1; then
  echo "FAIL: statistics were written although the parameters were invalid"
  status=1
fi

# 6. BC_PMPI_STATS=1 means stderr, not a file named "1" in the working directory.
mkdir -p "$W/one"
run one -x "LD_PRELOAD=$PRELOAD" -x BC_PMPI_STATS=1 -wdir "$W/one"
if [ -e "$W/one/1" ] || [ "$(grep -c '^# BlueConnect PMPI statistics: world rank' "$W/one.out")" != "$NP" ] ||
   [ "$(grep -c '^MPI_Allreduce served ' "$W/one.out")" != "$NP" ]; then
  echo "FAIL: with BC_PMPI_STATS=1 the run printed (and left: $(find "$W/one" -mindepth 1 -printf '%f ')):"
  cat "$W/one.out"
  status=1
fi

# 7. A path without %r or %p: PATH.RANK, one per rank, rather than one file
#    that every rank truncates and rewrites.
run shared -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/shared"
if [ -e "$W/shared" ]; then
  echo "FAIL: BC_PMPI_STATS=$W/shared wrote one file for all ranks"
  status=1
fi
for ((r = 0; r < NP; ++r)); do
  if ! grep -q "^# BlueConnect PMPI statistics: world rank $r of $NP," "$W/shared.$r" 2> /dev/null ||
     ! grep -q '^MPI_Allreduce served ' "$W/shared.$r"; then
    echo "FAIL: BC_PMPI_STATS without %r: no statistics of rank $r in $W/shared.$r"
    status=1
  fi
done

[ $status -eq 0 ] && echo "stats_check: interception counted, output unchanged, BC_DISABLE and BC_DEBUG honoured"
exit $status
