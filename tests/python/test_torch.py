"""`import tula` without PyTorch, and tula.torch's helpers where PyTorch is installed."""

import os
import socket
import subprocess
import sys
import unittest
from unittest import mock

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class NoTorchTest(unittest.TestCase):
    def test_import_tula_without_torch(self):
        # a child whose `import torch` fails, as on a machine without PyTorch
        code = ("import sys; sys.modules['torch'] = None\n"
                "import tula\n"
                "assert 'torch' not in dir(tula) or tula.torch is None\n"
                "p = tula.plan(env={})\n"
                "try:\n"
                "    import tula.torch\n"
                "except ImportError:\n"
                "    print('ok', p.global_batch)\n")
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "ok 64")


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed (scripts/install-deps --torch)")
class TorchHelpersTest(unittest.TestCase):
    def test_master_port_and_addr(self):
        import tula.torch as tt
        self.assertEqual(tt.master_port({"SLURM_JOB_ID": "123"}), 20123)
        self.assertEqual(tt.master_port({"SLURM_JOB_ID": "45000"}), 25000)
        self.assertEqual(tt.master_port({"SLURM_JOB_ID": "1", "MASTER_PORT": "4242"}), 4242)
        self.assertEqual(tt.master_port({}), 29500)
        with self.assertRaises(ValueError):
            tt.master_port({"MASTER_PORT": "70000"})
        self.assertEqual(tt.master_addr({"SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1"}), "10.0.0.1")
        self.assertEqual(tt.master_addr({"MASTER_ADDR": "h", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1"}), "h")

    def test_interface_towards_loopback(self):
        import tula.torch as tt
        self.assertEqual(tt.interface_towards("127.0.0.1"), "lo")
        self.assertEqual(tt.interface_address("lo"), "127.0.0.1")
        self.assertIsNone(tt.interface_address("no-such-if0"))
        names = [n for _, n in socket.if_nameindex()]
        self.assertIn("lo", names)

    def test_shard_covers_the_data_set(self):
        import tula.torch as tt
        shards = [tt.shard(10, r, 3, epoch=2) for r in range(3)]
        self.assertTrue(all(len(s) == 4 for s in shards))
        self.assertEqual(set(sum(shards, [])), set(range(10)))
        self.assertEqual(tt.shard(10, 1, 3, epoch=2), shards[1])      # the same on every rank
        self.assertNotEqual(tt.shard(10, 1, 3, epoch=3), shards[1])   # a new order each epoch
        self.assertEqual(tt.shard(5, 0, 2, shuffle=False), [0, 2, 4])
        with self.assertRaises(ValueError):
            tt.shard(5, 2, 2)

    def test_set_threads_and_single_process(self):
        import torch
        import tula.torch as tt
        before = torch.get_num_threads()
        try:
            self.assertEqual(tt.set_threads({"SLURM_CPUS_PER_TASK": "2"}), 2)
            self.assertEqual(torch.get_num_threads(), 2)
            self.assertEqual(tt.set_threads({}), 1)
        finally:
            torch.set_num_threads(before)
        with mock.patch.dict(os.environ, {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}):
            self.assertEqual(tt.init_distributed(), (0, 1))


if __name__ == "__main__":
    unittest.main()
