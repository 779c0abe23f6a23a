"""experiments/step_forms.py: its reading of knots against hand-computed values, its forms on a
fabricated entry whose steps follow a known law, and the committed report regenerated from the
data byte for byte."""
import math
import os
import shutil
import tempfile
import unittest

from experiments import step_forms

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class StepFormsTest(unittest.TestCase):
    def test_at(self):
        k = {8: 1.0, 32: 3.0, 64: 5.0}
        self.assertEqual(1.0, step_forms.at(k, 4))                # below: the smallest's value
        self.assertAlmostEqual(2.0, step_forms.at(k, 16))         # halfway in log b from 8 to 32
        self.assertAlmostEqual(7.0, step_forms.at(k, 96))         # beyond: 5 + (5-3)/32 x 32
        self.assertIsNone(step_forms.at({}, 4))

    def test_forms_recover_a_ring_law(self):
        # step(K, R, b) = 0.01 b (1 + 0.1) + x_R + a_R 2 (K-1)/K with exposed sync = the
        # exchange part: steps-ring and parts-ring predict every 3- and 4-node placement exactly.
        def step(K, R, b):
            return 0.01 * b * (1 + 0.1 * (R - 1)) + 0.002 * (R - 1) + sync(K, R)

        def sync(K, R):
            return 0.003 * (R - 1) + (0.02 + 0.01 * R) * 2.0 * (K - 1) / K

        rows = [{"K": K, "R": R, "b": b, "step": step(K, R, b), "sync": sync(K, R)}
                for K in (1, 2) for R in (1, 2, 4) for b in (8, 16, 32)]
        for source in ("steps", "parts"):
            f = step_forms.form(rows, source, "ring")
            for K, R, b in [(3, 1, 16), (4, 4, 8), (3, 2, 32), (5, 1, 64)]:
                self.assertTrue(math.isclose(step(K, R, b), f(K, R, b), rel_tol=1e-9),
                                "%s: %s x %s at %s" % (source, K, R, b))

    def test_report_regenerated(self):
        d = tempfile.mkdtemp(prefix="tula-py-")
        self.addCleanup(shutil.rmtree, d)
        out = os.path.join(d, "report.md")
        self.assertEqual(0, step_forms.main(["--out", out]))
        with open(out, "rb") as f, open(os.path.join(REPO, "results", "step-forms", "report.md"), "rb") as g:
            self.assertTrue(f.read() == g.read(), "results/step-forms/report.md is not what the study writes")


if __name__ == "__main__":
    unittest.main()
