#!/usr/bin/env python3
"""The same training as plexus-trainer, in Python with PyTorch's own
DistributedDataParallel (gloo by default): the reference bench/compare-trainer
and the trainer tests hold Plexus against.

    torchrun --nproc_per_node 2 torch_ddp.py --data DIR/data.ptf --init DIR/init.ptf [options]

DIR comes from `plexus-trainer --export DIR` with the same --data, --model,
--width, --depth and --seed, so that both sides start from the same weights
and read the same samples; the data order is DistributedSampler's, which
plexus::ddp::DistributedSampler reproduces. The options mean what they mean to
plexus-trainer (see its --help); DDP runs at PyTorch's defaults unless
--bucket-cap-mb or --gradient-as-bucket-view are given. Alone (no torchrun)
it trains as a world of one. Writes the same JSON record as plexus-trainer
(system "pytorch-ddp-gloo"); comm_not_hidden is not known here (null).

--backend plexus: the same DDP on torch.distributed's "plexus" backend
(plexus_torch, importable with PYTHONPATH=BUILD/plexus_torch/python from a
build with torch), whose PLEXUS_BACKEND (tcp, ucx, mpi, ...) picks the Plexus
backend underneath; system "pytorch-ddp-plexus-<that backend>". Under torchrun
it joins through torch's store; under mpirun (or plexus-run, Slurm: no
MASTER_ADDR and RANK) through plexus_torch.init_process_group(), which finds
the ranks from the launcher's variables:

    PYTHONPATH=BUILD/plexus_torch/python PLEXUS_BACKEND=mpi \
        mpirun -np 2 python3 torch_ddp.py --backend plexus --data ... --init ...
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_file  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

DTYPES = {"float32": torch.float32, "int64": torch.int64, "float64": torch.float64}


def load_arrays(path):
    out = {}
    for name, (dtype, shape, data) in tensor_file.read(path).items():
        out[name] = torch.frombuffer(bytearray(data), dtype=DTYPES[dtype]).reshape(shape)
    return out


def make_model(args, features, classes):
    # The layers of samples/trainer/models.hpp, in the same order (same names).
    if args.model == "cnn":
        side = int(round(features ** 0.5))
        return nn.Sequential(
            nn.Unflatten(1, (1, side, side)),
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * (side // 2) ** 2, 128), nn.ReLU(),
            nn.Linear(128, classes))
    layers, prev = [], features
    for _ in range(args.depth - 1):
        layers += [nn.Linear(prev, args.width), nn.ReLU()]
        prev = args.width
    layers.append(nn.Linear(prev, classes))
    return nn.Sequential(*layers)


def evaluate(model, x, y, rank, world):
    n = x.shape[0]
    begin, end = n * rank // world, n * (rank + 1) // world
    with torch.no_grad():
        logits = model(x[begin:end])
        sums = torch.tensor([F.cross_entropy(logits, y[begin:end], reduction="sum").item(),
                             float((logits.argmax(1) == y[begin:end]).sum()),
                             float(end - begin)], dtype=torch.float64)
    dist.all_reduce(sums)
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="tensor file with train_x/train_y/test_x/test_y")
    p.add_argument("--init", required=True, help="tensor file with the initial weights")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--lr", type=float, default=0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--bucket-cap-mb", type=float, default=None)
    p.add_argument("--gradient-as-bucket-view", action="store_true")
    p.add_argument("--backend", default="gloo",
                   help="torch.distributed backend (default gloo); plexus: Plexus' (plexus_torch, "
                        "PLEXUS_BACKEND picks tcp, ucx, mpi, ...)")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--log-every", type=int, default=0)
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--json")
    p.add_argument("--save-weights")
    args = p.parse_args()
    lr = args.lr or (0.05 if args.optimizer == "sgd" else 0.001)

    if args.backend == "plexus":
        try:
            import plexus_torch
        except ImportError as e:
            sys.exit(f"torch_ddp: --backend plexus needs the plexus_torch module ({e}): build "
                     f"Plexus with torch (BUILD/plexus_torch) and set "
                     f"PYTHONPATH=BUILD/plexus_torch/python")
        plexus_torch.init_process_group()  # torchrun, mpirun, plexus-run, Slurm, or alone
        system = f"pytorch-ddp-plexus-{plexus_torch.plexus_backend()}"
    else:
        if "RANK" not in os.environ:  # alone: a world of one
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group(args.backend)
        system = f"pytorch-ddp-{args.backend}"
    rank, world = dist.get_rank(), dist.get_world_size()
    # Ranks on this host, to share its cores: torchrun's, Plexus', Open MPI's
    # variable, else the whole world (one host).
    local = next((int(os.environ[v]) for v in ("LOCAL_WORLD_SIZE", "PLEXUS_LOCAL_WORLD_SIZE",
                                               "OMPI_COMM_WORLD_LOCAL_SIZE")
                  if os.environ.get(v, "").isdigit() and int(os.environ[v]) > 0), world)
    threads = args.threads or max(1, (os.cpu_count() or 1) // local)
    torch.set_num_threads(threads)

    data = load_arrays(args.data)
    train_x, train_y = data["train_x"].float(), data["train_y"].long()
    test_x, test_y = data["test_x"].float(), data["test_y"].long()
    classes = int(max(train_y.max(), test_y.max())) + 1
    model = make_model(args, train_x.shape[1], classes)
    init = load_arrays(args.init)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(init[name])
    ddp_kwargs = {}
    if args.bucket_cap_mb is not None:
        ddp_kwargs["bucket_cap_mb"] = args.bucket_cap_mb
    if args.gradient_as_bucket_view:
        ddp_kwargs["gradient_as_bucket_view"] = True
    ddp = DistributedDataParallel(model, **ddp_kwargs)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    dataset = TensorDataset(train_x, train_y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    steps_per_epoch = len(loader)
    log_every = args.log_every or max(1, steps_per_epoch // 10)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        on = system[len("pytorch-ddp-"):]
        print(f"torch_ddp: {args.model} ({params} parameters) on PyTorch DDP ({on}), "
              f"{world} rank(s) x batch {args.batch_size}, {args.optimizer} lr {lr:g}, "
              f"{threads} thread(s) per rank", flush=True)

    step_losses, step_ms, epochs, global_step = [], [], [], 0
    stop = False
    for epoch in range(args.epochs):
        if stop:
            break
        sampler.set_epoch(epoch)
        loss_sum, batches, times = 0.0, 0, []
        epoch_start = step_start = time.perf_counter()
        last_log = epoch_start
        optimizer.zero_grad()
        for step, (x, y) in enumerate(loader, 1):
            t0 = time.perf_counter()
            loss = F.cross_entropy(ddp(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad()
            t3 = time.perf_counter()
            value = loss.item()
            loss_sum += value
            batches += 1
            step_losses.append(value)
            if global_step >= args.warmup_steps:
                times.append(((t3 - step_start) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                              (t3 - t2) * 1e3))
                step_ms.append((t3 - step_start) * 1e3)
            global_step += 1
            if rank == 0 and args.log_every >= 0 and step % log_every == 0 and (
                    args.log_every > 0 or t3 - last_log >= 1):
                last_log = t3
                rate = step * args.batch_size * world / (t3 - epoch_start)
                print(f"epoch {epoch + 1}/{args.epochs}  step {step}/{steps_per_epoch}  "
                      f"loss {value:.4f}  {rate:.0f} samples/s", flush=True)
            step_start = time.perf_counter()
            if args.max_steps and global_step >= args.max_steps:
                stop = True
                break
        sums = torch.tensor([loss_sum, float(batches)], dtype=torch.float64)
        dist.all_reduce(sums)
        record = {"epoch": epoch + 1, "steps": batches,
                  "train_loss": (sums[0] / max(1.0, sums[1].item())).item(),
                  "test_loss": 0.0, "test_accuracy": 0.0}
        if not args.no_eval:
            record["test_loss"], record["test_accuracy"] = evaluate(model, test_x, test_y,
                                                                    rank, world)
        cols = list(zip(*times)) if times else [[], [], [], []]
        record.update(step_ms_median=statistics.median(cols[0]) if times else 0.0,
                      forward_ms=statistics.fmean(cols[1]) if times else 0.0,
                      backward_ms=statistics.fmean(cols[2]) if times else 0.0,
                      optimizer_ms=statistics.fmean(cols[3]) if times else 0.0,
                      comm_not_hidden_ms=None, comm_ms=None)
        record["samples_per_s"] = (args.batch_size * world / (record["step_ms_median"] / 1e3)
                                   if times else 0.0)
        epochs.append(record)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} done: train loss {record['train_loss']:.4f}, "
                  f"test loss {record['test_loss']:.4f}, test accuracy "
                  f"{100 * record['test_accuracy']:.2f} %; step {record['step_ms_median']:.1f} ms "
                  f"median: forward {record['forward_ms']:.1f}, backward "
                  f"{record['backward_ms']:.1f}, optimizer {record['optimizer_ms']:.1f}",
                  flush=True)

    if rank == 0 and args.save_weights:
        tensor_file.write(args.save_weights, [
            (name, "float32", list(p.shape), p.detach().contiguous().numpy().tobytes())
            for name, p in model.named_parameters()])
    if rank == 0 and args.json:
        median = statistics.median(step_ms) if step_ms else 0.0
        last = epochs[-1] if epochs else {}
        with open(args.json, "w") as f:
            json.dump({"system": system, "backend": args.backend,
                       "world_size": world, "model": args.model, "width": args.width,
                       "depth": args.depth, "parameters": sum(p.numel() for p in model.parameters()),
                       "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": lr,
                       "seed": args.seed, "threads": threads, "bucket_cap_mb": args.bucket_cap_mb,
                       "gradient_as_bucket_view": args.gradient_as_bucket_view,
                       "steps": global_step, "step_ms": step_ms, "step_ms_median": median,
                       "samples_per_s": args.batch_size * world / (median / 1e3) if median else 0,
                       "step_losses": step_losses,
                       "final_train_loss": last.get("train_loss", 0.0),
                       "final_test_loss": last.get("test_loss", 0.0),
                       "final_test_accuracy": last.get("test_accuracy", 0.0),
                       "epochs": epochs}, f, indent=1)
    # Both ranks tear gloo down together: a rank that destroys the process
    # group while its peer is still writing its records sometimes aborts in
    # gloo's teardown ("terminate called without an active exception", 3 of
    # 66 runs of compare-trainer --quick's job here; 0 of 35 with the barrier).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
