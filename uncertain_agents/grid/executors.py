"""Where a grid's cells run: ``local`` (serial, or a process pool) or ``ray``.

Workers only compute; the driver (this process) writes every result into the grid folder
as it arrives, so the folder stays the single source of truth whatever the executor.
"""
from __future__ import annotations

import time
import traceback
from typing import Callable

from ..runs import available_cores

EXECUTORS = ("local", "ray")


def execute_cell(cell: dict, threads: int) -> dict:
    """Run one cell (in whatever process the executor chose); never raises for a failed cell.

    Returns ``{"metrics": {...}, "seconds": s}`` or ``{"error": text, "seconds": s}``.
    """
    import torch

    from .jobs import JOBS

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        metrics = JOBS[cell["kind"]].run(cell)
    except Exception as err:  # a failed cell is recorded, the grid goes on
        return {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
                "seconds": time.perf_counter() - t0}
    return {"metrics": metrics, "seconds": time.perf_counter() - t0}


Report = Callable[[dict, dict], None]


def run_local(cells: list[dict], report: Report, *, workers: int = 1, threads: int = 1) -> None:
    """Serial when ``workers == 1``, else a pool of ``workers`` processes (spawned, so no
    torch thread pool is inherited; they stop if this process dies, see :mod:`..workers`)."""
    if workers == 1:  # in this process: give its torch thread count back afterwards
        import torch

        before = torch.get_num_threads()
        try:
            for cell in cells:
                report(cell, execute_cell(cell, threads))
        finally:
            torch.set_num_threads(before)
        return
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool

    from ..workers import broken_pool_error, spawn_pool, stop_pool

    pool = spawn_pool(workers)
    try:
        futures = {pool.submit(execute_cell, cell, threads): cell for cell in cells}
        for future in as_completed(futures):
            report(futures[future], future.result())
    except BaseException as err:  # Ctrl-C (or a failed report): stop the workers now; finished cells are written
        stop_pool(pool)  # else shutdown waits for every running (and queued) cell, then drops it
        if isinstance(err, BrokenProcessPool):
            raise broken_pool_error(err) from err
        raise
    pool.shutdown(wait=True)


def run_ray(cells: list[dict], report: Report, *, threads: int = 1, address: str | None = None,
            workers: int | None = None) -> None:
    """One Ray task per cell with the cell's CPU/GPU request (at least ``threads`` CPUs); connects
    to the cluster at ``address`` (e.g. ``"auto"`` or ``"ray://host:10001"``) or starts a local
    Ray instance with room for ``workers`` such tasks at once (default: the available cores, or
    one task when a task asks for more)."""
    try:
        import ray
    except ModuleNotFoundError:
        raise ValueError("the ray executor needs Ray: pip install 'uncertain-agents[ray]'") from None
    from .jobs import JOBS

    needs = [JOBS[cell["kind"]].resources(cell) for cell in cells]
    needs = [{**need, "num_cpus": max(need["num_cpus"], threads)} for need in needs]
    started_here = not ray.is_initialized()
    try:
        if started_here:  # room for `workers` tasks at once: each asks for (at least) `threads` CPUs
            per_task = max([need["num_cpus"] for need in needs], default=threads)
            cpus = workers * per_task if workers else max(available_cores(), per_task)
            kwargs = {"address": address} if address else {"num_cpus": cpus}
            ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
        gpus = max((need["num_gpus"] for need in needs), default=0)
        if gpus and ray.cluster_resources().get("GPU", 0) < gpus:  # Ray would wait for one for ever
            raise ValueError(f"cells ask for {gpus} GPU each (settings.device = cuda), but the Ray cluster has "
                             f"{ray.cluster_resources().get('GPU', 0):g}; use device = \"cpu\" or a cluster with GPUs")
        remote = ray.remote(execute_cell)
        pending = {}
        for cell, need in zip(cells, needs):
            ref = remote.options(num_cpus=need["num_cpus"], num_gpus=need["num_gpus"]).remote(cell, threads)
            pending[ref] = cell
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                report(pending.pop(ref), ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
