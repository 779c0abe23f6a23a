"""The large-batch study's rows (experiments.rows, experiments.convert_ags_logs): a log becomes a
row that gives it back byte for byte (a finished run, a diverged one), names the logs' pattern
does not hold are refused, runs.jsonl is written and read back, and the committed rows of
results/ags-study give back every log they were converted from (the SHA-256 of each in the
manifest)."""

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import unittest

from experiments import convert_ags_logs as conv
from experiments import rows

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DONE = ("tula: ags-study: command: build/bin/tula-train --model lenet5 --batch-size 1024 --device cuda\n"
        "tula-train: done: train_seconds=31.78 test_accuracy=0.9040 global_batch=1024 nodes=1 ranks=1 epochs=10 val_accuracy=0.9079\n")
DIVERGED = ("tula: ags-study: command: tula-train --batch-size 4096\n"
            "tula-train: training diverged in epoch 2 (loss nan); lower --lr or raise --warmup\n")


class LogRowTest(unittest.TestCase):
    def test_finished_run(self):
        r = conv.log_to_row("s", "ags-sqrt-1024-lr0.0625-wsd-seed3.log", DONE)
        self.assertEqual((r["method"], r["batch"], r["lr_mult"], r["schedule"], r["seed"]), ("ags-sqrt", 1024, 0.0625, "wsd", 3))
        self.assertEqual((r["test_accuracy"], r["val_accuracy"], r["train_seconds"]), (0.904, 0.9079, 31.78))
        self.assertEqual((r["done"], r["diverged"], r["device"], r["subset"]), (True, None, "cuda", None))
        self.assertEqual(r["command"], "build/bin/tula-train --model lenet5 --batch-size 1024 --device cuda")
        self.assertEqual(conv.row_to_log(r), DONE)
        self.assertEqual(conv.log_name(r), "ags-sqrt-1024-lr0.0625-wsd-seed3.log")

    def test_diverged_run_in_a_subset(self):
        r = conv.log_to_row("s", "cpu-check/linear-4096-lr1-cosine-seed1.log", DIVERGED)
        self.assertEqual((r["subset"], r["lr_mult"], r["done"], r["test_accuracy"], r["device"]), ("cpu-check", 1, False, None, "cpu"))
        self.assertEqual(r["diverged"], "training diverged in epoch 2 (loss nan); lower --lr or raise --warmup")
        self.assertEqual(conv.row_to_log(r), DIVERGED)
        self.assertEqual(conv.log_name(r), "cpu-check/linear-4096-lr1-cosine-seed1.log")

    def test_nan_accuracy_is_null(self):
        r = conv.log_to_row("s", "sgd-64-lr1-cosine-seed2.log", DONE.replace("0.9040", "nan"))
        self.assertIsNone(r["test_accuracy"])
        self.assertTrue(r["done"])

    def test_refused(self):
        for name, text in (("ags-1024-lr1.0-cosine-seed1.log", DONE), ("ags-1024-cosine-seed1.log", DONE),
                           ("ags-1024-lr1-cosine-seed1.log", DONE.rstrip("\n")),
                           ("ags-1024-lr1-cosine-seed1.log", DONE.split("\n", 1)[1])):
            with self.assertRaises(ValueError, msg=name):
                conv.log_to_row("s", name, text)
        self.assertIsNone(conv.log_to_row("s", "ags-1024-lr1.0-cosine-seed1.log", DONE, strict=False))
        r = conv.log_to_row("s", "ags-1024-lr1-cosine-seed1.log", DONE.split("\n", 1)[1], strict=False)
        self.assertEqual((r["command"], r["done"], r["device"]), (None, True, None))

    def test_jsonl_round_trip(self):
        d = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, d)
        written = [conv.log_to_row("s", "ags-1024-lr1-cosine-seed1.log", DONE),
                   conv.log_to_row("s", "linear-4096-lr1-cosine-seed1.log", DIVERGED)]
        path = os.path.join(d, "runs.jsonl")
        rows.write_rows(path, written)
        self.assertEqual(rows.read_rows(path), written)
        with open(path) as f:
            first = json.loads(f.readline())
        self.assertEqual(list(first), list(rows.FIELDS))

    def test_convert_a_folder(self):
        d = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, d)
        os.makedirs(os.path.join(d, "logs", "side"))
        for name, text in (("ags-1024-lr1-cosine-seed1.log", DONE), ("side/linear-4096-lr1-cosine-seed1.log", DIVERGED),
                           ("NOTE.md", "Made here.\n")):
            with open(os.path.join(d, "logs", name), "w") as f:
                f.write(text)
        out = os.path.join(d, "out")
        with contextlib.redirect_stdout(io.StringIO()) as said:
            rc = conv.main(["--logs", os.path.join(d, "logs"), "--out", out, "--study", "toy", "--model", "lenet5",
                             "--seeds", "2 3", "--extend-edges", "1", "--", "--device", "cuda"])
        self.assertEqual(rc, 0)
        self.assertTrue(said.getvalue().startswith("tula: convert_ags_logs: 2 rows from "))
        got = rows.read_rows(os.path.join(out, "runs.jsonl"))
        self.assertEqual([conv.log_name(r) for r in got], ["ags-1024-lr1-cosine-seed1.log", "side/linear-4096-lr1-cosine-seed1.log"])
        m = rows.read_manifest(os.path.join(out, "manifest.json"))
        self.assertEqual((m["study"], m["model"], m["provenance"]), ("toy", "lenet5", "Made here.\n"))
        self.assertEqual((m["options"]["seeds"], m["options"]["extend_edges"], m["options"]["extra"]), ([2, 3], 1, ["--device", "cuda"]))
        self.assertEqual(m["source"]["log_sha256"]["ags-1024-lr1-cosine-seed1.log"], hashlib.sha256(DONE.encode()).hexdigest())


class CommittedRowsTest(unittest.TestCase):
    def test_rows_give_back_every_log(self):
        base = os.path.join(REPO, "results", "ags-study")
        studies = sorted(os.listdir(base))
        self.assertEqual(studies, ["fmnist-cnn", "lenet5"])
        for study in studies:
            manifest = rows.read_manifest(os.path.join(base, study, "manifest.json"))
            got = {}
            for r in rows.read_rows(os.path.join(base, study, "runs.jsonl")):
                self.assertEqual(r["study"], study)
                got[conv.log_name(r)] = hashlib.sha256(conv.row_to_log(r).encode()).hexdigest()
            self.assertEqual(got, manifest["source"]["log_sha256"], study)
