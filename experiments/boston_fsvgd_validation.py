"""Validation runs used to choose the ``fsvgd``/``svgd`` defaults (test rows never used).

For each Boston split, 20% of the *training* rows (a seeded permutation) are held out as a
validation set; the posterior is fitted on the other 80% with batch 100 and evaluated on the
validation rows at 25, 50, 100, 200, 300 and 500 epochs (continuing the fit). One line per
(method, split) is printed; ``--csv`` also writes the numbers.

    UNCERTAIN_AGENTS_DATA=/work/shared/data OMP_NUM_THREADS=1 python experiments/boston_fsvgd_validation.py \\
        --methods fsvgd svgd "fsvgd:noise_objective='particle'" "fsvgd:prior_scale=10" --splits 0 1 2 3 4

Method syntax as in ``boston_fsvgd.py`` (``name:key=value,...``).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from boston_fsvgd import parse_method  # noqa: E402

import uncertain_agents as ua  # noqa: E402
from uncertain_agents.datasets.uci import UCIDataset  # noqa: E402
from uncertain_agents.runs import atomic_write_csv, record_run  # noqa: E402

EPOCHS = (25, 50, 100, 200, 300, 500)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["fsvgd", "svgd"])
    parser.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = UCIDataset("bostonHousing")
    rows = []
    for method in args.methods:
        name, opts = parse_method(method)
        for k in args.splits:
            sp = data.split(k)
            perm = np.random.default_rng(k).permutation(len(sp.x_train))
            nv = len(perm) // 5
            xv, yv = sp.x_train[perm[:nv]], torch.as_tensor(sp.y_train[perm[:nv]])
            x, y = sp.x_train[perm[nv:]], sp.y_train[perm[nv:]]
            post = ua.make_posterior(name, in_dim=x.shape[1], out_dim=1, hidden=(50,), seed=k, **opts)
            per_epoch, done, parts = math.ceil(len(x) / 100), 0, []
            for epoch in EPOCHS:
                post.fit(x, y, steps=(epoch - done) * per_epoch, batch_size=100)
                done = epoch
                pred = post.particle_predictive(xv)
                nll = float(-pred.log_prob(yv).mean())
                rmse = float((pred.mean - yv).square().mean().sqrt())
                rows.append({"method": method, "split": k, "epoch": epoch, "val_nll": nll, "val_rmse": rmse})
                parts.append(f"ep{epoch}: nll {nll:.3f} rmse {rmse:.2f}")
            print(f"{method} split{k} | " + " | ".join(parts), flush=True)
    df = pd.DataFrame(rows)
    if args.csv is not None:
        atomic_write_csv(args.csv, df)
        if args.csv.resolve().parent != Path(__file__).resolve().parent / "results":
            record_run(args.csv.parent)  # a results folder lists the runs that wrote into it
    print(df[df.epoch == EPOCHS[-1]].groupby("method", sort=False)[["val_nll", "val_rmse"]].mean())


if __name__ == "__main__":
    main()
