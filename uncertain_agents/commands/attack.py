"""``uncertain-agents attack``: FGSM / targeted I-FGSM against classifiers, entropy detection.

    uncertain-agents attack --dataset digits --posterior map dropout-alpha:alpha=0.5 \\
        --attack fgsm ifgsm --epochs 20 --out runs/digits-attack
"""
from __future__ import annotations

from pathlib import Path

from .common import add_hidden_argument, add_no_progress_argument, seed_arg

#: the printed tables show every ε (every I-FGSM step) up to this many, else evenly spaced ones
REPORT_EPSILONS = 11
REPORT_STEPS = 6
HEADERS = {"accuracy": "acc", "mean_entropy": "entropy", "auroc_entropy": "AUROC(H)",
           "auroc_mutual_information": "AUROC(MI)", "target_success": "target", "epsilon": "ε"}


def register(sub) -> None:
    p = sub.add_parser(
        "attack", help="adversarial attacks on classifiers with entropy-based detection",
        description="Train (or --load) each posterior on an image data set, attack it with FGSM and/or "
                    "targeted I-FGSM through foolbox, re-score every adversarial batch with fresh "
                    "posterior samples, and write CSV tables, PNG plots and summary.json.")
    p.add_argument("--dataset", choices=("mnist", "digits"), default="digits",
                   help="digits (scikit-learn 8×8, bundled) or mnist (default: digits)")
    p.add_argument("--posterior", nargs="+", required=True, metavar="NAME[:key=value,...]",
                   help="posteriors, e.g. map mfvi dropout-alpha:alpha=0.5 (options after a colon)")
    p.add_argument("--attack", nargs="+", choices=("fgsm", "ifgsm"), default=["fgsm"],
                   help="untargeted FGSM and/or targeted iterative FGSM (default: fgsm)")
    p.add_argument("--out", required=True, help="run folder for CSV, PNG, summary.json and models/")
    p.add_argument("--load", default=None, metavar="DIR",
                   help="load <label>.pt files from DIR (e.g. a previous run's models/) instead of training")
    p.add_argument("--data-dir", default=None, help="data folder (default: $UNCERTAIN_AGENTS_DATA)")
    add_hidden_argument(p, default=[400, 400], help="hidden widths, e.g. 400 400 or 400,400 (default: 400 400)")
    p.add_argument("--activation", default="relu", help="hidden non-linearity (default: relu)")
    p.add_argument("--epochs", type=float, default=5.0, help="training epochs (default: 5)")
    p.add_argument("--batch-size", type=int, default=128, help="training minibatch (default: 128)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the method's)")
    p.add_argument("--n-attack", type=int, default=1000,
                   help="test images attacked (seeded random subset; default 1000)")
    p.add_argument("--n-samples", type=int, default=20, help="functions averaged by the attacked predictive (default: 20)")
    p.add_argument("--eval-samples", type=int, default=None, help="fresh functions for re-scoring (default: n-samples)")
    p.add_argument("--epsilons", type=float, nargs="+", default=None, help="FGSM ε grid (default 0, 0.02, ..., 0.5)")
    p.add_argument("--step", type=float, default=0.01, help="I-FGSM step size (default: 0.01)")
    p.add_argument("--steps", type=int, default=40, help="I-FGSM steps (default: 40)")
    p.add_argument("--target", type=int, default=0, help="I-FGSM target class (default: 0)")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default: 0)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    add_no_progress_argument(p)  # the training bars and the spinner while attacking
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores this process may use, at most OMP_NUM_THREADS when set; never more)")
    p.add_argument("--force", action="store_true", help="replace a different run already in --out")
    p.set_defaults(func=run)


def report_values(values, most: int) -> list:
    """The sorted distinct ``values`` when there are at most ``most`` of them; otherwise at most
    ``most`` evenly spaced ones, always the first and the last (an even stride through the list
    when one gives at least four rows: ε 0, 0.02, ..., 0.5 -> 0, 0.1, ..., 0.5; steps 0..40 ->
    0, 8, ..., 40)."""
    values = sorted(set(values))
    if len(values) <= most:
        return values
    last = len(values) - 1
    for stride in range(1, last + 1):
        rows = last // stride + 1
        if last % stride == 0 and min(4, most) <= rows <= most:
            return values[::stride]
    picks = sorted({int(round(i * last / (most - 1))) for i in range(most)})
    return [values[i] for i in picks]


def _table(frame, key: str, most: int, title: str, columns):
    from .common import titled_table

    table = titled_table(title)
    table.add_column("posterior", overflow="fold", max_width=28)
    for col in (key, *columns):
        header = HEADERS.get(col, col)
        table.add_column(header, justify="right", no_wrap=True, min_width=max(5, len(header)))
    shown = report_values(frame[key].tolist(), most)
    for _, row in frame[frame[key].isin(shown)].iterrows():
        table.add_row(str(row["posterior"]), f"{row[key]:g}", *(f"{row[c]:.3f}" for c in columns))
    return table


def _clean_table(frame, title: str):
    from .common import titled_table

    table = titled_table(title)
    table.add_column("posterior", overflow="fold", max_width=28)
    for col in ("clean_accuracy", "train_seconds"):
        table.add_column(col, justify="right", no_wrap=True)
    for _, row in frame.iterrows():
        table.add_row(str(row["posterior"]), f"{row['clean_accuracy']:.4f}", f"{row['train_seconds']:.1f}")
    return table


def run(args) -> int:
    import pandas as pd
    import torch
    from rich.console import Console
    from rich.markup import escape

    from attacks.evaluate import (IMAGE_SHAPES, attack_subset, attack_units, evaluate, load_dataset, load_or_train,
                                  parse_posterior, write_outputs)
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from attacks.fgsm import DEFAULT_EPSILONS

    from ..network import ACTIVATIONS
    from ..posteriors.progress import progress_bar, status_console
    from ..runs import RunFolder
    from .common import (check_device, check_hidden, check_posterior_options, check_threads, check_writable_file,
                         finite_number, unit_name)

    # every argument is checked before any work starts (and before the run folder records them)
    choices = [parse_posterior(text) for text in args.posterior]
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--posterior names must be distinct, got {labels}")
    if len(set(args.attack)) != len(args.attack):  # each attack's table would be written twice
        raise ValueError(f"--attack names must be distinct, got {args.attack}")
    for flag in ("n_attack", "batch_size", "n_samples", "steps"):
        if getattr(args, flag) <= 0:
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}")
    if not 0 < args.epochs < float("inf"):
        raise ValueError(f"--epochs must be a positive finite number, got {args.epochs}")
    if args.eval_samples is not None and args.eval_samples <= 0:
        raise ValueError(f"--eval-samples must be a positive integer, got {args.eval_samples}")
    finite_number(args.lr, "--lr", positive=True)
    check_hidden(args.hidden)
    if args.activation not in ACTIVATIONS:
        raise ValueError(f"--activation must be one of {', '.join(sorted(ACTIVATIONS))}, got {args.activation!r}")
    if not 0 < args.step < float("inf"):
        raise ValueError(f"--step must be a positive finite number, got {args.step}")
    epsilons = DEFAULT_EPSILONS if args.epsilons is None else args.epsilons
    if not all(0 <= e < float("inf") for e in epsilons):
        raise ValueError(f"--epsilons must be finite numbers >= 0, got {list(epsilons)}")
    check_device(args.device)
    threads, note = check_threads(args.threads)
    load = None
    if args.load is not None:
        load = Path(args.load).resolve()
        for choice in choices:
            if not (load / f"{choice.file_stem}.pt").is_file():
                raise FileNotFoundError(f"--load {args.load}: no {choice.file_stem}.pt for --posterior {choice.label} "
                                        f"(--load DIR must hold <label>.pt for every posterior)")
    pixels, classes = IMAGE_SHAPES[args.dataset]
    for choice in choices:  # on the network load_or_train builds (pixels -> --hidden -> classes), before any data
        check_posterior_options([choice.name], dict(choice.options), in_dim=pixels, out_dim=classes,
                                hidden=args.hidden, activation=args.activation, likelihood="categorical",
                                where=f"--posterior {choice.label}")
    data = load_dataset(args.dataset, args.data_dir)
    loaded = None
    if load is not None:  # a broken or wrong model file fails now, before the run folder records --load
        try:  # each file must hold the method, options and network asked for (not just any classifier)
            loaded, load_times = load_or_train(choices, data, load_dir=load, hidden=args.hidden,
                                               activation=args.activation, device=args.device)
        except ValueError as err:
            raise ValueError(f"--load {args.load}: {err}") from None
    if not 0 <= args.target < data.n_classes:
        raise ValueError(f"--target must be a class index in [0, {data.n_classes - 1}] for {data.name}, "
                         f"got {args.target}")
    # what decides "the same run": not where the results or the data live (--out, --data-dir as typed)
    config = {k: v for k, v in vars(args).items()
              if k not in ("func", "force", "threads", "no_progress", "out", "data_dir", "load")}
    config["load"] = None if load is None else str(load)
    config["epsilons"] = list(epsilons)
    out = Path(args.out)
    check_writable_file(out / RunFolder.CONFIG, "--out", shown=out)  # names the flag, as grid and bench do
    folder = RunFolder(out, config, force=args.force)
    models = out / "models"
    # only an earlier run's networks (RunFolder keeps a user's files), never the folder this run --load-s
    if folder.replaced and models.is_dir() and not models.is_symlink() and load != models.resolve():
        import shutil

        shutil.rmtree(models)  # the replaced run's networks (not this run's --load): never beside its results
    # results on stdout; notes, what is loaded, trained and attacked, bars and spinners on stderr
    console, stderr = Console(), status_console()
    if note:
        stderr.print(note)
    torch.set_num_threads(threads)
    stderr.print(f"{data}")
    x_att, y_att = attack_subset(data, args.n_attack, seed=args.seed)
    tables = ("clean", *args.attack)
    parts: dict[str, list] = {t: [] for t in tables}
    for choice in choices:  # one unit per posterior: its clean row and its attack tables
        names = {t: unit_name(choice.label, t) for t in tables}
        found = {t: folder.load_frame(n) for t, n in names.items()}
        if any(f is None for f in found.values()):
            if loaded is not None:
                posteriors = {choice.label: loaded[choice.label]}
                times = load_times[load_times["posterior"] == choice.label]
                stderr.print(f"loaded {choice.label}")
            else:
                posteriors, times = load_or_train(
                    [choice], data, save_dir=out / "models", hidden=args.hidden, activation=args.activation,
                    epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    device=args.device, progress=not args.no_progress, log=stderr.print)
            work = []
            if "fgsm" in args.attack:
                work.append(f"FGSM at {len(epsilons)} ε")
            if "ifgsm" in args.attack:
                work.append(f"{args.steps} I-FGSM steps")
            # a bar of the attacks' units: FGSM's chunks of rows (every ε at once), then I-FGSM's steps
            bar = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeElapsedColumn(), TimeRemainingColumn(), disable=args.no_progress)
            task = bar.add_task(escape(f"attacking {choice.label}: {' and '.join(work)}"),
                                total=attack_units(len(y_att), args.attack, args.steps))
            with bar:
                result = evaluate(posteriors, data.x_test, data.y_test, x_att, y_att, attacks=args.attack,
                                  epsilons=epsilons, step=args.step, steps=args.steps, target=args.target,
                                  n_samples=args.n_samples, eval_samples=args.eval_samples, seed=args.seed,
                                  log=stderr.print, progress=lambda: bar.advance(task))
            result["clean"] = result["clean"].merge(times, on="posterior")
            for t in tables:
                folder.save_frame(names[t], result[t])
            found = result
        else:
            stderr.print(f"{choice.label}: finished in an earlier run (units/)")
        for t in tables:
            parts[t].append(found[t])
    results = {t: pd.concat(parts[t], ignore_index=True) for t in tables}
    write_outputs(results, out, config)

    console.print(_clean_table(results["clean"], f"clean test accuracy ({data.name}, {len(data.y_test)} images)"))
    if "fgsm" in results:
        console.print(_table(results["fgsm"], "epsilon", REPORT_EPSILONS, f"FGSM ({len(y_att)} test images)",
                             ("accuracy", "mean_entropy", "auroc_entropy", "auroc_mutual_information")))
    if "ifgsm" in results:
        console.print(_table(results["ifgsm"], "step", REPORT_STEPS,
                             f"targeted I-FGSM → {args.target} (step {args.step}; "
                             f"{int((y_att != args.target).sum())} test images not of class {args.target})",
                             ("accuracy", "target_success", "mean_entropy", "auroc_entropy")))
    console.print(f"results in {out.resolve()} (clean.csv, {', '.join(f'{a}.csv, {a}.png' for a in args.attack)}, "
                  f"summary.json; {'' if loaded is not None else 'models/, '}units/)", soft_wrap=True)
    return 0
