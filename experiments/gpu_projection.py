"""Projected GPU time of the 50,000-step `fsvgd-paper` bandit table, from CPU measurements.

No GPU was lent to the sessions that built this library, so the 50,000-step table (wheel
δ = 0.95 and mushroom, 10 trials; fsvgd, bootstrap, mfvi, LinFullPost) has not been timed on
one. This script measures what a projection can rest on, on the CPU at hand:

* the number of training steps of one 50,000-decision trial under the preset (exact, from
  its refit schedule);
* per posterior, one training step through ``Posterior.fit`` on the bandit network
  (117-100-100-2, batch 512, one observed arm per row), and the same step on a network so
  small (hidden 8 × 8, batch 16) that its arithmetic is negligible: what remains is the
  framework's per-operation cost, which an eager GPU step pays as well (plus a kernel launch
  per operation), since a small network cannot fill a GPU;
* the number of tensor operations per step (torch profiler), i.e. about the number of kernel
  launches on a GPU.

The projection, stated as such in docs/speed.md: GPU step ≈ framework time + operations ×
``--launch-us`` (default 5 µs, a typical CUDA kernel-launch cost), arithmetic neglected
(≤ 1.4 GFLOP per step, well under a millisecond on an H100). Run on the GPU machine itself,
``--device cuda`` measures the real step instead.

    python experiments/gpu_projection.py --out experiments/results/gpu_projection.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import uncertain_agents as ua
from uncertain_agents.agents import get_protocol
from uncertain_agents.agents.schedule import steps_for_refit
from uncertain_agents.runs import atomic_write_text, run_manifest

DECISIONS, TRIALS, POSTERIORS = 50_000, 10, ("fsvgd", "bootstrap", "mfvi")


def steps_per_trial(protocol, decisions: int = DECISIONS) -> int:
    """Training steps of one trial: one refit every ``train_every`` decisions."""
    refits = decisions // protocol.train_every
    return sum(steps_for_refit(protocol.train_steps, k) for k in range(refits))


def make(name: str, protocol, hidden, device: str, **overrides):
    """``name`` built as the preset builds it on the bandit network (``overrides`` on top)."""
    options = {**protocol.posterior_options.get("*", {}), **protocol.posterior_options.get(name, {}), **overrides}
    return ua.make_posterior(name, in_dim=117, out_dim=2, hidden=hidden, seed=0, device=device, **options)


def batch(n: int, device: str):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 117, generator=g)
    y = torch.randn(n, 2, generator=g)
    mask = torch.zeros(n, 2, dtype=torch.bool)
    mask[torch.arange(n), torch.randint(0, 2, (n,), generator=g)] = True
    return x.to(device), y.to(device), mask.to(device)


def step_seconds(post, data, steps: int, rounds: int, device: str) -> float:
    """Median over rounds of the time per step of ``fit(steps=...)`` on one whole batch."""
    x, y, mask = data
    post.fit(x, y, mask=mask, steps=steps, batch_size=x.shape[0])  # warm-up, first fit fixes units
    times = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        post.fit(x, y, mask=mask, steps=steps, batch_size=x.shape[0])
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def ops_per_step(post, data, steps: int = 10) -> float:
    """Tensor operations dispatched per training step (top-level aten calls, incl. autograd)."""
    from torch.profiler import ProfilerActivity, profile

    x, y, mask = data
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        post.fit(x, y, mask=mask, steps=steps, batch_size=x.shape[0])
    count = 0
    for event in prof.events():
        parent = event.cpu_parent
        if event.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::")):
            count += 1
    return count / steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--launch-us", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    protocol = get_protocol("fsvgd-paper")
    n_steps = steps_per_trial(protocol)
    rows = {}
    for name in POSTERIORS:
        full = step_seconds(make(name, protocol, protocol.hidden, args.device), batch(protocol.batch_size, args.device),
                            args.steps, args.rounds, args.device)
        tiny_post = make(name, protocol, (8, 8), args.device)
        tiny = step_seconds(tiny_post, batch(16, args.device), args.steps, args.rounds, args.device)
        ops = ops_per_step(tiny_post, batch(16, args.device))
        projected = tiny + ops * args.launch_us * 1e-6
        rows[name] = {"step_ms_bandit_net": 1e3 * full, "step_ms_tiny_net": 1e3 * tiny, "ops_per_step": ops,
                      "projected_gpu_step_ms": 1e3 * projected,
                      "projected_gpu_minutes_per_trial": projected * n_steps / 60,
                      "cpu_minutes_per_trial_at_this_step": full * n_steps / 60}
        print(f"{name:10s} bandit-net step {1e3 * full:7.2f} ms | tiny-net step {1e3 * tiny:6.2f} ms, "
              f"{ops:5.0f} ops -> projected GPU step {1e3 * projected:5.2f} ms, "
              f"{projected * n_steps / 60:5.1f} min per 50k-step trial", flush=True)
    result = {"manifest": run_manifest(), "device": args.device, "threads": args.threads,
              "protocol": protocol.name, "decisions": DECISIONS, "trials": TRIALS,
              "training_steps_per_trial": n_steps, "launch_us": args.launch_us, "posteriors": rows}
    print(f"training steps per {DECISIONS:,}-decision trial: {n_steps:,}")
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
