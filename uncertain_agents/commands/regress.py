"""``uncertain-agents regress DATASET --posterior NAME``: UCI regression on the standard splits.

Every finished split is written to ``--out/units/`` as it finishes; the same command
resumes from them, and a different run in ``--out`` is refused unless ``--force``.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..options import parse_key_value
from .common import add_hidden_argument, add_no_progress_argument, seed_arg


def register(sub) -> None:
    p = sub.add_parser("regress", help="UCI regression with a posterior on the standard splits",
                       description="Train a posterior on every standard split of a UCI data set and "
                                   "report mean ± standard error of test NLL and RMSE.")
    p.add_argument("dataset", help="e.g. bostonHousing (alias boston), concrete, energy, yacht, ...")
    p.add_argument("--posterior", default="bb-alpha", help="posterior name (see `uncertain-agents list`; default: bb-alpha)")
    add_hidden_argument(p, default=[50], help="hidden widths, e.g. 50, 50 50 or 50,50 (default: 50)")
    p.add_argument("--activation", default="relu", help="hidden non-linearity (default: relu)")
    p.add_argument("--epochs", type=int, default=500, help="training epochs per split (default: 500)")
    p.add_argument("--batch-size", type=int, default=32, help="training minibatch (default: 32)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the method's)")
    p.add_argument("--alpha", type=float, default=None, help="α for bb-alpha / dropout-alpha")
    p.add_argument("--train-samples", type=int, default=None, help="Monte-Carlo samples per step (K)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other method option, e.g. --option prior_std=1.0 (repeatable)")
    p.add_argument("--splits", type=int, default=None, help="use only the first N splits")
    p.add_argument("--n-samples", type=int, default=100, help="posterior samples for prediction (default: 100)")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default: 0)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--data-dir", default=None, help="data folder (default: $UNCERTAIN_AGENTS_DATA)")
    p.add_argument("--out", default=None, help="run folder (default: runs/regress-<dataset>-<posterior>)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: UCI networks are small, one thread is the fastest "
                        "and never contends with other jobs — Boston 148 s with 1, 166 s with 2 on a 2-core "
                        "machine; raise it for wide networks or large batches; at most the cores this "
                        "process may use)")
    p.add_argument("--force", action="store_true", help="replace a different run already in --out")
    add_no_progress_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd
    import torch
    from rich.console import Console

    from ..datasets.uci import UCIDataset
    from ..network import ACTIVATIONS
    from ..posteriors.progress import status_console
    from ..registry import resolve_name
    from ..regression import UCIConfig, run_uci, summarize
    from ..runs import RunFolder
    from .common import (check_device, check_hidden, check_posterior_options, check_threads, check_writable_file,
                         finite_number, json_safe, titled_table, unit_name)

    # every argument is checked before any work starts
    options = dict(parse_key_value(o) for o in args.option)
    if args.alpha is not None:
        options["alpha"] = args.alpha
    if args.train_samples is not None:
        options["train_samples"] = args.train_samples
    name = resolve_name(args.posterior)
    for flag in ("epochs", "batch_size", "n_samples", "splits"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    finite_number(args.lr, "--lr", positive=True)
    finite_number(args.alpha, "--alpha")
    check_hidden(args.hidden)
    if args.activation not in ACTIVATIONS:
        raise ValueError(f"--activation must be one of {', '.join(sorted(ACTIVATIONS))}, got {args.activation!r}")
    check_device(args.device)
    threads, note = check_threads(args.threads)
    data = UCIDataset(args.dataset, args.data_dir)
    # on the network run_uci builds: the data set's features -> --hidden -> one output
    flags = [f for f, v in (("--alpha", args.alpha), ("--train-samples", args.train_samples)) if v is not None]
    check_posterior_options([name], options, in_dim=len(data.features), out_dim=1, hidden=args.hidden,
                            activation=args.activation,  # an error names the flags the options came from
                            where="/".join([*flags, "--option"] if args.option else flags) + f" for {name}"
                            if flags else None)
    n_splits = data.n_splits
    splits = list(range(n_splits if args.splits is None else min(args.splits, n_splits)))
    for k in splits:  # a missing or malformed split file fails now, not after hours
        data.split(k)
    config = UCIConfig(dataset=data.name, posterior=name, hidden=tuple(args.hidden),
                       activation=args.activation, epochs=args.epochs, batch_size=args.batch_size,
                       lr=args.lr, n_samples=args.n_samples, splits=splits, seed=args.seed,
                       device=args.device, options=options)
    out = Path(args.out or f"runs/regress-{data.name}-{name}")
    check_writable_file(out / RunFolder.CONFIG, "--out", shown=out)  # names the flag, as grid and bench do
    folder = RunFolder(out, asdict(config), force=args.force)
    console, stderr = Console(), status_console()  # results on stdout; notes, resuming and the bar on stderr
    if note:
        stderr.print(note)
    torch.set_num_threads(threads)
    done = {k: folder.load_record(unit_name(f"split{k}")) for k in splits}
    todo = [k for k in splits if done[k] is None]
    if folder.resumed:
        stderr.print(f"resuming {out}: {len(splits) - len(todo)} of {len(splits)} splits already finished")
    if todo:
        run_uci(UCIConfig(**{**asdict(config), "splits": todo}), data_dir=args.data_dir,
                progress=not args.no_progress,
                on_split=lambda row: folder.save_record(unit_name(f"split{row['split']}"), row))
    rows = [folder.load_record(unit_name(f"split{k}")) for k in splits]
    frame = pd.DataFrame(rows)
    s = summarize(frame)
    folder.write_text("splits.csv", frame.to_csv(index=False))
    folder.write_text("summary.json", json.dumps(json_safe({"config": asdict(config), **s}), indent=2, default=str))
    import matplotlib.pyplot as plt

    from ..regression import plot_splits

    figure = plot_splits(frame, title=f"{data.name} · {name}: test NLL and RMSE per split")
    folder.write_figure("splits.png", figure, dpi=110)
    plt.close(figure)
    title = f"{data.name} · {name} · {s['n_splits']} split(s)"
    table = titled_table(title,
                         caption=f"mean and standard error over {s['n_splits']} splits" if s["n_splits"] > 1
                         else "one split: no standard error")
    for col in ("metric", "mean", "± s.e."):
        table.add_column(col)
    for label, key in (("test NLL (nats)", "test_nll"), ("test RMSE", "test_rmse")):
        se = s[f"{key}_se"]
        table.add_row(label, f"{s[f'{key}_mean']:.3f}", "–" if se != se else f"{se:.3f}")
    console.print(table)
    console.print(f"results in {out.resolve()} (splits.csv, summary.json, splits.png; units/ per split)", soft_wrap=True)
    return 0
