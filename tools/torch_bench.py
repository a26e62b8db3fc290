#!/usr/bin/env python3
"""torch.distributed "blueconnect" against Gloo in the same run (issue 15, docs/TORCH.md).

    PYTHONPATH=build/torch mpirun -x PYTHONPATH -np 4 /usr/bin/python3 tools/torch_bench.py --mode allreduce
    PYTHONPATH=build/torch mpirun -x PYTHONPATH -np 4 /usr/bin/python3 tools/torch_bench.py --mode ddp

(as root add --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1). The default
group is blueconnect; a Gloo group over all ranks sits beside it on the same store.

allreduce: dist.all_reduce (float32 sum, in place) per size, each backend alone in its own back-to-back
  loop (warm-up calls, then the timed calls with nothing in between); time = loop time / calls on the
  slowest rank. algbw = S/t, busbw = algbw * 2(p-1)/p. Data are small integers, so the sum is exact in any
  order, and every buffer is checked bit for bit after the loop (#wrong: wrong elements over all ranks).
ddp: trains torchvision's resnet18/50 (untrained, 10 classes) with DDP on synthetic images, once per
  backend from the same seed, after a compute-only run (no DDP) of the same model. Per backend: the step,
  the same buckets all-reduced with no compute (comm only), the exposed communication (step - compute only)
  and each bucket's rate, as a share of its link bound with --bound. blueconnect finishes learning its
  bucket sizes' plans after the warm-up steps, untimed (finish_learning).
Exit status: 0 all right; 1 a wrong all-reduce result, or parameters that differ across ranks, or between
the backends after the first step beyond rtol 1e-4, atol 1e-5 (1e-3, 1e-4 with --hook fp16; at the end
too with --check-final); 2 bad arguments.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import blueconnect.torch  # noqa: F401 - registers the backend and fills in MASTER_ADDR etc. from MPI
from torch_bench_common import BACKENDS, SHORT, finish_learning, max_over_ranks, orders
from torch_bench_ddp import run_ddp

def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    n = int(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else int(t)
    if n < 4 or n % 4:
        raise argparse.ArgumentTypeError("size %r is not a positive multiple of 4 bytes" % text)
    return n


def size_range(text):
    lo, _, hi = text.partition(":")
    lo, hi = parse_size(lo), parse_size(hi or lo)
    if hi < lo:
        raise argparse.ArgumentTypeError("MIN > MAX in %r" % text)
    sizes = [lo]
    while sizes[-1] * 2 <= hi:
        sizes.append(sizes[-1] * 2)
    return sizes


def bound_spec(text):
    parts = text.split(",")
    try:
        vals = [int(float(x)) for x in parts]
    except ValueError:
        raise argparse.ArgumentTypeError("--bound %r: expected NODES,BITS[,RACKS,TRUNK_BITS]" % text) from None
    if len(vals) not in (2, 4) or vals[0] < 1 or vals[1] <= 0:
        raise argparse.ArgumentTypeError("--bound %r: expected NODES,BITS[,RACKS,TRUNK_BITS]" % text)
    return tuple(vals) if len(vals) == 4 else (vals[0], vals[1], 1, 0)


def fmt_size(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d%s" % (b // m, unit)
    return str(b)


# --- all-reduce -------------------------------------------------------------------------

def reuse_limit(p):
    """How often one buffer may be all-reduced in place and stay exact: x_r in 0..6 sums to at most 6p,
    and each further call multiplies by p, so 6p * p^(m-1) must stay below 2^24 (float32's mantissa)."""
    if p == 1:
        return 1 << 30
    m = 1
    while 6 * p ** (m + 1) < (1 << 24):
        m += 1
    return m


def allreduce_one(group, bufs, warmup, iters):
    """warm-up, then `iters` back-to-back in-place all-reduces over the pool `bufs` in turn (one buffer would
    overflow: torch's all_reduce has no out-of-place form). Returns seconds per call on this rank. blueconnect
    finishes learning the size's plan first, untimed, on a scratch buffer (finish_learning)."""
    finish_learning(group, [bufs[0].numel() * bufs[0].element_size()])
    for k in range(warmup):
        dist.all_reduce(bufs[k % len(bufs)], group=group)
    dist.barrier(group=group)  # start the timed loop together
    t0 = time.perf_counter()
    for k in range(warmup, warmup + iters):
        dist.all_reduce(bufs[k % len(bufs)], group=group)
    return (time.perf_counter() - t0) / iters


def run_allreduce(args, p, rank, groups, gloo):
    sizes = args.sizes
    busf = 2.0 * (p - 1) / p if p > 1 else 1.0
    m = reuse_limit(p)
    wrong_any = False
    hdr = ["size", "count"]
    for b in BACKENDS:
        hdr += ["%s_iters" % SHORT[b], "%s_time_us" % SHORT[b], "%s_busbw" % SHORT[b], "%s_#wrong" % SHORT[b]]
    hdr.append("gloo/bc")
    if rank == 0:
        print("# all_reduce float32 sum, in place, p = %d; each backend alone in its own back-to-back loop of calls"
              % p)
        print("# time = loop time / calls on the slowest rank; algbw = S/t; busbw = algbw * 2(p-1)/p, in GB/s "
              "(1e9 B/s); gloo/bc = gloo time / blueconnect time (> 1: blueconnect faster)")
        print("# order: %s; warm-up %d calls; data exact in any order, checked bit for bit after each loop"
              % ({"alternate": "alternating per size, blueconnect first at the first size",
                  "bc": "blueconnect first", "gloo": "gloo first"}[args.order], args.warmup))
        print("%10s %10s " % tuple(hdr[:2]) + " ".join("%10s %12s %10s %9s" % tuple(hdr[i:i + 4])
                                                       for i in (2, 6)) + " %8s" % hdr[-1], flush=True)
    jf = open(args.json, "w") if args.json and rank == 0 else None
    for size, order in zip(sizes, orders(args.order, len(sizes))):
        count = size // 4
        idx = torch.arange(count, dtype=torch.int64)
        x = ((rank + idx) % 7).to(torch.float32)
        total = sum(((r + idx) % 7) for r in range(p)).to(torch.float32)  # exact: small integers
        res = {}
        for b in order:
            iters = args.iters
            if not iters:  # each backend: calls for about args.target seconds, the same on every rank
                probe = allreduce_one(groups[b], [x.clone()], 1, 3)  # a scratch buffer, not checked
                iters = max(3, min(args.max_iters, int(args.target / max_over_ranks(probe, gloo))))
            calls = args.warmup + iters
            nbufs = (calls + m - 1) // m
            bufs = [x.clone() for _ in range(nbufs)]
            t = max_over_ranks(allreduce_one(groups[b], bufs, args.warmup, iters), gloo)
            wrong = 0
            for i, buf in enumerate(bufs):  # buffer i was reduced uses(i) times: total * p^(uses-1)
                uses = len(range(i, calls, nbufs))
                wrong += int((buf != total * float(p) ** (uses - 1)).sum())
            wrong = int(max_over_ranks(wrong, gloo, dist.ReduceOp.SUM))
            wrong_any |= wrong > 0
            res[b] = {"avg_us": t * 1e6, "algbw_GBps": size / t / 1e9, "busbw_GBps": size / t / 1e9 * busf,
                      "wrong": wrong, "iters": iters}
        ratio = res["gloo"]["avg_us"] / res["blueconnect"]["avg_us"]
        if rank == 0:
            cols = "".join(" %10d %12.2f %10.4f %9d" % (res[b]["iters"], res[b]["avg_us"], res[b]["busbw_GBps"],
                                                         res[b]["wrong"]) for b in BACKENDS)
            print("%10d %10d%s %8.2f" % (size, count, cols, ratio), flush=True)
        if jf:
            jf.write(json.dumps({"coll": "allreduce", "dtype": "float32", "op": "sum", "inplace": True,
                                 "nranks": p, "size": size, "count": count, "bytes": size, "warmup": args.warmup,
                                 "iters": res["blueconnect"]["iters"], "mode": "back-to-back", "order": list(order),
                                 "bc": res["blueconnect"], "gloo": res["gloo"], "gloo_over_bc": ratio}) + "\n")
            jf.flush()
    if jf:
        jf.close()
    if wrong_any and rank == 0:
        print("torch_bench: WRONG all-reduce results (see #wrong)", file=sys.stderr, flush=True)
    return 1 if wrong_any else 0


def steady_malloc():
    """glibc raises its mmap threshold only after the first large free, so the first model trained in a
    process paid page faults on every step (measured here: the first backend's steps 2-4x slower than the
    second's, whichever it was). Fixing the thresholds up front gives every run the same allocator."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: glibc's upper limit on 64-bit
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD: keep freed memory instead of returning it
    except (OSError, AttributeError):
        pass  # not glibc: leave the allocator as it is


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("allreduce", "ddp"), required=True)
    ap.add_argument("--order", choices=("alternate", "bc", "gloo"), default="alternate",
                    help="which backend runs first: alternate per size (allreduce; ddp: blueconnect first), or "
                         "always bc, or always gloo (default alternate)")
    ap.add_argument("--json", metavar="FILE", help="rank 0 writes one JSON line per size (allreduce) or per "
                                                   "backend (ddp) to FILE")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per rank (default: OMP_NUM_THREADS if "
                                                           "set, else cores / ranks on the node, at least 1)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up calls per size and backend (default 2) or "
                                                             "untimed training steps (default 3)")
    g = ap.add_argument_group("allreduce")
    g.add_argument("--sizes", type=size_range, default=size_range("4K:64M"), metavar="MIN:MAX",
                   help="sizes in bytes, doubling, K M G suffixes (default 4K:64M)")
    g.add_argument("--iters", type=int, default=0, help="timed calls per size and backend (default auto, per "
                                                        "backend: about --target seconds per loop from 3 probe "
                                                        "calls, at least 3)")
    g.add_argument("--target", type=float, default=0.3, help="seconds per timed loop for auto iters (default 0.3)")
    g.add_argument("--max-iters", type=int, default=2000, help="cap for auto iters (default 2000)")
    g = ap.add_argument_group("ddp")
    g.add_argument("--model", choices=("resnet18", "resnet50"), default="resnet18")
    g.add_argument("--image", type=int, default=32, help="image side in pixels (default 32)")
    g.add_argument("--batch", type=int, default=8, help="images per rank and step (default 8)")
    g.add_argument("--steps", type=int, default=20, help="timed steps per backend (default 20)")
    g.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    g.add_argument("--bucket-mb", type=float, default=25, help="DDP bucket_cap_mb (default 25, DDP's)")
    g.add_argument("--seed", type=int, default=0)
    # No bf16: Gloo has no bfloat16 all-reduce in torch 1.13 ("Invalid scalar type"), so there is
    # nothing to compare with; tests/torch/test_backend.py checks bf16_compress_hook's results.
    g.add_argument("--hook", choices=("allreduce", "fp16"), default="allreduce",
                   help="DDP comm hook for both backends: DDP's default allreduce_hook, or fp16_compress_hook "
                        "(half the bytes on the wire; bucket bytes are reported as sent)")
    g.add_argument("--comm-reps", type=int, default=3, help="repeats of the communication-only run (default 3)")
    g.add_argument("--bound", type=bound_spec, default=None, metavar="NODES,BITS[,RACKS,TRUNK_BITS]",
                   help="the network, for link bounds: nodes and each node link's bit/s, and racks with their "
                        "trunks' bit/s (scripts/bench-torch passes its layout's)")
    g.add_argument("--check-final", action="store_true", help="fail also when the final parameters of the two "
                                                              "backends differ beyond the tolerance (by "
                                                              "default only those after step 1 must agree)")
    args = ap.parse_args()
    if args.warmup is None:
        args.warmup = 2 if args.mode == "allreduce" else 3
    if min(args.warmup, args.iters, args.steps - 1, args.batch - 1, args.image - 1) < 0:
        ap.error("negative --warmup/--iters, or zero --steps/--batch/--image")

    steady_malloc()
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or (os.cpu_count() or 1) // local
    torch.set_num_threads(max(1, threads))  # torch's default, every core per rank, oversubscribes the cores
    dist.init_process_group("blueconnect")
    p, rank = dist.get_world_size(), dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    groups = {"blueconnect": dist.group.WORLD, "gloo": gloo}
    rc = (run_allreduce if args.mode == "allreduce" else run_ddp)(args, p, rank, groups, gloo)
    dist.barrier(group=gloo)
    return rc


if __name__ == "__main__":
    sys.exit(main())
