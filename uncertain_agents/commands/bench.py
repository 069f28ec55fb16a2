"""``uncertain-agents bench``: each posterior's training step and ``predict`` as a ratio to a plain
PyTorch MLP of the same size, and Thompson sampling's ``act`` latency, in one interleaved run.

Prints a table and, with ``--out FILE.json``, writes the figures (with the device, torch version,
threads and the run manifest). The measuring lives in :mod:`uncertain_agents.bench`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..bench import BenchNetwork


def _csv_or_space_list(values: list[str], keep_options: bool = False) -> list[str]:
    """Space- or comma-separated names; with ``keep_options`` an item holding ``:`` (a name with
    options, ``ensemble:n_members=20,lr=0.01``) is kept whole."""
    out = []
    for item in values:
        parts = [item] if keep_options and ":" in item else item.split(",")
        out += [v.strip() for v in parts if v.strip()]
    return out


def register(sub) -> None:
    from ..bench import NETWORKS
    from .common import DEVICE_HELP, add_no_progress_argument

    nets = ", ".join(f"{n} ({net.label}, batch {net.batch})" for n, net in NETWORKS.items())
    p = sub.add_parser("bench", help="time each posterior's training step, predict and act against plain PyTorch",
                       description="Time each posterior's training step (through Posterior.fit) and predict as a "
                                   "ratio to a plain PyTorch MLP of the same size trained with Adam on the same "
                                   "batch, and Thompson sampling's act latency; candidates are interleaved round "
                                   "by round and the median is reported.")
    p.add_argument("--network", default="bandit", help=f"network to time: {nets} (default bandit)")
    p.add_argument("--posteriors", nargs="+", default=None, metavar="NAME",
                   help="posteriors to time, space- or comma-separated; NAME:key=value,key=value gives one "
                        "options (default: every registered one and ensemble:n_members=20)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported (default 3)")
    p.add_argument("--steps", type=int, default=20, help="optimiser steps per training timing (default 20)")
    p.add_argument("--act-calls", type=int, default=500, help="act calls timed per posterior (default 500)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default 2, at most the cores this process may use and OMP_NUM_THREADS when set)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--peers", action="store_true",
                   help="also time bayesian-torch and pyro mean-field VI steps when they are installed")
    p.add_argument("--out", type=Path, default=None, help="write the figures to this JSON file")
    add_no_progress_argument(p)
    p.set_defaults(func=run)


def check_args(args) -> tuple[list[str], int, str | None]:
    """Every argument checked before any work: the posterior names, threads (and its note)."""
    from ..bench import DEFAULT_VARIANTS, get_network, parse_candidate
    from ..registry import available_posteriors
    from .common import check_device, check_threads, check_writable_file

    get_network(args.network)
    for name in ("rounds", "steps", "act_calls"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    names = (_csv_or_space_list(args.posteriors, keep_options=True) if args.posteriors
             else [*available_posteriors(), *DEFAULT_VARIANTS])
    if not names:
        raise ValueError("--posteriors needs at least one name (see `uncertain-agents list`)")
    resolved = []
    for name in names:
        try:
            resolved.append(parse_candidate(name)[0])
        except (KeyError, ValueError) as err:
            if ":" in name and "key=value" in str(err):
                raise ValueError(f"--posteriors: {err}") from None
            raise ValueError(f"unknown posterior {name!r}; choose from {', '.join(available_posteriors())}") from None
    threads, note = check_threads(args.threads, default=2)
    check_device(args.device)
    if args.out is not None and Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a folder; give a file path such as {Path(args.out) / 'bench.json'}")
    if args.out is not None:  # a file that cannot be written fails now, not after the measuring
        check_writable_file(args.out, "--out")
    return list(dict.fromkeys(resolved)), threads, note


def run(args) -> int:
    from contextlib import nullcontext

    import torch

    from ..bench import available_peers, get_network, run_bench
    from ..posteriors.progress import status_console
    from ..runs import atomic_write_text, run_manifest
    from .common import Interrupted

    names, threads, note = check_args(args)
    net = get_network(args.network)
    stderr = status_console()  # notes and the spinner; the tables and the figures' notes go to stdout
    if note:
        stderr.print(note)
    torch.set_num_threads(threads)
    if args.peers:
        missing = [name for name, ok in available_peers().items() if not ok]
        if missing:
            stderr.print(f"peers skipped (not installed): {', '.join(n.replace('_', '-') for n in missing)}")
    status = None if args.no_progress else stderr.status("measuring")
    try:
        with status if status is not None else nullcontext():
            result = run_bench(args.network, names, rounds=args.rounds, steps=args.steps, act_calls=args.act_calls,
                               peers=args.peers, device=args.device,
                               progress=None if status is None else (lambda text: status.update(text)))
    except KeyboardInterrupt:  # nothing is kept, nothing resumes: say so (not the run-folder message)
        raise Interrupted("bench wrote nothing; run it again to measure from the start") from None
    result["manifest"] = run_manifest()

    tables = _result_tables(result, net, args)
    console = _report_console(tables)
    for table in tables:
        console.print(table)
    console.print(f"predict: {result['predict']['n_samples']} samples at {result['predict']['n_inputs']} inputs, "
                  f"ratio to {result['predict']['reference']}; act: Thompson sampling on one context "
                  f"({max(2, net.out_dim)} arms), {args.act_calls} calls; malloc keeps freed memory: "
                  f"{'yes' if result['malloc_keeps_freed_memory'] else 'no'} (uncertain_agents.allocator)"
                  + ("" if not result["device"].startswith("cuda") else
                     f"; CUDA graphs: {'on' if result.get('cuda_graphs') else 'off'} (UNCERTAIN_AGENTS_CUDA_GRAPHS)"))
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {args.out}")
    return 0


def _result_tables(result: dict, net: "BenchNetwork", args: argparse.Namespace) -> "list[Table]":
    """The ``rich`` tables of ``result``: each candidate's step and predict against plain
    PyTorch (and the peers), then the other agents' ``act`` latency when it was measured."""
    from rich.markup import escape
    from rich.table import Table

    from .common import titled_table

    table = Table(title=f"{net.name} network {net.label}, batch {net.batch}, {result['device']}"
                        f"{' (' + result['cpu'] + ')' if result['device'] == 'cpu' else ''}, "
                        f"{result['threads']} threads, median of {args.rounds} interleaved rounds × "
                        f"{args.steps} steps")
    for col in ("posterior", "step µs", "ratio to plain", "predict ms", "ratio", "act µs (median)"):
        table.add_column(col, justify="left" if col == "posterior" else "right")
    plain = result["plain"]
    table.add_row("plain PyTorch MLP (Adam)", f"{plain['step_us']:.0f}", "1.00×", f"{plain['predict_ms']:.1f}",
                  "1.00×", "")
    for e in result["posteriors"]:
        table.add_row(escape(e["posterior"]), f"{e['step_us']:.0f}", f"{e['step_ratio']:.2f}×", f"{e['predict_ms']:.1f}",
                      f"{e['predict_ratio']:.2f}×", f"{e['act_median_us']:.0f}")
    for peer in result["peers"]["timed"]:
        table.add_row(f"peer: {peer['peer']} (mean-field VI)", f"{peer['step_us']:.0f}",
                      f"{peer['step_ratio']:.2f}×", "", "", "")
    if not result.get("agents"):
        return [table]
    agents = titled_table("act latency of the other agents (same context, after a first fit)")
    for col in ("agent", "act µs (median)", "act µs (mean)"):
        agents.add_column(col, justify="left" if col == "agent" else "right")
    for row in result["agents"]:
        agents.add_row(escape(row["agent"]), f"{row['act_median_us']:.1f}", f"{row['act_mean_us']:.1f}")
    return [table, agents]


def _report_console(tables: "list[Table]") -> "Console":
    """The stdout console bench prints its report on.

    On a terminal, as wide as the terminal, as every command. Piped or redirected, rich's width
    (``$COLUMNS``, else 80, as every command), widened to the natural width of the widest of
    ``tables``: squeezed into 80 columns the table wrapped and cut posterior labels such as
    ``bb-alpha:alpha=0,train_samples=1``; a fixed 150 wrapped the notes 150 columns wide."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console
    unbounded = console.options.update_width(10_000)
    needed = max(console.measure(table, options=unbounded).maximum for table in tables)
    return console if needed <= console.width else Console(width=needed)
