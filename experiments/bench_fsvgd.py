"""Cost of one f-SVGD step with 20 particles relative to one step of a plain torch MLP.

Two networks:

* the bandit net: 2×100 ReLU, batch 512, 2 inputs and 5 outputs (the wheel bandit),
  ``noise_std=0.1`` and a mask with one observed arm per row — the agents' setting;
* the UCI net: 13 → 50 → 1 ReLU, batch 100, learned per-particle noise (Boston).

The plain baseline is an ``nn.Sequential`` of the same layers with Adam and a (masked)
squared-error loss: zero_grad, forward, loss, backward, Adam step on the same batch.
The f-SVGD step is one step of the public ``Posterior.fit(steps=1)`` on the same batch
(including ``fit``'s per-call checks; figures in the docs measured before 2026-11-23
timed the private step alone), with the user defaults
(B' = min(B, 32) extra points, 40 prior draws, 4 prior points; on the UCI net the noise
is learned with the 10% hold-out).
For reference the script also times a Python loop over 20 plain networks (what a
non-batched particle method would cost, about 20×) and the weight-space ``svgd`` step.
Contenders alternate round by round and the median time per step is reported, so a busy
machine slows all alike. Target (CPU): f-SVGD ≤ 25× the plain step on the bandit net.

    OMP_NUM_THREADS=1 python experiments/bench_fsvgd.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import compare  # noqa: E402

import uncertain_agents as ua  # noqa: E402

NETS = {  # name: (in_dim, hidden, out_dim, batch, posterior options)
    "bandit 2x100, batch 512": (2, (100, 100), 5, 512, {"noise_std": 0.1}),
    "UCI 13-50-1, batch 100": (13, (50,), 1, 100, {}),
}


def plain_net(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> nn.Module:
    layers, width = [], in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, out_dim))


def plain_step(net: nn.Module, x: Tensor, y: Tensor, mask: Tensor | None):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        err = (net(x) - y).square()
        loss = (err * mask).sum() / mask.sum() if mask is not None else err.mean()
        loss.backward()
        opt.step()
    return step


def posterior_step(name: str, in_dim, hidden, out_dim, x, y, mask, n_particles, opts):
    post = ua.make_posterior(name, in_dim=in_dim, out_dim=out_dim, hidden=hidden, seed=0,
                             n_particles=n_particles, **opts)
    post.fit(x, y, mask=None if mask is None else mask.bool(), steps=1, batch_size=x.shape[0])  # scaling + optimiser
    m = None if mask is None else mask.bool()
    return lambda: post.fit(x, y, mask=m, steps=1, batch_size=x.shape[0])  # one step, public API


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.particles} particles")
    print(f"{'network':28s} {'plain ms':>9s} {'fsvgd ms':>9s} {'ratio':>7s} {'svgd ratio':>11s} "
          f"{'20-net loop ratio':>18s}")
    for label, (in_dim, hidden, out_dim, bs, opts) in NETS.items():
        x = torch.randn(bs, in_dim, generator=g)
        y = torch.randn(bs, out_dim, generator=g)
        mask = None
        if out_dim > 1:  # one observed arm per row
            arm = torch.randint(out_dim, (bs,), generator=g)
            mask = torch.nn.functional.one_hot(arm, out_dim).float()
        loops = [plain_step(plain_net(in_dim, hidden, out_dim), x, y, mask) for _ in range(args.particles)]
        fns = {
            "plain": plain_step(plain_net(in_dim, hidden, out_dim), x, y, mask),
            "fsvgd": posterior_step("fsvgd", in_dim, hidden, out_dim, x, y, mask, args.particles, opts),
            "svgd": posterior_step("svgd", in_dim, hidden, out_dim, x, y, mask, args.particles, opts),
            "loop": lambda: [s() for s in loops],
        }
        t = compare(fns, number=args.number, rounds=args.rounds, warmup=5)
        print(f"{label:28s} {1e3 * t['plain']:9.3f} {1e3 * t['fsvgd']:9.3f} {t['fsvgd'] / t['plain']:6.1f}x "
              f"{t['svgd'] / t['plain']:10.1f}x {t['loop'] / t['plain']:17.1f}x", flush=True)


if __name__ == "__main__":
    main()
