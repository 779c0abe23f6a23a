"""bench/bench-published's fits of the seconds per step (linear_fit, FITS) against independent
references: the closed form of the ordinary least-squares line, the weighted normal equations,
a brute-force search of the least absolute deviations, and the committed --compare-fits table
regenerated from the data."""
import io
import os
import random
import unittest
from contextlib import redirect_stdout

import bench_scripts

REPO = bench_scripts.REPO


def load_bench():
    return bench_scripts.load("bench-published")


try:
    import numpy  # noqa: F401  (linear_fit needs numpy and scipy)
    import scipy  # noqa: F401
    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False


@unittest.skipUnless(HAVE_SCIPY, "numpy and scipy (python3-scipy) are not installed")
class LineFit(unittest.TestCase):
    def setUp(self):
        self.bp = load_bench()
        rng = random.Random(3)
        self.xs = [rng.uniform(20, 400) for _ in range(15)]
        self.ys = [0.01 + 3e-4 * x + rng.gauss(0, 0.004) for x in self.xs]

    @staticmethod
    def rows(xs):
        """The line's rows [1, x]."""
        return [[1.0, x] for x in xs]

    def test_least_squares_closed_form(self):
        n = len(self.xs)
        mx, my = sum(self.xs) / n, sum(self.ys) / n
        c = sum((x - mx) * (y - my) for x, y in zip(self.xs, self.ys)) / sum((x - mx) ** 2 for x in self.xs)
        a, c2 = self.bp.linear_fit(self.rows(self.xs), self.ys, None, False, "l2")
        self.assertAlmostEqual(c, c2, places=12)
        self.assertAlmostEqual(my - c * mx, a, places=12)

    def test_relative_least_squares_normal_equations(self):
        # minimise sum ((y - a - c x) / y)^2: the 2x2 normal equations written out
        w = [1 / y ** 2 for y in self.ys]
        s1, sx, sxx = sum(w), sum(wi * x for wi, x in zip(w, self.xs)), sum(wi * x * x for wi, x in zip(w, self.xs))
        sy, sxy = sum(wi * y for wi, y in zip(w, self.ys)), sum(wi * x * y for wi, x, y in zip(w, self.xs, self.ys))
        det = s1 * sxx - sx * sx
        a, c = (sy * sxx - sx * sxy) / det, (s1 * sxy - sx * sy) / det
        self.assertGreater(a, 0)  # the constraint a, c >= 0 is not active here
        a2, c2 = self.bp.linear_fit(self.rows(self.xs), self.ys, lambda y: 1 / y, True, "l2")
        self.assertAlmostEqual(a, a2, places=10)
        self.assertAlmostEqual(c, c2, places=12)

    def test_least_absolute_deviations_brute_force(self):
        # an L1 line passes through two of the points: the best of all pairs
        pts = list(zip(self.xs, self.ys))
        costs = []
        for i, (x0, y0) in enumerate(pts):
            for x1, y1 in pts[i + 1:]:
                slope = (y1 - y0) / (x1 - x0)
                costs.append(sum(abs(y - (y0 + slope * (x - x0))) for x, y in pts))
        a, c = self.bp.linear_fit(self.rows(self.xs), self.ys, None, False, "l1")
        cost = sum(abs(y - a - c * x) for x, y in pts)
        self.assertAlmostEqual(min(costs), cost, places=9)

    def test_nonnegative_and_too_few(self):
        # points on a falling line: a, c >= 0 gives c = 0 and a their mean (least squares)
        a, c = self.bp.linear_fit(self.rows([1, 2, 3]), [3.0, 2.0, 1.0], None, True, "l2")
        self.assertAlmostEqual(0.0, c, places=12)
        self.assertAlmostEqual(2.0, a, places=12)
        self.assertIsNone(self.bp.linear_fit(self.rows([5, 5]), [1.0, 2.0], None, True, "l2"))
        self.assertIsNone(self.bp.linear_fit([], [], None, True, "l2"))

    def test_committed_table_regenerates(self):
        out = io.StringIO()
        with redirect_stdout(out):
            self.bp.compare_fits(self.by_accelerator())
        with open(os.path.join(REPO, "results", "published-runs", "compare-fits.txt")) as f:
            committed = f.read().split("\n", 1)[1]  # below the command line
        self.assertEqual(committed, out.getvalue())

    def by_accelerator(self):
        by_acc = {}
        for r in self.bp.load_runs(os.path.join(REPO, "bench", "data", "mlperf-resnet50-up-to-64-gpus.json")):
            by_acc.setdefault(r["accelerator"], []).append(r)
        return by_acc


if __name__ == "__main__":
    unittest.main()
