#!/usr/bin/env python3
"""A stand-in for tula-train in the runners' tests: it trains nothing. It appends its process id and
command line to $FAKE_CALLS (one line a call), sleeps $FAKE_SLEEP seconds, and ends the way tula-train does:
with --summary FILE's run header and summary line (accuracies from the seed, batch and --lr) and
the done line; with $FAKE_FAIL set, with exit status 3 and no summary; or, when the --lr of the call is at least $FAKE_DIVERGE_LR, with the divergence
message and exit status 1. With --save-epochs it writes CHECKPOINT.eK for each K."""
import json
import os
import sys
import time


def opt(args, name, default=None):
    for i, w in enumerate(args):
        if w == name and i + 1 < len(args):
            return args[i + 1]
    return default


def main(args):
    if os.environ.get("FAKE_CALLS"):
        with open(os.environ["FAKE_CALLS"], "a") as f:
            f.write("%d %s\n" % (os.getpid(), " ".join(args)))
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    if os.environ.get("FAKE_FAIL"):
        print("fake: failed", file=sys.stderr)
        return 3
    lr = float(opt(args, "--lr", "0.05"))
    if lr >= float(os.environ.get("FAKE_DIVERGE_LR", "inf")):
        print("tula-train: training diverged in epoch 1 (loss nan); lower --lr or raise --warmup-epochs", file=sys.stderr)
        return 1
    batch, seed, epochs = int(opt(args, "--batch-size", "64")), int(opt(args, "--seed", "0")), int(opt(args, "--epochs", "1"))
    # the accuracy peaks at lr 0.05 and falls with the batch; the seed and the epochs move it a little
    test = round(0.9 - abs(lr - 0.05) - batch / 100000.0 + seed / 1000.0 + epochs / 10000.0, 4)
    val = round(test + 0.005, 4)
    ck = opt(args, "--checkpoint")
    for k in (opt(args, "--save-epochs") or "").split(","):
        if k and ck:
            open("%s.e%s" % (ck, k), "w").close()
    summary = opt(args, "--summary")
    if summary:
        with open(summary, "w") as f:
            f.write(json.dumps({"type": "run", "host": "fakehost", "steps_per_epoch": 50000 // batch, "seed": seed}) + "\n")
            f.write(json.dumps({"type": "summary", "train_seconds": 1.5, "test_accuracy": test, "val_accuracy": val}) + "\n")
    print("tula-train: done: train_seconds=1.50 test_accuracy=%.4f global_batch=%d nodes=1 ranks=1 epochs=%d val_accuracy=%.4f"
          % (test, batch, epochs, val), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
