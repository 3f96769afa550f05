"""torch.distributed on every Plexus backend.

    import torch.distributed as dist, plexus_torch
    dist.init_process_group("plexus")   # PLEXUS_BACKEND picks tcp, ucx, mpi, nccl or a plugin path

Importing this module registers the backend "plexus" for cpu and cuda
tensors. Under torchrun, or anything that sets MASTER_ADDR, MASTER_PORT,
RANK and WORLD_SIZE, dist.init_process_group("plexus") meets the other ranks
through torch's own store. plexus_torch.init_process_group() does that too,
and also works under launchers that give torch no store (mpirun, srun,
plexus-run): it finds the ranks the way every Plexus program does.
"""

import atexit
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from ._built_with import TORCH_VERSION as _BUILT_WITH

# _C links LibTorch's C++ symbols, which differ between torch versions: a
# mismatch would end in an undefined symbol at best, so say it first.
if torch.__version__ != _BUILT_WITH:
    raise ImportError(
        f"plexus_torch was built against torch {_BUILT_WITH}, but this Python has torch "
        f"{torch.__version__} ({os.path.dirname(torch.__file__)}): rebuild plexus_torch against "
        f"it (meson configure BUILD -Dtorch_path={os.path.dirname(torch.__file__)} && ninja -C "
        f"BUILD, or scripts/build.sh with that torch in the checkout's .venv)")

from . import _C  # noqa: E402  (after the version check)

__all__ = ["init_process_group", "plexus_backend"]


def _create(store, rank, world_size, timeout):
    if isinstance(timeout, timedelta):
        timeout = timeout
    else:
        timeout = timedelta(seconds=float(timeout))
    return _C.PlexusBackend(store, rank, world_size, timeout)


dist.Backend.register_backend("plexus", _create, devices=["cpu", "cuda"])
# Process groups can outlive destroy_process_group (any reference keeps one);
# their communicators are released at exit so that the Plexus backends are
# finalised (MPI must be, or mpirun reports the job as failed).
atexit.register(_C._release_all)


def plexus_backend(group=None):
    """The Plexus backend under a "plexus" process group: "tcp", "ucx", "mpi", ..."""
    pg = group if group is not None else dist.group.WORLD
    return pg._get_backend(torch.device("cpu")).plexus_backend


def init_process_group(timeout=None, **kwargs):
    """dist.init_process_group("plexus") under any launcher.

    Under torchrun (or anything that sets RANK and MASTER_ADDR) it is just
    that: the ranks meet through torch's own store. Under launchers that
    give torch no store (mpirun, srun, plexus-run) the ranks meet the way
    any Plexus program's do (the launcher's variables, PLEXUS_* or
    plexus-run's), then rank 0 hosts a c10d TCPStore for torch's own use
    (new_group, object collectives) and tells the others where it is.
    Other keyword arguments go to dist.init_process_group.
    """
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        args = dict(backend="plexus")
        if timeout is not None:
            args["timeout"] = timeout
        args.update(kwargs)
        dist.init_process_group(**args)
        return
    rank, size, _local_rank = _C._prepare_world_from_env()
    if size == 1:
        store = dist.HashStore()
    else:
        # Rank 0 hosts torch's store (on every interface) and says where it
        # is: its host name, an address of it, the port. A rank on the same
        # host connects over loopback; MASTER_ADDR, when set, wins.
        if rank == 0:
            store = dist.TCPStore("0.0.0.0", 0, size, is_master=True, wait_for_workers=False)
            name = socket.gethostname()
            try:
                address = os.environ.get("MASTER_ADDR") or socket.gethostbyname(name)
            except OSError:
                address = "127.0.0.1"
            where = f"{name} {address} {store.port}".encode()
        else:
            where = b""
        name, address, port = _C._broadcast_from_rank_zero(where).decode().split(" ")
        if rank != 0:
            if name == socket.gethostname() and not os.environ.get("MASTER_ADDR"):
                address = "127.0.0.1"
            store = dist.TCPStore(address, int(port), size, is_master=False)
    args = dict(backend="plexus", store=store, rank=rank, world_size=size)
    if timeout is not None:
        args["timeout"] = timeout
    args.update(kwargs)
    dist.init_process_group(**args)
