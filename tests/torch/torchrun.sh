#!/usr/bin/env bash
# The backend launched as torch users launch: torchrun (python -m
# torch.distributed.run --nproc_per_node 2) sets RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT but starts no MPI job. init_process_group
# ("blueconnect") must fail at once, saying to launch with mpirun, instead of
# hanging or running as two jobs of one rank each (docs/TORCH.md). And one
# process with WORLD_SIZE=1, without mpirun, still works.
# Usage: torchrun.sh PYTHON PKGDIR
set -uo pipefail
python=$1 pkgdir=$2
. "$(dirname "$0")/torch_common.sh" "$python" "$pkgdir" torch "apt-get install python3-torch"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/train.py" <<'EOF'
import torch
import torch.distributed as dist
import blueconnect.torch  # noqa: F401 - registers the backend
dist.init_process_group("blueconnect")
t = torch.ones(1)
dist.all_reduce(t)
print("all_reduce gave %g on rank %d of %d" % (t.item(), dist.get_rank(), dist.get_world_size()), flush=True)
EOF
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# no launcher variables, even when this script itself runs under mpirun
clean=(env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u RANK -u WORLD_SIZE -u LOCAL_RANK
       -u MASTER_ADDR -u MASTER_PORT)
fail=0

# --redirects 1 --tee 1 (stdout to a log file and the console, as without
# them): torch 1.13's default "0" crashes torchrun itself under Python 3.11,
# whose Flag enums no longer list a zero member (Std.from_str("0") gives
# None: AttributeError: 'NoneType' object has no attribute 'get').
start=$(date +%s)
"${clean[@]}" timeout 60 "$python" -m torch.distributed.run --nproc_per_node 2 --master_port "$(free_port)" \
  --redirects 1 --tee 1 "$dir/train.py" >"$dir/torchrun.txt" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$dir/torchrun.txt"
echo "# torchrun --nproc_per_node 2: exit status $rc after $took s"
if [ "$rc" = 0 ]; then echo "FAIL: torchrun exited 0"; fail=1; fi
if [ "$rc" = 124 ] || [ "$took" -ge 40 ]; then echo "FAIL: torchrun took $took s (hung?), expected a fast failure"; fail=1; fi
if ! grep -q "not started by mpirun.*launch with \`mpirun" "$dir/torchrun.txt"; then
  echo "FAIL: torchrun's output does not say to launch with mpirun"; fail=1
fi
if grep -q "all_reduce gave" "$dir/torchrun.txt"; then
  echo "FAIL: a rank ran on (as a job of its own?)"; fail=1
fi

# WORLD_SIZE=1 without mpirun: MPI starts as a singleton, which is the world.
"${clean[@]}" RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  timeout 60 "$python" "$dir/train.py" >"$dir/single.txt" 2>&1
rc=$?
cat "$dir/single.txt"
echo "# WORLD_SIZE=1 without mpirun: exit status $rc"
if [ "$rc" != 0 ] || ! grep -q "all_reduce gave 1 on rank 0 of 1" "$dir/single.txt"; then
  echo "FAIL: one process with WORLD_SIZE=1 without mpirun did not work"; fail=1
fi
[ "$fail" = 0 ] && echo "torchrun fails fast: ok"
exit "$fail"
