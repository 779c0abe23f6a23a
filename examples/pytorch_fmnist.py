#!/usr/bin/python3
"""Trains tula-train's fmnist-cnn on Fashion-MNIST with PyTorch's DistributedDataParallel (gloo,
CPU) under Slurm and Tula: the global batch and epochs come from Tula's plan (tula.plan()),
rank 0 writes the metrics file (tula.Metrics) that `tula db record --metrics` records. Before
the job's time limit it saves a checkpoint, has Slurm requeue the job and exits with status 3
(tula.Requeue, tula-jobs(7)); the requeued job resumes from the checkpoint.

    srun python3 examples/pytorch_fmnist.py [--batch-size B] [--epochs E] [--limit-train N]
    python3 examples/pytorch_fmnist.py --profile      (under tula profile compute --command)

Plain SGD, momentum 0.9, weight decay 5e-4 on the weights (not biases and BN), the rate
scaled linearly from 0.05 at global batch 64 with a linear warmup from 0.05 (tula-train's
defaults: none up to batch 64, 1 epoch up to 8 x 64, else 2, at most the epochs), then
cosine decay. The data: Debian's dataset-fashion-mnist (IDX files, gzip), pixels scaled to
(v/255 - 0.2860) / 0.3530 as tula-train does."""

import argparse
import copy
import gzip
import math
import os
import struct
import sys
import time

try:
    import tula
except ImportError:  # not installed: the tree's python/ (TULA_REPO, the submit directory, or next to this file)
    for root in (os.environ.get("TULA_REPO"), os.environ.get("SLURM_SUBMIT_DIR"),
                 os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")):
        if root and os.path.isfile(os.path.join(root, "python", "tula", "__init__.py")):
            sys.path.insert(0, os.path.join(root, "python"))
            break
    import tula

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import tula.torch as tt

WORKLOAD = "torch-fmnist-cnn@fashion-mnist"
MEAN, STD = 0.2860, 0.3530
BASE_LR, BASE_BATCH = 0.05, 64


def say(*args):
    print("pytorch_fmnist:", *args, flush=True)


def read_idx(path, limit=None):
    """The array of an IDX file (gzip): a uint8 tensor of its dimensions, the first LIMIT items."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit("tula: pytorch_fmnist: %s: %s (apt-get install dataset-fashion-mnist)" % (path, e))
    magic, = struct.unpack(">I", data[:4])
    if magic >> 8 != 0x08 or (magic & 0xFF) not in (1, 3):
        sys.exit("tula: pytorch_fmnist: %s: not an IDX file of bytes (magic 0x%08x)" % (path, magic))
    rank = magic & 0xFF
    dims = list(struct.unpack(">%dI" % rank, data[4:4 + 4 * rank]))
    body = data[4 + 4 * rank:]
    if len(body) != math.prod(dims):
        sys.exit("tula: pytorch_fmnist: %s: holds %d bytes, its header says %d" % (path, len(body), math.prod(dims)))
    t = torch.frombuffer(bytearray(body), dtype=torch.uint8).view(*dims)
    return t[:limit] if limit else t


def dataset_size(data_dir, train):
    """Examples in the whole training (or test) set: the first dimension of its label file."""
    path = os.path.join(data_dir, ("train" if train else "t10k") + "-labels-idx1-ubyte.gz")
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        sys.exit("tula: pytorch_fmnist: %s: %s (apt-get install dataset-fashion-mnist)" % (path, e))
    if len(head) < 8:
        sys.exit("tula: pytorch_fmnist: %s: too short for an IDX header" % path)
    return struct.unpack(">I", head[4:8])[0]


def load(data_dir, train, limit=None):
    """(x, y): images (N, 1, 28, 28) normalised as tula-train does, labels (N,) int64."""
    pre = os.path.join(data_dir, "train" if train else "t10k")
    x = read_idx(pre + "-images-idx3-ubyte.gz", limit)
    y = read_idx(pre + "-labels-idx1-ubyte.gz", limit)
    if len(x) != len(y):
        sys.exit("tula: pytorch_fmnist: %s: %d images but %d labels" % (pre, len(x), len(y)))
    x = ((x.float() / 255.0 - MEAN) / STD).unsqueeze(1).contiguous()
    return x, y.long()


def fmnist_cnn(classes=10):
    """tula-train's fmnist-cnn (trainer/core/model_zoo.hpp): four 3x3 conv-BN-ReLU (32, 32, 64,
    64 channels, no conv bias) with a 2x2 max pool after the second and the fourth, then
    linear 64*7*7 -> 256, ReLU, linear 256 -> classes."""
    layers = []
    for i, (cin, cout) in enumerate([(1, 32), (32, 32), (32, 64), (64, 64)]):
        layers += [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        if i % 2 == 1:
            layers.append(nn.MaxPool2d(2))
    layers += [nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, classes)]
    return nn.Sequential(*layers)


def make_optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0.0}],
                           lr=lr, momentum=0.9)


def rate_at(step, total_steps, warmup_steps, peak):
    """Linear warmup from the base rate to PEAK over WARMUP_STEPS, then cosine decay to 0."""
    if step < warmup_steps:
        return BASE_LR + (peak - BASE_LR) * step / warmup_steps
    rest = max(1, total_steps - warmup_steps)
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / rest))


def warmup_epochs(global_batch, epochs):
    w = 0 if global_batch <= BASE_BATCH else 1 if global_batch <= 8 * BASE_BATCH else 2
    return min(w, epochs)


def evaluate(model, x, y, rank, world, batch=1000):
    """Test accuracy over the whole test set: each rank counts its share, one allreduce."""
    model.eval()
    correct = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for lo in range(rank * batch, len(x), world * batch):
            pred = model(x[lo:lo + batch]).argmax(1)
            correct[0] += (pred == y[lo:lo + batch]).sum().item()
            correct[1] += len(pred)
    if world > 1:
        dist.all_reduce(correct)
    model.train()
    return correct[0].item() / correct[1].item()


def profile_mode(args):
    """tula profile compute --command: one training step (no allreduce) timed per local batch."""
    tt.set_threads()
    torch.manual_seed(args.seed)
    batches = tula.profile_batches() or [16, 32, 64, 128]
    x, y = load(args.data_dir, True, max(batches))
    model = fmnist_cnn()
    opt = make_optimizer(model, BASE_LR)

    def make_batch(b):
        return x[:b], y[:b]

    def step(data):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(data[0]), data[1]).backward()
        opt.step()

    # The header gives the workload row (parameters, data set sizes) for a database that does
    # not know the workload yet.
    with tula.Metrics(None, workload=os.environ.get("TULA_WORKLOAD") or WORKLOAD, nodes=1, ranks=1, global_batch=None,
                      params=sum(p.numel() for p in model.parameters()),
                      train_examples=dataset_size(args.data_dir, True),
                      test_examples=dataset_size(args.data_dir, False)) as metrics:
        tula.profile(step, make_batch, batches=batches, metrics=metrics)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, help="global batch (default: Tula's plan, else 64)")
    ap.add_argument("--epochs", type=int, help="epochs (default: Tula's plan, else 2)")
    ap.add_argument("--limit-train", type=int, default=0, metavar="N", help="train on the first N examples")
    ap.add_argument("--limit-test", type=int, default=0, metavar="N",
                    help="evaluate on the first N test examples (default: the whole test set)")
    ap.add_argument("--data-dir", default=os.environ.get("TULA_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--metrics", help="metrics file (default: $TULA_METRICS, else tula-metrics-$SLURM_JOB_ID.jsonl)")
    ap.add_argument("--checkpoint", metavar="FILE",
                    help="checkpoint for a stop before the time limit and the resume (default under Slurm: "
                         "tula-ckpt-$SLURM_JOB_ID.pt; outside Slurm: none)")
    ap.add_argument("--checkpoint-seconds", type=float, default=0.0, metavar="S",
                    help="estimate of one checkpoint save in seconds, until one is timed (default 0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="time training steps for tula profile compute --command")
    args = ap.parse_args()
    for name in ("batch_size", "epochs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error("--%s must be >= 1" % name.replace("_", "-"))
    if not math.isfinite(args.checkpoint_seconds) or args.checkpoint_seconds < 0:
        ap.error("--checkpoint-seconds must be a number >= 0")
    if args.limit_train < 0 or args.limit_test < 0:
        ap.error("--limit-train and --limit-test must be >= 0 (0: all)")
    try:
        if args.profile:
            return profile_mode(args)
        return train(args)
    except ValueError as e:
        if str(e).startswith("tula: "):
            sys.exit(str(e))
        raise


def checkpointing(args, rank, state, restore):
    """tula.Requeue for the run: the checkpoint --checkpoint, else tula-ckpt-$SLURM_JOB_ID.pt under
    Slurm; outside Slurm without --checkpoint none (a stand-in that never stops)."""
    if args.checkpoint is None and not os.environ.get("SLURM_JOB_ID"):
        return NoCheckpoint()

    def save(path):
        torch.save(state(), path)

    def load(path):
        try:  # the job's own file: PyTorch's full unpickler (weights_only=True refuses floats in 1.13)
            saved = torch.load(path, map_location="cpu", weights_only=False)
        except TypeError:  # a PyTorch without weights_only
            saved = torch.load(path, map_location="cpu")
        restore(saved, path)

    return tula.Requeue(save=save, load=load, path=args.checkpoint,
                        checkpoint_seconds=args.checkpoint_seconds, rank=rank)


class NoCheckpoint:
    """What checkpointing() gives without a checkpoint: never resumes, never stops."""
    resumed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def should_stop(self, step_seconds=None):
        return False


def measure_first(args, model, xtr, ytr, local, nodes, world, rank, params, test_examples):
    """TULA_PROFILE (a first job of a workload nobody profiled): tula.measure() times training
    steps of a copy of MODEL at local batches around LOCAL before training; the random number
    generator is forked, so that the training draws what it would have drawn without it."""
    with torch.random.fork_rng():
        scratch = copy.deepcopy(model)
        opt = make_optimizer(scratch, BASE_LR)

        def make_batch(b):
            b = min(b, len(xtr))
            return xtr[:b], ytr[:b]

        def step(data):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(scratch(data[0]), data[1]).backward()
            opt.step()

        tula.measure(step, make_batch, local, workload=WORKLOAD, nodes=nodes, ranks=world, rank=rank, params=params,
                     train_examples=dataset_size(args.data_dir, True), test_examples=dataset_size(args.data_dir, False))


def train(args):
    plan = tula.plan(default_batch=64, default_epochs=2)
    rank, world = tt.init_distributed()
    threads = tt.set_threads()
    global_batch = args.batch_size or plan.global_batch
    epochs = args.epochs or plan.epochs
    local = max(1, global_batch // world)
    if local * world != global_batch and rank == 0:
        say("global batch %d is not a multiple of %d ranks; training with %d (%d a rank)"
            % (global_batch, world, local * world, local))
    global_batch = local * world
    torch.manual_seed(args.seed)
    xtr, ytr = load(args.data_dir, True, args.limit_train or None)
    xte, yte = load(args.data_dir, False, args.limit_test or None)
    model = fmnist_cnn()
    params = sum(p.numel() for p in model.parameters())
    peak = BASE_LR * global_batch / BASE_BATCH
    opt = make_optimizer(model, BASE_LR)
    steps_per_epoch = -(-len(xtr) // global_batch)
    total_steps = steps_per_epoch * epochs
    warm = warmup_epochs(global_batch, epochs) * steps_per_epoch
    # The position in the run: the next step's number, epoch and batch in the epoch, the
    # epoch's training seconds and loss sums so far (rank 0 holds the ranks' sum when saved).
    pos = {"step": 0, "epoch": 1, "batch": 0, "epoch_seconds": 0.0, "train_seconds": 0.0,
           "loss_sum": torch.zeros(2, dtype=torch.float64)}
    # What a checkpoint must match: the same run, resumed.
    run = {"global_batch": global_batch, "epochs": epochs, "train_examples": len(xtr), "seed": args.seed,
           "world": world}

    def state():
        return {"run": run, "model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state(),
                "position": dict(pos)}

    def restore(saved, path):
        if saved.get("run") != run:
            raise ValueError("tula: pytorch_fmnist: checkpoint %s belongs to another run (%r, not %r); remove it "
                             "to start afresh" % (path, saved.get("run"), run))
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
        pos.update(saved["position"])
        if rank != 0:  # rank 0's sum is every rank's
            pos["loss_sum"] = torch.zeros(2, dtype=torch.float64)

    with checkpointing(args, rank, state, restore) as rq:
        if not rq.resumed:
            measure_first(args, model, xtr, ytr, local, plan.nodes, world, rank, params, len(xte))
        ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
        metrics = None
        if rank == 0:
            metrics = tula.Metrics(args.metrics, workload=WORKLOAD, nodes=plan.nodes, ranks=world,
                                   global_batch=global_batch, epochs=epochs, params=params,
                                   train_examples=len(xtr), test_examples=len(xte), optimizer="sgd",
                                   dataset_train_examples=dataset_size(args.data_dir, True),
                                   dataset_test_examples=dataset_size(args.data_dir, False),
                                   predicted_seconds=plan.predicted_seconds, resume=rq.resumed,
                                   resumed_at_step=pos["step"] if rq.resumed else None)
            say("%d examples, %d epochs, global batch %d (%d a rank) on %d ranks, %d nodes, %d threads a rank, "
                "rate %.4g, %d warmup steps; metrics %s%s"
                % (len(xtr), epochs, global_batch, local, world, plan.nodes, threads, peak, warm, metrics.path,
                   "; resumed at step %d" % pos["step"] if rq.resumed else ""))
        acc = 0.0
        while pos["epoch"] <= epochs:
            epoch = pos["epoch"]
            idx = torch.tensor(tt.shard(len(xtr), rank, world, epoch=epoch, seed=args.seed))
            per_rank = len(idx) // local  # whole local batches: every rank takes the same steps
            loss_sum = pos["loss_sum"]
            t_epoch = time.perf_counter() - pos["epoch_seconds"]
            for i in range(pos["batch"], per_rank):
                t0 = time.perf_counter()
                step = pos["step"]
                for g in opt.param_groups:
                    g["lr"] = rate_at(step, total_steps, warm, peak)
                b = idx[i * local:(i + 1) * local]
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(ddp(xtr[b]), ytr[b])
                loss.backward()
                opt.step()
                loss_sum[0] += loss.item()
                loss_sum[1] += 1
                seconds = time.perf_counter() - t0
                if metrics:
                    metrics.step(step, seconds, global_batch)
                pos.update(step=step + 1, batch=i + 1)
                if rq.should_stop(seconds):
                    pos["epoch_seconds"] = time.perf_counter() - t_epoch
                    if world > 1:
                        dist.all_reduce(loss_sum)  # rank 0 saves the ranks' sum
                    if metrics:
                        metrics.close()  # this part's summary: its training seconds
                    rq.stop(pos["step"])  # saves, requeues when allowed, exits with status 3
            seconds = time.perf_counter() - t_epoch
            pos["train_seconds"] += seconds
            acc = evaluate(model, xte, yte, rank, world)
            if world > 1:
                dist.all_reduce(loss_sum)
            train_loss = loss_sum[0].item() / max(1.0, loss_sum[1].item())
            if metrics:
                metrics.epoch(epoch, seconds, acc, train_loss=train_loss)
                say("epoch %d/%d: %.2f s, train loss %.4f, test accuracy %.4f" % (epoch, epochs, seconds, train_loss, acc))
            pos.update(epoch=epoch + 1, batch=0, epoch_seconds=0.0, loss_sum=torch.zeros(2, dtype=torch.float64))
    if metrics:
        metrics.close()
        say("done: train_seconds=%.2f test_accuracy=%.4f global_batch=%d nodes=%d ranks=%d epochs=%d"
            % (pos["train_seconds"], acc, global_batch, plan.nodes, world, epochs))
    if world > 1:
        dist.destroy_process_group()

if __name__ == "__main__":
    main()
