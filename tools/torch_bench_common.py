"""Helpers tools/torch_bench.py and tools/torch_bench_ddp.py share: the two backends, their order per
size or run, a value reduced over the ranks, and blueconnect's plan learning finished before timing."""
import torch
import torch.distributed as dist

BACKENDS = ("blueconnect", "gloo")
SHORT = {"blueconnect": "bc", "gloo": "gloo"}


def max_over_ranks(value, group, op=dist.ReduceOp.MAX):
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=op, group=group)
    return t.item()


def orders(first, n):
    """Backend order per size (or per run): alternate, or one backend always first."""
    if first == "alternate":
        return [BACKENDS if i % 2 == 0 else BACKENDS[::-1] for i in range(n)]
    return [BACKENDS if first == "bc" else BACKENDS[::-1]] * n


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
