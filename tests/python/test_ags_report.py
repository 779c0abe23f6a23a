"""The large-batch study's report (experiments.ags_report) on fabricated rows with hand-computed
figures: each row's choice on validation accuracy, the test table's mean ± 95 % t half-width,
the critical batches, AGS minus tuned SGD and minus the weak baseline paired by seed, a missing
test run, the edge extensions' runs; and every committed report regenerated from its rows in
results/ags-study, identical to the report.md beside them."""

import contextlib
import io
import os
import unittest

from experiments import ags_report, rows
from experiments.ags_report_text import report
from experiments.ags_study import Study
from committed import assert_regenerated

try:
    import scipy  # noqa: F401
    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPTIONS = {"epochs": 1, "val_split": 1000, "methods": ["sgd", "ags"], "schedules": ["cosine"], "lr_mults": ["1", "2"],
           "extend_edges": 0, "batches": [256, 1024], "reference_batch": 64, "select_seed": 1, "seeds": [2, 3]}
HEADER = {"results": "results/toy", "command": "python3 -m experiments.ags_study_run --model toy", "note": "",
          "provenance": "Made by hand."}


def row(method, batch, mult, seed, test, val=None, done=True):
    return {"study": "toy", "subset": None, "method": method, "batch": batch, "lr_mult": mult, "schedule": "cosine",
            "seed": seed, "val_accuracy": val, "test_accuracy": test, "done": done, "command": "tula-train --batch-size %d" % batch}


def toy_rows():
    """Selection (seed 1, validation): sgd 64 x1 0.90 > x2 0.80; sgd 256 x2; sgd 1024 x2; ags 256
    x1; ags 1024 x2. Test seeds 2 and 3 of the choices; the weak baseline at 1024."""
    out = []
    for m, b, v1, v2 in (("sgd", 64, 0.90, 0.80), ("sgd", 256, 0.85, 0.88), ("sgd", 1024, 0.70, 0.75),
                         ("ags", 256, 0.89, 0.87), ("ags", 1024, 0.86, 0.88)):
        out += [row(m, b, 1, 1, 0.5, v1), row(m, b, 2, 1, 0.87 if (m, b) == ("ags", 1024) else 0.5, v2)]
    for m, b, x, t2, t3 in (("sgd", 64, 1, 0.90, 0.91), ("sgd", 256, 2, 0.88, 0.88), ("sgd", 1024, 2, 0.70, 0.72),
                            ("ags", 256, 1, 0.90, 0.90), ("ags", 1024, 2, 0.90, 0.92)):
        out += [row(m, b, x, 2, t2), row(m, b, x, 3, t3)]
    out += [row("linear", 1024, 1, 1, None, done=False), row("linear", 1024, 1, 2, 0.80), row("linear", 1024, 1, 3, 0.84)]
    # a side experiment's run is not the study's
    out.append(dict(row("ags", 256, 1, 2, 0.10), subset="cpu-check"))
    return out


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class ToyReportTest(unittest.TestCase):
    def setUp(self):
        self.text = report(Study("toy", OPTIONS, toy_rows()), HEADER)

    def line(self, start):
        found = [ln for ln in self.text.splitlines() if ln.startswith(start)]
        self.assertEqual(len(found), 1, "%r in\n%s" % (start, self.text))
        return found[0]

    def test_selection(self):
        self.assertEqual(self.line("| sgd | 64 (reference) |"), "| sgd | 64 (reference) | **0.9000** | 0.8000 | x1 cosine *edge* |")
        self.assertIn("\n| ags | 1024 | 0.8600 | **0.8800** | x2 cosine *edge* |\n", self.text)

    def test_test_table(self):
        # reference: 0.90, 0.91: 0.9050 ± 12.706 x 0.00707 / sqrt(2) = 0.0635; 1024: 0.70, 0.72 and
        # 0.90, 0.92: sd 0.01414, ± 12.706 x 0.01 = 0.1271
        self.assertEqual(self.line("| 64 (reference) |"), "| 64 (reference) | 0.9050 ± 0.0635 | - |")
        self.assertEqual(self.line("| 256 | 0.8800"), "| 256 | 0.8800 ± 0.0000 | 0.9000 ± 0.0000 |")
        self.assertEqual(self.line("| 1024 | 0.7100"), "| 1024 | 0.7100 ± 0.1271 | 0.9100 ± 0.1271 |")

    def test_critical_batch(self):
        # target 0.905, within 0.01: ags 0.90 at 256 and 0.91 at 1024; sgd 0.88 and 0.71
        self.assertIn("mean test accuracy 0.9050.", self.text)
        self.assertEqual(self.line("| sgd | none"), "| sgd | none |")
        self.assertIn("\n| ags | 1024 |\n", self.text)
        self.assertIn("AGS meets the target up to batch 1024, no baseline at any batch of the grid", self.text)

    def test_differences(self):
        # AGS - SGD: 256 +0.02 on both seeds, 1024 +0.20 on both; mean over batches +0.11
        self.assertIn("| 256 | 2 | +0.0200 ± 0.0000 |", self.text)
        self.assertIn("| 1024 | 2 | +0.2000 ± 0.0000 |", self.text)
        self.assertIn("Mean over the 2 batches with pairs: +0.1100 (AGS ahead).", self.text)
        self.assertIn("Mean over the batches from 1024 up (1024): +0.2000 ± 0.0000, over 2 seeds", self.text)
        # weak baseline at 1024: seed 1 diverged (no pair), seeds 2, 3: +0.10, +0.08: +0.0900 ± 12.706 x 0.01 = 0.1271
        self.assertIn("| 1024 | 2 | +0.0900 ± 0.1271 |", self.text)
        self.assertIn("| 256 | 0 | not measured |", self.text)

    def test_header_and_complete(self):
        self.assertTrue(self.text.startswith("# Large-batch optimizer study: toy on Fashion-MNIST\n"))
        self.assertIn("\nMade by hand.\n", self.text)
        self.assertIn("\n    tula-train --batch-size 64\n", self.text)
        self.assertNotIn("Incomplete", self.text)
        self.assertIn("\nWritten by `experiments/ags_report.py` from the rows in `results/toy` ", self.text)
        self.assertIn("regenerate it with the\nstudy's command and `--from-rows`. Command:\n", self.text)
        converted = report(Study("toy", OPTIONS, toy_rows()), dict(HEADER, converted=True))
        self.assertIn("(one per run, converted from the study's\ntula-train logs); regenerate it with `make ags-report`.", converted)

    def test_missing_test_run(self):
        some = [r for r in toy_rows() if (r["method"], r["batch"], r["seed"]) != ("ags", 1024, 3)]
        text = report(Study("toy", OPTIONS, some), HEADER)
        self.assertIn("\n| 1024 | 0.7100 ± 0.1271 | 0.9000 (one seed, no interval); missing: seed 3 |\n", text)
        # a missing seed takes the batch out of the critical batch
        self.assertIn("\n| ags | 256 |\n", text)
        self.assertIn("\n| 1024 | 1 | +0.2000 (one seed, no interval) |\n", text)
        self.assertIn("Incomplete: 1 run of the study has no row yet.", text)


class ToySelectionTest(unittest.TestCase):
    def test_extensions_at_the_edges(self):
        # every choice is at an edge: x1 adds x0.5 below, x2 adds x4 above
        st = Study("toy", dict(OPTIONS, extend_edges=1), toy_rows())
        self.assertEqual(st.missing_selection_runs(), [
            ("sgd", 64, "0.5", "cosine", "1"), ("sgd", 256, "4", "cosine", "1"), ("sgd", 1024, "4", "cosine", "1"),
            ("ags", 256, "0.5", "cosine", "1"), ("ags", 1024, "4", "cosine", "1")])


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class CommittedReportsTest(unittest.TestCase):
    def test_reports_regenerated_from_the_rows(self):
        for study in ("lenet5", "fmnist-cnn"):
            assert_regenerated(self, ags_report.main, os.path.join("results", "ags-study", study))

    def test_selection_of_the_steps_study(self):
        # the steps study's selection: the lenet5 study's choices at its batches
        with contextlib.redirect_stdout(io.StringIO()) as said:
            rc = ags_report.main(["--results", "results/ags-study/lenet5", "print-selection"])
        self.assertEqual(rc, 0)
        wanted = rows.read_manifest(os.path.join(REPO, "results", "ags-steps", "lenet5", "manifest.json"))["options"]["selection"]
        got = said.getvalue().splitlines()
        for line in wanted:
            self.assertIn(line, got)
