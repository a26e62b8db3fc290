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
import statistics
import sys
import time

import torch
import torch.distributed as dist

import blueconnect.torch  # noqa: F401 - registers the backend and fills in MASTER_ADDR etc. from MPI

BACKENDS = ("blueconnect", "gloo")
SHORT = {"blueconnect": "bc", "gloo": "gloo"}


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


def max_over_ranks(value, group, op=dist.ReduceOp.MAX):
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=op, group=group)
    return t.item()


def orders(first, n):
    """Backend order per size (or per run): alternate, or one backend always first."""
    if first == "alternate":
        return [BACKENDS if i % 2 == 0 else BACKENDS[::-1] for i in range(n)]
    return [BACKENDS if first == "bc" else BACKENDS[::-1]] * n


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


# --- DDP --------------------------------------------------------------------------------

class CommTimer:
    """State of the timing comm hook: the wall time from each bucket's hook call to its all-reduce's
    completion. Buckets overlap each other and the backward pass, so their sum is not time lost."""

    def __init__(self, group, hook="allreduce"):
        self.group = group
        self.hook = hook
        self.spans = []  # (start, end, bytes) per bucket of the current step

    def reset(self):
        self.spans = []


def timed_allreduce_hook(state, bucket):
    """DDP's hook (--hook: allreduce_hook, or fp16_compress_hook, which sends half the bytes), timed from
    its call to its future's completion."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hook = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook}[state.hook]
    t0 = time.perf_counter()
    nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
    if state.hook != "allreduce":
        nbytes //= 2  # what goes on the wire: the bucket in 16-bit floats

    def done(fut):  # runs on the backend's thread when the bucket is reduced: record, wait for nothing
        state.spans.append((t0, time.perf_counter(), nbytes))
        return fut.value()
    return hook(state.group, bucket).then(done)


def make_model(args):
    import torchvision
    torch.manual_seed(args.seed)  # identical initial weights on every rank and for every backend
    return getattr(torchvision.models, args.model)(num_classes=10)


def batch(args, rank, step):
    g = torch.Generator().manual_seed(args.seed * 1000003 + rank * 10007 + step)  # same data for each backend
    return (torch.randn(args.batch, 3, args.image, args.image, generator=g),
            torch.randint(0, 10, (args.batch,), generator=g))


def train(args, rank, group=None, backend=None):
    """warm-up + timed steps; returns (step times, comm sum per step, comm span per step, flat parameters
    after the first step, at the end, the timed steps' bucket timelines: per step a list of (hook call,
    completion, bytes) in seconds from the step's start, in completion order). Without a backend: the
    model alone (compute only), no DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(args)
    timer = None
    if backend:
        model = DDP(model, process_group=group, bucket_cap_mb=args.bucket_mb)
        timer = CommTimer(group, args.hook)
        model.register_comm_hook(timer, timed_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, comm, span, first, timelines, learned = [], [], [], None, [], 0
    flat = lambda: torch.cat([q.detach().flatten() for q in model.parameters()])  # noqa: E731
    for step in range(args.warmup + args.steps):
        x, y = batch(args, rank, step)
        if timer:
            timer.reset()
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP's backward returns once every bucket is reduced
        opt.step()
        t1 = time.perf_counter()
        if step == 0:
            first = flat()  # outside the timing: a copy of 45 MB (resnet18)
        if step == args.warmup - 1 and timer and timer.spans:
            learned = finish_learning(group, [n for _, _, n in timer.spans])
        if step >= args.warmup:
            steps.append(t1 - t0)
            if timer and timer.spans:
                comm.append(sum(e - s for s, e, _ in timer.spans))
                span.append(max(e for _, e, _ in timer.spans) - min(s for s, _, _ in timer.spans))
                timelines.append([(s - t0, e - t0, n) for s, e, n in timer.spans])
    return steps, comm, span, (first, flat()), timelines, learned


def finish_learning(group, bucket_bytes):
    """blueconnect learns each all-reduce size's plan on its first calls (docs/PLANS.md, Learning): the
    cost model's best plans take turns, so a slower one runs now and then until the verdict. A long training
    run pays that in its first steps; a benchmark of a few steps would time it instead of the plan the run
    then keeps. So after the warm-up steps, each bucket size gets the all-reduces it still needs, untimed, on
    a scratch buffer (the training itself is the same for both backends). Returns how many ran."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not hasattr(pg, "learning_calls"):
        return 0  # gloo, or an older blueconnect
    ran = 0
    for n in sorted(set(bucket_bytes)):
        left = pg.learning_calls(n)  # the same on every rank: verdicts are agreed, turns counted in calls
        scratch = torch.zeros(max(1, n // 4), dtype=torch.float32)
        for _ in range(left):
            dist.all_reduce(scratch, group=group)
        ran += left
    return ran


def identical_on_all_ranks(flat, gloo):
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=gloo)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=gloo)
    return bool(torch.equal(hi, lo)) and bool(torch.isfinite(flat).all())


def bucket_timeline(timelines, gloo):
    """Per bucket in completion order: its bytes, and the slowest rank's mean over the timed steps of its
    hook call and its completion, in ms from the step's start. Where DDP's buckets sit in the step says
    whether the all-reduces wait for the backward pass, for each other, or for the wire."""
    # Collective: every rank makes the same calls, even one that timed no bucket.
    nb = int(max_over_ranks(statistics.mode(len(t) for t in timelines) if timelines else 0, gloo))
    same = [t for t in timelines if len(t) == nb]  # every timed step has the same buckets after warm-up
    out, prev = [], 0.0
    for i in range(nb):
        start = statistics.mean(t[i][0] for t in same) if same else 0.0
        end = statistics.mean(t[i][1] for t in same) if same else 0.0
        b = {"bytes": same[0][i][2] if same else 0, "hook_ms": 1e3 * max_over_ranks(start, gloo),
             "done_ms": 1e3 * max_over_ranks(end, gloo)}
        # Its own rate if the buckets run one at a time (blueconnect's do; Gloo's overlap: not a rate there).
        busy = b["done_ms"] - max(b["hook_ms"], prev)
        b["mb_per_s"] = b["bytes"] / busy / 1e3 if busy > 0 else None
        prev = b["done_ms"]
        out.append(b)
    return out


def link_bound_s(args, nbytes):
    """The all-reduce's link bound for nbytes (seconds), from --bound: every node sends and receives
    2(N-1)/N of the buffer over its link, and every rack 2(R-1)/R over its trunk; None without --bound."""
    if not args.bound:
        return None
    nodes, bw, racks, trunk = args.bound
    t = 2.0 * (nodes - 1) / nodes * nbytes * 8 / bw if nodes > 1 else 0.0
    if racks > 1 and trunk > 0:
        t = max(t, 2.0 * (racks - 1) / racks * nbytes * 8 / trunk)
    return t


def tolerance(args):
    """(rtol, atol) for the two backends' parameters: float32 sums, or float16 ones with --hook fp16."""
    return (1e-3, 1e-4) if args.hook == "fp16" else (1e-4, 1e-5)


def comm_only(args, bucket_bytes, group, gloo):
    """The buckets DDP reduced, in the order it launched them, reduced again with no compute: each
    bucket's all-reduce started async as DDP's hook does, all waited for; buffers of the same bytes in
    the type the hook sends (float32, or float16 with --hook fp16). Slowest rank's median over
    --comm-reps repeats, in seconds."""
    dtype = torch.float16 if args.hook == "fp16" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    bufs = [torch.ones(max(1, n // elem), dtype=dtype) for n in bucket_bytes]
    times = []
    for rep in range(args.comm_reps + 1):  # the first one untimed: buffers and plans
        dist.barrier(group=gloo)
        t0 = time.perf_counter()
        works = [dist.all_reduce(b, group=group, async_op=True) for b in bufs]
        for w in works:
            w.wait()
        if rep:
            times.append(time.perf_counter() - t0)
    return max_over_ranks(statistics.median(times), gloo) if times else 0.0


def run_ddp(args, p, rank, groups, gloo):
    gb = args.batch * p
    rows, flats = [], {}
    ms = lambda v: 1e3 * max_over_ranks(v, gloo)  # noqa: E731 - slowest rank, in ms
    steps = train(args, rank)[0]
    timelines = {}
    rows.append({"backend": "compute only", "step_median_ms": ms(statistics.median(steps)),
                 "step_mean_ms": ms(statistics.mean(steps))})
    for b in orders(args.order, 1)[0]:
        dist.barrier(group=gloo)
        steps, comm, span, flats[b], timelines[b], learned = train(args, rank, groups[b], b)
        row = {"backend": b, "step_median_ms": ms(statistics.median(steps)), "step_mean_ms": ms(statistics.mean(steps)),
               "comm_sum_ms": ms(statistics.mean(comm)) if comm else 0.0,
               "comm_span_ms": ms(statistics.mean(span)) if span else 0.0,
               "identical": identical_on_all_ranks(flats[b][1], gloo), "learning_calls": learned}
        row["samples_per_s"] = gb / (row["step_mean_ms"] / 1e3)
        row["buckets"] = bucket_timeline(timelines[b], gloo)
        # Overlap as a measured quantity: the same buckets with no compute, and what of the step the
        # compute does not explain (the exposed communication).
        launch = sorted(row["buckets"], key=lambda bk: bk["hook_ms"])
        row["comm_only_ms"] = 1e3 * comm_only(args, [bk["bytes"] for bk in launch], groups[b], gloo)
        row["exposed_ms"] = row["step_median_ms"] - rows[0]["step_median_ms"]
        grad_bytes = sum(bk["bytes"] for bk in row["buckets"])
        bound = link_bound_s(args, grad_bytes)
        row["grad_bytes"] = grad_bytes
        row["grad_bound_ms"] = 1e3 * bound if bound is not None else None
        for bk in row["buckets"]:  # its rate as a share of the link's: bound time / busy time
            kb = link_bound_s(args, bk["bytes"])
            busy_s = bk["bytes"] / (bk["mb_per_s"] * 1e6) if bk["mb_per_s"] else None
            bk["bound_pct"] = 100.0 * kb / busy_s if kb and busy_s else None
        rows.append(row)
    # The backends sum in different orders, so the parameters differ by rounding after the first step (3e-8
    # measured at np 4); training amplifies that (1.7e-3 after 5 steps of resnet18 at np 4: BatchNorm over
    # small batches, momentum). So the check that fails is after step 1, where a wrong reduction would show;
    # the final difference is reported, and fails only with --check-final.
    # With --hook fp16 both sum float16 values, rounding to 11 bits after each addition, in different
    # orders: a gradient differs by up to 2(p-1) * 2^-11 of the largest, and the parameters after one step
    # by lr times that (1.5e-5 measured on layout b, p = 8); a lost or doubled rank moves them by about
    # lr * G / p, still above the wider tolerance.
    rtol, atol = tolerance(args)
    close, diff = [], []
    for i in (0, 1):
        a, g = flats["blueconnect"][i], flats["gloo"][i]
        close.append(max_over_ranks(int(torch.allclose(a, g, rtol=rtol, atol=atol)), gloo, dist.ReduceOp.MIN) == 1)
        diff.append(max_over_ranks((a - g).abs().max().item(), gloo))
    ok = close[0] and (close[1] or not args.check_final) and all(r.get("identical", True) for r in rows)
    if rank == 0:
        print("# DDP %s, %dx%d synthetic images, batch %d per rank (global %d), p = %d, SGD lr %g momentum 0.9, "
              "%d timed steps after %d warm-up, %d torch thread(s) per rank"
              % (args.model, args.image, args.image, args.batch, gb, p, args.lr, args.steps, args.warmup,
                 torch.get_num_threads()))
        print("# step = forward+backward+optimizer step, per rank without barriers, slowest rank's median/mean;")
        print("# comm_sum = wall time from each bucket's DDP comm hook call to its all-reduce's completion, summed"
              " per step (the buckets overlap each other and backward: not time lost); comm_span = first hook call"
              " to last completion per step; samples/s = global batch / mean step")
        print("# compute only = the same model without DDP, every rank at once (as in training)")
        print("# comm_only = the same buckets all-reduced with no compute, launched as DDP launched them (async, in"
              " hook order), slowest rank's median of %d; exposed = step_med - compute only's step_med"
              % args.comm_reps)
        print("%-13s %13s %11s %13s %14s %12s %11s %11s %10s" % (
            "backend", "step_med_ms", "step_mean_ms", "comm_sum_ms", "comm_span_ms", "comm_only_ms", "exposed_ms",
            "samples/s", "identical"))
        for r in rows:
            if "comm_sum_ms" in r:
                print("%-13s %13.1f %11.1f %13.1f %14.1f %12.1f %11.1f %11.1f %10s" % (
                    r["backend"], r["step_median_ms"], r["step_mean_ms"], r["comm_sum_ms"], r["comm_span_ms"],
                    r["comm_only_ms"], r["exposed_ms"], r["samples_per_s"], "yes" if r["identical"] else "NO"))
            else:
                print("%-13s %13.1f %11.1f %13s %14s %12s %11s %11s %10s" % (
                    r["backend"], r["step_median_ms"], r["step_mean_ms"], "-", "-", "-", "-", "-", "-"))
        bc_row = next((r for r in rows if r["backend"] == "blueconnect"), None)
        if bc_row:
            print("# blueconnect learned its bucket sizes' plans with %d untimed all-reduces after the warm-up steps"
                  " (docs/PLANS.md, Learning)" % bc_row["learning_calls"])
        if bc_row and bc_row["grad_bound_ms"] is not None:
            nodes, bw, racks, trunk = args.bound
            print("# link bound of the gradients (%d B): %.1f ms (%d nodes at %.0f Mbit/s%s): comm_only at %.0f %% "
                  "of it (blueconnect)" % (
                      bc_row["grad_bytes"], bc_row["grad_bound_ms"], nodes, bw / 1e6,
                      ", %d racks at %.0f Mbit/s" % (racks, trunk / 1e6) if racks > 1 else "",
                      100.0 * bc_row["grad_bound_ms"] / bc_row["comm_only_ms"] if bc_row["comm_only_ms"] else 0))
        print("# DDP buckets in completion order: bytes; hook call and completion, ms from the step's start (slowest"
              " rank's mean over the timed steps); MB/s = bytes / (completion - max(hook call, previous completion));"
              " %% of link = the bucket's link bound / that time (blueconnect runs buckets one at a time; Gloo's"
              " overlap, so its rates are not rates)")
        for r in rows:
            for i, bk in enumerate(r.get("buckets", [])):
                print("#   %-11s bucket %d: %9d B  hook %8.1f  done %8.1f  %8.1f MB/s  %s" % (
                    r["backend"], i, bk["bytes"], bk["hook_ms"], bk["done_ms"], bk["mb_per_s"] or float("inf"),
                    "%5.1f %% of link" % bk["bound_pct"] if bk.get("bound_pct") else ""))
        print("# parameters after step 1, blueconnect against gloo: max |diff| %.3g, %s (rtol %g, atol %g)"
              % (diff[0], "agree" if close[0] else "DISAGREE", rtol, atol))
        print("# final parameters, blueconnect against gloo: max |diff| %.3g, %s%s" % (
            diff[1], "within" if close[1] else "beyond", " the same tolerance" + (
                "" if close[1] or args.check_final else " (not a failure without --check-final: the two summation"
                " orders' rounding differences grow with training)")), flush=True)
        why = [w for w, bad in (("parameters differ across ranks", not all(r.get("identical", True) for r in rows)),
                                ("blueconnect's and gloo's parameters disagree after step 1", not close[0]),
                                ("final parameters disagree (--check-final)", args.check_final and not close[1]))
               if bad]
        if why:
            print("torch_bench: FAILED: %s" % "; ".join(why), file=sys.stderr)
        if args.json:
            with open(args.json, "w") as f:
                for r in rows:
                    f.write(json.dumps(dict(r, mode="ddp", model=args.model, image=args.image, batch=args.batch,
                                            nranks=p, steps=args.steps, warmup=args.warmup, hook=args.hook,
                                            step1_max_abs_diff=diff[0], step1_agree=close[0],
                                            final_max_abs_diff=diff[1], final_agree=close[1])) + "\n")
    return 0 if ok else 1


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
