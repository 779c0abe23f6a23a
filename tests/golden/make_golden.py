#!/usr/bin/python3
"""Writes the golden files of tests/unit/test_trainer_golden.cpp with Debian's PyTorch.

Run by hand from the repository root (not part of the build):
    /usr/bin/python3 tests/golden/make_golden.py      # needs python3-torch (Debian 1.13.1)

Each case is one file tests/golden/<case>.tg, little-endian:
    magic   uint32  0x474C5554 ("TULG")
    version uint32  1
    count   uint32  number of tensors
    count times:
        name_len uint32, name (ASCII, name_len bytes)
        ndim uint32, dims ndim x uint32
        data     prod(dims) x float32 (row-major, PyTorch's layout)
Layer cases hold the input x, the parameters, the output y, an upstream gradient dy (the
loss is sum(y * dy)), and the gradients dx / d<param>. Weights, inputs and dy are drawn
from a fixed seed. The lenet5 case is one full forward/backward of the network with
softmax cross-entropy (mean over the batch) on 1x12x12 inputs (the smallest LeNet-5 takes,
to keep the files small): params and grads are flattened in the trainer's order
(= model.parameters() order).

Parameter counts of the zoo models (stated in tests/unit/test_trainer_model.cpp) come from
count_params() below: `/usr/bin/python3 tests/golden/make_golden.py --counts`.
"""
import struct
import sys

import torch
from torch import nn

MAGIC = 0x474C5554
VERSION = 1


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(struct.pack("<III", MAGIC, VERSION, len(tensors)))
        for name, t in tensors:
            t = t.detach().to(torch.float32).contiguous()
            nb = name.encode("ascii")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            dims = list(t.shape) if t.dim() > 0 else [1]
            f.write(struct.pack("<I", len(dims)))
            f.write(struct.pack("<%dI" % len(dims), *dims))
            f.write(t.numpy().astype("<f4").tobytes())


def layer_case(path, layer, x, train=True):
    layer.train(train)
    x = x.clone().requires_grad_(True)
    params = list(layer.named_parameters())
    y = layer(x)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    out = [("x", x)] + [(n, p) for n, p in params] + [("y", y), ("dy", dy), ("dx", x.grad)]
    out += [("d" + n, p.grad) for n, p in params]
    for n, b in layer.named_buffers():
        if b.dtype == torch.float32:
            out.append((n, b))  # e.g. running_mean / running_var after the step
    write(path, out)


def count_params():
    import torchvision
    def n(m):
        return sum(p.numel() for p in m.parameters())
    for c, k in [(3, 10), (1, 10), (3, 100)]:
        r = torchvision.models.resnet18(num_classes=k)
        r.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
        r.maxpool = nn.Identity()
        r50 = torchvision.models.resnet50(num_classes=k)
        r50.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
        r50.maxpool = nn.Identity()
        v = torchvision.models.vgg11_bn(num_classes=k)
        v.features[0] = nn.Conv2d(c, 64, 3, padding=1)
        a = torchvision.models.alexnet(num_classes=k)
        a.features[0] = nn.Conv2d(c, 64, 3, 1, 1)
        m = torchvision.models.mobilenet_v3_small(num_classes=k)
        m.features[0][0] = nn.Conv2d(c, 16, 3, 1, 1, bias=False)
        print(c, k, "resnet18", n(r), "resnet50", n(r50), "vgg11", n(v), "alexnet", n(a), "mobilenetv3-small", n(m))


def main():
    if "--counts" in sys.argv:
        count_params()
        return
    torch.manual_seed(20261123)
    d = "tests/golden/"
    layer_case(d + "conv_basic.tg", nn.Conv2d(3, 4, 3, padding=1), torch.randn(2, 3, 5, 5))
    layer_case(d + "conv_strided.tg", nn.Conv2d(2, 3, 3, stride=2, padding=1, bias=False), torch.randn(2, 2, 7, 6))
    layer_case(d + "conv_grouped.tg", nn.Conv2d(4, 6, 3, padding=1, groups=2), torch.randn(2, 4, 5, 5))
    layer_case(d + "conv_depthwise.tg", nn.Conv2d(4, 4, 5, stride=2, padding=2, groups=4, bias=False),
               torch.randn(2, 4, 7, 7))
    bn = nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    layer_case(d + "batchnorm_train.tg", bn, 1.5 * torch.randn(4, 3, 3, 3) + 0.7)
    layer_case(d + "linear.tg", nn.Linear(7, 5), torch.randn(3, 7))
    layer_case(d + "maxpool.tg", nn.MaxPool2d(2), torch.randn(2, 2, 6, 6))

    # lenet5, one forward/backward with softmax cross-entropy
    net = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(16, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    x = torch.randn(4, 1, 12, 12)
    labels = torch.tensor([3, 0, 9, 3])
    logits = net(x)
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()
    params = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    grads = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    write(d + "lenet5.tg", [("x", x), ("labels", labels.float()), ("params", params), ("logits", logits),
                            ("loss", loss.reshape(1)), ("grads", grads)])


if __name__ == "__main__":
    main()
