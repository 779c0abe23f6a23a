"""Runs the Python tests (tests/python/test_*.py) against python/tula and the experiments package
(experiments/) and ends with the line
`python: N passed, M failed, K skipped` that tests/run counts; exit status 1 if M > 0."""

import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
result = unittest.TextTestRunner(verbosity=1, stream=sys.stdout).run(suite)
for test, why in result.skipped:
    print("SKIP %s: %s" % (test.id(), why))
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
passed = result.testsRun - failed - len(result.skipped)
print("python: %d passed, %d failed, %d skipped" % (passed, failed, len(result.skipped)))
sys.exit(1 if failed else 0)
