"""experiments/hole.py's pure parts: Slurm's times, `key=value` lines and the report section,
on a fabricated result with hand-computed figures."""
import time
import unittest
from unittest import mock

from experiments import hole


class HoleTest(unittest.TestCase):
    def test_kv_and_slurm_time(self):
        self.assertEqual({"status": "ok", "time_min": "3", "x": "a=b"}, hole.kv("status=ok\ntime_min=3\nnoise\nx=a=b\n"))
        t = time.mktime(time.strptime("2026-11-27T20:40:48", "%Y-%m-%dT%H:%M:%S"))
        self.assertEqual(t, hole.slurm_time("2026-11-27T20:40:48"))
        self.assertIsNone(hole.slurm_time("Unknown"))
        self.assertIsNone(hole.slurm_time(None))

    def test_slurm_seconds(self):
        self.assertEqual([103, 3723, 90000 + 5, 65, None, None],
                         [hole.slurm_seconds(x) for x in ("00:01:43", "01:02:03", "1-01:00:05", "01:05", "N/A", None)])

    def test_keep_hole_moves_the_reservation_only_when_time_min_no_longer_fits(self):
        a = mock.Mock(lead=20, reservation="tula-hole")
        now = 1000.0
        calls = []
        with mock.patch.object(hole.time, "time", lambda: now), \
                mock.patch.object(hole, "run", lambda cmd: calls.append(cmd)):
            with mock.patch.object(hole, "job_fields", lambda j: {"JobState": "PENDING", "TimeMin": "00:03:00"}):
                self.assertEqual(0, hole.keep_hole(a, "7", 1185, lambda m: None))  # 180 + 5 fits in 185
                self.assertEqual(17, hole.keep_hole(a, "7", 1183, lambda m: None))  # 183 left: to 1200
            with mock.patch.object(hole, "job_fields", lambda j: {"JobState": "RUNNING", "TimeMin": "00:03:00"}):
                self.assertEqual(0, hole.keep_hole(a, "7", 1100, lambda m: None))  # started in the hole
            with mock.patch.object(hole, "job_fields", lambda j: {"JobState": "PENDING", "TimeMin": "N/A"}):
                self.assertEqual(0, hole.keep_hole(a, "7", 1100, lambda m: None))
        self.assertEqual(1, len(calls))
        self.assertIn("reservationname=tula-hole", calls[0])
        self.assertIn("starttime=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1200)), calls[0])

    def test_markdown(self):
        r = {"plan": {"hole": "starts in a backfill hole of 3m00s in 0.0s and finishes in it in 1 part: result in 1m00s instead of 5m20s"},
             "partition": "cpu", "hole_seconds": 200, "time_min_minutes": 3, "reservation_minutes": 1,
             "trainer_args": "--model lenet5",
             "time_min": {"first_start_seconds": 0.4, "parts": 2, "time_to_result_seconds": 400.0,
                          "test_accuracy": 0.8828, "state": "COMPLETED"},
             "no_time_min": {"first_start_seconds": 262.0, "parts": 1, "time_to_result_seconds": 500.0,
                             "test_accuracy": None, "state": "COMPLETED"}}
        md = hole.markdown(r)
        self.assertIn("from 200 s after submission (the plan's time_min of 3 min plus 20 s) for 1 min", md)
        self.assertIn("The plan with the hole there (`tula plan --time-min yes`): starts in a backfill hole of 3m00s", md)
        self.assertIn("| with `--tula-time-min=yes` | 0 | 2 | 400 | 0.8828 | COMPLETED |", md)
        self.assertIn("| without (`--tula-time-min=no`) | 262 | 1 | 500 | n/a | COMPLETED |", md)
        self.assertIn("the result comes 100 s earlier (80 % of the time without it)", md)


if __name__ == "__main__":
    unittest.main()
