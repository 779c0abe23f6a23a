"""tula.measure() (TULA_PROFILE, a first job that measures itself) with a fake step function and
a fake clock: its budget, its local batches, the profile lines it writes (start-up included), and
what it skips."""

import io
import json
import os
import shutil
import tempfile
import unittest
from contextlib import redirect_stderr

import tula


class FakeClock:
    """time.perf_counter that a step moves on by SECONDS_PER_EXAMPLE per example of its batch."""
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class MeasureTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, "m.profile.jsonl")
        self.clock = FakeClock()
        self.per_example = 0.01
        self.calls = []

    def step(self, data):
        self.calls.append(data)
        if data == 128 and getattr(self, "oom_at_128", False):
            raise RuntimeError("out of memory: 128 examples\nmore")
        self.clock.now += self.per_example * data

    def measure(self, value, local=32, rank=0, end=None, **kw):
        env = {"TULA_PROFILE": value} if value is not None else {}
        if end is not None:
            env["SLURM_JOB_END_TIME"] = str(end)
        err = io.StringIO()
        with redirect_stderr(err):
            out = tula.measure(self.step, lambda b: b, local, workload="m@d", nodes=1, ranks=1, rank=rank,
                               path=self.path, record=False, env=env, clock=self.clock, params=10, **kw)
        return out, err.getvalue()

    def lines(self):
        with open(self.path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def test_budget(self):
        self.assertEqual((60.0, None), tula.measure_budget("1", None))
        self.assertEqual((60.0, None), tula.measure_budget("yes", None))
        self.assertEqual((12.5, None), tula.measure_budget("12.5", None))
        self.assertEqual((2.0, None), tula.measure_budget("1", 100.0))  # 2 % of 100 s left
        for off in (None, "", "0", "no"):
            self.assertEqual((0.0, None), tula.measure_budget(off, None))
        for bad in ("soon", "-1", "inf", "nan", "4000"):
            budget, why = tula.measure_budget(bad, None)
            self.assertEqual(0.0, budget)
            self.assertIn("is not 1, yes, 0, no or seconds", why)

    def test_batches(self):
        self.assertEqual([8, 16, 32, 64], tula.measured_batches(32))
        self.assertEqual([1, 2, 4], tula.measured_batches(2))
        self.assertEqual([1, 2], tula.measured_batches(1))

    def test_unset_measures_nothing(self):
        out, err = self.measure(None)
        self.assertEqual({}, out)
        self.assertEqual([], self.calls)
        self.assertFalse(os.path.exists(self.path))

    def test_measures_and_writes_profile_lines(self):
        out, err = self.measure("1", local=32)
        self.assertEqual({8: 0.08, 16: 0.16, 32: 0.32, 64: 0.64}, {b: round(s, 6) for b, s in out.items()})
        self.assertEqual(4 * (tula._measure.WARMUP_STEPS + tula._measure.TIMED_STEPS), len(self.calls))
        lines = self.lines()
        self.assertEqual("run", lines[0]["type"])
        self.assertEqual("m@d", lines[0]["workload"])
        self.assertNotIn("global_batch", lines[0])
        profile = [x for x in lines if x["type"] == "profile"]
        self.assertEqual([8, 16, 32, 64], [x["local_batch"] for x in profile])
        self.assertAlmostEqual(0.32, profile[2]["seconds"])
        self.assertIn("measured 4 local batch(es)", err)

    def test_profile_lines_carry_startup_seconds(self):
        # the first step at each batch takes 0.5 s more than the steady ones (first touch of its
        # buffers): each line's startup_seconds is that extra, as tula profile compute records it
        seen = set()
        steady = self.step

        def step(data):
            if data not in seen:
                seen.add(data)
                self.clock.now += 0.5
            steady(data)
        self.step = step
        out, err = self.measure("1", local=32)
        profile = [x for x in self.lines() if x["type"] == "profile"]
        self.assertEqual([8, 16, 32, 64], [x["local_batch"] for x in profile])
        for x in profile:
            self.assertAlmostEqual(0.5, x["startup_seconds"])
        self.assertIn("measured local batch 8: 80.00 ms per step (3 steps, start-up 0.500 s)", err)

    def test_budget_stops_early(self):
        # 2 s: 8 and 16 take 0.32 + 0.64 s; 32's estimate (4 x 0.32 s) would pass it
        out, err = self.measure("2", local=32)
        self.assertEqual([8, 16], sorted(out))
        self.assertIn("local batch 32 not measured: it would pass the budget of 2 s", err)

    def test_failing_batch_is_skipped(self):
        self.oom_at_128 = True
        out, err = self.measure("1", local=64)
        self.assertEqual([16, 32, 64], sorted(out))
        self.assertIn("local batch 128 not measured: out of memory: 128 examples", err)

    def test_bad_value_warns_once_and_measures_nothing(self):
        out, err = self.measure("soon")
        self.assertEqual({}, out)
        self.assertEqual([], self.calls)
        self.assertEqual(1, err.count("TULA_PROFILE='soon'"))

    def test_other_ranks_write_nothing(self):
        out, err = self.measure("1", rank=1)
        self.assertEqual(4, len(out))
        self.assertFalse(os.path.exists(self.path))
        self.assertEqual("", err)


if __name__ == "__main__":
    unittest.main()
