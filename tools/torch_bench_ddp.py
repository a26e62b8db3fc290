"""tools/torch_bench.py --mode ddp: DDP training on both backends, compute only, comm only, exposed
communication and each bucket against its link bound (docs/TORCH.md)."""
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

from torch_bench_common import finish_learning, max_over_ranks, orders


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
