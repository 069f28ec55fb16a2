"""A/B timing of the narrow-output weight layout (``uncertain_agents.network.rows_times_weight``).

Times each posterior's training step through the public ``fit`` twice per round, in one
process: with narrow layers re-laid out output-major (the library's behaviour) and with the
re-layout switched off (``NARROW_FAN_OUT = 0``), interleaved over ``--rounds`` rounds beside a
plain PyTorch MLP step; prints the medians.

    OMP_NUM_THREADS=2 python experiments/narrow_layout_ab.py --network bandit --posteriors dropout-alpha:input_dropout=0
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import uncertain_agents.network as network
from uncertain_agents.bench import get_network, make_batch, parse_candidate, plain_step_fn, posterior_step_fn
from uncertain_agents.registry import make_posterior


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="bandit")
    parser.add_argument("--posteriors", nargs="+", default=["dropout-alpha:input_dropout=0"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    net = get_network(args.network)
    x, y = make_batch(net, net.batch)
    fns = {"plain": (None, plain_step_fn(net, x, y, steps=args.steps))}
    for text in args.posteriors:
        label, name, options = parse_candidate(text)
        post = make_posterior(name, in_dim=net.in_dim, out_dim=net.out_dim, hidden=net.hidden,
                              likelihood=net.likelihood, seed=0, **options)
        step = posterior_step_fn(post, x, y, steps=args.steps)
        fns[f"{label} (narrow re-laid out)"] = (network.NARROW_FAN_OUT, step)
        fns[f"{label} (row-major)"] = (0, step)
    default = network.NARROW_FAN_OUT
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.rounds):
        for key, (narrow, fn) in fns.items():
            network.NARROW_FAN_OUT = default if narrow is None else narrow
            start = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - start) / args.steps * 1e6)
    network.NARROW_FAN_OUT = default
    plain = statistics.median(times["plain"])
    print(f"{args.network} network, {args.threads} threads, median of {args.rounds} rounds × {args.steps} steps")
    for key, values in times.items():
        median = statistics.median(values)
        print(f"  {key:55s} {median:8.0f} µs  {median / plain:5.2f}× plain")


if __name__ == "__main__":
    main()
