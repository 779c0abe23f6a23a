"""bench/bench-traces' --drop: the placements it takes out of the traces against a naive filter
of the same rows, and its messages on malformed items; --split-even: the rows of an unrecorded
split it adds against those written by hand."""
import json
import os
import tempfile
import unittest

import bench_scripts


class Drop(unittest.TestCase):
    def setUp(self):
        self.bt = bench_scripts.load("bench-traces")
        rows = [{"nodes": K, "gpus_per_node": R, "local_batch": b, "step_seconds": 0.1 * K + 0.01 * R + 1e-4 * b,
                 "sync_seconds": 0.001 * K}
                for K in (1, 2, 3) for R in (1, 2, 4, 8) for b in (16, 32)]
        self.doc = {"models": [{"name": "net", "dataset": "Data Set", "gpu": "NVIDIA A100 40GB (DGX A100)",
                                "cluster": "c", "params": 1000, "gpus_per_node_max": 8, "rows": rows}]}
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "traces.json")
        with open(self.path, "w") as f:
            json.dump(self.doc, f)

    def tearDown(self):
        self.dir.cleanup()

    def kept(self, drop):
        types = self.bt.load(self.path, self.bt.parse_drop(drop))
        (t,) = types.values()
        (e,) = t["entries"].values()
        return sorted((r["K"], r["R"], r["b"]) for r in e["rows"])

    def test_against_a_naive_filter(self):
        cases = {"": lambda K, R: False,
                 "2x1": lambda K, R: K == 2 and R == 1,
                 "1x2-8": lambda K, R: K == 1 and 2 <= R <= 8,
                 "*x1, 3 x *": lambda K, R: R == 1 or K == 3,
                 "2X4,2x8": lambda K, R: K == 2 and R in (4, 8)}
        every = [(r["nodes"], r["gpus_per_node"], r["local_batch"]) for r in self.doc["models"][0]["rows"]]
        for drop, gone in cases.items():
            self.assertEqual(sorted(x for x in every if not gone(x[0], x[1])), self.kept(drop), drop)

    def test_nodes_of_a_type_follow_what_is_left(self):
        types = self.bt.load(self.path, self.bt.parse_drop("3x*"))
        self.assertEqual(2, next(iter(types.values()))["nodes"])

    def test_split_even(self):
        # scalability rows of K nodes and N GPUs: 3 x 6 is added; 2 nodes (seen rows), 12 GPUs on 5
        # nodes (no even split), one a recorded row already holds (3 x 4 at b 16) and one --drop
        # names (4 x 3) are not
        split = [{"nodes": K, "gpus_total": N, "local_batch": b, "step_seconds": 0.5, "sync_seconds": 0.05}
                 for K, N, b in ((3, 18, 16), (3, 18, 32), (2, 8, 16), (5, 12, 16), (3, 12, 16), (4, 12, 16))]
        self.doc["models"][0]["rows_split_unrecorded"] = split
        with open(self.path, "w") as f:
            json.dump(self.doc, f)
        every = sorted((r["nodes"], r["gpus_per_node"], r["local_batch"]) for r in self.doc["models"][0]["rows"])
        self.assertEqual(every, self.kept(""))
        types = self.bt.load(self.path, self.bt.parse_drop("4x3"), split_even=True)
        (e,) = next(iter(types.values()))["entries"].values()
        self.assertEqual([(3, 6, 16), (3, 6, 32)], sorted((r["K"], r["R"], r["b"]) for r in e["rows"] if r["even"]))
        self.assertEqual(every, sorted((r["K"], r["R"], r["b"]) for r in e["rows"] if not r["even"]))
        self.assertEqual(0.5, next(r for r in e["rows"] if r["even"])["step"])
        # the split rows are predicted, never seen
        self.assertTrue(all(self.bt.split(3, r) == "predicted" for r in e["rows"] if r["even"]))

    def test_malformed(self):
        for bad in ("2", "2x1x1", "ax1", "2x1-", "-2x1"):
            with self.assertRaises(self.bt.BenchError) as c:
                self.bt.parse_drop(bad)
            self.assertIn("--drop", str(c.exception))


if __name__ == "__main__":
    unittest.main()
