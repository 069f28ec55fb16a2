"""PNG plots of attack results: accuracy, mean entropy and detection AUROC against ε or step."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import pandas as pd

from uncertain_agents.runs import atomic_save_figure

LABELS = {"epsilon": "ε (L∞ perturbation)", "step": "I-FGSM step", "accuracy": "accuracy",
          "mean_entropy": "mean predictive entropy (nats)", "target_success": "target success",
          "auroc_entropy": "AUROC (entropy)", "mean_mutual_information": "mean mutual information (nats)",
          "auroc_mutual_information": "AUROC (mutual information)"}

#: the panels drawn by default, before one AUROC panel per detection score the results carry
DEFAULT_METRICS = ("accuracy", "mean_entropy")
#: a column ``auroc_<score>`` holds the AUROC of detecting adversarial inputs by ``<score>``
AUROC_PREFIX = "auroc_"
#: the y range of an AUROC panel: all of [0, 1], since an attack can make adversarial inputs look
#: *more* certain than clean ones (AUROC below 0.5), plus a hair of margin so a line at 0 or 1 shows
AUROC_YLIM = (-0.02, 1.02)
#: the AUROC of a detector that cannot tell clean from adversarial inputs
CHANCE = 0.5
#: panels per row: up to three in one row, else two rows (four panels: 2 × 2, five or six: 3 + 2 / 3 + 3)
MAX_ONE_ROW = 3

#: what :func:`plot_attack_curves` draws: one long frame with a ``posterior`` column, or name -> frame
Results: TypeAlias = pd.DataFrame | Mapping[str, pd.DataFrame]


def _as_frames(results: Results) -> dict[str, pd.DataFrame]:
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


def is_auroc(metric: str) -> bool:
    """True for a detection-AUROC column (``auroc_entropy``, ``auroc_mutual_information``, ...)."""
    return metric.startswith(AUROC_PREFIX)


def detection_metrics(results: Results) -> list[str]:
    """The AUROC columns (``auroc_<score>``) that every frame of ``results`` holds, in column order.

    ``results`` is what :func:`plot_attack_curves` takes. An empty list when no frame has one
    (e.g. a table written before the detection scores were added)."""
    frames = list(_as_frames(results).values())
    if not frames:
        return []
    return [c for c in frames[0].columns
            if isinstance(c, str) and is_auroc(c) and all(c in f.columns for f in frames[1:])]


def plot_attack_curves(results: Results, path, *, x: str = "epsilon",
                       metrics: str | Sequence[str] | None = None, title: str | None = None) -> Path:
    """Draw one panel per metric against ``x``, one line per posterior, and save a PNG.

    Every posterior keeps one colour in all panels, and the first panel's legend names them. A
    detection AUROC column (``auroc_<score>``) gets a panel on a fixed y axis from 0 to 1 (not
    cropped to [0.4, 1]: an attack can make adversarial inputs look *more* certain than clean
    ones, an AUROC below 0.5) with a dashed line at 0.5 labelled "chance" in its legend. Up to
    three panels stand in one row, more in two rows (four: 2 × 2).

    Args:
        results: ``{posterior name: DataFrame}`` or one long DataFrame with a
            ``posterior`` column (as written by the ``attack`` command).
        path: output file (``.png``); parent folders are created.
        x: the column on the horizontal axis (``"epsilon"`` or ``"step"``).
        metrics: columns drawn, one panel each. By default (``None``) accuracy and mean entropy,
            then one AUROC panel per detection score present in every frame
            (:func:`detection_metrics`: ``auroc_entropy``, ``auroc_mutual_information``).
        title: figure title.

    Returns:
        the path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    frames = _as_frames(results)
    if not frames:
        raise ValueError("results is empty: nothing to plot")
    if metrics is None:
        metrics = [*DEFAULT_METRICS, *detection_metrics(frames)]
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise ValueError("metrics is empty: name at least one column to plot")
    for name, frame in frames.items():
        missing = [c for c in (x, *metrics) if c not in frame.columns]
        if missing:
            raise ValueError(f"results for {name!r} lack column(s) {missing}; has {list(frame.columns)}")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    ncols = len(metrics) if len(metrics) <= MAX_ONE_ROW else math.ceil(len(metrics) / 2)
    nrows = math.ceil(len(metrics) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False)
    axes = list(grid.flat)
    for spare in axes[len(metrics):]:  # the empty slot of a 3 + 2 layout
        fig.delaxes(spare)
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color") or ["C0"]
    colors = {name: cycle[i % len(cycle)] for i, name in enumerate(frames)}
    for ax, metric in zip(axes, metrics):
        for name, frame in frames.items():
            frame = frame.sort_values(x)
            ax.plot(frame[x], frame[metric], marker="o", markersize=2.5, color=colors[name], label=name)
        ax.set_xlabel(LABELS.get(x, x))
        # at most ~6 ticks (nine 5-digit ε ticks ran into each other), whole numbers on a step axis
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=x == "step"))
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
        if is_auroc(metric):
            chance = ax.axhline(CHANCE, color="0.35", linestyle="--", linewidth=1, label="chance", zorder=1)
            ax.set_ylim(*AUROC_YLIM)
            ax.yaxis.set_major_locator(MultipleLocator(0.25))
            if ax is not axes[0]:  # the posteriors are named once, in the first panel (same colours)
                ax.legend(handles=[chance], fontsize=8)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=120)  # a reader never sees half a figure
    plt.close(fig)
    return path
