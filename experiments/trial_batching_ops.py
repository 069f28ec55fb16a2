"""Ten trials as one trial-batched model against ten posteriors: operations and time per step.

On a GPU a bandit refit's step is launch-bound (docs/speed.md, "GPU"): its cost is the number
of kernels, not their arithmetic. This counts the ATen operations one training step dispatches
(one per kernel on a GPU) for one posterior, for ``R`` posteriors stepped one after another, and
for one trial-batched posterior of ``R`` trials (posteriors/trials.py), and times the steps on
this machine, interleaved. Bandit network of the ``fsvgd-paper`` preset (2×100, batch 512,
20 particles / members, fixed noise 0.1), wheel-sized data (2 inputs, 5 arms, 2,000 rows).

    python experiments/trial_batching_ops.py --out experiments/results/trial_batching_ops.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from _timing import CountOps  # noqa: E402  (experiments/ is the script's folder)

from uncertain_agents import make_posterior
from uncertain_agents.posteriors.trials import make_trial_posterior

OPTIONS = {"mfvi": {}, "bootstrap": {"n_members": 20}, "fsvgd": {"n_particles": 20}}


def _data(trials: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, n, 2, generator=g)
    arm = torch.randint(5, (trials, n), generator=g)
    reward = torch.sin(3 * x[..., 0]) * (arm + 1) + 0.1 * torch.randn(trials, n, generator=g)
    y = torch.zeros(trials, n, 5).scatter_(2, arm.unsqueeze(-1), reward.unsqueeze(-1))
    mask = torch.zeros(trials, n, 5, dtype=torch.bool).scatter_(2, arm.unsqueeze(-1), True)
    return x, y, mask


def _build(method: str, trials: int | None, seed: int):
    kw = dict(in_dim=2, out_dim=5, hidden=(100, 100), seed=seed, noise_std=0.1, **OPTIONS[method])
    post = make_posterior(method, **kw) if trials is None else make_trial_posterior(method, trials=trials, **kw)
    post.set_units()
    return post


def measure(method: str, trials: int, rows: int, steps: int, rounds: int) -> dict:
    x, y, mask = _data(trials, rows)
    singles = [_build(method, None, seed=r) for r in range(trials)]
    batched = _build(method, trials, seed=0)
    fit_single = lambda r, k: singles[r].fit(x[r], y[r], mask[r], steps=k, batch_size=512)  # noqa: E731
    fit_batched = lambda k: batched.fit(x, y, mask, steps=k, batch_size=512)  # noqa: E731
    fit_single(0, 3), fit_batched(3)  # warm

    def ops_per_step(fit) -> float:
        counts = []
        for k in (steps, 2 * steps):
            with CountOps() as mode:
                fit(k)
            counts.append(mode.count)
        return (counts[1] - counts[0]) / steps

    one_ops = ops_per_step(lambda k: fit_single(0, k))
    batched_ops = ops_per_step(fit_batched)
    single_t, batched_t = [], []
    for _ in range(rounds):  # interleaved
        t0 = time.perf_counter()
        for r in range(trials):
            fit_single(r, steps)
        single_t.append((time.perf_counter() - t0) / steps)
        t0 = time.perf_counter()
        fit_batched(steps)
        batched_t.append((time.perf_counter() - t0) / steps)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {"method": method, "trials": trials, "ops_per_step_one_trial": one_ops,
            "ops_per_step_trials_one_by_one": one_ops * trials, "ops_per_step_batched": batched_ops,
            "ms_per_step_trials_one_by_one": 1e3 * med(single_t), "ms_per_step_batched": 1e3 * med(batched_t)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="mfvi,bootstrap,fsvgd")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    results = []
    print(f"{'method':10} {'ops/step: 1 trial':>18} {args.trials:>3} one by one {'batched':>9} "
          f"{'ms/step: one by one':>20} {'batched':>9}")
    for method in args.methods.split(","):
        r = measure(method, args.trials, args.rows, args.steps, args.rounds)
        results.append(r)
        print(f"{method:10} {r['ops_per_step_one_trial']:18.0f} {r['ops_per_step_trials_one_by_one']:14.0f} "
              f"{r['ops_per_step_batched']:9.0f} {r['ms_per_step_trials_one_by_one']:20.1f} "
              f"{r['ms_per_step_batched']:9.1f}", flush=True)
    if args.out is not None:
        from uncertain_agents.runs import atomic_write_text, run_manifest

        atomic_write_text(args.out, json.dumps({"manifest": run_manifest(), "torch": torch.__version__,
                                                "threads": torch.get_num_threads(),
                                                "args": vars(args) | {"out": str(args.out)},
                                                "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
