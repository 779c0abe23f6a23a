"""The steps study's rows and report (experiments.convert_ags_steps_logs,
experiments.ags_steps_report): a log becomes a row that gives it back byte for byte (a branch, a
trunk, a probe, a log without a command line), names the pattern does not hold are refused; on
fabricated rows with hand-computed figures, each T's mean final test accuracy with its 95 % t
half-width, a seed's steps to the target, "not reached", the seed-paired ratios of steps; the
committed rows of results/ags-steps give back every log and file they were converted from (the
SHA-256 of each in the manifest), and their report.md is regenerated from them identically."""

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
import unittest

from experiments import ags_steps_report as rep
from experiments import convert_ags_steps_logs as conv
from experiments import rows
from committed import assert_regenerated

try:
    import scipy  # noqa: F401
    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BRANCH = ("tula: ags-steps: command: build/bin/tula-train --batch-size 1024 --seed 2 --optimizer ags --lr 0.05"
          " --epochs 10 --schedule wsd --decay-epochs 2 --branch-from w/ags-1024-seed2.ckpt.e8\n"
          "tula-train: branching from w/ags-1024-seed2.ckpt.e8 at epoch 9, step 0 of the epoch (384 steps done)\n"
          "tula-train: lenet5@fashion-mnist: 61706 parameters; 10 epochs of 48 steps; lr 0.05\n"
          "epoch 10/10  loss 0.2348  train-acc 0.911  test-acc 0.896\n"
          "tula-train: done: train_seconds=34.28 test_accuracy=0.8964 global_batch=1024 nodes=1 ranks=1 epochs=10 val_accuracy=0.9025\n")
TRUNK = ("tula: ags-steps: command: tula-train --batch-size 4096 --epochs 32 --schedule constant --checkpoint c --save-epochs 2,4\n"
         "tula-train: training diverged in epoch 3 (loss nan); lower --lr or raise --warmup\n")
PROBE = ("tula: probe: command: tula-train --batch-size 1024 --lr 0.00375 --epochs 32 --schedule constant --device cuda\n"
         "tula-train: done: train_seconds=91.32 test_accuracy=0.8899 global_batch=1024 nodes=1 ranks=1 epochs=32 val_accuracy=0.8948\n")
NO_STATE = "tula: ags-steps: the trunk saved no state at epoch 8 (it diverged or failed; see its log)\n"
SELECTION = ["chosen sgd 64 1 wsd", "chosen lamb 1000 0.5 cosine", "chosen ags 1000 2 wsd", "reference 64 0.905000 0.010000"]
OPTIONS = {"selection": SELECTION, "methods": ["ags", "lamb"], "batches": [1000], "totals": [3, 5, 10], "seeds": [2, 3],
           "decay_share": 0.2, "val_split": 10000}
HEADER = {"results": "results/toy", "command": "python3 -m experiments.ags_steps_run --model toy", "note": "", "provenance": "Made by hand.\n"}


class LogRowTest(unittest.TestCase):
    def test_branch(self):
        r = conv.log_to_row("s", "ags-first-1024-seed2-T10.log", BRANCH, {("ags-first", 1024): 0.5})
        self.assertEqual((r["method"], r["batch"], r["seed"], r["run"], r["lr_mult"], r["schedule"]),
                         ("ags-first", 1024, 2, "T10", 0.5, "wsd"))
        self.assertEqual((r["epochs"], r["decay_epochs"], r["steps_per_epoch"], r["logged_by"]), (10, 2, 48, "ags-steps"))
        self.assertEqual((r["test_accuracy"], r["val_accuracy"], r["train_seconds"], r["done"]), (0.8964, 0.9025, 34.28, True))
        self.assertEqual(conv.row_to_log(r), BRANCH)
        self.assertEqual(conv.log_name(r), "ags-first-1024-seed2-T10.log")

    def test_trunk_probe_and_no_state(self):
        r = conv.log_to_row("s", "first-pass/lamb-4096-seed3-trunk.log", TRUNK, {("lamb", 4096): 0.25})
        self.assertEqual((r["subset"], r["run"], r["lr_mult"], r["schedule"], r["epochs"], r["done"]),
                         ("first-pass", "trunk", 0.25, "constant", 32, False))
        self.assertEqual(r["diverged"], "training diverged in epoch 3 (loss nan); lower --lr or raise --warmup")
        self.assertEqual(conv.row_to_log(r), TRUNK)
        p = conv.log_to_row("s", "fixed-rate/ags-1024-seed2-rate0.06.log", PROBE)
        self.assertEqual((p["run"], p["lr_mult"], p["logged_by"], p["device"], p["test_accuracy"]), ("rate0.06", None, "probe", "cuda", 0.8899))
        self.assertEqual(conv.log_name(p), "fixed-rate/ags-1024-seed2-rate0.06.log")
        self.assertEqual(conv.row_to_log(p), PROBE)
        n = conv.log_to_row("s", "ags-1024-seed2-T10.log", NO_STATE)
        self.assertEqual((n["command"], n["done"], n["test_accuracy"], n["device"]), (None, False, None, None))
        self.assertEqual(conv.row_to_log(n), NO_STATE)

    def test_refused(self):
        for name, text in (("ags-1024-seed2.log", BRANCH), ("ags-1024-seed2-T.log", BRANCH), ("ags-1024-seed2-T10.log", BRANCH.rstrip("\n"))):
            with self.assertRaises(ValueError, msg=name):
                conv.log_to_row("s", name, text)
        self.assertIsNone(conv.log_to_row("s", "ags-1024-seed2.log", BRANCH, strict=False))

    def test_chosen_mults(self):
        self.assertEqual(conv.chosen_mults(SELECTION + ["chosen lars 1000 - -"]),
                         {("sgd", 64): 1, ("lamb", 1000): 0.5, ("ags", 1000): 2})

    def test_convert_a_folder(self):
        d = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, d)
        os.makedirs(os.path.join(d, "logs", "probe"))
        files = {"ags-1024-seed2-T10.log": BRANCH, "probe/ags-1024-seed2-rate0.06.log": PROBE, "NOTE.md": "Made here.\n",
                 "selection.txt": "chosen ags 1024 2 wsd\nreference 64 0.905000 0.010000\n", "probe/selection.txt": "chosen ags 1024 4 wsd\n"}
        for name, text in files.items():
            with open(os.path.join(d, "logs", name), "w") as f:
                f.write(text)
        out = os.path.join(d, "out")
        with contextlib.redirect_stdout(io.StringIO()) as said:
            rc = conv.main(["--logs", os.path.join(d, "logs"), "--out", out, "--study", "toy", "--seeds", "2 3"])
        self.assertEqual(rc, 0)
        self.assertTrue(said.getvalue().startswith("tula: convert_ags_steps_logs: 2 rows from "))
        got = rows.read_rows(os.path.join(out, "runs.jsonl"))
        self.assertEqual([(conv.log_name(r), r["lr_mult"]) for r in got],
                         [("ags-1024-seed2-T10.log", 2), ("probe/ags-1024-seed2-rate0.06.log", 4)])
        m = rows.read_manifest(os.path.join(out, "manifest.json"))
        self.assertEqual((m["study"], m["provenance"], m["options"]["seeds"]), ("toy", "Made here.\n", [2, 3]))
        self.assertEqual(m["options"]["selection"], ["chosen ags 1024 2 wsd", "reference 64 0.905000 0.010000"])
        self.assertEqual(m["subsets"], {"probe": {"selection": ["chosen ags 1024 4 wsd"]}})
        self.assertEqual(sorted(m["source"]["file_sha256"]), ["NOTE.md", "probe/selection.txt", "selection.txt"])
        self.assertEqual(m["source"]["log_sha256"]["ags-1024-seed2-T10.log"], hashlib.sha256(BRANCH.encode()).hexdigest())


def branch(method, seed, t, acc, steps=40):
    return {"study": "toy", "subset": None, "method": method, "batch": 1000, "seed": seed, "run": "T%d" % t,
            "test_accuracy": acc, "done": True, "steps_per_epoch": steps}


def toy_rows():
    """Target 0.905 - 0.01 = 0.895 at 40 steps per epoch: ags reaches it at T=5 (seed 2) and
    T=10 (seed 3); lamb at T=10 (seed 2), never (seed 3)."""
    out = []
    for m, s, accs in (("ags", 2, (0.85, 0.90, 0.91)), ("ags", 3, (0.84, 0.89, 0.90)),
                       ("lamb", 2, (0.80, 0.88, 0.896)), ("lamb", 3, (0.81, 0.87, 0.89))):
        out += [branch(m, s, t, a) for t, a in zip((3, 5, 10), accs)]
    # a side experiment's run is not the study's
    out.append(dict(branch("lamb", 3, 10, 0.99), subset="first-pass"))
    return out


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class ToyReportTest(unittest.TestCase):
    def text(self, methods=("ags", "lamb"), extra=(), drop=()):
        rs = [r for r in toy_rows() + list(extra) if (r["method"], r["seed"], r["run"]) not in drop]
        return rep.report(rep.Steps("toy", dict(OPTIONS, methods=list(methods)), rs), HEADER)

    def test_accuracy_steps_and_ratio(self):
        text = self.text()
        self.assertIn("\nWritten by `experiments/ags_steps_report.py` from the rows in `results/toy` ", text)
        self.assertIn("\n    python3 -m experiments.ags_steps_run --model toy\n\nMade by hand.\n\n", text)
        self.assertIn("minus 0.01: **0.8950**", text)
        # ags T=5: 0.90, 0.89: mean 0.895, sd 0.00707, t(1) 12.706: half-width 0.0635
        self.assertIn("\n| ags | 1000 | 0.8450 ± 0.0635 | 0.8950 ± 0.0635 | 0.9050 ± 0.0635 |\n", text)
        # steps 200 and 400: mean 300, sd 141.4, half-width 12.706 x 100 = 1271; epochs 7.5 ± 31.8
        self.assertIn("\n| ags | 1000 | 40 | seed 2: 200 (5), seed 3: 400 (10) | 300 ± 1271 | 7.5 ± 31.8 |\n", text)
        self.assertIn("\n| lamb | 1000 | 40 | seed 2: 400 (10), seed 3: not reached in 10 epochs | not every seed | - |\n", text)
        self.assertIn("\n- batch 1000, lamb / ags: 2.00 (left out: seed 3)\n", text)
        self.assertTrue(text.endswith("and other decay shares.\n"))

    def test_missing_branch_and_steps_per_epoch_fallback(self):
        # lamb seed 3 has no T=3 branch: one value, no interval; lamb seed 2 at 10 epochs has
        # the steps of the validation split's fallback, (60000 - 10000) / 1000 = 50 per epoch,
        # once no lamb row gives its steps
        rs = [dict(r, steps_per_epoch=None) if r["method"] == "lamb" else r for r in toy_rows()]
        st = rep.Steps("toy", OPTIONS, [r for r in rs if (r["method"], r["seed"], r["run"]) != ("lamb", 3, "T3")])
        text = rep.report(st, HEADER)
        self.assertIn("\n| lamb | 1000 | 0.8000 (1 of 2) | 0.8750 ± 0.0635 | 0.8930 ± 0.0381 |\n", text)
        self.assertIn("\n| lamb | 1000 | 50 | seed 2: 500 (10), seed 3: not reached in 10 epochs | not every seed | - |\n", text)

    def test_variant_against_baselines_and_ags(self):
        # ags-first reaches the target at T=10 (seed 2) and T=5 (seed 3)
        extra = [branch("ags-first", s, t, a) for s, accs in ((2, (0.80, 0.89, 0.90)), (3, (0.85, 0.90, 0.90)))
                 for t, a in zip((3, 5, 10), accs)]
        text = self.text(("ags", "lamb", "ags-first"), extra)
        self.assertIn("\n- batch 1000, lamb / ags: 2.00 (left out: seed 3)\n", text)
        self.assertIn("\n- batch 1000, lamb / ags-first: 1.00 (left out: seed 3)\n", text)
        # ags / ags-first: 200 / 400 and 400 / 200: 0.5 and 2, mean 1.25, sd 1.0607, half-width 9.53
        self.assertIn("\n- batch 1000, ags / ags-first: 1.25 ± 9.53\n", text)

    def test_no_ratios_without_ags(self):
        self.assertNotIn("## AGS against the baselines", self.text(("lamb",)))

    def test_no_results(self):
        with contextlib.redirect_stderr(io.StringIO()) as said:
            self.assertEqual(rep.main(["--results", os.path.join(REPO, "no-such-folder")]), 1)
        self.assertTrue(said.getvalue().startswith("tula: ags_steps_report: "))


class CommittedRowsTest(unittest.TestCase):
    def setUp(self):
        self.base = os.path.join(REPO, "results", "ags-steps", "lenet5")
        self.manifest = rows.read_manifest(os.path.join(self.base, "manifest.json"))

    def test_rows_give_back_every_log_and_file(self):
        got = {}
        for r in rows.read_rows(os.path.join(self.base, "runs.jsonl")):
            self.assertEqual(r["study"], "lenet5")
            got[conv.log_name(r)] = hashlib.sha256(conv.row_to_log(r).encode()).hexdigest()
        self.assertEqual(got, self.manifest["source"]["log_sha256"])
        texts = {"NOTE.md": self.manifest["provenance"], "selection.txt": "\n".join(self.manifest["options"]["selection"]) + "\n"}
        for name, sub in self.manifest["subsets"].items():
            texts[name + "/selection.txt"] = "\n".join(sub["selection"]) + "\n"
        self.assertEqual({k: hashlib.sha256(v.encode()).hexdigest() for k, v in texts.items()}, self.manifest["source"]["file_sha256"])

    @unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
    def test_report_regenerated_from_the_rows(self):
        assert_regenerated(self, rep.main, os.path.join("results", "ags-steps", "lenet5"))
