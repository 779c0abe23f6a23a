"""The scripts of bench/ (files without a .py suffix) imported as modules for the tests."""
import importlib.machinery
import importlib.util
import os

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load(name):
    """bench/NAME as a module (its main() not run)."""
    module_name = name.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(module_name, os.path.join(REPO, "bench", name))
    spec = importlib.util.spec_from_loader(module_name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
