"""A tiny UCI data folder for command-line tests (no real data needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def write_tiny_yacht(root: Path) -> Path:
    """``root/uci/yacht``: 30 rows, 3 features, one 25/5 split (the loader checks no sums when there
    is no SHA256SUMS file)."""
    folder = Path(root) / "uci" / "yacht"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    np.savetxt(folder / "data.txt", np.column_stack([x, x @ np.array([1.0, -2.0, 0.5])]))
    np.savetxt(folder / "index_features.txt", np.arange(3), fmt="%d")
    np.savetxt(folder / "index_target.txt", [3], fmt="%d")
    (folder / "n_splits.txt").write_text("1\n")
    perm = rng.permutation(30)
    np.savetxt(folder / "index_train_0.txt", perm[:25], fmt="%d")
    np.savetxt(folder / "index_test_0.txt", perm[25:], fmt="%d")
    return Path(root)
