#!/usr/bin/env python3
"""A small DDP training run on the "blueconnect" backend (docs/TORCH.md).

    PYTHONPATH=build/torch mpirun -x PYTHONPATH -np 8 /usr/bin/python3 tools/torch_ddp_example.py

(as root add --allow-run-as-root --oversubscribe --bind-to none --mca
mpi_yield_when_idle 1). Every rank trains the same two-layer model on its
own synthetic data for --steps steps; rank 0 prints the mean loss, and at the
end every rank checks that its parameters are the same bits as rank 0's.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import blueconnect.torch  # noqa: F401 - registers the backend


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    dist.init_process_group("blueconnect")  # rank and size from MPI
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.randn(64, 10, generator=torch.Generator().manual_seed(7))
    for step in range(args.steps):
        x = torch.randn(args.batch, 64, generator=gen)
        loss = ((model(x) - x @ w_true) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print("step %3d  loss %.5f" % (step, mean.item()), flush=True)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    same = torch.tensor([int(torch.equal(flat.view(torch.int32), ref.view(torch.int32)))])
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    if rank == 0:
        print("%d ranks, parameters identical on every rank: %s" % (size, bool(same.item())), flush=True)
    if not same.item():
        raise SystemExit(1)


if __name__ == "__main__":
    main()
