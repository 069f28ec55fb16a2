"""``uncertain-agents grid``: run a spec's cells (resumable, local or on Ray) and tabulate them."""
from __future__ import annotations

from pathlib import Path

from .common import add_no_progress_argument


def register(sub) -> None:
    p = sub.add_parser("grid", help="run an experiment grid from a spec, or tabulate a grid folder",
                       description="Experiment grids (docs/grid.md): every cell is one run of the library's "
                                   "runner, written as one file when it finishes; re-running skips finished cells.")
    grid_sub = p.add_subparsers(dest="grid_command", metavar="{run,table}")
    run = grid_sub.add_parser("run", help="run the cells of SPEC that are not finished in --out",
                              description="Run every cell of a TOML spec that --out does not hold yet (each cell "
                                          "is one file in --out/cells/ once it finishes), then print and write the "
                                          "table (mean ± s.e. per configuration). Exit code 1 if a cell failed "
                                          "(its error is in cells/<hash>.error.json; the next run retries it).")
    run.add_argument("spec", type=Path, help="a TOML spec, e.g. experiments/specs/smoke.toml")
    run.add_argument("--out", type=Path, required=True, help="grid folder (cells/, grid.json, table.*)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="local processes (default) or Ray tasks (pip install 'uncertain-agents[ray]')")
    run.add_argument("--workers", type=int, default=1,
                     help="local processes, or CPUs of a Ray instance started here (default: 1)")
    run.add_argument("--threads", type=int, default=None, help="torch threads per cell (default: cores / workers, at most OMP_NUM_THREADS when set)")
    run.add_argument("--ray-address", default=None, help="a running Ray cluster (e.g. auto, ray://host:10001)")
    run.add_argument("--only", default=None,
                     help="comma-separated method labels: run only their cells (the rest stay for a later run); "
                          "a label that itself holds commas is matched whole")
    run.add_argument("--where", action="append", default=None, metavar="KEY=V1,V2",
                     help="run only the cells whose cross KEY is one of the values (repeatable), e.g. "
                          "--where split=0,1 (the rest stay for a later run)")
    add_no_progress_argument(run)
    run.set_defaults(func=_run)
    table = grid_sub.add_parser("table", help="aggregate a grid folder: mean ± s.e. per configuration",
                                description="Aggregate the finished cells of a grid folder: mean ± standard error "
                                            "over the spec's replicate key (split, trial or seed) per configuration; "
                                            "writes cells.csv, table.csv, table.md (and, for swept metrics, "
                                            "table_sweeps*.csv and sweeps*.png) into the folder.")
    table.add_argument("out", type=Path, help="grid folder")
    table.add_argument("--markdown", type=Path, default=None,
                       help="also write a results page (e.g. docs/results/NAME.md)")
    table.add_argument("--command", default=None, help="the command that produced the grid, for the page")
    table.set_defaults(func=_table)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..grid import load_spec, run_grid, select_cells
    from ..grid.table import method_label
    from ..posteriors.progress import progress_bar, status_console

    from .common import check_writable_file

    spec = load_spec(args.spec)
    check_writable_file(args.out / "grid.json", "--out", shown=args.out)  # before any cell runs
    console = Console()
    only = None if args.only is None else _parse_only(args.only, [method_label(m) for m in spec.methods])
    where = _parse_where(args.where)
    cells = select_cells(spec, only, where)
    with progress_bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), disable=args.no_progress) as bar:
        task = bar.add_task(f"grid {spec.name}", total=len(cells))
        from ..grid import CellStore

        bar.update(task, completed=sum(CellStore(args.out).done(c) for c in cells))
        result = run_grid(spec, args.out, executor=args.executor, workers=args.workers, threads=args.threads,
                          ray_address=args.ray_address, progress=lambda cell, res: bar.advance(task), only=only,
                          where=where)
    console.print(f"{spec.name}: {result.total} cells, {result.skipped} already finished, "
                  f"{result.finished} run now, {len(result.failed)} failed → {args.out}", soft_wrap=True)
    errors = status_console()  # on stderr, as the CLI's own errors
    for cell, error in result.failed:
        errors.print(f"[red]failed[/] {cell['method']} {({k: v for k, v in cell.items() if k != 'method'})}: {error}")
    _print_table(args.out, console)
    return 1 if result.failed else 0


def _parse_only(value: str, labels: list[str]) -> list[str]:
    """``--only`` -> method labels: comma-separated, but a run of pieces that makes up a label
    of the spec (``mfvi(noise_std=0.1, prior_std=1.0)``) is that label, the longest first.
    A piece that is no label is passed on as it is, for :func:`select_cells` to name."""
    pieces = value.split(",")
    only, i = [], 0
    while i < len(pieces):
        for j in range(len(pieces), i, -1):
            label = ",".join(pieces[i:j]).strip()
            if label in labels or j == i + 1:
                only.append(label)
                i = j
                break
    return only


def _parse_where(items: list[str] | None) -> dict[str, list[str]] | None:
    """``["split=0,1", "dataset=yacht"]`` -> ``{"split": ["0", "1"], "dataset": ["yacht"]}``."""
    if not items:
        return None
    where: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        chosen = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not chosen:
            raise ValueError(f"--where must look like KEY=V1,V2 (e.g. split=0,1), got {item!r}")
        where.setdefault(key.strip(), []).extend(chosen)
    return where


def _table(args) -> int:
    from rich.console import Console

    from .common import check_writable_file

    if args.markdown is not None:
        check_writable_file(args.markdown, "--markdown")
    _print_table(args.out, Console(), markdown=args.markdown, command=args.command)
    return 0


def _print_table(out: Path, console, markdown=None, command=None) -> None:
    from ..grid import grid_table, sweep_names
    from ..grid.table import display_frame, shown_tables
    from .common import titled_table

    table = grid_table(out, markdown=markdown, command=command)
    if table.empty:
        console.print(f"{out}: no finished cells yet")
        return
    metrics = [c for c in table.columns if f"{c}_se" in table.columns]
    axes = table.attrs.get("sweep_axes", {})
    shown, longs = shown_tables(table, metrics, lambda base: axes.get(base, "value"))
    frames = [(f"{out} (mean ± s.e.)", shown)]
    frames += [(f"{out}: against {axis} (mean ± s.e.)", display_frame(long, bases)) for axis, long, bases in longs]
    for title, shown in frames:
        view = titled_table(title)
        for col in shown.columns:  # folded, never cut: a cut label or metric name ("ifgsm_a…") names nothing
            view.add_column(str(col), overflow="fold")
        for row in shown.itertuples(index=False):
            view.add_row(*(str(v) for v in row))
        console.print(view)
    figures = sweep_names([axis for axis, _, _ in longs])
    written = ["table.csv", "table.md", "cells.csv", *(f"table_{f}.csv" for f in figures), *(f"{f}.png" for f in figures)]
    console.print(f"written: {out}/{', '.join(written)}" + (f", {markdown}" if markdown else ""), soft_wrap=True)
