"""What a CUDA graph would save on the bandit table's small training steps (a measurement).

Each `fsvgd-paper` trial is about 120,000 training steps of small networks, bound on a GPU by
the host's kernel launches. This times one Adam step of a stack of ``M`` bandit networks
(117-100-100-2, batch 512, batched matrix products as the library's ensembles and particles
use) two ways on the same device: eager, and replayed from a CUDA graph captured once
(``torch.cuda.graph``, Adam with ``capturable=True``) — the floor a graph-captured training step
could reach. ``M`` = 1 (a plain network), 20 (one trial's ensemble / particles) and 200 (ten
trials' worth in one batched step):

    python experiments/gpu_graph_probe.py --out experiments/results/gpu_graph_probe.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from uncertain_agents.runs import atomic_write_text, run_manifest

WIDTHS = (117, 100, 100, 2)


def make_stack(m: int, device) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    params = []
    for fan_in, fan_out in zip(WIDTHS[:-1], WIDTHS[1:]):
        params.append(torch.nn.Parameter((torch.randn(m, fan_in, fan_out, generator=g) / fan_in ** 0.5).to(device)))
        params.append(torch.nn.Parameter(torch.zeros(m, 1, fan_out).to(device)))
    return params


def loss_of(params, x, y):
    """Mean squared error of every network of the stack on the batch ``x[B, 117]``."""
    h = x.unsqueeze(0).expand(params[0].shape[0], -1, -1)
    for i in range(0, len(params), 2):
        if i:
            h = torch.relu(h)
        h = torch.baddbmm(params[i + 1], h, params[i])
    return (h - y).square().mean()


def time_steps(step, steps: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def measure(m: int, steps: int, rounds: int) -> dict:
    device = torch.device("cuda")
    x_pool, y_pool = torch.randn(4096, WIDTHS[0], device=device), torch.randn(4096, WIDTHS[-1], device=device)
    # eager: a fresh minibatch index per step, as the library's loop takes them
    params = make_stack(m, device)
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)

    def eager_step():
        idx = torch.randint(4096, (512,), device=device)
        loss = loss_of(params, x_pool.index_select(0, idx), y_pool.index_select(0, idx))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        eager_step()
    eager = time_steps(eager_step, steps, rounds)
    # graph: the same step captured once; the index is drawn inside the graph
    params = make_stack(m, device)
    opt = torch.optim.Adam(params, lr=1e-3, fused=True, capturable=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            idx = torch.randint(4096, (512,), device=device)
            loss = loss_of(params, x_pool.index_select(0, idx), y_pool.index_select(0, idx))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # the captured backward then writes (not adds) the gradients
    with torch.cuda.graph(graph):
        idx = torch.randint(4096, (512,), device=device)
        loss = loss_of(params, x_pool.index_select(0, idx), y_pool.index_select(0, idx))
        loss.backward()
        opt.step()
    graphed = time_steps(graph.replay, steps, rounds)
    return {"networks": m, "eager_step_ms": 1e3 * eager, "graph_step_ms": 1e3 * graphed,
            "speed_up": eager / graphed}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stacks", default="1,20,200")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_graph_probe.py needs a CUDA device")
    rows = []
    for m in map(int, args.stacks.split(",")):
        row = measure(m, args.steps, args.rounds)
        rows.append(row)
        print(f"{m:4d} networks: eager {row['eager_step_ms']:.3f} ms, CUDA graph {row['graph_step_ms']:.3f} ms "
              f"per step ({row['speed_up']:.1f}x)", flush=True)
    if args.out is not None:
        atomic_write_text(args.out, json.dumps({"manifest": run_manifest(), "device_name": torch.cuda.get_device_name(),
                                                "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
