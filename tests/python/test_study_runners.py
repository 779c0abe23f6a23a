"""The studies' runners (experiments.ags_study_run, experiments.ags_steps_run, experiments.runner)
with a stand-in trainer (fake_tula_train.py): each run once with its recipe's options and its row
from the trainer's summary file, a second invocation trains nothing, a diverged run is kept and a
failed one trained again, SIGTERM stops the runs in flight (none left running, no row of theirs,
exit status 143, one `tula:` line) and the next invocation trains them; bad options; the steps
chains (trunk, branches, states removed); the recipes' sentence of the report."""

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from experiments import ags_steps_run, ags_study_run, recipes, rows

try:
    import scipy  # noqa: F401
    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
FAKE = os.path.join(HERE, "fake_tula_train.py")
GRID = ["--methods", "sgd lamb ags", "--batches", "256", "--lr-mults", "1 2", "--schedules", "cosine", "--seeds", "2",
        "--epochs", "1", "--val-split", "1000", "--jobs", "1", "--trainer", FAKE]


class Env:
    """A temporary folder and the stand-in's environment (FAKE_*), undone at the test's end."""

    def __init__(self, test, **env):
        self.dir = tempfile.mkdtemp(prefix="tula-py-")
        test.addCleanup(shutil.rmtree, self.dir)
        self.calls = os.path.join(self.dir, "calls")
        self.env = dict(FAKE_CALLS=self.calls, **env)
        for k, v in self.env.items():
            old = os.environ.get(k)
            os.environ[k] = v
            test.addCleanup(_restore, k, old)

    def call_lines(self):
        if not os.path.exists(self.calls):
            return []
        with open(self.calls) as f:
            return [ln.split(" ", 1)[1] for ln in f.read().splitlines()]

    def path(self, *p):
        return os.path.join(self.dir, *p)


def _restore(k, old):
    if old is None:
        os.environ.pop(k, None)
    else:
        os.environ[k] = old


def quiet(fn, *a):
    """fn(*a) with its standard error captured: (result, stderr text)."""
    with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
        rc = fn(*a)
    return rc, err.getvalue()


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class StudyRunnerTest(unittest.TestCase):
    def test_runs_once_with_the_recipes_and_resumes(self):
        e = Env(self)
        res = e.path("r")
        rc, err = quiet(ags_study_run.main, GRID + ["--results", res, "--note", "A note."])
        self.assertEqual(rc, 0, err)
        calls = e.call_lines()
        # selection: sgd at 64 and 256, lamb and ags at 256, x1 and x2; the weak baseline on seeds 1, 2;
        # the four choices on seed 2 (ags's and sgd's x1 at 256 on seed 2 are their own runs)
        self.assertEqual(len(calls), 8 + 2 + 4)
        self.assertEqual(len(calls), len(set(calls)))
        self.assertTrue(any("--optimizer sgd --lr-scaling linear --lr-max 0.8 --lr 0.1 --schedule cosine" in c for c in calls))
        self.assertTrue(any("--optimizer lamb --lr-scaling sqrt --lr 0.02 " in c for c in calls))
        self.assertTrue(any("--optimizer sgd --lr-scaling linear --lr-max 0 --lr 0.05 --schedule cosine" in c for c in calls))
        got = rows.read_rows(os.path.join(res, "runs.jsonl"))
        self.assertEqual(len(got), len(calls))
        r = got[0]
        self.assertEqual(list(r)[:len(rows.FIELDS)], list(rows.FIELDS))
        self.assertEqual((r["host"], r["done"], r["diverged"], r["train_seconds"]), ("fakehost", True, None, 1.5))
        self.assertEqual(r["test_accuracy"] + 0.005, r["val_accuracy"])
        self.assertIn("tula-train: done:", r["output"][-1])
        manifest = rows.read_manifest(os.path.join(res, "manifest.json"))
        self.assertEqual(manifest["options"]["lr_mults"], ["1", "2"])
        with open(os.path.join(res, "report.md")) as f:
            text = f.read()
        self.assertIn("\nA note.\n", text)
        self.assertIn("| lamb |", text)
        # the second invocation trains nothing
        rc, err = quiet(ags_study_run.main, GRID + ["--results", res])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(e.call_lines()), len(calls))
        self.assertIn("10 selection or weak-baseline runs already have a complete row", err)
        # --print-selection
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(ags_study_run.main(GRID + ["--results", res, "--print-selection"]), 0)
        self.assertIn("chosen ags 256 1 cosine", out.getvalue().splitlines())
        self.assertTrue(out.getvalue().splitlines()[-1].startswith("reference 64 0.90"))

    def test_diverged_run_kept_failed_run_trained_again(self):
        e = Env(self, FAKE_DIVERGE_LR="0.1")
        res = e.path("r")
        args = GRID + ["--results", res, "--methods", "sgd", "--seeds", "2"]
        rc, err = quiet(ags_study_run.main, args)
        self.assertEqual(rc, 0, err)
        div = [r for r in rows.read_rows(os.path.join(res, "runs.jsonl")) if r["diverged"]]
        self.assertEqual(len(div), 2)  # x2 at 64 and 256
        self.assertTrue(div[0]["diverged"].startswith("training diverged in epoch 1"))
        n = len(e.call_lines())
        os.environ["FAKE_FAIL"] = "1"
        self.addCleanup(_restore, "FAKE_FAIL", None)
        os.remove(os.path.join(res, "runs.jsonl"))
        rc, err = quiet(ags_study_run.main, args)
        self.assertEqual(rc, 1)
        self.assertIn("failed (exit 3): fake: failed", err)
        self.assertIn("runs failed for another reason than divergence", err)
        failed = len(e.call_lines()) - n
        del os.environ["FAKE_FAIL"]
        rc, err = quiet(ags_study_run.main, args)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(e.call_lines()) - n - failed, n)

    def test_sigterm_stops_the_runs_in_flight(self):
        e = Env(self, FAKE_SLEEP="60")
        res = e.path("r")
        args = [sys.executable, "-m", "experiments.ags_study_run"] + GRID + ["--results", res, "--jobs", "2"]
        p = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=REPO))
        end = time.monotonic() + 30
        while len(e.call_lines()) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        self.assertEqual(len(e.call_lines()), 2)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM)
        self.assertEqual(err.splitlines(), ["tula: ags-study: stopped by SIGTERM; the runs in flight were stopped and are"
                                            " trained again by the next invocation"])
        with open(e.calls) as f:
            for pid in [int(ln.split()[0]) for ln in f]:
                with self.assertRaises(ProcessLookupError):
                    os.kill(pid, 0)
        self.assertFalse(os.path.exists(os.path.join(res, "runs.jsonl")))
        self.assertEqual(sorted(os.listdir(res)), ["manifest.json"])
        os.environ["FAKE_SLEEP"] = "0"
        rc, err = quiet(ags_study_run.main, GRID + ["--results", res])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(rows.read_rows(os.path.join(res, "runs.jsonl"))), 14)

    def test_bad_options(self):
        e = Env(self)
        for bad, msg in ((["--methods", "sgd adam"], "--methods: unknown method 'adam'"),
                         (["--seeds", "1 2"], "--seeds: 1 is the selection seed"),
                         (["--lr-mults", "1 1.0"], "--lr-mults: '1' is given twice"),
                         (["--extend-edges", "5"], "--extend-edges: '5' is not an integer from 0 to 4"),
                         (["--", "--lr=3"], "extra option '--lr=3' is set by the study itself"),
                         (["--bogus"], "unrecognized arguments: --bogus"),
                         (["--trainer", e.path("none")], "tula-train not found at")):
            rc, err = quiet(ags_study_run.main, GRID + ["--results", e.path("r")] + bad)
            self.assertEqual(rc, 2, bad)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertTrue(err.startswith("tula: ags-study: ") and msg in err, err)
        self.assertEqual(e.call_lines(), [])


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class StepsRunnerTest(unittest.TestCase):
    def test_chains_resume_and_states_removed(self):
        e = Env(self)
        sel = e.path("selection.txt")
        with open(sel, "w") as f:
            f.write("chosen ags 1000 2 cosine\nchosen lamb 1000 0.5 wsd\nreference 64 0.900000 0.010000\n")
        args = ["--selection", sel, "--batches", "1000", "--totals", "3 5", "--seeds", "2", "--jobs", "2",
                "--trainer", FAKE, "--results", e.path("s"), "--work", e.path("w")]
        rc, err = quiet(ags_steps_run.main, args)
        self.assertEqual(rc, 0, err)
        calls = e.call_lines()
        self.assertEqual(len(calls), 2 * 3)
        trunk = [c for c in calls if "--optimizer ags" in c and "--schedule constant" in c]
        self.assertEqual(len(trunk), 1)
        self.assertIn("--lr 0.1 --epochs 4 --schedule constant --checkpoint %s --save-epochs 2,4" % e.path("w", "ags-1000-seed2.ckpt"), trunk[0])
        self.assertTrue(any("--optimizer lamb --lr-scaling sqrt --lr 0.005 --epochs 5 --schedule wsd --decay-epochs 1 --branch-from" in c
                            for c in calls))
        self.assertEqual(os.listdir(e.path("w")), [])
        got = {(r["method"], r["run"]): r for r in rows.read_rows(e.path("s", "runs.jsonl"))}
        self.assertEqual(got[("ags", "T5")]["steps_per_epoch"], 50)
        self.assertEqual((got[("ags", "T5")]["epochs"], got[("ags", "T5")]["decay_epochs"], got[("lamb", "T3")]["lr_mult"]), (5, 1, 0.5))
        rc, err = quiet(ags_steps_run.main, args)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(e.call_lines()), len(calls))
        with open(e.path("s", "report.md")) as f:
            self.assertIn("\n| ags | 1000 | 0.8423 | 0.8425 |\n", f.read())

    def test_missing_choice(self):
        e = Env(self)
        sel = e.path("selection.txt")
        with open(sel, "w") as f:
            f.write("chosen ags 1000 2 cosine\nreference 64 0.9 0.01\n")
        rc, err = quiet(ags_steps_run.main, ["--selection", sel, "--batches", "1000", "--trainer", FAKE])
        self.assertEqual(rc, 2)
        self.assertEqual(err, "tula: ags-steps: --selection: no chosen configuration of lamb at batch 1000 in '%s'\n" % sel)


class RecipesTest(unittest.TestCase):
    def test_options_and_sentence(self):
        self.assertEqual(recipes.train_args("sgd", 0.5), ["--optimizer", "sgd", "--lr-scaling", "linear", "--lr-max", "0.2",
                                                          "--lr", "0.025"])
        self.assertEqual(recipes.train_args("lamb", 2), ["--optimizer", "lamb", "--lr-scaling", "sqrt", "--lr", "0.02"])
        self.assertEqual(recipes.train_args("linear", 1), ["--optimizer", "sgd", "--lr-scaling", "linear", "--lr-max", "0",
                                                           "--lr", "0.05"])
        self.assertEqual(recipes.base_lr_text(), "0.01 for lamb, 0.05 otherwise")
        self.assertEqual(recipes.recipes_text(),
                         "recipes at multiplier m: sgd `--optimizer sgd --lr-scaling linear --lr-max 0.4*m` (linear scaling"
                         " with the trainer's gradual warmup, the rate capped at 0.4*m); lars, ags `--optimizer NAME`; lamb"
                         " `--optimizer lamb --lr-scaling sqrt` (square-root scaling); ags-sqrt `--optimizer ags"
                         " --ags-rate-rule sqrt`; ags-first `--optimizer ags --ags-rate-rule first`; the trainer's defaults"
                         " otherwise")


if __name__ == "__main__":
    unittest.main()
