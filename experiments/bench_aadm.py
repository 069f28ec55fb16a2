"""Benchmark: one ``aadm`` training step (discriminator step + generator step) against one
step of a plain PyTorch MLP of the same main network, measured in one run.

    OMP_NUM_THREADS=1 python experiments/bench_aadm.py [--threads 1] [--device cpu|cuda]

Both sides train on a Boston-sized data set (455 × 13, batch 32, network 13 → 50 → 50 → 1)
through their own loop, ``--steps`` steps per call (the posterior through its public
``fit``, which draws the minibatches; the plain loop draws them the same way), contenders
interleaved round by round, median of the rounds. ``aadm`` runs with K = 10 in both sample
modes; ``mfvi`` and ``bb-alpha`` (K = 10) are shown for context. Target (issue 10): the
default ``aadm`` ≤ 10× the plain step on CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import compare  # noqa: E402

import uncertain_agents as ua  # noqa: E402
from uncertain_agents.runs import atomic_write_text, run_manifest  # noqa: E402


def plain_loop(x, y, hidden, batch, steps):
    layers, width = [], x.shape[1]
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    net = nn.Sequential(*layers, nn.Linear(width, 1)).to(x.device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator(device=x.device).manual_seed(0)

    def run():
        order = torch.randperm(x.shape[0], generator=g, device=x.device)
        for s in range(steps):
            idx = order[(s * batch) % (x.shape[0] - batch):][:batch]
            opt.zero_grad(set_to_none=True)
            loss = (net(x[idx]) - y[idx]).square().mean()
            loss.backward()
            opt.step()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=50, help="training steps per timed call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(455, 13, generator=g).to(device)
    y = torch.randn(455, 1, generator=g).to(device)
    hidden, batch = (50, 50), 32
    kw = dict(in_dim=13, out_dim=1, hidden=hidden, device=device, seed=0)
    posts = {
        "aadm K=10 shared (default)": ua.make_posterior("aadm", **kw),
        "aadm K=10 per_point": ua.make_posterior("aadm", sample_mode="per_point", **kw),
        "mfvi": ua.make_posterior("mfvi", **kw),
        "bb-alpha K=10": ua.make_posterior("bb-alpha", **kw),
    }

    def fit_fn(post):
        return lambda: (post.fit(x, y, steps=args.steps, batch_size=batch), sync())

    plain = plain_loop(x, y, hidden, batch, args.steps)
    fns = {"plain MLP": lambda: (plain(), sync()), **{k: fit_fn(p) for k, p in posts.items()}}
    seconds = compare(fns, number=1, rounds=args.rounds, warmup=2)
    per_step = {k: v / args.steps for k, v in seconds.items()}
    base = per_step["plain MLP"]
    threads = torch.get_num_threads()
    print(f"device {device}, {threads} thread(s), network 13-50-50-1, batch {batch}, "
          f"{args.steps} steps per call, median of {args.rounds} interleaved rounds")
    for name, s in per_step.items():
        print(f"  {name:28s} {s * 1e6:9.0f} µs/step   {s / base:6.2f}×")
    if args.json:
        atomic_write_text(args.json, json.dumps({"manifest": run_manifest(), "device": str(device), "threads": threads,
                                                 "us_per_step": {k: v * 1e6 for k, v in per_step.items()},
                                                 "ratio_to_plain": {k: v / base for k, v in per_step.items()}},
                                                indent=2))


if __name__ == "__main__":
    main()
