"""Figures of a grid's swept metrics (e.g. accuracy and entropy against the attack's ε)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runs import atomic_write_bytes


def plot_sweeps(long_table: pd.DataFrame, bases: list[str], axis: str, path, *, title: str = "",
                replicate: str | None = None) -> Path:
    """One panel per swept metric against ``axis`` (three to a row), one line per method (± s.e. band); saved
    atomically as a PNG at ``path``. ``long_table`` is :func:`~.table.long_sweep_table`'s output.
    ``replicate`` (the spec's replicate key, e.g. ``seed``) is named in the title: what the bands are."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(bases))
    rows = -(-len(bases) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(bases):]:
        ax.set_visible(False)
    for ax, base in zip(axes.flat, bases):
        for method, group in long_table.groupby("method", sort=False):
            group = group.dropna(subset=[base]).sort_values(axis)
            x, y, se = group[axis].to_numpy(), group[base].to_numpy(), group[f"{base}_se"].fillna(0).to_numpy()
            ax.plot(x, y, marker="o", ms=3, label=str(method))
            ax.fill_between(x, y - se, y + se, alpha=0.2)
        ax.set_xlabel(axis)
        ax.set_ylabel(base)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    if replicate:
        title = f"{title}: mean ± s.e. over {replicate}s" if title else f"mean ± s.e. over {replicate}s"
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(Path(path), buffer.getvalue())
