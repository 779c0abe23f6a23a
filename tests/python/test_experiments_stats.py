"""experiments.stats: the mean and the half-width of the 95 % t-interval, hand-computed, the t
quantiles of the printed tables up to 10 degrees of freedom and beyond them, and the message when
python3-scipy is missing."""

import builtins
import unittest
from unittest import mock

from experiments import stats

try:
    import scipy  # noqa: F401
    HAVE_SCIPY = True
except ImportError:
    HAVE_SCIPY = False

# the two-sided 95 % quantiles of Student's t as printed tables give them
TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 20: 2.086, 30: 2.042}


@unittest.skipUnless(HAVE_SCIPY, "python3-scipy is not installed")
class StatsTest(unittest.TestCase):
    def test_quantiles_as_the_tables_print_them(self):
        for df, t in TABLE.items():
            self.assertEqual(stats.t975(df), t, "df %d" % df)

    def test_empty_and_one_value(self):
        self.assertEqual(stats.mean_ci([]), (None, None, 0))
        self.assertEqual(stats.mean_ci([0.75]), (0.75, None, 1))

    def test_two_values(self):
        # sd 0.00707107, sd / sqrt(2) = 0.005, x 12.706 = 0.06353
        mean, half, n = stats.mean_ci([0.90, 0.91])
        self.assertAlmostEqual(mean, 0.905, places=12)
        self.assertAlmostEqual(half, 0.06353, places=9)
        self.assertEqual(n, 2)

    def test_three_values(self):
        # sd 0.02, / sqrt(3) = 0.0115470, x 4.303 = 0.0496868
        mean, half, n = stats.mean_ci([0.80, 0.82, 0.84])
        self.assertAlmostEqual(mean, 0.82, places=12)
        self.assertAlmostEqual(half, 0.0496868, places=7)
        self.assertEqual(n, 3)

    def test_twelve_values_beyond_ten_degrees_of_freedom(self):
        # six 0.5 and six 0.6: mean 0.55, sd sqrt(12 x 0.0025 / 11) = 0.0522233, / sqrt(12) =
        # 0.0150756, x t(11) 2.201 = 0.0331813
        mean, half, n = stats.mean_ci([0.5] * 6 + [0.6] * 6)
        self.assertAlmostEqual(mean, 0.55, places=12)
        self.assertAlmostEqual(half, 0.0331813, places=7)
        self.assertEqual(n, 12)


class NoScipyTest(unittest.TestCase):
    def test_message_names_the_package(self):
        real = builtins.__import__

        def no_scipy(name, *args, **kw):
            if name.startswith("scipy"):
                raise ImportError("no scipy")
            return real(name, *args, **kw)
        with mock.patch("builtins.__import__", no_scipy):
            with self.assertRaises(SystemExit) as e:
                stats.t975(3)
        self.assertTrue(str(e.exception.code).startswith("tula: "))
        self.assertIn("python3-scipy", str(e.exception.code))
