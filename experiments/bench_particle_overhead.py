"""What the particle update costs on top of 20 batched networks: `fsvgd` and `svgd` (20
particles) against an ensemble of 20, per round.

``uncertain-agents bench`` reports each candidate's median over rounds divided by the plain
step's median; on a VM whose speed drifts within a run, the ratio of two candidates is then a
ratio of medians taken minutes apart. Here every round times all candidates back to back and
the ratio is taken within the round (paired), then the median over rounds. Also timed: the
ensemble on 544 rows (the 512 batch rows plus `fsvgd`'s 32 extra points) and `fsvgd` without
extra points, which split `fsvgd`'s overhead into its extra rows and the rest. Bandit network
(117-100-100-2, batch 512), public ``Posterior.fit`` only::

    python experiments/bench_particle_overhead.py --rounds 9 --steps 20

About 2 minutes on 2 threads. Issue 14's target: ≤ 1.25× the ensemble-of-20 step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from uncertain_agents import make_posterior
from uncertain_agents.bench import get_network, make_batch, posterior_step_fn

CANDIDATES = {  # label -> (posterior, options, batch rows)
    "ensemble of 20": ("ensemble", {"n_members": 20}, 512),
    "ensemble of 20, 544 rows": ("ensemble", {"n_members": 20}, 544),
    "fsvgd": ("fsvgd", {}, 512),
    "fsvgd, no extra points": ("fsvgd", {"n_extra": 0}, 512),
    "svgd": ("svgd", {}, 512),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20, help="training steps per timing")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    net = get_network("bandit")
    fns = {}
    for label, (name, options, rows) in CANDIDATES.items():
        x, y = make_batch(net, rows)
        post = make_posterior(name, in_dim=net.in_dim, out_dim=net.out_dim, hidden=net.hidden, seed=0, **options)
        fns[label] = posterior_step_fn(post, x, y, steps=args.steps)
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(args.rounds):
        for label, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - t0) / args.steps * 1e6)
    reference = times["ensemble of 20"]
    print(f"bandit network, {args.threads} threads, {args.rounds} rounds × {args.steps} steps")
    print(f"{'candidate':<28}{'step µs (median)':>18}{'÷ ensemble of 20 (paired median)':>36}")
    for label, values in times.items():
        paired = statistics.median(a / b for a, b in zip(values, reference))
        print(f"{label:<28}{statistics.median(values):>18.0f}{paired:>36.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
