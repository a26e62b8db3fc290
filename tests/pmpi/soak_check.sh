#!/usr/bin/env bash
# The preload's soak (pmpi_soak.c) in one job: NP ranks under the interposer,
# the program's own checks (exact results, guard bytes, RSS, descriptors and
# shared-memory mappings flat), then two of ours: BlueConnect served most
# of the calls (BC_PMPI_STATS: the soak must exercise the library, not MPI)
# and no bc-shm-* segment is left in /dev/shm after the job. The route is
# BC_PMPI_ROUTE=bc (SOAK_ROUTE=learn for the default's mix): every call the
# library can take goes to it; the program's int16 calls go to MPI (not a
# type BlueConnect reduces), so both routes interleave.
# Usage: soak_check.sh NP [pmpi_soak arguments...]; the launcher is MPIRUN
# (scripts/soak passes scripts/simcluster, with MPIRUN_ARGS starting "run"),
# SOAK_NAME names the work directory. Environment (tests/pmpi/meson.build):
# MPIRUN, MPIRUN_ARGS, PRELOAD, EXE (pmpi_soak), WORKDIR. Exit 0 on pass, 1
# on failure.
set -u
. "$(dirname "$0")/../check_common.sh" "pmpi_soak${SOAK_NAME:+_$SOAK_NAME}"
np=$1
shift
before=$(ls /dev/shm | grep '^bc-shm-' | sort)
"$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x "BC_PMPI_STATS=$W/stats.%r" -x BC_TIMEOUT=120s \
  -x "BC_PMPI_ROUTE=${SOAK_ROUTE:-bc}" \
  -np "$np" "$EXE" "$@" > "$W/out" 2>&1
rc=$?
grep -E '^pmpi_soak|first wrong' "$W/out"
[ $rc -eq 0 ] || { fail "exited with $rc"; tail -n 30 "$W/out"; }
grep -q "pmpi_soak: PASS" "$W/out" || fail "no PASS line"
served=0 passed=0
for f in "$W"/stats.*; do
  [ -f "$f" ] || continue
  served=$((served + $(awk '($1 == "MPI_Allreduce" || $1 == "MPI_Iallreduce") && $2 == "served" { n += $3 } END { print n + 0 }' "$f")))
  passed=$((passed + $(awk '($1 == "MPI_Allreduce" || $1 == "MPI_Iallreduce") && $2 == "passed" { n += $3 } END { print n + 0 }' "$f")))
done
echo "pmpi_soak: calls on all ranks served by BlueConnect $served, passed to MPI $passed (BC_PMPI_STATS)"
[ "$served" -gt "$passed" ] || fail "BlueConnect served $served calls, MPI $passed: the soak did not exercise the library"
after=$(ls /dev/shm | grep '^bc-shm-' | sort)
left=$(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')
[ -z "${left// /}" ] || fail "left in /dev/shm: $left"
[ $status -eq 0 ] && echo "pmpi_soak: pass"
exit $status
