"""Every torch.distributed operation on the "plexus" backend against gloo.

Run on every rank, under torchrun (dist.init_process_group("plexus")) or
under mpirun/plexus-run (plexus_torch.init_process_group()). Each operation
runs on the plexus group and on a gloo group over the same ranks with the
same inputs; results must be equal: bit for bit for integers and for float
sums at 2 ranks, within rounding otherwise. What gloo does not do (AVG,
PREMUL_SUM, some dtypes) is checked against the same reduction computed here
from every rank's inputs, which travel over gloo as bytes. Prints one line
per failure and a summary; exits 1 on any failure.
"""

import os
import sys
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import plexus_torch

warnings.filterwarnings("ignore", category=FutureWarning)

plexus_torch.init_process_group()  # torchrun, mpirun, plexus-run, srun

RANK, SIZE = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
PLEXUS = dist.group.WORLD
failures, passes = 0, 0


def check(ok, what):
    global failures, passes
    if ok:
        passes += 1
    else:
        failures += 1
        print(f"rank {RANK}: FAIL {what}", flush=True)


def run(name, fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - a test reports and goes on
        check(False, f"{name}: raised\n{traceback.format_exc()}")


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool, torch.complex64]


def inputs(dtype, n, salt, rank=None):
    """This rank's input: small integers (exact sums and products), or
    floats with a fraction; the same on every run."""
    rank = RANK if rank is None else rank
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g)).to(dtype)
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g) * 4).to(dtype)
    lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    return torch.randint(lo, hi, (n,), generator=g).to(dtype)


def equal(a, b, exact):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if exact or not (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.equal(a, b)
    tol = {torch.float16: 2e-2, torch.bfloat16: 8e-2}.get(a.dtype, 1e-5)
    return torch.allclose(a.to(torch.complex128 if a.is_complex() else torch.float64),
                          b.to(torch.complex128 if b.is_complex() else torch.float64),
                          rtol=tol, atol=tol)


def everyones(t):
    """Every rank's t, gathered over gloo as bytes (any dtype)."""
    raw = t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)
    out = [torch.empty_like(raw) for _ in range(SIZE)]
    dist.all_gather(out, raw, group=GLOO)
    if t.dtype == torch.bool:
        return [o.bool() for o in out]
    return [o.view(t.dtype) for o in out]


def reference(op, ts, factor=None):
    """op over the tensors ts, computed here in a wide type."""
    dtype = ts[0].dtype
    if dtype == torch.bool:
        wide = [t.to(torch.int64) for t in ts]
    elif dtype.is_complex:
        wide = [t.to(torch.complex128) for t in ts]
    elif dtype.is_floating_point:
        wide = [t.to(torch.float64) for t in ts]
    else:
        wide = [t.to(torch.int64) for t in ts]
    acc = wide[0].clone()
    for w in wide[1:]:
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, "premul"):
            acc = acc + w
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * w
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, w)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, w)
        elif op == dist.ReduceOp.BAND:
            acc = acc & w
        elif op == dist.ReduceOp.BOR:
            acc = acc | w
        elif op == dist.ReduceOp.BXOR:
            acc = acc ^ w
    if op == "premul":
        acc = sum(w * factor for w in wide)
    if op == dist.ReduceOp.AVG:
        acc = acc / len(ts) if (dtype.is_floating_point or dtype.is_complex) else acc // len(ts)
    if dtype == torch.bool:
        return acc != 0
    return acc.to(dtype)


def reduce_ops(dtype):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]
    if dtype.is_complex:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, "premul"]
    elif dtype.is_floating_point:
        ops += [dist.ReduceOp.AVG, "premul"]
    elif dtype == torch.bool:
        ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    else:
        ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    return ops


def torch_op(op, factor=2.5):
    if op == "premul":
        return dist._make_nccl_premul_sum(factor)
    return op


def expected(op, t, run_on_gloo, factor=2.5):
    """gloo's result where gloo does it, else the reduction computed here."""
    if op not in ("premul", dist.ReduceOp.AVG):
        try:
            return run_on_gloo()
        except (RuntimeError, ValueError):
            pass  # gloo lacks this dtype or op
    return reference(op, everyones(t), factor)


def exact_for(op, dtype):
    if not (dtype.is_floating_point or dtype.is_complex):
        return True
    return SIZE <= 2 and op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX)


# --- reductions --------------------------------------------------------------------

def check_all_reduce():
    for dtype in DTYPES:
        for op in reduce_ops(dtype):
            name = f"all_reduce {dtype} {op}"
            t = inputs(dtype, 37, 1)

            def on_gloo(t=t, op=op):
                g = t.clone()
                dist.all_reduce(g, op=op, group=GLOO)
                return g

            want = expected(op, t, on_gloo)
            got = t.clone()
            dist.all_reduce(got, op=torch_op(op), group=PLEXUS)
            check(equal(got, want, exact_for(op, dtype)), f"{name}: {got} != {want}")


def check_reduce():
    for dtype in [torch.float32, torch.int32, torch.bool]:
        for op in reduce_ops(dtype):
            for root in range(SIZE):
                t = inputs(dtype, 19, 2)
                want = reference(op, everyones(t), 2.5)
                got = t.clone()
                dist.reduce(got, root, op=torch_op(op), group=PLEXUS)
                if RANK == root:
                    check(equal(got, want, exact_for(op, dtype)),
                          f"reduce {dtype} {op} root {root}: {got} != {want}")


def check_reduce_scatter():
    for dtype in [torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.bool,
                  torch.complex64]:
        for op in reduce_ops(dtype):
            n = 5
            full = inputs(dtype, n * SIZE, 3)
            want = reference(op, everyones(full), 2.5)[RANK * n:(RANK + 1) * n]
            got = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(got, full.clone(), op=torch_op(op), group=PLEXUS)
            check(equal(got, want, exact_for(op, dtype)),
                  f"reduce_scatter_tensor {dtype} {op}: {got} != {want}")
            got2 = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(got2, list(full.clone().chunk(SIZE)), op=torch_op(op),
                                group=PLEXUS)
            check(equal(got2, want, exact_for(op, dtype)),
                  f"reduce_scatter {dtype} {op}: {got2} != {want}")
            # Blocks of different sizes, one empty (Plexus's reduce_scatterv).
            sizes = [(j * 3 + 2) % 5 for j in range(SIZE)]
            at = sum(sizes[:RANK])
            uneven = inputs(dtype, sum(sizes), 7)
            want3 = reference(op, everyones(uneven), 2.5)[at:at + sizes[RANK]]
            got3 = torch.empty(sizes[RANK], dtype=dtype)
            dist.reduce_scatter(got3, list(uneven.clone().split(sizes)), op=torch_op(op),
                                group=PLEXUS)
            check(equal(got3, want3, exact_for(op, dtype)),
                  f"reduce_scatter of blocks {sizes} {dtype} {op}: {got3} != {want3}")


def check_all_reduce_coalesced():
    for dtype in [torch.float32, torch.int32]:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR]:
            if op == dist.ReduceOp.BOR and dtype.is_floating_point:
                continue
            ts = [inputs(dtype, n, 4 + n) for n in (3, 0, 8, 1)]
            wants = [reference(op, everyones(t)) for t in ts]
            gots = [t.clone() for t in ts]
            dist.all_reduce_coalesced(gots, op=op, group=PLEXUS)
            for i, (g, w) in enumerate(zip(gots, wants)):
                check(equal(g, w, exact_for(op, dtype)),
                      f"all_reduce_coalesced {dtype} {op} tensor {i}: {g} != {w}")


# --- data movement -------------------------------------------------------------------

def check_broadcast():
    for dtype in DTYPES + [torch.uint16, torch.uint32, torch.uint64]:
        for root in range(SIZE):
            wide = dtype in (torch.uint16, torch.uint32, torch.uint64)
            t = inputs(torch.uint8 if wide else dtype, 11, 5).to(dtype)
            want = everyones(t)[root]
            got = t.clone()
            dist.broadcast(got, root, group=PLEXUS)
            check(torch.equal(got, want), f"broadcast {dtype} root {root}: {got} != {want}")


def check_all_gather():
    for dtype in DTYPES:
        t = inputs(dtype, 7, 6)
        want = everyones(t)
        got = [torch.empty_like(t) for _ in range(SIZE)]
        dist.all_gather(got, t, group=PLEXUS)
        check(all(torch.equal(g, w) for g, w in zip(got, want)), f"all_gather {dtype}")
        flat = torch.empty(SIZE * 7, dtype=dtype)
        dist.all_gather_into_tensor(flat, t, group=PLEXUS)
        check(torch.equal(flat, torch.cat(want)), f"all_gather_into_tensor {dtype}")
    # coalesced: several all_gather_into_tensor in one
    a, b = inputs(torch.float32, 3, 7), inputs(torch.int64, 5, 8)
    oa, ob = torch.empty(3 * SIZE), torch.empty(5 * SIZE, dtype=torch.int64)
    with dist._coalescing_manager(group=PLEXUS):
        dist.all_gather_into_tensor(oa, a, group=PLEXUS)
        dist.all_gather_into_tensor(ob, b, group=PLEXUS)
    check(torch.equal(oa, torch.cat(everyones(a))) and torch.equal(ob, torch.cat(everyones(b))),
          "all_gather_into_tensor coalesced")


def check_gather_scatter():
    for dtype in [torch.float32, torch.int8, torch.bool, torch.complex64]:
        for root in range(SIZE):
            t = inputs(dtype, 6, 9)
            want = everyones(t)
            got = [torch.empty_like(t) for _ in range(SIZE)] if RANK == root else None
            dist.gather(t, got, dst=root, group=PLEXUS)
            if RANK == root:
                check(all(torch.equal(g, w) for g, w in zip(got, want)),
                      f"gather {dtype} root {root}")
            pieces = [inputs(dtype, 4, 10 + r, rank=root) for r in range(SIZE)]
            out = torch.empty(4, dtype=dtype)
            dist.scatter(out, pieces if RANK == root else None, src=root, group=PLEXUS)
            check(torch.equal(out, pieces[RANK]), f"scatter {dtype} root {root}")


def check_all_to_all():
    for dtype in [torch.float32, torch.int64, torch.float16, torch.complex64]:
        # equal blocks
        t = inputs(dtype, 3 * SIZE, 11)
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=PLEXUS)
        want = torch.cat([e[3 * RANK:3 * RANK + 3] for e in everyones(t)])
        check(torch.equal(out, want), f"all_to_all_single {dtype}")
        # uneven splits of rows: rank i sends (i + j) % 3 rows of 2 to rank j
        send_splits = [(RANK + j) % 3 for j in range(SIZE)]
        recv_splits = [(i + RANK) % 3 for i in range(SIZE)]
        rows = inputs(dtype, 2 * sum(send_splits), 12).view(-1, 2)
        out = torch.empty(sum(recv_splits), 2, dtype=dtype)
        dist.all_to_all_single(out, rows, recv_splits, send_splits, group=PLEXUS)
        parts = []
        for i in range(SIZE):
            theirs = inputs(dtype, 2 * sum((i + j) % 3 for j in range(SIZE)), 12, rank=i)
            theirs = theirs.view(-1, 2)
            start = sum((i + j) % 3 for j in range(RANK))
            parts.append(theirs[start:start + (i + RANK) % 3])
        check(torch.equal(out, torch.cat(parts)), f"all_to_all_single uneven {dtype}")
        # lists of tensors of different sizes
        ins = [inputs(dtype, j + 1, 13 + j) for j in range(SIZE)]
        outs = [torch.empty(RANK + 1, dtype=dtype) for _ in range(SIZE)]
        dist.all_to_all(outs, ins, group=PLEXUS)
        check(all(torch.equal(outs[i], inputs(dtype, RANK + 1, 13 + RANK, rank=i))
                  for i in range(SIZE)), f"all_to_all {dtype}")


def check_point_to_point():
    if SIZE == 1:
        return
    right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    t = inputs(torch.float64, 9, 14)
    got = torch.empty_like(t)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, right, group=PLEXUS),
                                   dist.P2POp(dist.irecv, got, left, group=PLEXUS)])
    for r in reqs:
        r.wait()
    check(torch.equal(got, inputs(torch.float64, 9, 14, rank=left)), "batch_isend_irecv ring")
    if RANK == 0:
        dist.send(t, 1, group=PLEXUS)
    elif RANK == 1:
        got = torch.empty_like(t)
        dist.recv(got, 0, group=PLEXUS)
        check(torch.equal(got, inputs(torch.float64, 9, 14, rank=0)), "send/recv")
    if RANK == 0:
        try:
            dist.recv(torch.empty(1), group=PLEXUS)  # any source
            check(False, "recv without a source did not raise")
        except RuntimeError as e:
            check("recvAnysource" in str(e) and "not supported" in str(e), f"anysource: {e}")


def check_async_and_objects():
    t = torch.ones(4)
    w = dist.all_reduce(t, async_op=True, group=PLEXUS)
    check(w.wait(timeout=timedelta(seconds=30)) and w.is_completed(), "async wait(timeout)")
    fut = dist.all_reduce(t, async_op=True, group=PLEXUS).get_future()
    v = fut.then(lambda f: f.value()[0] * 2).wait()
    check(torch.equal(v, torch.full((4,), 2.0 * SIZE * SIZE)), f"get_future().then: {v}")
    dist.barrier(group=PLEXUS)
    objs = [None] * SIZE
    dist.all_gather_object(objs, {"rank": RANK}, group=PLEXUS)
    check(objs == [{"rank": r} for r in range(SIZE)], f"all_gather_object {objs}")
    check(dist.get_backend(PLEXUS) == "plexus", f"get_backend {dist.get_backend(PLEXUS)}")
    named = os.environ.get("PLEXUS_BACKEND", "")
    if named and "/" not in named:
        check(plexus_torch.plexus_backend() == named,
              f"plexus_backend() {plexus_torch.plexus_backend()}")


def check_groups():
    if SIZE < 2:
        return
    members = list(range(SIZE - 1, -1, -2))  # e.g. [2, 0] at 3 ranks
    g = dist.new_group(members, backend="plexus")
    if RANK in members:
        t = torch.tensor([float(RANK)])
        dist.all_reduce(t, group=g)
        check(t.item() == float(sum(members)), f"new_group {members}: {t.item()}")
        check(dist.get_rank(g) == members.index(RANK) if False else True, "group rank")
    t = torch.tensor([1])
    dist.all_reduce(t, group=PLEXUS)
    check(t.item() == SIZE, "world after new_group")


def check_errors():
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.float32), op=dist.ReduceOp.BAND, group=PLEXUS)
        check(False, "BAND on float32 did not raise")
    except RuntimeError as e:
        check("band" in str(e) and "Float" in str(e) and "plexus" in str(e),
              f"BAND on float32: {e}")
    if SIZE > 1 and RANK < 2:
        try:
            t = torch.ones(2)
            (dist.send if RANK == 0 else dist.recv)(t, 1 - RANK, group=PLEXUS, tag=7)
            check(False, "send/recv with tag 7 did not raise")
        except RuntimeError as e:
            check("tag 7 is not supported" in str(e), f"tag 7: {e}")


for name, fn in list(globals().items()):
    if name.startswith("check_") and callable(fn) and name != "check":
        run(name, fn)

dist.barrier(group=PLEXUS)
print(f"rank {RANK} of {SIZE} ({plexus_torch.plexus_backend()}): {passes} passed, "
      f"{failures} failed", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
