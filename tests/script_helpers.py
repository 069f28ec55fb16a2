"""Loading an experiment script (``experiments/NAME.py``) as a module, for the tests of its functions."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_script(name: str) -> ModuleType:
    """``experiments/{name}.py`` as a fresh module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
