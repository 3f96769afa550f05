"""Once a work's wait() returns, its future is complete (as on Gloo and NCCL).

Run on every rank, under torchrun or mpirun (plexus_torch.init_process_group()).
ROUNDS allreduces of 256 B to 512 KiB; after each w.wait() the future is
read at once, in four ways in turn: fut.value(), fut.wait(), a then()
callback's result (the callback calls w.wait() too), and w.result() beside fut.done(). Each result is checked
exactly (integers summed over the ranks). Exits 1 on the first failure,
naming the round, the size and the way.
"""

import os
import sys

import torch
import torch.distributed as dist

import plexus_torch

ROUNDS = int(os.environ.get("FUTURE_CHECK_ROUNDS", "500"))

plexus_torch.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
want_sum = size * (size + 1) // 2
sizes = [64 << k for k in range(12)]  # int32 elements: 256 B .. 512 KiB


def fail(i, n, way, what):
    print(f"rank {rank}: FAIL round {i}, {n * 4} bytes, {way}: {what}", flush=True)
    sys.exit(1)


for i in range(ROUNDS):
    n = sizes[i % len(sizes)]
    x = torch.full((n,), rank + 1, dtype=torch.int32)
    w = dist.all_reduce(x, async_op=True)
    fut = w.get_future()
    way = ("value", "wait", "then", "result")[i % 4]
    # The callback waits on the work too (it runs where the work completes).
    chained = fut.then(lambda f, w=w: (w.wait(), f.value()[0][:1].clone())[1]) if way == "then" else None
    w.wait()
    try:
        if way == "value":
            got = fut.value()[0]
        elif way == "wait":
            got = fut.wait()[0]
        elif way == "then":
            got = x
            head = chained.wait()
            if int(head[0]) != want_sum:
                fail(i, n, way, f"then() saw {int(head[0])}, want {want_sum}")
        else:
            if not fut.done():
                fail(i, n, way, "fut.done() is False after w.wait()")
            got = w.result()[0]
    except RuntimeError as e:
        fail(i, n, way, f"raised {e}".splitlines()[0])
    if not torch.equal(got, torch.full((n,), want_sum, dtype=torch.int32)):
        fail(i, n, way, "wrong result")

dist.destroy_process_group()
print(f"rank {rank}: {ROUNDS} allreduces, the future complete after every wait()", flush=True)
