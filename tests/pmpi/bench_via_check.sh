#!/usr/bin/env bash
# bc_bench --via mpi: BlueConnect measured as an unmodified MPI program calls
# it (MPI_Allreduce under the PMPI preload) against PMPI_Allreduce, the path
# scripts/bench uses for the #6 targets.
#   1. with the preload (and the cost model on): exit 0, every result right,
#      the header names the preload, and the stats show BlueConnect served the
#      calls while the MPI side went past it;
#   2. without the preload: exit 2 and a message that says what is missing.
# Environment (tests/pmpi/meson.build): MPIRUN, MPIRUN_ARGS, PRELOAD, EXE
# (bc_bench), WORKDIR. Exit 0 on pass, 1 on failure.
set -u
. "$(dirname "$0")/../check_common.sh" bench_via

"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/stats.%r" -x BC_TOPO=2x2 \
  -x BC_MODEL=calibrate -x "BC_CACHE_DIR=$W/cache" -np 4 "$EXE" -c --via mpi --compare mpi --plan -m 4K:256K -i 3 -x 1 > "$W/via.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "bc_bench --via mpi exited with $rc"; cat "$W/via.out"; }
grep -q "^# via: BlueConnect through MPI_Allreduce etc. of .*libblueconnect_mpi.so" "$W/via.out" ||
  fail "the header does not name the preload"
grep -q "^# all results correct" "$W/via.out" || fail "bc_bench did not report all results correct"
rows=$(grep -cE '^ +[0-9]+ ' "$W/via.out")
[ "$rows" -eq 7 ] || fail "expected 7 size rows (4K..256K), got $rows"
# 7 sizes x (1 warm-up + 3 timed) calls served at least; the MPI side is not counted.
for r in 0 1 2 3; do
  served=$(awk '$1 == "MPI_Allreduce" && $2 == "served" { print $3 }' "$W/stats.$r" 2>/dev/null)
  [ "${served:-0}" -ge 28 ] || fail "rank $r: BlueConnect served ${served:-no} MPI_Allreduce calls (want >= 28)"
done

"$MPIRUN" "${ARGS[@]}" -np 2 "$EXE" --via mpi -m 4K > "$W/nopreload.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "without the preload bc_bench --via mpi exited with $rc, not 2"
grep -q "load the PMPI preload" "$W/nopreload.out" || { fail "no message about the missing preload"; cat "$W/nopreload.out"; }

[ $status -eq 0 ] && echo "bench --via mpi: preload served the calls, results right; refused without it"
exit $status
