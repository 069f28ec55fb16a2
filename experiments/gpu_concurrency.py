"""How many bandit trials can share one GPU: training throughput of P processes at once.

One `fsvgd-paper` trial trains its posterior in about 120,000 small steps (117-100-100-2,
batch 512), each a few hundred kernels too small to fill a GPU: a trial is bound by the host's
kernel dispatch, not by the device. The 50,000-step table runs ten trials per agent, one
process each (``experiments/bandit_table.py --workers``), so its wall time depends on how the
steps of P processes overlap on one GPU. This script measures that: P spawned processes, each
with its own posterior (built as the preset builds it), wait at a barrier, then each runs
``--steps`` training steps through ``Posterior.fit``; the wall time from the barrier to the last
one's end gives the aggregate step rate at concurrency P.

Each configuration is ``NAME:P`` (P processes of posterior NAME, built with the preset's
options, which ``NAME+key=value`` overrides, e.g. ``fsvgd+n_particles=200:1`` — ten trials'
particles in one batched network, the arithmetic of a trial-batched step) or ``mixed:P``
(P processes cycling through fsvgd, bootstrap, mfvi — the table's mix). From the measured time per step
at the largest concurrency it projects the table's wall time per bandit (stated as a
projection from this measurement):

    python experiments/gpu_concurrency.py --device cuda --configs fsvgd:1,fsvgd:4,fsvgd:10,mixed:15 \\
        --out experiments/results/gpu_concurrency_cuda.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path

import torch

from uncertain_agents.agents import get_protocol
from uncertain_agents.runs import atomic_write_text, run_manifest

MIX = ("fsvgd", "bootstrap", "mfvi")


def _worker(name: str, device: str, steps: int, barrier, queue) -> None:
    import gpu_projection as gp  # noqa: E402 (this folder is on sys.path in the spawned child)

    torch.set_num_threads(1)
    protocol = get_protocol("fsvgd-paper")
    method, *items = name.split("+")
    overrides = {}
    for item in items:
        key, _, value = item.partition("=")
        overrides[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    post = gp.make(method, protocol, protocol.hidden, device, **overrides)
    x, y, mask = gp.batch(2 * protocol.batch_size, device)
    post.fit(x, y, mask=mask, steps=20, batch_size=protocol.batch_size)  # warm-up: allocations, kernels
    if device == "cuda":
        torch.cuda.synchronize()
    barrier.wait()
    t0 = time.perf_counter()
    post.fit(x, y, mask=mask, steps=steps, batch_size=protocol.batch_size)
    if device == "cuda":
        torch.cuda.synchronize()
    queue.put((name, time.perf_counter(), time.perf_counter() - t0))


def measure(names: list[str], device: str, steps: int) -> dict:
    """Run one process per entry of ``names`` at once; the barrier-to-last-end wall time."""
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(len(names) + 1), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(n, device, steps, barrier, queue)) for n in names]
    for proc in procs:
        proc.start()
    barrier.wait()
    t0 = time.perf_counter()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    wall = max(end for _, end, _ in results) - t0
    per_process = {}
    for name, _, seconds in results:
        per_process.setdefault(name, []).append(seconds / steps)
    return {"processes": len(names), "wall_seconds": wall, "steps_per_process": steps,
            "aggregate_steps_per_second": len(names) * steps / wall,
            "ms_per_step_in_process": {n: 1e3 * sum(v) / len(v) for n, v in per_process.items()}}


def parse_config(text: str) -> list[str]:
    name, _, count = text.partition(":")
    p = int(count or 1)
    if p < 1:
        raise ValueError(f"--configs: process count must be >= 1 in {text!r}")
    return [MIX[i % len(MIX)] for i in range(p)] if name == "mixed" else [name] * p


def main(argv=None) -> int:
    import gpu_projection as gp

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--configs", default="fsvgd:1,fsvgd:4,fsvgd:10,mixed:15")
    p.add_argument("--steps", type=int, default=300, help="timed training steps per process")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    n_steps = gp.steps_per_trial(get_protocol("fsvgd-paper"))
    rows = []
    for config in args.configs.split(","):
        row = {"config": config, **measure(parse_config(config), args.device, args.steps)}
        rows.append(row)
        per = ", ".join(f"{n} {ms:.2f} ms" for n, ms in row["ms_per_step_in_process"].items())
        print(f"{config:12s} {row['processes']:3d} processes: wall {row['wall_seconds']:6.2f} s, "
              f"{row['aggregate_steps_per_second']:7.0f} steps/s together; per step in a process: {per}", flush=True)
    # projection: a bandit's table = 10 trials x (fsvgd, bootstrap, mfvi), each n_steps steps,
    # run as processes at the concurrency of the mixed configuration measured last
    mixed = [r for r in rows if r["config"].startswith("mixed")]
    result = {"manifest": run_manifest(), "device": args.device,
              "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "training_steps_per_trial": n_steps, "rows": rows}
    if mixed:
        best = mixed[-1]
        runs = 10 * len(MIX)
        minutes = runs * n_steps / best["aggregate_steps_per_second"] / 60
        result["projected_minutes_per_bandit"] = minutes
        print(f"projected wall time of one bandit's 50,000-step table ({runs} runs of {n_steps:,} steps) at "
              f"the {best['config']} rate: {minutes:.1f} min (a projection from this measurement)")
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
