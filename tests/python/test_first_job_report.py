"""experiments/first_job_report.py's pure parts: the job output readers and the report, on
fabricated outputs and rows with hand-computed figures."""
import unittest

from experiments import first_job_report as fj


class FirstJobReportTest(unittest.TestCase):
    def test_job_outcome(self):
        text = ("tula-train: measuring the step of lenet5@fashion-mnist before training\n"
                "tula-train: measured 4 local batch(es) in 12.5 s, recorded as compute samples; training starts\n"
                "tula-train: done: train_seconds=30.25 test_accuracy=0.8123 global_batch=64\n")
        self.assertEqual({"train_seconds": 30.25, "test_accuracy": 0.8123, "measured_batches": 4, "measure_seconds": 12.5},
                         fj.job_outcome(text))
        torch = "tula: measured 3 local batch(es) in 9.0 s into x; training starts\npytorch_fmnist: done: train_seconds=80.00 test_accuracy=0.7000 global_batch=64\n"
        self.assertEqual((80.0, 0.7, 3, 9.0), tuple(fj.job_outcome(torch).values()))
        self.assertEqual({"train_seconds": None, "test_accuracy": None, "measured_batches": None, "measure_seconds": None},
                         fj.job_outcome("nothing\n"))

    def test_spread(self):
        self.assertAlmostEqual(10.0, fj.spread([19.0, 20.0, 21.0]))  # (21 - 19) / 20
        self.assertIsNone(fj.spread([1.0, None, 2.0]))

    def test_report(self):
        def row(role, job, wall, train, acc, **kw):
            r = {"example": "tula-train", "role": role, "job": job, "state": "COMPLETED", "nodes": 1, "wall_seconds": wall,
                 "train_seconds": train, "test_accuracy": acc, "measure_seconds": None, "time_limit_seconds": 3600}
            r.update(kw)
            return r
        rows = [row("first", 1, 50, 30.0, 0.8123, measure_seconds=12.5),
                row("planned", 2, 40, 20.0, 0.81, nodes=2, predicted_seconds=18.0, global_batch=128, epochs=2),
                row("unmeasured", 3, 36, 30.2, 0.8123),
                row("repeat-1", 4, 41, 21.0, 0.81), row("repeat-2", 5, 39, 19.0, 0.81)]
        md = fj.report(rows, {"made_at": "2026-11-30 10:00 UTC"})
        self.assertIn("| first | 1 | COMPLETED | 1 | 50 | 30.0 | - | 0.8123 | 12.5 |", md)
        # 50 - 36 = +14 s; budget min(60, 2 % of 3600 s = 72) = 60 s
        self.assertIn("the same job without the measurement 36 s: +14 s (the measurement itself: 12.5 s; its budget "
                      "min(60 s, 2 % of the time limit) = 60 s)", md)
        self.assertIn("without 0.8123: identical.", md)
        # (20 - 18) / 20 = +10 %; floor (21 - 19) / 20 = 10 %
        self.assertIn("2 nodes x global batch 128, 2 epochs, predicted 18.0 s, measured 20.0 s: error +10.0 %; noise floor "
                      "of the same job three times: 10.0 %.", md)


if __name__ == "__main__":
    unittest.main()
