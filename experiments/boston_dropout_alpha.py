"""Boston housing, 20 standard splits: dropout-alpha (α ∈ {0, 0.5, 1}), map and ensemble.

Protocol (Li & Gal 2017, Table 1; Hernández-Lobato & Adams 2015): one hidden layer of 50
ReLU units, batch 32, 500 epochs (``steps = 500 * ceil(N_train / 32)``), the posterior's
defaults otherwise. Reports mean ± standard error over splits of the test NLL
(``-Predictive.log_prob(y_test).mean()``, original units) and the RMSE of the predictive
mean, and writes one CSV row per (method, split).

    UNCERTAIN_AGENTS_DATA=/work/shared/data OMP_NUM_THREADS=1 \\
        python experiments/boston_dropout_alpha.py --out experiments/results/boston_dropout_alpha.csv

A method is ``name`` or ``name:key=value,key=value`` (values parsed as Python literals),
e.g. ``dropout-alpha:alpha=0.5``. Default: the five rows of the docs table.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.datasets.uci import UCIDataset
from uncertain_agents.options import parse_posterior_spec as parse_method
from uncertain_agents.runs import atomic_write_csv

DEFAULT_METHODS = ("dropout-alpha:alpha=0.0", "dropout-alpha:alpha=0.5", "dropout-alpha:alpha=1.0",
                   "map", "ensemble")
PUBLISHED = {  # Li & Gal (2017), Table 1, Boston: (test NLL, RMSE)
    "dropout-alpha:alpha=0.0": (2.42, 2.85), "dropout-alpha:alpha=0.5": (2.38, 2.97),
    "dropout-alpha:alpha=1.0": (2.50, 3.04),
}


def run_split(method: str, data: UCIDataset, k: int, *, epochs: int, batch_size: int,
              n_samples: int, seed: int) -> dict:
    name, opts = parse_method(method)
    split = data.split(k)
    n_train, in_dim = split.x_train.shape
    steps = epochs * math.ceil(n_train / batch_size)
    post = ua.make_posterior(name, in_dim=in_dim, out_dim=1, hidden=(50,), seed=seed + k, **opts)
    t0 = time.perf_counter()
    post.fit(split.x_train, split.y_train, steps=steps, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    pred = post.predict(split.x_test, n_samples=n_samples, generator=torch.Generator().manual_seed(k))
    y = torch.as_tensor(split.y_test)
    nll = float(-pred.log_prob(y).mean())
    rmse = float((pred.mean - y).square().mean().sqrt())
    return {"method": method, "split": k, "test_nll": nll, "test_rmse": rmse, "fit_seconds": seconds,
            "steps": steps}


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby("method", sort=False)
    out = pd.DataFrame({
        "splits": g.size(),
        "nll_mean": g.test_nll.mean(), "nll_se": g.test_nll.std(ddof=1) / np.sqrt(g.size()),
        "rmse_mean": g.test_rmse.mean(), "rmse_se": g.test_rmse.std(ddof=1) / np.sqrt(g.size()),
        "nll_worst_split": g.test_nll.max(),
    })
    out["published_nll"] = [PUBLISHED.get(m, (np.nan, np.nan))[0] for m in out.index]
    out["published_rmse"] = [PUBLISHED.get(m, (np.nan, np.nan))[1] for m in out.index]
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--splits", type=int, nargs="*", default=None, help="split indices (default all)")
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-samples", type=int, default=1000, help="functions per test prediction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/boston_dropout_alpha.csv"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = UCIDataset("bostonHousing")
    splits = range(data.n_splits) if args.splits is None else args.splits
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for method in args.methods:
        for k in splits:
            row = run_split(method, data, k, epochs=args.epochs, batch_size=args.batch_size,
                            n_samples=args.n_samples, seed=args.seed)
            rows.append(row)
            print(f"{method:28s} split {k:2d}  nll {row['test_nll']:.3f}  rmse {row['test_rmse']:.3f}"
                  f"  ({row['fit_seconds']:.0f}s)", flush=True)
            atomic_write_csv(args.out, pd.DataFrame(rows))
    summary = summarise(pd.DataFrame(rows))
    atomic_write_csv(args.out.with_name(args.out.stem + "_summary.csv"), summary, index=True)
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
