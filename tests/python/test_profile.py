"""tula.profile() with a fake step function and a fake clock."""

import io
import json
import os
import shutil
import tempfile
import unittest
from contextlib import redirect_stderr
from unittest import mock

import tula
from tula import _profile


class FakeClock:
    """time.perf_counter that a step moves on by 0.01 s per example of its batch."""
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class ProfileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, self.dir)
        patcher = mock.patch.dict(os.environ, {"TULA_METRICS": os.path.join(self.dir, "p.jsonl"),
                                               "TULA_WORKLOAD": "fmnist-cnn@fashion-mnist"})
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in ("TULA_PROFILE_BATCHES", "TULA_PROFILE_MIN_SECONDS", "SLURM_JOB_ID"):
            os.environ.pop(name, None)
        self.clock = FakeClock()
        self.calls = []

    def step(self, data):
        self.calls.append(data)
        self.clock.now += 0.01 * data

    def run_profile(self, **kw):
        err = io.StringIO()
        with mock.patch.object(_profile.time, "perf_counter", self.clock), redirect_stderr(err):
            out = tula.profile(self.step, lambda b: b, **kw)
        return out, err.getvalue()

    def lines(self):
        with open(os.environ["TULA_METRICS"], "rb") as f:
            return [json.loads(x) for x in f.read().splitlines()]

    def test_batches_from_the_environment(self):
        os.environ["TULA_PROFILE_BATCHES"] = "2,10"
        os.environ["TULA_PROFILE_MIN_SECONDS"] = "0.5"
        out, err = self.run_profile(warmup=2)
        self.assertEqual(sorted(out), [2, 10])
        self.assertAlmostEqual(out[2], 0.02)
        self.assertAlmostEqual(out[10], 0.1)
        # batch 2: 0.02 s a step, 25 steps reach 0.5 s; batch 10: 0.1 s, 5 steps (the minimum)
        self.assertEqual(self.calls.count(2), 2 + 25)
        self.assertEqual(self.calls.count(10), 2 + 5)
        lines = self.lines()
        self.assertEqual(lines[0], {"type": "run", "workload": "fmnist-cnn@fashion-mnist", "nodes": 1, "ranks": 1})
        self.assertEqual([(x["local_batch"], x["steps"]) for x in lines[1:]], [(2, 25), (10, 5)])
        self.assertEqual(len(err.strip().splitlines()), 2)
        self.assertTrue(all(x.startswith("tula: profile: local batch ") for x in err.strip().splitlines()))

    def test_arguments_win_and_default_min_seconds(self):
        os.environ["TULA_PROFILE_BATCHES"] = "999"
        out, _ = self.run_profile(batches=[4], warmup=0)
        self.assertEqual(list(out), [4])
        self.assertEqual(self.calls.count(4), 25)  # 1.0 s at 0.04 s a step

    def test_given_metrics_is_left_open(self):
        path = os.path.join(self.dir, "q.jsonl")
        with tula.Metrics(path, workload="a@b", nodes=1, ranks=1, global_batch=None) as m:
            self.run_profile(batches=[1], min_seconds=0.05, metrics=m)
            m.profile(7, 1.0, 1)
        with open(path) as f:
            self.assertEqual(len(f.read().splitlines()), 3)

    def test_bad_inputs(self):
        for env, kw in [({}, {}), ({"TULA_PROFILE_BATCHES": "16,x"}, {}), ({"TULA_PROFILE_BATCHES": "0"}, {}),
                        ({"TULA_PROFILE_BATCHES": "16,,32"}, {}), ({"TULA_PROFILE_MIN_SECONDS": "0"}, {"batches": [1]}),
                        ({"TULA_PROFILE_MIN_SECONDS": "nan"}, {"batches": [1]}), ({}, {"batches": [0]}),
                        ({}, {"batches": []}), ({}, {"batches": [1], "min_seconds": -1}),
                        ({}, {"batches": [1], "warmup": -1})]:
            with self.subTest(env=env, kw=kw), mock.patch.dict(os.environ, env):
                with self.assertRaises(ValueError) as cm:
                    self.run_profile(**kw)
                self.assertTrue(str(cm.exception).startswith("tula: "))
        os.environ.pop("TULA_WORKLOAD")
        with self.assertRaises(ValueError):
            self.run_profile(batches=[1])


if __name__ == "__main__":
    unittest.main()
