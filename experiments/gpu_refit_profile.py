"""Where a bandit refit's host time goes: cProfile of steady-state refits (100 steps each).

Runs Thompson sampling with the ``fsvgd-paper`` preset but a constant 100 steps per refit (the
schedule of a 50,000-decision trial after its first 20 refits) for ``--decisions`` decisions on
the wheel, one method at a time, and prints the wall time per refit and the functions with the
most own time (``tottime``) — on a GPU the host's Python work, not the device, bounds how many
runs can share one process (experiments/bandit_table.py --parallel threads).

    python experiments/gpu_refit_profile.py --device cuda --out profile.json
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from pathlib import Path

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import torch

from uncertain_agents.agents import make_agent, run_bandit
from uncertain_agents.agents.experiment import make_env


def profile_method(method: str, decisions: int, device: str, top: int) -> dict:
    env = make_env("wheel", steps=decisions, delta=0.95)
    agent = make_agent("thompson", n_actions=5, context_dim=2, posterior=method, protocol="fsvgd-paper",
                       train_steps=100, device=device, seed=0)
    run_bandit(env, agent, steps=200, seed=0)  # warm: first fits, lazy initialisation, first capture
    fits_before = agent.n_fits
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    run_bandit(env, agent, steps=decisions, seed=1)
    profiler.disable()
    seconds = time.perf_counter() - t0
    refits = agent.n_fits - fits_before
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return {"method": method, "decisions": decisions, "refits": refits, "seconds": seconds,
            "ms_per_refit": 1e3 * seconds / max(refits, 1),
            "captures": getattr(agent.posterior, "_cuda_graph_captures", 0),
            "capture_failure": getattr(agent.posterior, "_cuda_graph_failure", None), "profile": text.getvalue()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--methods", default="mfvi,bootstrap,fsvgd")
    p.add_argument("--decisions", type=int, default=1000)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    results = []
    for method in args.methods.split(","):
        r = profile_method(method, args.decisions, args.device, args.top)
        print(f"== {method}: {r['refits']} refits in {r['seconds']:.2f} s = {r['ms_per_refit']:.1f} ms per refit "
              f"(captures {r['captures']}, failure {r['capture_failure']})", flush=True)
        print(r["profile"], flush=True)
        results.append(r)
    if args.out is not None:
        args.out.write_text(json.dumps({"device": args.device, "torch": torch.__version__, "results": results},
                                       indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
