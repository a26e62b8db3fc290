#!/usr/bin/env bash
# The torch backend across simulated hosts (2 x 2 ranks, 250 Mbit/s): the DDP
# part of tests/torch/test_backend.py (blueconnect against Gloo, the same bits
# on every rank, non-blocking against blocking) with TEST_ACROSS_NODES=1, which
# also checks the group's communicator as the backend makes it across nodes:
# every peer over UCX, waits that sleep on UCX's event fd (torch/process_group.cc,
# kAcrossNodesOptions). Skips (exit 77, with the reason) without torch, the
# extension or namespaces. Its own namespace prefix and state.
# Usage: torch_on_simcluster.sh SIMCLUSTER PYTHON PKGDIR
set -u
sc=$1 python=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../torch/torch_common.sh" "$python" "$3" torch "apt-get install python3-torch"
. "$here/sim_common.sh"
sim_names torch torch
sim_up torch --nodes 2 --slots 2 --bw 250mbit --delay 50us
sim_run -np 4 -x PYTHONPATH -x OMP_NUM_THREADS -x TEST_ACROSS_NODES=1 -x GLOO_SOCKET_IFNAME=eth0 \
  "$python" "$here/../torch/test_backend.py" ddp
rc=$?
sim_down
exit $rc
