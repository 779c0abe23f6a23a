#!/usr/bin/python3
"""A torchvision ResNet-50 job on one GPU through the tula Python package, on synthetic
ImageNet-shaped data, for the GPU checks of the compute model and of the first job
(bench/bench-gpu-compute --torch, bench/bench-gpu-first-job).

    python3 bench/torch_resnet50.py [--batch-size B] [--epochs E] [--train-examples N] [--device D]
    python3 bench/torch_resnet50.py --profile     (under tula profile compute --command)

Data: N images (3, S, S) of standard normal pixels and uniform labels over C classes (defaults
N 12,800, S 224, C 1,000), drawn on the device from --seed, and 1,000 more as the test set;
the accuracy on such labels says nothing about the model and is printed only as the run's
record. Model: torchvision.models.resnet50(num_classes=C), fp32 with TF32 convolutions
(PyTorch's default), cudnn.benchmark. Optimizer: SGD, momentum 0.9, weight decay 5e-5, rate
0.1 x B / 256 with cosine decay. The global batch and epochs come from tula.plan()
(TULA_BATCH_SIZE, TULA_EPOCHS), else --batch-size / --epochs, else 128 and 2. With
TULA_PROFILE set (tula-jobs(7)) it measures its step first with tula.measure() on a copy of the
model, the random number generators forked so that training draws what it would have drawn
without it. Rank 0 writes the metrics file (--metrics, else $TULA_METRICS, else
tula-metrics-JOB.jsonl) that `tula db record --metrics` records; the workload is
torch-resnet50@synthetic-3xSxS-C. One process, one GPU: no allreduce."""

import argparse
import copy
import math
import os
import sys
import time

try:
    import tula
except ImportError:  # not installed: the tree's python/ next to this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import tula

import torch
import torch.nn.functional as F
import torchvision

BASE_LR, BASE_BATCH = 0.1, 256


def say(*args):
    print("torch_resnet50:", *args, flush=True)


def workload(size, classes):
    return "torch-resnet50@synthetic-3x%dx%d-%d" % (size, size, classes)


def synthetic(n, size, classes, seed, device):
    """(x, y): N standard normal images (N, 3, SIZE, SIZE) float32 and uniform labels (N,) int64
    over CLASSES, drawn on DEVICE from SEED."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    x = torch.randn(n, 3, size, size, generator=g, device=device)
    y = torch.randint(0, classes, (n,), generator=g, device=device)
    return x, y


def make_model(classes, device):
    return torchvision.models.resnet50(num_classes=classes).to(device)


def make_optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": 5e-5}, {"params": rest, "weight_decay": 0.0}],
                           lr=lr, momentum=0.9)


def step_fn(model, opt, device):
    """One training step on (x, y): forward, loss, backward, update; returns when the device is done."""
    def step(data):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(data[0]), data[1]).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return step


def profile_mode(args, device):
    """tula profile compute --command: one training step timed per local batch."""
    batches = tula.profile_batches() or [16, 32, 64, 128, 256]
    torch.manual_seed(args.seed)
    x, y = synthetic(max(batches), args.image_size, args.classes, args.seed, device)
    model = make_model(args.classes, device)
    opt = make_optimizer(model, BASE_LR)
    w = os.environ.get("TULA_WORKLOAD") or workload(args.image_size, args.classes)
    with tula.Metrics(None, workload=w, nodes=1, ranks=1, global_batch=None,
                      params=sum(p.numel() for p in model.parameters()), train_examples=args.train_examples,
                      test_examples=args.test_examples) as metrics:
        tula.profile(step_fn(model, opt, device), lambda b: (x[:b], y[:b]), batches=batches, metrics=metrics)


def evaluate(model, x, y, batch=250):
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, len(x), batch):
            correct += (model(x[lo:lo + batch]).argmax(1) == y[lo:lo + batch]).sum().item()
    model.train()
    return correct / len(x)


def train(args, device):
    plan = tula.plan(default_batch=128, default_epochs=2)
    batch = args.batch_size or plan.global_batch
    epochs = args.epochs or plan.epochs
    w = workload(args.image_size, args.classes)
    torch.manual_seed(args.seed)
    xtr, ytr = synthetic(args.train_examples, args.image_size, args.classes, args.seed, device)
    xte, yte = synthetic(args.test_examples, args.image_size, args.classes, args.seed + 1, device)
    model = make_model(args.classes, device)
    params = sum(p.numel() for p in model.parameters())
    if os.environ.get("TULA_PROFILE"):
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            scratch = copy.deepcopy(model)
            tula.measure(step_fn(scratch, make_optimizer(scratch, BASE_LR), device),
                         lambda b: (xtr[:min(b, len(xtr))], ytr[:min(b, len(ytr))]), batch, workload=w, nodes=1,
                         ranks=1, params=params, train_examples=len(xtr), test_examples=len(xte),
                         path=os.path.splitext(args.metrics)[0] + ".profile.jsonl" if args.metrics else None)
            del scratch
    peak = BASE_LR * batch / BASE_BATCH
    opt = make_optimizer(model, peak)
    steps_per_epoch = len(xtr) // batch
    total = steps_per_epoch * epochs
    metrics = tula.Metrics(args.metrics, workload=w, nodes=1, ranks=1, global_batch=batch, epochs=epochs,
                           params=params, train_examples=len(xtr), test_examples=len(xte), optimizer="sgd",
                           predicted_seconds=plan.predicted_seconds)
    say("%s: %d examples, %d epochs, global batch %d on %s; metrics %s"
        % (w, len(xtr), epochs, batch, device, metrics.path))
    step = step_fn(model, opt, device)
    g = torch.Generator(device="cpu")
    train_seconds, loss, acc, n = 0.0, 0.0, 0.0, 0
    with metrics:
        for epoch in range(1, epochs + 1):
            g.manual_seed(args.seed + epoch)
            order = torch.randperm(len(xtr), generator=g).to(device)
            t_epoch = time.perf_counter()
            for i in range(steps_per_epoch):
                t0 = time.perf_counter()
                for group in opt.param_groups:
                    group["lr"] = peak * 0.5 * (1 + math.cos(math.pi * n / total))
                idx = order[i * batch:(i + 1) * batch]
                step((xtr[idx], ytr[idx]))
                metrics.step(n, time.perf_counter() - t0, batch)
                n += 1
            seconds = time.perf_counter() - t_epoch
            train_seconds += seconds
            with torch.no_grad():
                loss = F.cross_entropy(model(xtr[:250]), ytr[:250]).item()  # on the first 250 training images
            acc = evaluate(model, xte, yte)
            metrics.epoch(epoch, seconds, acc, train_loss=loss)
            say("epoch %d/%d: %.2f s, loss %.4f, test accuracy %.4f" % (epoch, epochs, seconds, loss, acc))
    say("done: train_seconds=%.2f test_accuracy=%.4f loss=%.6f global_batch=%d epochs=%d"
        % (train_seconds, acc, loss, batch, epochs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, help="global batch (default: Tula's plan, else 128)")
    ap.add_argument("--epochs", type=int, help="epochs (default: Tula's plan, else 2)")
    ap.add_argument("--train-examples", type=int, default=12800, metavar="N")
    ap.add_argument("--test-examples", type=int, default=1000, metavar="N")
    ap.add_argument("--image-size", type=int, default=224, metavar="S")
    ap.add_argument("--classes", type=int, default=1000, metavar="C")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--metrics", help="metrics file (default: $TULA_METRICS, else tula-metrics-JOB.jsonl)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="time training steps for tula profile compute --command")
    args = ap.parse_args()
    for name in ("batch_size", "epochs", "train_examples", "test_examples", "image_size", "classes"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error("--%s must be >= 1" % name.replace("_", "-"))
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    try:
        return profile_mode(args, device) if args.profile else train(args, device)
    except ValueError as e:
        if str(e).startswith("tula: "):
            sys.exit(str(e))
        raise


if __name__ == "__main__":
    main()
