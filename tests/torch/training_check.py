"""PyTorch's own training wrappers on the "plexus" backend, against gloo.

Under torchrun at 2 ranks (DDP, FSDP2) or 4 ranks (adds a 2x2 DeviceMesh):
  - DDP (many small buckets, several steps) on a plexus group ends with
    parameters equal bit for bit to DDP on a gloo group (2 ranks; within
    1e-6 at more, where the two may add in other orders);
  - FSDP2 (fully_shard) on CPU over a plexus mesh ends within 1e-5 of it
    over a gloo mesh;
  - at 4 ranks, a 2x2 DeviceMesh over plexus runs an all_reduce on each of
    its dimensions.
Exits 1 on any failure.
"""

import sys
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

import plexus_torch

warnings.filterwarnings("ignore")
plexus_torch.init_process_group()  # torchrun, mpirun, plexus-run, srun
RANK, SIZE = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
failures = 0


def check(ok, what):
    global failures
    print(f"rank {RANK}: {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    failures += 0 if ok else 1


def model():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(64, 64), nn.Tanh())],
                         nn.Linear(64, 4))


def batches(steps):
    g = torch.Generator().manual_seed(100 + RANK)
    return [(torch.randn(16, 64, generator=g), torch.randn(16, 4, generator=g))
            for _ in range(steps)]


def train(m, steps=6):
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches(steps):
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return m


def check_ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP
    # 0.01 MB buckets: one per layer or so, many allreduces per step.
    on_plexus = train(DDP(model(), process_group=dist.group.WORLD, bucket_cap_mb=0.01))
    on_gloo = train(DDP(model(), process_group=GLOO, bucket_cap_mb=0.01))
    diff = max((a - b).abs().max().item()
               for a, b in zip(on_plexus.parameters(), on_gloo.parameters()))
    if SIZE <= 2:  # a sum of two floats is the same in either order
        check(diff == 0, f"DDP on plexus equals DDP on gloo bit for bit after 6 steps "
                         f"(max diff {diff})")
    else:  # more ranks: the two libraries may add in other orders
        check(diff <= 1e-6, f"DDP on plexus within 1e-6 of DDP on gloo after 6 steps "
                            f"(max diff {diff:.3g})")


def check_fsdp2():
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def sharded(mesh):
        m = model()
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        train(m)
        return [p.full_tensor() for p in m.parameters()]

    on_plexus = sharded(init_device_mesh("cpu", (SIZE,)))
    on_gloo = sharded(DeviceMesh.from_group(GLOO, "cpu"))
    diff = max((a - b).abs().max().item() for a, b in zip(on_plexus, on_gloo))
    check(diff <= 1e-5, f"FSDP2 on plexus within 1e-5 of FSDP2 on gloo (max diff {diff:.3g})")


def check_device_mesh():
    if SIZE != 4:
        return
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        t = torch.tensor([float(RANK)])
        dist.all_reduce(t, group=group)
        members = dist.get_process_group_ranks(group)
        check(t.item() == float(sum(members)) and dist.get_backend(group) == "plexus",
              f"2x2 DeviceMesh all_reduce on '{dim}' over ranks {members}: {t.item()}")


check_ddp()
check_fsdp2()
check_device_mesh()
dist.barrier()
dist.destroy_process_group()
sys.exit(1 if failures else 0)
