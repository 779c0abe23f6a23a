#!/usr/bin/python3
"""PyTorch side of bench/bench-trainer-vs-pytorch: training images/s of lenet5 or
fmnist-cnn (the brief's definitions) at a given batch and thread count, SGD momentum 0.9,
random 1x28x28 inputs (speed does not depend on the values).

usage: bench_trainer_vs_pytorch.py MODEL BATCH THREADS ITERS
prints one line: "<images/s>"; exit 3 when torch is not importable.
"""
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit(3)


def lenet5():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def fmnist_cnn():
    def blk(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
    return nn.Sequential(*blk(1, 32), *blk(32, 32), nn.MaxPool2d(2), *blk(32, 64), *blk(64, 64), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 256), nn.ReLU(), nn.Linear(256, 10))


def main():
    name, batch, threads, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    net = {"lenet5": lenet5, "fmnist-cnn": fmnist_cnn}[name]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    dt = time.perf_counter() - t0
    print("%.1f" % (batch * iters / dt))


if __name__ == "__main__":
    main()
