#!/usr/bin/env python3
"""bench/torch_allreduce.py: dist.all_reduce on the "plexus" backend, side by
side with gloo and with the Plexus communicator underneath, in one run.

    torchrun --standalone --nproc-per-node 2 bench/torch_allreduce.py [options]
    mpirun -np 2 .venv/bin/python3 bench/torch_allreduce.py [options]   # PLEXUS_BACKEND=mpi

(PYTHONPATH must reach plexus_torch: build/plexus_torch/python.) PLEXUS_BACKEND
picks the Plexus backend (tcp, ucx, mpi, a plugin path). For each size
(bytes of one rank's float32 tensor, sum, in place), ROUNDS rounds of three
blocks in rotating order, each block as many blocking calls as take about
BLOCK_MS, preceded by a barrier, timed on every rank (the block time is the
slowest rank's):

  plexus   dist.all_reduce(t) on the default group ("plexus": c10d, the
           bridge, the Plexus backend)
  gloo     dist.all_reduce(t, group=gloo) on a gloo group over the same ranks
  direct   the same Plexus communicator called without c10d (the floor)

Printed per size: the median time per call of each, plexus/gloo (< 1: plexus
faster), and plexus - direct in microseconds and plexus/direct (the bridge's
cost). --json FILE writes the rows.

Here gloo shares its processes, and so their cores, with Plexus' threads.
--alone gloo runs gloo in a job of its own instead, at its defaults (its
default group, no Plexus loaded); bench/torch-allreduce-placed alternates
such jobs with Plexus' and prints both placements.
"""

import argparse
import json
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1].upper()] if text[-1].upper() in mult else int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("-s", "--sizes", default="8,64,1K,8K,64K,1M,8M,64M",
                   help="comma-separated sizes in bytes, K/M/G suffixes (default %(default)s)")
    p.add_argument("-r", "--rounds", type=int, default=15, help="rounds (default %(default)s)")
    p.add_argument("-m", "--block-ms", type=float, default=30,
                   help="milliseconds per block (default %(default)s)")
    p.add_argument("--json", help="write the rows here (rank 0)")
    p.add_argument("--alone", choices=["gloo"],
                   help="time only this backend, in a job of its own (its default group)")
    args = p.parse_args()
    if args.alone:
        return alone(args)
    try:
        import plexus_torch
    except ImportError as e:
        sys.exit(f"torch_allreduce: cannot import plexus_torch ({e}); build Plexus with torch "
                 "(scripts/build.sh) and set PYTHONPATH=build/plexus_torch/python")
    torch.set_num_threads(1)
    plexus_torch.init_process_group()  # torchrun, mpirun, plexus-run, srun
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    name = backend.plexus_backend

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.item()

    def block(kind, t, calls):
        dist.barrier(group=gloo)
        if kind == "direct":
            return slowest(backend._raw_allreduce_seconds(t, calls))
        group = gloo if kind == "gloo" else None
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t, group=group)
        return slowest(time.perf_counter() - start)

    kinds = ["plexus", "gloo", "direct"]
    rows = []
    if rank == 0:
        print(f"# dist.all_reduce, float32 sum in place, {size} ranks; plexus = torch.distributed "
              f"on Plexus {name}; direct = the same communicator without c10d")
        print(f"# {'bytes':>10} {'calls':>7} {'plexus us':>11} {'gloo us':>11} {'direct us':>11} "
              f"{'plexus/gloo':>11} {'bridge us':>10} {'plexus/direct':>13}")
    for text in args.sizes.split(","):
        nbytes = parse_size(text)
        t = torch.ones(max(1, nbytes // 4))
        for kind in kinds:
            block(kind, t, 3)
        probe = block("plexus", t, 5) / 5
        calls = max(1, int(args.block_ms / 1000 / max(probe, 1e-7)))
        calls = int(torch.tensor([calls]).max().item())
        c = torch.tensor([calls])
        dist.broadcast(c, 0, group=gloo)
        calls = int(c.item())
        per = {k: [] for k in kinds}
        for r in range(args.rounds):
            order = kinds[r % 3:] + kinds[:r % 3]
            for kind in order:
                per[kind].append(block(kind, t, calls) / calls * 1e6)
        med = {k: statistics.median(v) for k, v in per.items()}
        row = {"bytes": nbytes, "calls": calls, "plexus_us": med["plexus"],
               "gloo_us": med["gloo"], "direct_us": med["direct"],
               "plexus_over_gloo": med["plexus"] / med["gloo"],
               "bridge_us": med["plexus"] - med["direct"],
               "plexus_over_direct": med["plexus"] / med["direct"], "backend": name,
               "ranks": size}
        rows.append(row)
        if rank == 0:
            print(f"  {nbytes:>10} {calls:>7} {med['plexus']:>11.2f} {med['gloo']:>11.2f} "
                  f"{med['direct']:>11.2f} {row['plexus_over_gloo']:>11.3f} "
                  f"{row['bridge_us']:>10.2f} {row['plexus_over_direct']:>13.3f}", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def alone(args):
    """gloo at its defaults, with no Plexus in the processes: its own
    default group, the same blocks and rounds as main()."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    def block(t, calls):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        return took.item()

    rows = []
    if rank == 0:
        print(f"# dist.all_reduce, float32 sum in place, {size} ranks; gloo alone")
        print(f"# {'bytes':>10} {'calls':>7} {'gloo us':>11}")
    for text in args.sizes.split(","):
        nbytes = parse_size(text)
        t = torch.ones(max(1, nbytes // 4))
        block(t, 3)
        c = torch.tensor([max(1, int(args.block_ms / 1000 / max(block(t, 5) / 5, 1e-7)))])
        dist.broadcast(c, 0)
        calls = int(c.item())
        med = statistics.median(block(t, calls) / calls * 1e6 for _ in range(args.rounds))
        rows.append({"bytes": nbytes, "calls": calls, "gloo_us": med, "ranks": size})
        if rank == 0:
            print(f"  {nbytes:>10} {calls:>7} {med:>11.2f}", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
