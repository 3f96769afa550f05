"""Compares plexus::ddp::DistributedSampler with Python's
torch.utils.data.distributed.DistributedSampler, case by case.

usage: sampler_vs_python.py SAMPLER_CHECK_BINARY
Exits 77 (skipped) when Python torch cannot be imported, saying why."""
import subprocess
import sys

try:
    import torch  # noqa: F401
    from torch.utils.data.distributed import DistributedSampler
except Exception as e:  # the CPU-only LibTorch install has no working Python torch
    print(f"skipped: Python torch cannot be imported here ({e}); scripts/install-torch.sh installs it")
    sys.exit(77)


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


out = subprocess.run([sys.argv[1], "cases"], check=True, capture_output=True, text=True).stdout
cases = failures = 0
for line in out.splitlines():
    head, *ranks = line.split("|")
    size, replicas, shuffle, seed, epoch, drop_last = map(int, head.split())
    for rank, got in enumerate(ranks):
        s = DistributedSampler(Sized(size), num_replicas=replicas, rank=rank,
                               shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
        s.set_epoch(epoch)
        want = list(s)
        cases += 1
        if [int(x) for x in got.split()] != want or len(s) != len(want):
            failures += 1
            if failures <= 5:
                print(f"MISMATCH size={size} replicas={replicas} rank={rank} shuffle={shuffle} "
                      f"seed={seed} epoch={epoch} drop_last={drop_last}:\n  C++    {got.split()}\n"
                      f"  Python {want}")
print(f"{cases} (case, rank) pairs compared with torch {torch.__version__}: {failures} differ")
sys.exit(1 if failures else 0)
