"""Experiment grids: a spec crosses methods × data × splits/trials/seeds; every cell is one
run of the library's own runner; finished cells are files, so a killed grid resumes.

    from uncertain_agents.grid import load_spec, run_grid, grid_table
    spec = load_spec("experiments/specs/smoke.toml")
    run_grid(spec, "runs/smoke", workers=2)       # skips finished cells
    table = grid_table("runs/smoke")              # mean ± s.e. per configuration

CLI: ``uncertain-agents grid run SPEC --out DIR [--executor local|ray] [--workers N]`` and
``uncertain-agents grid table DIR``. See docs/grid.md.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import pandas as pd

from ..runs import atomic_write_text, default_threads, record_run, run_manifest
from .executors import EXECUTORS, available_cores, run_local, run_ray
from .jobs import JOBS
from .spec import GridSpec, load_spec, parse_spec
from .store import CellStore, cell_hash
from .reference import add_reference, reference_csv
from .plots import plot_sweeps
from .table import aggregate, cells_frame, display_frame, method_label, shown_tables, to_markdown

__all__ = ["GridSpec", "GridRun", "load_spec", "parse_spec", "run_grid", "grid_table", "cell_hash", "JOBS",
           "EXECUTORS", "CellStore"]


class GridRun:
    """What :func:`run_grid` did: cells in the grid, found finished, run now, failed."""

    def __init__(self, total: int, skipped: int) -> None:
        self.total, self.skipped, self.finished, self.failed = total, skipped, 0, []

    def __repr__(self) -> str:
        return (f"GridRun(total={self.total}, skipped={self.skipped}, finished={self.finished}, "
                f"failed={len(self.failed)})")


def run_grid(spec: GridSpec | str | Path | dict, out, *, executor: str = "local", workers: int = 1,
             threads: int | None = None, ray_address: str | None = None,
             progress: Callable[[dict, dict], None] | None = None, only: list[str] | None = None,
             where: dict[str, list] | None = None) -> GridRun:
    """Run every cell of ``spec`` not yet finished in ``out``.

    Args:
        executor: ``"local"`` (serial, or ``workers`` processes) or ``"ray"``.
        workers: local processes, or cells at once on a Ray instance started here (it gets
            ``workers × threads`` CPUs).
        threads: torch threads per cell (default: the cores divided among the workers); a Ray
            task asks for this many CPUs.
        ray_address: a running Ray cluster to connect to (default: start a local instance).
        progress: ``progress(cell, result)`` after every cell.
        only: run only the cells of these methods (their labels as the table shows them). Cells
            are named by their configuration, so a later run of the whole spec into the same
            folder skips them, and two runs with disjoint ``only`` can share a folder.
        where: run only the cells whose cross values are among these, e.g.
            ``{"split": [0, 1]}`` (a slice of a long grid: every data set at two splits). Like
            ``only``, the other cells stay for a later run into the same folder.
    """
    if not isinstance(spec, GridSpec):
        spec = parse_spec(spec) if isinstance(spec, dict) else load_spec(spec)
    cells = select_cells(spec, only, where)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    cores = available_cores()
    if threads is None:  # the cores shared by the workers, and never above a user's OMP_NUM_THREADS
        threads = default_threads(max(1, cores // workers))
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if ray_address is not None and executor != "ray":
        raise ValueError(f"ray_address (--ray-address) is used with executor='ray' (--executor ray) only; "
                         f"got executor={executor!r}")
    if spec.job.check_cells is not None:  # e.g. a split the data set lacks fails now, not when its cell runs
        spec.job.check_cells(cells)
    if executor == "local":  # cells run here: a device this machine lacks fails now, once, not in every cell
        from ..validation import check_device

        for device in dict.fromkeys(str(c["device"]) for c in cells if "device" in c):
            check_device(device, f"{Path(spec.source).name if spec.source else 'spec'}: settings.device")
    out = Path(out)
    if spec.reference:  # a missing CSV fails now, not after every cell has run (see grid_table)
        reference_csv(spec.reference, Path(spec.source).parent if spec.source else out)
    store = CellStore(out)
    todo = [c for c in cells if not store.done(c)]
    if todo:  # tables of a finished folder stay readable; only adding cells would mix streams
        _check_seeding(store, [c for c in spec.cells() if store.done(c)], out)
    out.mkdir(parents=True, exist_ok=True)
    raw = {k: v for k, v in asdict(spec).items() if k != "source"}
    atomic_write_text(out / "grid.json", json.dumps(
        {"spec": raw, "source": spec.source, "cells": [cell_hash(c) for c in spec.cells()]}, indent=1))
    run = GridRun(len(cells), len(cells) - len(todo))
    manifest = run_manifest()
    if todo:  # the folder's manifest.json lists every run that added cells (each cell also keeps its own)
        record_run(out)

    def report(cell: dict, result: dict) -> None:
        record_manifest = {**manifest, "cell_seconds": result["seconds"], "executor": executor}
        if "error" in result:
            store.write_error(cell, result["error"], record_manifest, result.get("traceback"))
            run.failed.append((cell, result["error"]))
        else:
            store.write(cell, result["metrics"], record_manifest)
            run.finished += 1
        if progress is not None:
            progress(cell, result)

    if executor == "ray":
        run_ray(todo, report, threads=threads, address=ray_address, workers=workers)
    else:
        run_local(todo, report, workers=workers, threads=threads)
    return run


def _check_seeding(store: CellStore, finished: list[dict], out: Path) -> None:
    """Refuse to add cells to a folder whose finished cells were made under another seeding scheme
    (:data:`uncertain_agents.seeding.SEEDING_SCHEME`; cells without the key are scheme 1)."""
    from ..seeding import SEEDING_SCHEME, recorded_scheme

    other = [c for c in finished
             if recorded_scheme((store.load(c).get("manifest") or {}).get("seeding")) != SEEDING_SCHEME]
    if other:
        raise ValueError(f"{out}: {len(other)} finished cell(s) were made with the random streams of before session 33 "
                         f"(seeding scheme 1, today's is {SEEDING_SCHEME}); new cells would mix the two. Run into "
                         f"another folder, or delete the folder's cells/ to re-run them all")


def select_cells(spec: GridSpec, only: list[str] | None = None, where: dict[str, list] | None = None) -> list[dict]:
    """The spec's cells, or only those of the methods labelled ``only`` and whose cross values
    are among ``where[key]`` for every key of ``where``.

    Values of ``where`` match a cross value equal to them, written the same or, for a number,
    a string of the same number (``"0"`` selects split ``0`` and ``"1"`` epochs ``1.0``, as the
    CLI's ``--where split=0,1`` passes them). Raises ``ValueError`` naming the
    spec's labels, cross keys or values when one of ``only`` or ``where`` is not in the spec.
    """
    cells = spec.cells()
    if only is not None:
        labels = {method_label(m) for m in spec.methods}
        if not only or any(label not in labels for label in only):
            raise ValueError(f"only must name methods of the spec, one of {sorted(labels)}; got {only!r}")
        cells = [c for c in cells if method_label(c["method"]) in only]
    if where is not None:
        if not isinstance(where, dict) or not where:
            raise ValueError(f"where must map cross keys of the spec to lists of their values, got {where!r}")
        for key, wanted in where.items():
            if key not in spec.cross:
                raise ValueError(f"where: {key!r} is not a cross key of the spec, one of {sorted(spec.cross)}")
            if isinstance(wanted, (str, int, float)) or not wanted:
                raise ValueError(f"where[{key!r}] must be a non-empty list of values, got {wanted!r}")
            values = spec.cross[key]
            chosen = []
            for w in wanted:
                match = [v for v in values if v == w or str(v) == str(w) or _same_number(v, w)]
                if not match:
                    raise ValueError(f"where[{key!r}]: {w!r} is not one of the spec's values {values!r}")
                chosen += match
            cells = [c for c in cells if any(c[key] == v for v in chosen)]
    return cells


def _same_number(value, text) -> bool:
    """Whether the string ``text`` (a CLI value) is the number ``value`` (``"1"`` is ``1.0``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(text, str):
        return False
    try:
        return float(text) == value
    except ValueError:
        return False


def sweep_names(axes: list[str]) -> list[str]:
    """The file stems of a grid's swept metrics, one per sweep axis in order: ``sweeps`` for the first
    (``table_sweeps.csv``, ``sweeps.png``), ``sweeps_<axis>`` for the others."""
    return ["sweeps" if i == 0 else f"sweeps_{axis}" for i, axis in enumerate(axes)]


def grid_table(out, *, write: bool = True, markdown=None, command: str | None = None) -> pd.DataFrame:
    """Aggregate the finished cells of the grid in ``out`` (mean ± s.e. over the replicate
    key), with the published numbers beside them when the spec has a ``[reference]``.

    Writes ``cells.csv``, ``table.csv`` and ``table.md`` into ``out`` when ``write``, and a
    results page (title, description, protocol note, command, cells finished, the tables) to
    ``markdown`` when given. Metrics swept over a value (``accuracy@0.1``, ``entropy@0.1``,
    ... of an attack) are shown in long form, one row per method and value
    (``table_sweeps.csv``), and plotted against it beside the page (``NAME.png``) and in ``out``
    (``sweeps.png``); a second sweep axis (an attack's I-FGSM ``step``) gets
    ``table_sweeps_<axis>.csv``, ``sweeps_<axis>.png`` and ``NAME_<axis>.png``.
    """
    out = Path(out)
    try:
        meta = json.loads((out / "grid.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{out} holds no grid (grid.json missing or unreadable); run `grid run` first") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
        raise ValueError(f"{out / 'grid.json'} is not a grid file (no \"spec\" table); run `grid run` again to rewrite it")
    spec = parse_spec(meta["spec"], str(out / "grid.json"))
    cells = spec.cells()
    store = CellStore(out)
    records = store.records(cells)
    unreadable = [store.path(c) for c in cells if store.path(c).exists() and store.load(c) is None]
    if unreadable:  # left out of the table (and run again by `grid run`): say so rather than show a smaller n
        import sys

        print(f"note: {len(unreadable)} cell file(s) could not be read and are left out of the table "
              f"(`grid run` runs them again): {', '.join(map(str, unreadable[:3]))}"
              + (" ..." if len(unreadable) > 3 else ""), file=sys.stderr)
    frame = cells_frame(records)
    if frame.empty:
        return frame
    metrics = sorted({k for r in records for k in r["metrics"]})
    table = aggregate(frame, spec.job.replicate, metrics)
    table.attrs["sweep_axes"] = {m.partition("@")[0]: spec.job.axis_of(m.partition("@")[0])
                                 for m in metrics if "@" in m}
    shown, longs = shown_tables(table, metrics, spec.job.axis_of)
    if spec.reference:
        base = Path(meta.get("source") or out / "grid.json").parent
        shown = add_reference(shown, spec.reference, base)
    sections = [to_markdown(shown)]
    sections += [f"Against {axis}:\n\n" + to_markdown(display_frame(long, bases)) for axis, long, bases in longs]
    figure_names = sweep_names([axis for axis, _, _ in longs])
    if write:
        atomic_write_text(out / "cells.csv", frame.to_csv(index=False))
        atomic_write_text(out / "table.csv", table.to_csv(index=False))
        atomic_write_text(out / "table.md", "\n".join(sections))
        for name, (axis, long, bases) in zip(figure_names, longs):
            atomic_write_text(out / f"table_{name}.csv", long.to_csv(index=False))
            plot_sweeps(long, bases, axis, out / f"{name}.png", title=spec.name, replicate=spec.job.replicate)
    if markdown is not None:
        markdown = Path(markdown)
        for i, (axis, long, bases) in enumerate(longs):
            path = markdown.with_suffix(".png") if i == 0 else markdown.with_name(f"{markdown.stem}_{axis}.png")
            figure = plot_sweeps(long, bases, axis, path, title=f"{spec.name}: against {axis}",
                                 replicate=spec.job.replicate)
            sections.append(f"![{spec.name}: against {axis}]({figure.name})\n")
        page = results_page(spec, sections, len(records), len(cells), command or recorded_commands(records))
        atomic_write_text(markdown, page)
    return table


def recorded_commands(records: list[dict]) -> str | None:
    """The ``grid run`` command lines (program name shortened) and git commits recorded in the
    cells' manifests, one line each, most cells first; ``None`` when no cell recorded one."""
    counts: dict[str, int] = {}
    for record in records:
        manifest = record.get("manifest") or {}
        argv = manifest.get("argv")
        if not argv:
            continue
        line = " ".join([Path(str(argv[0])).name, *map(str, argv[1:])])
        if manifest.get("git_commit"):
            line += f"    # commit {str(manifest['git_commit'])[:10]}"
        counts[line] = counts.get(line, 0) + 1
    if not counts:
        return None
    return "\n    ".join(sorted(counts, key=counts.get, reverse=True))


def results_page(spec: GridSpec, sections: list[str], finished: int, total: int, command: str | None) -> str:
    """A docs page: what the grid is, how it was produced, ours beside the paper's (``sections``:
    Markdown tables and figure links, in order)."""
    lines = [f"# {spec.name}", ""]
    if spec.description:
        lines += [spec.description, ""]
    if spec.reference.get("paper"):
        lines += [f"Published numbers: {spec.reference['paper']} (`{spec.reference['csv']}`).", ""]
    if spec.reference.get("note"):
        lines += [f"Protocol differences: {spec.reference['note']}", ""]
    if command:
        lines += ["Produced by", "", "    " + command, ""]
    lines += [f"Cells finished: {finished} of {total}. Ours: mean ± standard error over "
              f"`{spec.job.replicate}`; `n` is the number of {spec.job.replicate}s.", ""]
    return "\n".join(lines + ["\n".join(sections)])
