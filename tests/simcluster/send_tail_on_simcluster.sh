#!/usr/bin/env bash
# A rank whose all-reduce is complete must not leave the tail of its last
# message in UCX's send buffer while it waits in an MPI call: the peer would
# wait for it forever (transports/ucx/ucx_drain.h). 2 simulated hosts x 1
# rank with tiny socket buffers (UCX_TCP_SNDBUF/RCVBUF=4k), so that the socket
# takes only part of a message and UCX keeps the rest; `bc_bench --app 0`
# calls bc_allreduce and then PMPI_Barrier, 40 times per size, 64-256 KiB,
# checking every result. Without the drainer both ranks failed the first size
# with BC_ERR_TIMEOUT ("waits in step 1 of 2: recv from rank 1"), every run.
# Skips (exit 77, with the reason) where namespaces cannot be made.
# Usage: send_tail_on_simcluster.sh SIMCLUSTER BC_BENCH
set -u
sc=$1 bench=$2
. "$(dirname "$0")/sim_common.sh"
sim_names t tail
sim_up tail --nodes 2 --slots 1 --bw 1gbit --delay 100us
timeout -k 5 120 "$sc" run -x BC_TRANSPORT=ucx -x BC_MODEL=off -x BC_TIMEOUT=20s \
  -x UCX_TCP_SNDBUF=4k -x UCX_TCP_RCVBUF=4k -np 2 "$bench" -c --app 0 -m 64K:256K -i 40 > "$dir/out" 2>&1
rc=$?
cat "$dir/out"
sim_down
rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6' "$dir/out" | wc -l)
if [ "$rc" != 0 ] || [ "$rows" != 3 ]; then
  echo "FAIL: bc_bench exited with $rc and printed $rows of 3 rows (a timeout above: a message's tail stayed in UCX's send buffer)"
  exit 1
fi
echo "PASS: 3 sizes x 40 all-reduces, each followed by an MPI barrier, exact, no timeout"
