"""A/B timing of keep-masks drawn by geometric skips (``uncertain_agents.posteriors.masks``).

Times, in one process and interleaved round by round: the keep-masks of one ``dropout-alpha``
training step (``draw_keep`` for ``K × B`` rows of every layer) and the step itself through the
public ``fit``, once with long low-rate masks drawn by skipping (the library's behaviour) and once
with skipping switched off (``SKIP_MIN_ENTRIES`` set out of reach: the 16-bit comparison of
before), beside a plain PyTorch MLP step; prints the medians and the median over rounds of the
paired difference (the machine's speed drifts between rounds), and writes them as JSON.

    OMP_NUM_THREADS=2 python experiments/keep_mask_ab.py --network bandit --out ab.json
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import uncertain_agents.posteriors.masks as masks
from uncertain_agents.bench import (get_network, interleaved, make_batch, parse_candidate, plain_step_fn,
                                    posterior_step_fn)
from uncertain_agents.registry import make_posterior
from uncertain_agents.runs import atomic_write_text, processor_name, record_run

OFF = 2**62


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="bandit")
    parser.add_argument("--posterior", default="dropout-alpha", help="NAME or NAME:key=value,...")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the medians and every round as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    net = get_network(args.network)
    x, y = make_batch(net, net.batch)
    label, name, options = parse_candidate(args.posterior)
    post = make_posterior(name, in_dim=net.in_dim, out_dim=net.out_dim, hidden=net.hidden,
                          likelihood=net.likelihood, seed=0, **options)
    step = posterior_step_fn(post, x, y, steps=args.steps)
    generator = torch.Generator().manual_seed(0)
    shape = (post.train_samples, net.batch)

    def draw_masks() -> None:
        for _ in range(args.steps):
            post.draw_keep(shape, generator, post.params.dtype)

    default = masks.SKIP_MIN_ENTRIES
    cases = {"plain step": (None, plain_step_fn(net, x, y, steps=args.steps))}
    for mode, threshold in (("skipping", default), ("16-bit comparison", OFF)):
        cases[f"{label} masks of a step ({mode})"] = (threshold, draw_masks)
        cases[f"{label} step ({mode})"] = (threshold, step)

    def with_threshold(threshold: int | None, fn):
        def run() -> None:
            masks.SKIP_MIN_ENTRIES = default if threshold is None else threshold
            fn()
        return run

    seconds = interleaved({key: with_threshold(*case) for key, case in cases.items()}, rounds=args.rounds)
    masks.SKIP_MIN_ENTRIES = default
    times = {key: [s / args.steps * 1e6 for s in values] for key, values in seconds.items()}
    medians = {key: statistics.median(values) for key, values in times.items()}
    plain = medians["plain step"]
    print(f"{args.network} network ({net.label}, batch {net.batch}), {processor_name()}, {args.threads} threads, "
          f"median of {args.rounds} rounds × {args.steps} steps")
    for key, median in medians.items():
        ratio = f"{median / plain:5.2f}× plain" if "masks of" not in key else ""
        print(f"  {key:55s} {median:8.0f} µs  {ratio}")
    # the machine's speed drifts between rounds; the two variants of one round ran back to back
    paired = {what: statistics.median(a - b for a, b in zip(times[f"{label} {what} (skipping)"],
                                                            times[f"{label} {what} (16-bit comparison)"]))
              for what in ("masks of a step", "step")}
    for what, diff in paired.items():
        print(f"  {label} {what}: skipping − comparison, median over rounds {diff:+.0f} µs "
              f"({100 * diff / medians[f'{label} {what} (16-bit comparison)']:+.1f}%)")
    if args.out is not None:
        result = {"network": args.network, "posterior": args.posterior, "cpu": processor_name(),
                  "threads": args.threads, "torch_version": torch.__version__, "rounds": args.rounds,
                  "steps": args.steps, "median_us": medians, "paired_median_difference_us": paired,
                  "rounds_us": times}
        record_run(args.out.parent)  # the folder's manifest.json lists the runs that wrote it
        atomic_write_text(args.out, json.dumps(result, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
