"""torch.distributed on a Plexus backend under srun, with nothing to set.

    srun -n 4 python3 torch_hello.py                  # one node: nothing to set
    srun -N 2 -n 8 python3 torch_hello.py             # nor across nodes
    PLEXUS_BACKEND=mpi srun --mpi=pmix -n 4 python3 torch_hello.py

plexus_torch.init_process_group() reads rank, world size and the rendezvous
point from Slurm (as it does from torchrun, mpirun or plexus-run) and starts
the process group on the "plexus" backend (PLEXUS_BACKEND picks which Plexus
backend: tcp, ucx, mpi, ...). Every rank contributes rank + 1.
"""
import torch
import torch.distributed as dist

import plexus_torch

plexus_torch.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = size * (size + 1) / 2
print(f"rank {rank} of {size}: all_reduce: {t.item()} (expected {expected})", flush=True)
dist.destroy_process_group()
raise SystemExit(0 if t.item() == expected else 1)
