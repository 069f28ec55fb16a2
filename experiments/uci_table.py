"""Reproduce the UCI regression table (Boston by default) for several posteriors.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/uci_table.py \
        --out experiments/results/boston_mean_field [--splits 20] [--epochs 500]

Protocol (Li & Gal 2017 / Hernández-Lobato et al. 2016): the 20 standard splits, one
hidden layer of 50 ReLU units, batch 32, 500 epochs, 100 posterior samples for the test
log-likelihood, every method with the defaults a user gets. Writes one CSV per method,
``table.csv`` and ``table.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from uncertain_agents.regression import UCIConfig, run_uci, summarize
from uncertain_agents.runs import atomic_write_csv, atomic_write_text, record_run

DEFAULT_METHODS = [
    ("mfvi", "mfvi", {}),
    ("bb-alpha α=-1", "bb-alpha", {"alpha": -1.0}),
    ("bb-alpha α=0", "bb-alpha", {"alpha": 0.0}),
    ("bb-alpha α=0.5", "bb-alpha", {"alpha": 0.5}),
    ("bb-alpha α=1", "bb-alpha", {"alpha": 1.0}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="bostonHousing")
    parser.add_argument("--splits", type=int, default=None, help="first N splits (default: all)")
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--methods", default=None,
                        help='JSON list of [label, posterior, options], default: mfvi and bb-alpha α∈{-1,0,0.5,1}')
    parser.add_argument("--seed", type=int, default=0, help="split k uses seed + k")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default="experiments/results/uci")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    methods = json.loads(args.methods) if args.methods else DEFAULT_METHODS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record_run(out)  # appends commit, command line and versions to {out}/manifest.json
    rows = []
    for label, name, options in methods:
        config = UCIConfig(dataset=args.dataset, posterior=name, epochs=args.epochs, batch_size=args.batch_size,
                           splits=None if args.splits is None else list(range(args.splits)), options=options,
                           seed=args.seed)
        frame = run_uci(config, data_dir=args.data_dir,
                        on_split=lambda r, lab=label: print(lab, {k: round(v, 4) for k, v in r.items()}, flush=True))
        slug = label.replace(" ", "_").replace("=", "").replace("α", "alpha")
        atomic_write_csv(out / f"{slug}.csv", frame)
        s = summarize(frame)
        rows.append({"method": label, **s, "train_seconds_per_split": float(frame.train_seconds.mean())})
        print("SUMMARY", rows[-1], flush=True)
        table = pd.DataFrame(rows)
        atomic_write_csv(out / "table.csv", table)
        lines = ["| method | test NLL | test RMSE | splits |", "|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['method']} | {r['test_nll_mean']:.2f} ± {r['test_nll_se']:.2f} | "
                         f"{r['test_rmse_mean']:.2f} ± {r['test_rmse_se']:.2f} | {r['n_splits']} |")
        atomic_write_text(out / "table.md", "\n".join(lines) + "\n")
    print((out / "table.md").read_text())


if __name__ == "__main__":
    sys.exit(main())
