#!/bin/bash
# Runs the device-buffer MPI test after the probe: without a GPU it exits 77
# with the probe's reason as its last line, which meson counts as a skip.
# Usage: run_mpi.sh PROBE MPIRUN [mpirun args...] -np N TEST [test args...]
set -u
probe=$1
shift
"$probe" || exit $?
exec "$@"
