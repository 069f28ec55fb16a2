"""PNG plots of attack results: accuracy and mean entropy against ε or step."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from uncertain_agents.runs import atomic_save_figure

LABELS = {"epsilon": "ε (L∞ perturbation)", "step": "I-FGSM step", "accuracy": "accuracy",
          "mean_entropy": "mean predictive entropy (nats)", "target_success": "target success",
          "auroc_entropy": "AUROC (entropy)", "mean_mutual_information": "mean mutual information (nats)"}


def _as_frames(results) -> dict[str, pd.DataFrame]:
    if isinstance(results, pd.DataFrame):
        if "posterior" not in results.columns:
            return {"posterior": results}
        return {str(k): g for k, g in results.groupby("posterior", sort=False)}
    if isinstance(results, Mapping):
        for key, frame in results.items():
            if not isinstance(frame, pd.DataFrame):
                raise TypeError(f"results[{key!r}] must be a pandas DataFrame, got {type(frame).__name__}")
        return {str(k): v for k, v in results.items()}
    raise TypeError("results must be a DataFrame (with a 'posterior' column) or a mapping name -> DataFrame")


def plot_attack_curves(results, path, *, x: str = "epsilon", metrics=("accuracy", "mean_entropy"),
                       title: str | None = None) -> Path:
    """Draw one panel per metric against ``x``, one line per posterior, and save a PNG.

    Args:
        results: ``{posterior name: DataFrame}`` or one long DataFrame with a
            ``posterior`` column (as written by the ``attack`` command).
        path: output file (``.png``); parent folders are created.
        x: the column on the horizontal axis (``"epsilon"`` or ``"step"``).
        metrics: columns drawn, one panel each.
        title: figure title.

    Returns:
        the path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    frames = _as_frames(results)
    if not frames:
        raise ValueError("results is empty: nothing to plot")
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    for name, frame in frames.items():
        missing = [c for c in (x, *metrics) if c not in frame.columns]
        if missing:
            raise ValueError(f"results for {name!r} lack column(s) {missing}; has {list(frame.columns)}")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for name, frame in frames.items():
            frame = frame.sort_values(x)
            ax.plot(frame[x], frame[metric], marker="o", markersize=2.5, label=name)
        ax.set_xlabel(LABELS.get(x, x))
        # at most ~6 ticks (nine 5-digit ε ticks ran into each other), whole numbers on a step axis
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=x == "step"))
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=120)  # a reader never sees half a figure
    plt.close(fig)
    return path
