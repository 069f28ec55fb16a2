"""Boston housing, 20 standard splits: aadm (α ∈ {1e-4, 0.5, 1}) and avb beside mfvi.

Protocol (issue 10; the user's defaults): a 2 × 50 ReLU network, batch 32, 500 epochs
(``steps = 500 · ceil(N_train / 32)``), every method's own defaults otherwise (AADM:
K = 10 shared samples, 10 % KL warm-up, lr 1e-3 for both networks). The
paper's protocol differs (leaky ReLU, batch 10, 2,000 epochs, lr 1e-4): pass
``--epochs``, ``--batch-size``, ``--activation`` and method options to move towards it.
Test NLL is ``-Predictive.log_prob(y_test).mean()`` in original units over 100 functions
(the paper's K_test), RMSE that of the predictive mean.

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 \\
        python experiments/boston_aadm.py --out experiments/results/boston_aadm

A method is ``name`` or ``name:key=value,...``. Every finished (method, split) is one row
of ``<out>/splits.csv``, rewritten atomically; a rerun skips what is there.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.runs import atomic_write_csv, atomic_write_text, record_run
from uncertain_agents.datasets.uci import UCIDataset
from uncertain_agents.options import parse_posterior_spec

DEFAULT_METHODS = ("aadm:alpha=0.0001", "aadm:alpha=0.5", "aadm:alpha=1.0", "avb", "mfvi")


def run_split(method: str, data: UCIDataset, k: int, args) -> dict:
    name, opts = parse_posterior_spec(method)
    split = data.split(k)
    n_train, in_dim = split.x_train.shape
    steps = args.epochs * math.ceil(n_train / args.batch_size)
    post = ua.make_posterior(name, in_dim=in_dim, out_dim=1, hidden=tuple(args.hidden),
                             activation=args.activation, seed=args.seed + k, **opts)
    t0 = time.perf_counter()
    post.fit(split.x_train, split.y_train, steps=steps, batch_size=args.batch_size)
    seconds = time.perf_counter() - t0
    pred = post.predict(split.x_test, n_samples=args.n_samples, generator=torch.Generator().manual_seed(k))
    y = torch.as_tensor(split.y_test)
    return {"method": method, "split": k, "test_nll": float(-pred.log_prob(y).mean()),
            "test_rmse": float((pred.mean - y).square().mean().sqrt()), "fit_seconds": seconds,
            "steps": steps}


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby("method", sort=False)
    return pd.DataFrame({
        "splits": g.size(),
        "nll_mean": g.test_nll.mean(), "nll_se": g.test_nll.std(ddof=1) / np.sqrt(g.size()),
        "rmse_mean": g.test_rmse.mean(), "rmse_se": g.test_rmse.std(ddof=1) / np.sqrt(g.size()),
        "seconds_per_fit": g.fit_seconds.mean(),
    })


def write_atomic(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    atomic_write_csv(tmp, df)
    os.replace(tmp, path)


def markdown(summary: pd.DataFrame) -> str:
    lines = ["| method | splits | test NLL | test RMSE | s / fit |", "|---|---|---|---|---|"]
    for method, r in summary.iterrows():
        lines.append(f"| `{method}` | {r.splits} | {r.nll_mean:.3f} ± {r.nll_se:.3f} | "
                     f"{r.rmse_mean:.3f} ± {r.rmse_se:.3f} | {r.seconds_per_fit:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--splits", type=int, nargs="*", default=None, help="split indices (default all 20)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[50, 50])
    parser.add_argument("--activation", default="relu")
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-samples", type=int, default=100, help="functions per test prediction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/boston_aadm"))
    args = parser.parse_args(argv)
    record_run(args.out)  # appends commit, command line and versions to {out}/manifest.json
    torch.set_num_threads(args.threads)
    data = UCIDataset("bostonHousing")
    splits = range(data.n_splits) if args.splits is None else args.splits
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "splits.csv"
    done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["method", "split"])
    rows = done.to_dict("records")
    have = {(r["method"], int(r["split"])) for r in rows}
    for method in args.methods:
        for k in splits:
            if (method, k) in have:
                continue
            row = run_split(method, data, k, args)
            rows.append(row)
            print(f"{method:24s} split {k:2d}  nll {row['test_nll']:.3f}  rmse {row['test_rmse']:.3f}"
                  f"  ({row['fit_seconds']:.0f}s)", flush=True)
            write_atomic(pd.DataFrame(rows), path)
    frame = pd.DataFrame(rows)
    summary = summarise(frame[frame.method.isin(args.methods)])
    atomic_write_text(args.out / "table.md", markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
