"""Training-step cost of ``dropout-alpha`` (K = 10) and ``ensemble`` (5 members) relative to
one plain torch MLP of the same size on the same batch.

The plain baseline is ``nn.Sequential(Linear, ReLU, Linear)`` with Adam and a squared-error
loss: one step = zero_grad, forward, loss, backward, Adam step. Two measurements:

* ``step``: one optimiser step through the public ``Posterior.fit(steps=1)`` (minibatch 32;
  includes ``fit``'s per-call input checks and, for dropout-alpha, drawing the K×B masks);
  figures in the docs measured before 2026-11-23 timed the private step alone;
* ``fit``: ``Posterior.fit(steps=S)`` per step (minibatch indexing, checks, the loss trace)
  against a plain loop that also draws a shuffled minibatch every step.

Timings alternate between the contenders over several rounds and the median per-step
time is reported, so a busy machine slows every contender alike. Targets (CPU): ≤ 12×
for dropout-alpha K = 10 and ≤ 6× for a 5-member ensemble.

    OMP_NUM_THREADS=1 python experiments/bench_dropout_ensemble.py
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor, nn

import uncertain_agents as ua


def plain_step_fn(in_dim: int, hidden: int, x: Tensor, y: Tensor, shuffle: bool):
    net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    n, bs = x.shape[0], 32

    def step():
        if shuffle:
            idx = torch.randint(n, (bs,), generator=g)
            xb, yb = x[idx], y[idx]
        else:
            xb, yb = x[:bs], y[:bs]
        opt.zero_grad(set_to_none=True)
        loss = (net(xb) - yb).square().mean()
        loss.backward()
        opt.step()
    return step


def posterior(name: str, in_dim: int, hidden: int, **opts):
    return ua.make_posterior(name, in_dim=in_dim, out_dim=1, hidden=(hidden,), seed=0, **opts)


def post_step_fn(post, x: Tensor, y: Tensor):
    """One optimiser step through the public ``fit`` (minibatch 32 of ``x``; includes
    ``fit``'s per-call input checks)."""
    return lambda: post.fit(x, y, steps=1, batch_size=32)


def post_fit_fn(post, x: Tensor, y: Tensor, steps: int):
    def run():
        post.fit(x, y, steps=steps, batch_size=32)
    return run


def time_per_call(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-dim", type=int, default=13)
    parser.add_argument("--hidden", type=int, default=50)
    parser.add_argument("--n-data", type=int, default=455)
    parser.add_argument("--steps", type=int, default=300, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.n_data, args.in_dim, generator=g)
    y = x[:, :1].sin() + 0.1 * torch.randn(args.n_data, 1, generator=g)

    contenders = {
        "dropout-alpha K=10": posterior("dropout-alpha", args.in_dim, args.hidden, train_samples=10),
        "ensemble M=5": posterior("ensemble", args.in_dim, args.hidden, n_members=5),
    }
    targets = {"dropout-alpha K=10": 12.0, "ensemble M=5": 6.0}
    results = {}
    for mode in ("step", "fit"):
        fns = {"plain torch MLP": plain_step_fn(args.in_dim, args.hidden, x, y, shuffle=(mode == "fit"))}
        for label, post in contenders.items():
            if mode == "step":
                fns[label] = post_step_fn(post, x, y)
            else:
                fit = post_fit_fn(post, x, y, args.steps)
                fns[label] = lambda fit=fit: fit()
        times = {label: [] for label in fns}
        for fn in fns.values():  # warm-up
            fn()
        for _ in range(args.rounds):
            for label, fn in fns.items():
                if mode == "fit" and label != "plain torch MLP":
                    times[label].append(time_per_call(fn, 1) / args.steps)
                else:
                    times[label].append(time_per_call(fn, args.steps))
        results[mode] = {label: statistics.median(t) for label, t in times.items()}

    print(f"in_dim={args.in_dim} hidden={args.hidden} batch=32 threads={args.threads} "
          f"rounds={args.rounds} x {args.steps} steps (median)")
    print(f"{'contender':22s} {'mode':5s} {'us/step':>9s} {'ratio':>7s} {'target':>7s}")
    for mode, res in results.items():
        base = res["plain torch MLP"]
        for label, t in res.items():
            ratio = t / base
            target = targets.get(label)
            flag = "" if target is None else (f"<= {target:.0f}x " + ("ok" if ratio <= target else "MISSED"))
            print(f"{label:22s} {mode:5s} {t * 1e6:9.1f} {ratio:7.2f} {flag}")


if __name__ == "__main__":
    main()
