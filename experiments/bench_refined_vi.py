"""Benchmark: refined VI's refinement phase, M members batched against a loop over members,
and its cost per member-step against one ``mfvi`` step of the same network.

    OMP_NUM_THREADS=1 python experiments/bench_refined_vi.py --threads 1

Boston-sized data (455 × 13, batch 32, network 13 → 50 → 1). Each contender is one public
``fit`` with 1 VI step and K = 4 refinement steps of ``--iters`` iterations: ``batched`` is
one ``refined-vi`` with ``n_members = M``; ``loop`` is M posteriors with ``n_members = 1``
fitted one after the other; ``mfvi`` is ``fit`` of ``4 · iters + 1`` steps. Interleaved,
median of the rounds. Target (issue 11): batched ≥ 5× faster than the loop on CPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import compare  # noqa: E402

import uncertain_agents as ua  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50, help="refinement iterations per step")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(455, 13, generator=g), torch.randn(455, 1, generator=g)
    kw = dict(in_dim=13, out_dim=1, hidden=(50,), seed=0, refine_iters=args.iters)
    batched = ua.make_posterior("refined-vi", n_members=args.members, **kw)
    singles = [ua.make_posterior("refined-vi", n_members=1, **kw) for _ in range(args.members)]
    mfvi = ua.make_posterior("mfvi", in_dim=13, out_dim=1, hidden=(50,), seed=0)
    steps = 4 * args.iters + 1
    fns = {
        "batched": lambda: batched.fit(x, y, steps=1, batch_size=32),
        "loop": lambda: [p.fit(x, y, steps=1, batch_size=32) for p in singles],
        "mfvi": lambda: mfvi.fit(x, y, steps=steps, batch_size=32),
    }
    sec = compare(fns, number=1, rounds=args.rounds, warmup=1)
    member_steps = args.members * 4 * args.iters
    print(f"{torch.get_num_threads()} thread(s), M = {args.members}, K = 4 × {args.iters} iterations, "
          f"median of {args.rounds} interleaved rounds")
    print(f"  batched refinement   {sec['batched']:.3f} s   {sec['batched'] / member_steps * 1e6:8.1f} µs per member-step")
    print(f"  loop over members    {sec['loop']:.3f} s   {sec['loop'] / member_steps * 1e6:8.1f} µs per member-step")
    print(f"  batched vs loop      {sec['loop'] / sec['batched']:.1f}× faster")
    mfvi_step = sec["mfvi"] / steps
    print(f"  one mfvi step        {mfvi_step * 1e6:8.1f} µs; a batched member-step costs "
          f"{sec['batched'] / member_steps / mfvi_step:.2f} mfvi steps")


if __name__ == "__main__":
    main()
