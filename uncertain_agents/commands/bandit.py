"""``uncertain-agents bandit``: agents on the wheel or mushroom bandit, against Uniform.

Writes ``steps.csv`` (every step of every run), ``summary.csv`` / ``summary.json``
(cumulative and normalised regret, mean ± standard error over trials) and
``regret.png`` to ``--out``, and prints the summary as a table. Every finished run (one
agent, one trial) is written to ``--out/units/`` as it finishes; running the same command
again resumes from them, and a different run is refused unless ``--force``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..agents.protocols import PROTOCOLS, get_protocol
from ..options import parse_key_value
from .common import DEVICE_HELP, add_hidden_argument, add_no_progress_argument, seed_arg


def _csv_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expects a comma-separated list such as a,b, got {text!r}")
    return items


def _option(text: str) -> tuple[str, object]:
    try:
        return parse_key_value(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def register(sub) -> None:
    p = sub.add_parser("bandit", help="run Thompson sampling and baselines on a contextual bandit",
                       description="Run agents on the wheel or mushroom bandit; Uniform always runs "
                                   "beside them so regret can be normalised (Uniform = 100, same contexts).")
    p.add_argument("env", help="wheel or mushroom")
    p.add_argument("--agent", default="thompson", type=_csv_list,
                   help="comma-separated agents: thompson, greedy, linear, neural-linear, uniform")
    p.add_argument("--posterior", default=None, type=_csv_list,
                   help="comma-separated posterior names for the posterior agents thompson and greedy "
                        "(default mfvi; see `uncertain-agents list`)")
    p.add_argument("--option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                   help="posterior option, e.g. --option noise_std=0.1 (repeatable)")
    p.add_argument("--delta", type=float, default=0.95, help="wheel exploration parameter δ (default 0.95)")
    p.add_argument("--steps", type=int, default=2000, help="decisions per run (default 2000)")
    p.add_argument("--trials", type=int, default=3, help="independent trials (default 3)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of trial 0; trial i uses seed + i")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bandit-ENV)")
    p.add_argument("--protocol", default="default", choices=sorted(PROTOCOLS),
                   help="named settings (network, refit schedule, posterior options): default, "
                        "showdown (Riquelme et al. 2018), fsvgd-paper (Wang et al. 2019); "
                        "the options below override it")
    add_hidden_argument(p, default=None, help="hidden widths, e.g. 50, 100 100 or 100,100 (default: the protocol's)")
    p.add_argument("--train-every", type=int, default=None, help="refit every N decisions (default: protocol)")
    p.add_argument("--train-steps", type=int, default=None, help="optimiser steps per refit (default: protocol)")
    p.add_argument("--batch-size", type=int, default=None, help="refit minibatch (default: protocol)")
    p.add_argument("--initial-pulls", type=int, default=None,
                   help="round-robin pulls of every arm before the first fit (default: the protocol's; "
                        "5 in default, the papers' 2 in showdown and fsvgd-paper)")
    p.add_argument("--lr", type=float, default=None, help="refit learning rate (default: the method's)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--data-dir", default=None, help="data folder (else $UNCERTAIN_AGENTS_DATA)")
    p.add_argument("--no-download", dest="download", action="store_false",
                   help="never download a missing data file (fail with a clear error instead)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: bandit refits are tiny, extra threads only contend; "
                        "at most the cores this process may use)")
    p.add_argument("--workers", type=int, default=1,
                   help="run this many (agent, trial) runs side by side (at most the cores this process may "
                        "use); the results are the same as one by one")
    p.add_argument("--parallel", default="auto", choices=["auto", "processes", "threads", "batched"],
                   help="how --workers runs side by side: processes (spawned, one torch thread each), threads "
                        "(one process; on CUDA every run on its own stream, which the GPU overlaps), batched "
                        "(the trials of a Thompson agent as one trial-batched model in lock step, for mfvi, "
                        "bb-alpha, dropout-alpha, bootstrap, ensemble, and fsvgd / svgd with a fixed noise; other "
                        "random numbers than one by one), auto (default: threads on CUDA, processes on a CPU)")
    p.add_argument("--force", action="store_true", help="replace a different run already in --out")
    add_no_progress_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from ..agents.experiment import (agent_specs, make_env, parallel_mode, plot_regret, resolve_env,
                                     run_experiment, summarize, trials_batchable)
    from ..agents.factory import POSTERIOR_AGENTS
    from ..posteriors.progress import progress_bar, status_console
    from ..runs import RunFolder
    from .common import (check_device, check_hidden, check_posterior_options, check_threads, check_writable_file,
                         finite_number, json_safe, unit_name)

    # every argument is checked before any work starts
    env_name = resolve_env(args.env)
    threads, note = check_threads(args.threads)
    workers, workers_note = check_threads(args.workers, name="--workers")
    for name in ("steps", "trials"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    for name in ("train_every", "train_steps", "batch_size"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.initial_pulls is not None and args.initial_pulls < 0:
        raise ValueError(f"--initial-pulls must be a non-negative integer, got {args.initial_pulls}")
    finite_number(args.lr, "--lr", positive=True)
    check_hidden(args.hidden)
    hidden = None if args.hidden is None else tuple(args.hidden)
    if env_name == "wheel" and not 0.0 < args.delta < 1.0:
        raise ValueError(f"--delta must lie in (0, 1), got {args.delta}")
    check_device(args.device)
    specs = agent_specs(args.agent, args.posterior or ["mfvi"], dict(args.option))
    proto = get_protocol(args.protocol)
    mushroom = None
    if env_name == "mushroom":
        from ..datasets.mushroom import load_mushroom

        mushroom = load_mushroom(args.data_dir, download=args.download)  # a missing file fails now, not after a run
    # the options are checked on the network the agents build: the environment's context and arms,
    # the protocol's (or --hidden) widths, the protocol's options for the method under the given ones
    env = make_env(env_name, steps=args.steps, delta=args.delta, mushroom_data=mushroom)
    net_hidden = hidden or proto.hidden
    check_posterior_options([s.posterior for s in specs if s.posterior], dict(args.option),
                            in_dim=env.observation_space.shape[0], out_dim=int(env.action_space.n), hidden=net_hidden,
                            merge=lambda name, options: proto.merged_options(name, net_hidden, options))
    unused = [] if any(s.posterior for s in specs) else \
        [text for text, given in ((f"--posterior {','.join(args.posterior or [])}", args.posterior),
                                  ("--option", args.option)) if given]

    config = {"env": env_name, "delta": args.delta if env_name == "wheel" else None, "steps": args.steps,
              "trials": args.trials, "seed": args.seed, "protocol": proto.name,
              "hidden": list(hidden or proto.hidden), "train_every": args.train_every,
              "train_steps": args.train_steps, "batch_size": args.batch_size,
              "initial_pulls": args.initial_pulls if args.initial_pulls is not None else proto.initial_pulls,
              "lr": args.lr, "device": args.device,
              "agents": [s.label for s in specs], "options": dict(args.option)}
    # --parallel batched runs a Thompson agent's trials as one trial-batched model, with other random
    # numbers than one by one (processes, threads, serial: the same runs); a run started one way is
    # never resumed the other. Recorded only when batching happens, so other runs keep their config.
    batched = [s.label for s in specs if trials_batchable(s, proto.name)] \
        if parallel_mode(args.parallel, args.device) == "batched" else []
    if batched:
        config["trial_batched"] = batched
    if not proto.fit_after_warmup:  # the presets' first fit moved in session 39: never resume a folder of before
        config["first_fit"] = "train_every"
    out = args.out or Path("runs") / f"bandit-{env_name}"
    check_writable_file(Path(out) / RunFolder.CONFIG, "--out", shown=out)  # names the flag, as grid and bench do
    folder = RunFolder(out, config, force=args.force)
    console, stderr = Console(), status_console()  # results on stdout; notes, resuming and the bar on stderr
    if unused:
        stderr.print(escape(f"note: {' and '.join(unused)} not used: --posterior and --option apply only to the "
                            f"posterior agents ({', '.join(POSTERIOR_AGENTS)}), and --agent {','.join(args.agent)} "
                            f"names none of them"), soft_wrap=True)
    for line in (note, workers_note):
        if line:
            stderr.print(line)
    torch.set_num_threads(threads)
    units = {(s.label, t): unit_name(s.label, f"trial{t}") for s in specs for t in range(args.trials)}
    finished = sum(name in set(folder.finished()) for name in units.values())
    if folder.resumed:
        stderr.print(f"resuming {out}: {finished} of {len(units)} runs already finished")
    total = len(specs) * args.trials * args.steps
    with progress_bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), disable=args.no_progress) as bar:
        task = bar.add_task(f"{env_name}", total=total)

        def tick(label: str, k: int) -> None:
            bar.update(task, advance=k, description=escape(f"{env_name} {label}"))

        steps = run_experiment(env_name, specs, steps=args.steps, trials=args.trials, seed=args.seed,
                               delta=args.delta, data_dir=args.data_dir, download=args.download,
                               protocol=args.protocol, hidden=hidden,
                               train_every=args.train_every, train_steps=args.train_steps,
                               batch_size=args.batch_size, initial_pulls=args.initial_pulls, lr=args.lr,
                               device=args.device, workers=workers, parallel=args.parallel,
                               progress=tick,
                               on_run=lambda f: folder.save_frame(units[f["label"].iloc[0], int(f["trial"].iloc[0])], f),
                               completed=lambda label, trial: folder.load_frame(units[label, trial]))
        bar.update(task, description=escape(env_name))  # the bar counted every run, not only the last one's
    summary = summarize(steps)
    folder.write_text("steps.csv", steps.to_csv(index=False))
    folder.write_text("summary.csv", summary.to_csv(index=False))
    meta = {**config, "summary": summary.to_dict(orient="records")}
    folder.write_text("summary.json", json.dumps(json_safe(meta), indent=2, default=float))
    title = f"{env_name}" + (f" δ={args.delta}" if env_name == "wheel" else "") + \
        f", {args.steps} steps, {args.trials} trial(s)"
    plot_regret(steps, Path(out) / "regret.png", title=title)

    n_trials = int(summary["trials"].max())
    table = Table(title=title, caption=(f"mean ± s.e. over {n_trials} trials; " if n_trials > 1 else "one trial, no s.e.; ")
                  + "normalised regret = 100 × cumulative regret / Uniform's in the same trial; s / run: wall seconds")
    for col in ("agent", "cumulative regret", "normalised regret", "s / run"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for row in summary.itertuples():
        table.add_row(escape(row.label), _pm(row.cumulative_regret, row.cumulative_regret_se),
                      _pm(row.normalised_regret, row.normalised_regret_se), f"{row.seconds:.1f}")
    console.print(table)
    console.print(f"results in {out}/ (steps.csv, summary.csv, summary.json, regret.png; units/ per run)", soft_wrap=True)
    return 0


def _pm(mean: float, se: float) -> str:
    return f"{mean:.2f}" if se != se else f"{mean:.2f} ± {se:.2f}"
