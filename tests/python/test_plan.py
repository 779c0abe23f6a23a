"""tula.plan(): the job's environment parsed, every malformed value refused."""

import unittest

import tula


class PlanTest(unittest.TestCase):
    def test_defaults_outside_tula(self):
        p = tula.plan(default_batch=32, default_epochs=3, env={})
        self.assertEqual((p.global_batch, p.local_batch, p.epochs), (32, 32, 3))
        self.assertEqual((p.nodes, p.ranks, p.rank, p.local_rank), (1, 1, 0, 0))
        self.assertIsNone(p.workload)
        self.assertIsNone(p.predicted_seconds)
        self.assertFalse(p.under_tula)

    def test_under_tula_and_slurm(self):
        env = {"TULA_BATCH_SIZE": "256", "TULA_EPOCHS": "4", "TULA_NODES": "2",
               "TULA_WORKLOAD": "fmnist-cnn@fashion-mnist", "TULA_PREDICTED_SECONDS": "61.5",
               "SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2"}
        p = tula.plan(env=env)
        self.assertEqual((p.global_batch, p.local_batch, p.epochs), (256, 64, 4))
        self.assertEqual((p.nodes, p.ranks, p.rank, p.local_rank), (2, 4, 3, 1))
        self.assertEqual(p.workload, "fmnist-cnn@fashion-mnist")
        self.assertEqual(p.predicted_seconds, 61.5)
        self.assertTrue(p.under_tula)
        with self.assertRaises(Exception):
            p.epochs = 5  # frozen

    def test_local_batch_at_least_one(self):
        p = tula.plan(env={"TULA_BATCH_SIZE": "3", "SLURM_NTASKS": "8", "SLURM_JOB_NUM_NODES": "2"})
        self.assertEqual(p.local_batch, 1)
        self.assertEqual(tula.plan(env={"TULA_BATCH_SIZE": "100", "SLURM_NTASKS": "3"}).local_batch, 33)

    def test_torchrun_variables_without_slurm(self):
        p = tula.plan(env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})
        self.assertEqual((p.ranks, p.rank, p.local_rank, p.nodes), (2, 1, 1, 1))
        # Slurm's win when both are there
        p = tula.plan(env={"WORLD_SIZE": "8", "RANK": "5", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"})
        self.assertEqual((p.ranks, p.rank), (2, 0))

    def test_step_nodes_and_nodes_capped_by_ranks(self):
        env = {"SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "2"}
        self.assertEqual(tula.plan(env=env).nodes, 1)
        env = {"SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "4", "SLURM_STEP_NUM_NODES": "2"}
        self.assertEqual(tula.plan(env=env).nodes, 2)
        self.assertEqual(tula.plan(env={"TULA_NODES": "3", "WORLD_SIZE": "6"}).nodes, 3)

    def test_empty_values_are_unset(self):
        p = tula.plan(default_batch=16, env={"TULA_BATCH_SIZE": "", "TULA_EPOCHS": " ", "TULA_WORKLOAD": ""})
        self.assertEqual((p.global_batch, p.epochs, p.workload, p.under_tula), (16, 1, None, False))

    def test_every_malformed_value(self):
        cases = [
            ("TULA_BATCH_SIZE", ["0", "-4", "x", "1.5", "64k", "1e3", "٣"]),
            ("TULA_EPOCHS", ["0", "-1", "x", "2.0", "two"]),
            ("TULA_NODES", ["0", "x", "-2"]),
            ("TULA_PREDICTED_SECONDS", ["-1", "x", "nan", "inf", "1e999", "1,5"]),
            ("TULA_WORKLOAD", ["lenet5", "a@", "@b", "a@b@c", "a b@c", "a/b@c", "x" * 200 + "@d"]),
            ("SLURM_NTASKS", ["0", "x"]),
            ("SLURM_PROCID", ["-1", "x"]),
            ("SLURM_LOCALID", ["x"]),
            ("SLURM_JOB_NUM_NODES", ["0", "x"]),
            ("WORLD_SIZE", ["0", "x"]),
            ("RANK", ["x"]),
            ("LOCAL_RANK", ["-1"]),
        ]
        for name, values in cases:
            for value in values:
                with self.subTest(name=name, value=value):
                    with self.assertRaises(ValueError) as cm:
                        env = {name: value}
                        if name in ("SLURM_PROCID", "SLURM_LOCALID"):
                            env["SLURM_NTASKS"] = "2"  # read under Slurm only
                        tula.plan(env=env)
                    self.assertTrue(str(cm.exception).startswith("tula: "), cm.exception)
                    self.assertIn(name, str(cm.exception))

    def test_message_names_the_value(self):
        with self.assertRaises(ValueError) as cm:
            tula.plan(env={"TULA_EPOCHS": "x"})
        self.assertTrue(str(cm.exception).startswith("tula: TULA_EPOCHS='x' is not a whole number >= 1"))

    def test_rank_beyond_the_ranks(self):
        with self.assertRaises(ValueError):
            tula.plan(env={"SLURM_NTASKS": "2", "SLURM_PROCID": "2"})
        with self.assertRaises(ValueError):
            tula.plan(env={"WORLD_SIZE": "2", "RANK": "7"})

    def test_bad_defaults(self):
        for kw in ({"default_batch": 0}, {"default_epochs": 0}, {"default_batch": True}, {"default_batch": 1.0}):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                tula.plan(env={}, **kw)

    def test_check_workload(self):
        self.assertEqual(tula.check_workload("resnet18@cifar-10.v2"), "resnet18@cifar-10.v2")
        with self.assertRaises(ValueError):
            tula.check_workload(None)


if __name__ == "__main__":
    unittest.main()
