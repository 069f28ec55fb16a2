"""Benchmark: training-step cost of mfvi and bb-alpha against a plain PyTorch MLP, and the
speed-up of batched ``predict`` over a Python loop over samples.

    python experiments/bench_training.py [--device cpu|cuda] [--threads 2]

All figures are measured in one run, on the same batch, interleaved round by round.
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


def plain_step_fn(in_dim, hidden, out_dim, x, y):
    layers, width = [], in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    net = nn.Sequential(*layers, nn.Linear(width, out_dim)).to(x.device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = (net(x) - y).square().mean()
        loss.backward()
        opt.step()
    return step


def posterior_step_fn(post, x, y, n_data):
    """One optimiser step on the batch ``x`` through the public ``fit`` (includes its
    per-call input checks; ``n_data`` is then the batch size)."""
    return lambda: post.fit(x, y, steps=1, batch_size=x.shape[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, nargs="+", default=[50])
    parser.add_argument("--in-dim", type=int, default=13)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, args.in_dim, generator=g).to(device)
    y = torch.randn(args.batch, 1, generator=g).to(device)
    hidden = tuple(args.hidden)
    kw = dict(in_dim=args.in_dim, out_dim=1, hidden=hidden, device=device, seed=0)
    mfvi = ua.make_posterior("mfvi", **kw)
    bba = ua.make_posterior("bb-alpha", alpha=0.5, train_samples=10, **kw)

    def synced(fn):
        return lambda: (fn(), sync())

    steps = compare({
        "plain": synced(plain_step_fn(args.in_dim, hidden, 1, x, y)),
        "mfvi": synced(posterior_step_fn(mfvi, x, y, 455)),
        "bb-alpha K=10": synced(posterior_step_fn(bba, x, y, 455)),
    }, number=200)

    # batched predict vs a Python loop over samples, 100 samples, at two test-set sizes
    n_samples = 100
    predict_times = {}
    for n_test in (51, 1000):
        xt = torch.randn(n_test, args.in_dim, generator=g).to(device)

        def batched(xt=xt):
            bba.predict(xt, n_samples=n_samples)
            sync()

        @torch.no_grad()
        def looped(xt=xt):
            fs = bba.sample(n_samples)
            outs = [fs[i](xt) for i in range(n_samples)]
            torch.cat(outs).mean(0)
            sync()

        t = compare({"batched": batched, "loop": looped}, number=5)
        predict_times[n_test] = t
    pred = predict_times[1000]
    figures = {
        "device": str(device), "threads": torch.get_num_threads(), "batch": args.batch,
        "hidden": list(hidden),
        "plain_step_us": steps["plain"] * 1e6,
        "mfvi_step_us": steps["mfvi"] * 1e6,
        "bb_alpha_k10_step_us": steps["bb-alpha K=10"] * 1e6,
        "mfvi_ratio": steps["mfvi"] / steps["plain"],
        "bb_alpha_k10_ratio": steps["bb-alpha K=10"] / steps["plain"],
        "predict_batched_ms": pred["batched"] * 1e3,
        "predict_loop_ms": pred["loop"] * 1e3,
        "predict_b51_batched_ms": predict_times[51]["batched"] * 1e3,
        "predict_b51_loop_ms": predict_times[51]["loop"] * 1e3,
        "predict_speedup": pred["loop"] / pred["batched"],
        "predict_speedup_b51": predict_times[51]["loop"] / predict_times[51]["batched"],
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"training step and predict cost ({device}, {torch.get_num_threads()} threads, "
                        f"batch {args.batch}, hidden {hidden})")
    for col in ("what", "time", "ratio", "target"):
        table.add_column(col)
    table.add_row("plain PyTorch MLP step", f"{figures['plain_step_us']:.0f} µs", "1.0×", "")
    table.add_row("mfvi step", f"{figures['mfvi_step_us']:.0f} µs", f"{figures['mfvi_ratio']:.2f}×", "≤ 3× (CPU)")
    table.add_row("bb-alpha K=10 step", f"{figures['bb_alpha_k10_step_us']:.0f} µs",
                  f"{figures['bb_alpha_k10_ratio']:.2f}×", "≤ 12× (CPU)")
    for n_test, key in ((51, "predict_b51_"), (1000, "predict_")):
        speedup = figures["predict_speedup_b51" if n_test == 51 else "predict_speedup"]
        table.add_row(f"predict, 100 samples × {n_test} inputs, batched", f"{figures[key + 'batched_ms']:.2f} ms",
                      "", "")
        table.add_row(f"predict, 100 samples × {n_test} inputs, Python loop", f"{figures[key + 'loop_ms']:.2f} ms",
                      f"batched {speedup:.1f}× faster", "")
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
