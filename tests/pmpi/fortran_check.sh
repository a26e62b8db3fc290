#!/usr/bin/env bash
# Fortran callers reach the interposer: runs pmpi_check_f (use mpi) on 3 ranks
# without and with libblueconnect_mpi.so, and checks that the output is the
# same and that the statistics count the Fortran calls as served. Fortran's
# MPI_FINALIZE calls PMPI_Finalize directly, so the statistics also show that
# the MPI_COMM_SELF hook finalised the interposer.
# Environment: MPIRUN, MPIRUN_ARGS, PRELOAD, EXE (pmpi_check_f), WORKDIR.
set -u
NP=3
. "$(dirname "$0")/../check_common.sh" pmpi_fortran

"$MPIRUN" "${ARGS[@]}" -np "$NP" "$EXE" > "$W/plain.out" 2>&1 || { echo "FAIL: without the interposer:"; cat "$W/plain.out"; exit 1; }
# BC_PMPI_ROUTE=bc: the counts below are the routing rules' (learning: pmpi_learn).
"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x BC_PMPI_ROUTE=bc -x "BC_PMPI_STATS=$W/stats.%r" -np "$NP" "$EXE" > "$W/pre.out" 2>&1 ||
  { echo "FAIL: with the interposer:"; cat "$W/pre.out"; exit 1; }
if [ "$(cat "$W/plain.out")" != "pmpi_check_f: all checks passed" ] || ! cmp -s "$W/plain.out" "$W/pre.out"; then
  echo "FAIL: outputs differ or report failures:"
  diff "$W/plain.out" "$W/pre.out"
  cat "$W/pre.out"
  status=1
fi
expected="MPI_Allreduce served 2
MPI_Allreduce passed 1
MPI_Allreduce passed:op 1
MPI_Reduce_scatter_block served 2
MPI_Reduce_scatter_block passed 0
MPI_Allgather served 2
MPI_Allgather passed 0
MPI_Iallreduce served 1
MPI_Iallreduce passed 0"
for ((r = 0; r < NP; ++r)); do
  if [ ! -s "$W/stats.$r" ]; then
    echo "FAIL: no statistics file $W/stats.$r (was the interposer finalised?)"
    status=1
  elif ! diff <(grep -v '^#' "$W/stats.$r") <(printf '%s\n' "$expected"); then
    echo "FAIL: $W/stats.$r differs from the expected counts (< got, > expected)"
    status=1
  fi
done
[ $status -eq 0 ] && echo "fortran_check: Fortran calls served, output unchanged"
exit $status
