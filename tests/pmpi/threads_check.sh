#!/usr/bin/env bash
# Threads calling MPI_Allreduce and MPI_Iallreduce at once, each on
# communicators of its own, through the interposer (pmpi_threads.c): the
# first call on each communicator creates a BlueConnect communicator, so
# creations overlap with each other and with other threads' all-reduces, and
# the last phase duplicates and frees communicators in the threads.
# BC_PMPI_ROUTE=bc and BC_PMPI_MIN_BYTES=0, so that BlueConnect serves every
# call, at np 3 and 5 with the automatic transport and with ucx (whose
# communicators share one UCX worker, told apart by an id agreed at
# creation: transports/ucx/ucx_comm_id.cc). Checks the results (the program
# does) and that every rank's BC_PMPI_STATS counts all of its calls served.
# Environment (tests/pmpi/meson.build): MPIRUN, MPIRUN_ARGS, PRELOAD, EXE
# (pmpi_threads), WORKDIR. Exit 0 on pass, 1 on failure, 77 on skip.
set -u
# Per rank: 3 threads x (3 rounds + 4 communicators) x 7 counts, and the
# program's one verdict all-reduce on MPI_COMM_WORLD.
CALLS=$((3 * (3 + 4) * 7 + 1))
. "$(dirname "$0")/../check_common.sh" pmpi_threads

for transport in auto ucx; do
  for np in 3 5; do
    run=$transport-np$np
    "$MPIRUN" "${ARGS[@]}" -x "LD_PRELOAD=$PRELOAD" -x BC_PMPI_ROUTE=bc -x BC_PMPI_MIN_BYTES=0 \
      -x "BC_TRANSPORT=$transport" -x BC_TIMEOUT=60s -x "BC_PMPI_STATS=$W/$run.%r" -np "$np" "$EXE" \
      > "$W/$run.out" 2>&1
    rc=$?
    if [ $rc -eq 77 ]; then
      cat "$W/$run.out"
      echo "SKIP: this MPI has no MPI_THREAD_MULTIPLE"
      exit 77
    fi
    [ $rc -eq 0 ] || { fail "$run: exited with $rc"; cat "$W/$run.out"; continue; }
    grep -q "all results right" "$W/$run.out" || { fail "$run: no verdict line"; cat "$W/$run.out"; }
    for ((r = 0; r < np; ++r)); do
      served=$(awk '$2 == "served" { n += $3 } END { print n + 0 }' "$W/$run.$r" 2>/dev/null)
      [ "$served" -eq "$CALLS" ] || fail "$run: rank $r: BlueConnect served $served of $CALLS calls"
    done
    echo "$run: $(grep 'pmpi_threads:' "$W/$run.out"), $CALLS calls served on each rank"
  done
done
exit $status
