#!/usr/bin/env bash
# Smoke test of tools/torch_bench.py (not a timing test): both modes at np 2
# with tiny settings must exit 0, i.e. pass their own checks (all-reduce
# results bit for bit, DDP parameters identical on every rank and equal
# between blueconnect and Gloo), and print the expected rows.
# Usage: bench_smoke.sh PYTHON PKGDIR TOOL [mpirun args...]
set -uo pipefail
python=$1 pkgdir=$2 tool=$3
shift 3
. "$(dirname "$0")/torch_common.sh" "$python" "$pkgdir" "torch, torchvision" "apt-get install python3-torchvision"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
check() { # WHAT FILE PATTERN COUNT: at least COUNT lines of FILE match PATTERN
  local n
  n=$(grep -cE "$3" "$2")
  if [ "$n" -lt "$4" ]; then echo "FAIL: $1: $n lines match '$3', expected $4"; fail=1; fi
}

run_mode() { # MODE OUTPUT [tool args...]: one run of the tool at np 2, its output shown and kept
  local mode=$1 output=$2 rc
  shift 2
  mpirun -x PYTHONPATH -x OMP_NUM_THREADS "${mpirun_args[@]}" -np 2 "$python" "$tool" --mode "$mode" "$@" \
    >"$output" 2>&1
  rc=$?
  cat "$output"
  [ "$rc" = 0 ] || { echo "FAIL: --mode $mode exited $rc"; fail=1; }
}
mpirun_args=("$@")

run_mode allreduce "$out/ar.txt" --sizes 4K:64K --iters 3 --json "$out/ar.jsonl"
# size count, then iters time busbw #wrong (= 0) for each backend, then the ratio: 5 sizes.
check "allreduce rows" "$out/ar.txt" '^ +[0-9]+ +[0-9]+ +3 +[0-9.]+ +[0-9.]+ +0 +3 +[0-9.]+ +[0-9.]+ +0 +[0-9.]+$' 5
check "allreduce header" "$out/ar.txt" '^ +size +count +bc_iters +bc_time_us +bc_busbw +bc_#wrong +gloo_iters +gloo_time_us' 1
check "allreduce JSON lines" "$out/ar.jsonl" '"gloo_over_bc"' 5

run_mode ddp "$out/ddp.txt" --image 16 --batch 2 --steps 2 --warmup 1 --json "$out/ddp.jsonl"
check "ddp compute row" "$out/ddp.txt" '^compute only +[0-9.]+ +[0-9.]+ ' 1
# step med, mean, comm sum, span, comm only, exposed (negative where the
# step beat compute alone), samples/s, then the agreement with Gloo.
check "ddp backend rows" "$out/ddp.txt" '^(blueconnect|gloo) +(-?[0-9.]+ +){7}yes$' 2
check "ddp bucket lines" "$out/ddp.txt" '^#   (blueconnect|gloo) +bucket [0-9]+: +[0-9]+ B  hook' 2
check "ddp agreement" "$out/ddp.txt" '^# parameters after step 1, blueconnect against gloo: .*, agree ' 1
check "ddp JSON lines" "$out/ddp.jsonl" '"backend"' 3
[ "$fail" = 0 ] && echo "torch_bench smoke: ok"
exit "$fail"
