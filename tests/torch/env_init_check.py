"""dist.init_process_group("plexus") with torch's own env:// rendezvous under
plexus-run: torch's rank 0 hosts its store at MASTER_ADDR:MASTER_PORT, which
plexus-run must leave free (its own store is at PLEXUS_MASTER_PORT); it once
gave MASTER_PORT its own store's port, and rank 0 died with EADDRINUSE.

Run on every rank: plexus-run -n N python env_init_check.py. An allreduce on
the plexus group and one on a gloo group (through the same torch store) must
give exact sums; exits 1 otherwise.
"""
import os
import sys

import torch
import torch.distributed as dist

import plexus_torch  # noqa: F401  (registers "plexus")

assert os.environ["MASTER_PORT"] != os.environ["PLEXUS_MASTER_PORT"], "one port for two stores"
dist.init_process_group("plexus")
rank, size = dist.get_rank(), dist.get_world_size()
want = float(size * (size + 1) // 2)
ok = True
for group in (dist.group.WORLD, dist.new_group(backend="gloo")):
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x, group=group)
    ok = ok and bool((x == want).all())
print(f"rank {rank} of {size}: {'ok' if ok else 'FAILED'}: allreduce on plexus and on gloo",
      flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
