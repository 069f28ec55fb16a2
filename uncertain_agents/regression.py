"""UCI regression on the standard splits: train a posterior per split, report test NLL/RMSE."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .datasets.uci import UCIDataset
from .metrics import regression_metrics
from .registry import make_posterior, resolve_name
from .runs import atomic_write_csv, atomic_write_text, json_safe
from .posteriors.optimizers import load_optimizer_machinery


@dataclass
class UCIConfig:
    """Protocol of one UCI run (defaults: Hernández-Lobato & Adams 2015 / Li & Gal 2017)."""

    dataset: str = "bostonHousing"
    posterior: str = "bb-alpha"
    hidden: tuple[int, ...] = (50,)
    activation: str = "relu"
    epochs: int = 500
    batch_size: int = 32
    lr: float | None = None
    n_samples: int = 100
    splits: list[int] | None = None
    seed: int = 0
    device: str = "cpu"
    options: dict = field(default_factory=dict)


def summarize(frame: pd.DataFrame, columns=("test_nll", "test_rmse")) -> dict[str, float]:
    """Mean and standard error over splits."""
    out = {"n_splits": int(len(frame))}
    for col in columns:
        values = frame[col].to_numpy(dtype=float)
        out[f"{col}_mean"] = float(values.mean())
        out[f"{col}_se"] = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")
    return out


def run_uci(config: UCIConfig, *, data_dir=None, progress: bool = False, on_split=None) -> pd.DataFrame:
    """Train and evaluate ``config.posterior`` on each split; one row per split.

    Columns: ``split, test_nll, test_rmse, train_seconds, steps`` and the fit's
    :meth:`~uncertain_agents.posteriors.training.FitResult.summary` (per-phase seconds, scalar
    diagnostics such as refined VI's ``elbo_init`` and ``elbo_aux_final``).
    """
    name = resolve_name(config.posterior)
    data = UCIDataset(config.dataset, data_dir)
    splits = list(range(data.n_splits)) if config.splits is None else list(config.splits)
    rows = []
    bar = _SplitBar(progress, len(splits), f"{data.name} · {name}")
    try:
        for k in splits:
            split = data.split(k)
            n_train = split.x_train.shape[0]
            steps = config.epochs * math.ceil(n_train / config.batch_size)
            post = make_posterior(name, in_dim=split.x_train.shape[1], out_dim=1, hidden=config.hidden,
                                  activation=config.activation, device=config.device,
                                  seed=config.seed + k, **config.options)
            load_optimizer_machinery()  # a one-off import, not this split's time
            t0 = time.perf_counter()
            result = post.fit(split.x_train, split.y_train, steps=steps, batch_size=config.batch_size, lr=config.lr)
            seconds = time.perf_counter() - t0
            pred = post.predict(split.x_test, n_samples=config.n_samples,
                                generator=torch.Generator(post.device).manual_seed(10_000 + k))
            row = {"split": k, **regression_metrics(pred, split.y_test), "train_seconds": seconds,
                   "steps": steps, **result.summary()}
            rows.append(row)
            if on_split is not None:
                on_split(row)
            bar.advance(row)
    finally:
        bar.close()
    return pd.DataFrame(rows)


def write_run(frame: pd.DataFrame, config: UCIConfig, out_dir) -> Path:
    """Write ``splits.csv`` and ``summary.json`` into ``out_dir`` (each atomically: an interrupted write
    leaves the old file or none, never a truncated one that a resuming script would count as done)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(out / "splits.csv", frame)
    summary = {"config": asdict(config), **summarize(frame)}
    atomic_write_text(out / "summary.json", json.dumps(json_safe(summary), indent=2, default=str))
    return out


def plot_splits(frame: pd.DataFrame, *, title: str = ""):
    """A figure of test NLL and RMSE per split (points), with the mean over splits (line) and
    ± one standard error (band): the spread between splits is most of a UCI table's ±.

    ``frame`` has columns ``split``, ``test_nll`` and ``test_rmse`` (one row per split, as
    :func:`run_uci` returns). Returns the matplotlib figure; the caller saves and closes it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    summary = summarize(frame)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, column, label in zip(axes, ("test_nll", "test_rmse"), ("test NLL (nats)", "test RMSE")):
        mean, se = summary[f"{column}_mean"], summary[f"{column}_se"]
        ax.plot(frame["split"], frame[column], "o", color="tab:blue", markersize=4)
        ax.axhline(mean, color="tab:red", label=f"mean {mean:.3f}" + ("" if math.isnan(se) else f" ± {se:.3f}"))
        if not math.isnan(se):
            ax.axhspan(mean - se, mean + se, color="tab:red", alpha=0.15)
        ax.set_xlabel("split")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # splits are whole numbers: no 0.2, 0.4, ... ticks
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(title or f"{summary['n_splits']} split(s)")
    fig.tight_layout()
    return fig


class _SplitBar:
    def __init__(self, enabled: bool, total: int, description: str):
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

            from .posteriors.progress import progress_bar

            self.progress = progress_bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                         TextColumn("last NLL {task.fields[nll]}"), TimeElapsedColumn())
            self.task = self.progress.add_task(description, total=total, nll="-")
            self.progress.start()

    def advance(self, row: dict) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=1, nll=f"{row['test_nll']:.3f}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
