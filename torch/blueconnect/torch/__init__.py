"""torch.distributed backend "blueconnect" (docs/TORCH.md).

    import blueconnect.torch          # registers the backend
    dist.init_process_group("blueconnect")

Launch with mpirun: MPI gives every rank and the world size. When MASTER_ADDR,
MASTER_PORT, RANK or WORLD_SIZE are missing and the process runs under
mpirun, importing this package sets them from MPI (rank 0's address and a
free port, broadcast over MPI), so torch's env:// rendezvous works unchanged
and the store it makes also serves Gloo groups created beside it.
"""
import atexit
import os
import sys
from datetime import timedelta

import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupBlueConnect", "setup_env_from_mpi"]
ProcessGroupBlueConnect = _C.ProcessGroupBlueConnect

_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def _under_mpirun():
    return any(v in os.environ for v in _LAUNCHER_VARS)


def setup_env_from_mpi():
    """Sets the env:// variables that are missing from MPI. Collective over
    MPI_COMM_WORLD (every rank calls it, as importing the package does)."""
    rank, size, addr, port = _C.mpi_rendezvous()
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(size))
    os.environ.setdefault("MASTER_ADDR", addr)
    os.environ.setdefault("MASTER_PORT", str(port))


def _check_store(store, rank, size, world_ranks, my_world_rank, timeout):
    """Every member writes its MPI world rank under its group rank in the
    store torch gave us, and reads all: a store that is not shared, or ranks
    that do not match MPI's (`world_ranks`: torch's idea), fail here with the
    reason."""
    key = "blueconnect/world_rank/%d"
    store.set(key % rank, str(my_world_rank))
    keys = [key % r for r in range(size)]
    try:
        store.wait(keys, min(timeout, timedelta(seconds=120)))
    except RuntimeError as e:
        raise RuntimeError("blueconnect: the store given to init_process_group is not shared by all %d ranks "
                           "(waiting for the others' keys: %s)" % (size, e)) from None
    for r in range(size):
        got = int(store.get(key % r))
        if got != world_ranks[r]:
            raise RuntimeError("blueconnect: the store disagrees with MPI: group rank %d is MPI rank %d in the "
                               "store, %d for MPI" % (r, got, world_ranks[r]))


def _not_started_by_mpirun(why, size):
    return RuntimeError("blueconnect: this process was not started by mpirun (%s) but torch's WORLD_SIZE is %d: "
                        "launch with `mpirun -np N python ...`; torchrun is not supported (docs/TORCH.md)"
                        % (why, size))


def _create(opts, pg_options=None):
    """The creator torch calls (register_backend with extended_api=True):
    `opts` carries the store, the group rank and size, the timeout and, for a
    new_group, the global ranks of its members."""
    ranks = list(opts.global_ranks_in_group)
    rank, size = opts.group_rank, opts.group_size
    if not ranks and size > 1 and not _under_mpirun():
        # torchrun (or RANK/WORLD_SIZE set by hand): MPI would start as a
        # singleton in each process, several jobs of 1 rank. Said before MPI
        # is touched; WORLD_SIZE=1 without mpirun goes on.
        raise _not_started_by_mpirun("none of %s is set" % ", ".join(_LAUNCHER_VARS), size)
    world_rank, world_size = _C.mpi_world()
    if not ranks:
        if size != world_size and world_size == 1:
            # a launcher we do not know of that did not start MPI's world
            raise _not_started_by_mpirun("MPI's world has 1 rank", size)
        if size != world_size:
            raise RuntimeError("blueconnect: world_size %d given to init_process_group disagrees with MPI's "
                               "world size %d" % (size, world_size))
        if rank != world_rank:
            raise RuntimeError("blueconnect: rank %d given to init_process_group disagrees with this process's "
                               "MPI rank %d" % (rank, world_rank))
        _check_store(opts.store, rank, size, list(range(size)), world_rank, opts.timeout)
    else:
        # Global ranks are ranks of the default group, which is MPI_COMM_WORLD.
        _check_store(opts.store, rank, size, ranks, world_rank, opts.timeout)
    return _C.ProcessGroupBlueConnect(opts.store, rank, size, ranks, opts.timeout)


if _under_mpirun() and not all(v in os.environ for v in _ENV):
    setup_env_from_mpi()

if "BLUECONNECT" not in dist.Backend._plugins:
    dist.Backend.register_backend("blueconnect", _create, extended_api=True)

# MPI must be finalised before the interpreter exits; this drains queued work
# first. atexit runs it after the user's own exit handlers.
atexit.register(_C.shutdown)

if _under_mpirun():
    # An uncaught exception on one rank would leave the others waiting for it
    # in a collective (and this rank in MPI_Finalize): print it, then
    # MPI_Abort the job, as `python -m mpi4py` does.
    _previous_hook = sys.excepthook

    def _abort_on_uncaught(kind, value, tb):
        _previous_hook(kind, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        _C.abort(1)

    sys.excepthook = _abort_on_uncaught
