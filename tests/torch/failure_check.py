"""Failures on the "plexus" backend reach Python as torch.distributed errors.

    failure_check.py dead N      # rank 1 is killed (SIGKILL) mid-allreduce
    failure_check.py mismatch N  # PLEXUS_DEBUG=detail, ranks post different collectives

Starts N ranks itself (so that a killed rank does not make a launcher stop
the others) on a free port, with PLEXUS_TIMEOUT=30, and checks what each
survivor printed: a DistBackendError naming rank 1 (dead), or an error
naming the mismatch on every rank (mismatch); and that destroy_process_group
returns after the failure. Exits 1 on any failure.
"""

import os
import signal
import socket
import subprocess
import sys
import time


def worker(mode):
    import torch
    import torch.distributed as dist

    import plexus_torch  # noqa: F401

    dist.init_process_group("plexus")
    rank = dist.get_rank()
    t = torch.ones(1 << 20)
    dist.all_reduce(t)  # everyone is up
    start = time.monotonic()
    try:
        if mode == "dead":
            if rank == 1:
                dist.all_reduce(t, async_op=True)
                os.kill(os.getpid(), signal.SIGKILL)
            for _ in range(20):
                dist.all_reduce(t)
        else:
            if rank == 0:
                dist.all_reduce(torch.ones(8))
            else:
                dist.broadcast(torch.ones(8), 0)
        print(f"rank {rank}: no error", flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the driver
        print(f"rank {rank}: {type(e).__name__} after {time.monotonic() - start:.1f} s: {e}",
              flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: destroyed", flush=True)


def driver(mode, n):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PLEXUS_TIMEOUT="30")
        if mode == "mismatch":
            env["PLEXUS_DEBUG"] = "detail"
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", mode], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0] + "\n(killed by the test after 120 s)"
        outs.append(out)
    failures = 0
    for r, out in enumerate(outs):
        lines = [ln for ln in out.splitlines() if ln.startswith(f"rank {r}:")]
        print(f"--- rank {r}:\n" + "\n".join(lines or out.splitlines()[-5:]))
        if mode == "dead" and r == 1:
            continue
        said = "\n".join(lines)
        if mode == "dead":
            ok = "DistBackendError" in said and "rank 1" in said
        else:
            ok = "RuntimeError" in said and "collectives differ across ranks" in said
        ok = ok and f"rank {r}: destroyed" in said
        if not ok:
            failures += 1
            print(f"FAIL: rank {r} did not report the failure as expected")
    print(f"{mode} at {n} ranks: {'ok' if not failures else 'FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(driver(sys.argv[1], int(sys.argv[2])))
