"""A Python callback still running on the bridge's completion thread when the
script ends: the interpreter must not be finalised under it.

Rank 0 posts an allreduce that rank 1 joins 0.5 s later, asks for its future
(the completion thread takes the work) and hangs two callbacks on it: the
first completes the future rank 0 waits for, the second sleeps 1 s with the
GIL released and then prints. Rank 0 then leaves at once (with or without
destroy_process_group, argv[1]). The process must end with status 0 after the
second callback has printed. Before the fix the process exited without
running it (status 0, the callback lost) or, when the completion thread took
the GIL back while Python was finalising, aborted ("terminate called without
an active exception": the CI run of stop 45, 1 run in ~50 of ops_check.py).

Run without arguments it is the test: it launches itself under torchrun,
2 ranks, in both modes, and checks each run's status and output.
"""

import subprocess
import sys
import time


def launch():
    failures = 0
    for mode in ("keep", "destroy"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", __file__, mode]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        out = run.stdout + run.stderr
        ok = run.returncode == 0 and "the late callback ran, sum 8" in out
        print(f"{mode}: exit status {run.returncode}, late callback "
              f"{'ran' if 'the late callback ran' in out else 'did not run'}: "
              f"{'OK' if ok else 'FAIL'}", flush=True)
        if not ok:
            print(out, flush=True)
            failures += 1
    sys.exit(1 if failures else 0)


if len(sys.argv) == 1:
    launch()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import plexus_torch  # noqa: E402,F401  (registers "plexus")

dist.init_process_group("plexus")
RANK = dist.get_rank()
t = torch.ones(4)
if RANK == 1:
    time.sleep(0.5)
    dist.all_reduce(t)
else:
    fut = dist.all_reduce(t, async_op=True).get_future()
    first = fut.then(lambda f: f.value()[0].sum().item())

    def late(f):
        time.sleep(1.0)
        print(f"rank 0: the late callback ran, sum {f.value()[0].sum().item():g}", flush=True)

    fut.add_done_callback(late)
    print(f"rank 0: first callback gave {first.wait():g}, leaving", flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "destroy":
    dist.destroy_process_group()
