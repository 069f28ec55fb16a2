"""Where a bandit refit's host time goes: cProfile of steady-state refits (100 steps each).

Runs Thompson sampling with the ``fsvgd-paper`` preset but a constant 100 steps per refit (the
schedule of a 50,000-decision trial after its first 20 refits) for ``--decisions`` decisions on
the wheel, one method at a time, and prints the wall time per refit and the functions with the
most own time (``tottime``) — on a GPU the host's Python work, not the device, bounds how many
runs can share one process (experiments/bandit_table.py --parallel threads).
``--trials R`` (R > 1) profiles the lock-step runner instead: one trial-batched model of ``R``
trials (experiments/bandit_table.py --parallel batched), every decision and refit of its run.

    python experiments/gpu_refit_profile.py --device cuda --out profile.json
    python experiments/gpu_refit_profile.py --device cuda --trials 10 --env mushroom --out batched.json

``--host-eigh-max-dim 0`` keeps f-SVGD's per-step eigen-clip of its function prior on the device (cuSOLVER);
the library's default (``function_prior.HOST_EIGH_MAX_DIM``, session 30) computes covariances up to 64 × 64 on
the host. ``--step-clip iterative`` computes it by matrix products inside the step's CUDA graph instead
(``function_prior.STEP_CLIP``, session 38: no synchronisation per step). Run them on one machine to compare.
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
from uncertain_agents.agents.experiment import make_env, run_thompson_trials
from uncertain_agents.posteriors.cuda_graphs import cuda_graph_status
from uncertain_agents.runs import atomic_write_text, run_manifest


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
            "captures": cuda_graph_status(agent.posterior)["captures"],
            "capture_failure": cuda_graph_status(agent.posterior)["failure"], "profile": text.getvalue()}


def profile_batched(method: str, trials: int, env_name: str, decisions: int, device: str, top: int) -> dict:
    """The same for ``trials`` trials as one lock-step model (run_thompson_trials), from its start."""
    from uncertain_agents.posteriors import trials as trial_module

    # the fits the run makes, counted at the training loop itself (the first one after the warm-up pulls
    # included): session 34's count from the profile's call statistics read 0 under Python 3.12's cProfile
    fits = [0]
    training_loop = trial_module.run_training

    def counted_training(*args, **kwargs):
        fits[0] += 1
        return training_loop(*args, **kwargs)

    profiler = cProfile.Profile()
    trial_module.run_training = counted_training
    try:
        t0 = time.perf_counter()
        profiler.enable()
        run_thompson_trials(method, {}, list(range(trials)), env_name=env_name, steps=decisions, delta=0.95,
                            protocol="fsvgd-paper", train_steps=100, device=device)
        profiler.disable()
        seconds = time.perf_counter() - t0
    finally:
        trial_module.run_training = training_loop
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    refits = fits[0]
    stats.sort_stats("tottime").print_stats(top)
    return {"method": method, "trials": trials, "env": env_name, "decisions": decisions, "refits": refits,
            "seconds": seconds, "ms_per_refit": 1e3 * seconds / max(refits, 1), "profile": text.getvalue()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--methods", default="mfvi,bootstrap,fsvgd")
    p.add_argument("--decisions", type=int, default=1000)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--trials", type=int, default=1, help="R > 1: R trials as one lock-step model")
    p.add_argument("--env", default="wheel", choices=["wheel", "mushroom"], help="with --trials > 1")
    p.add_argument("--host-eigh-max-dim", type=int, default=None,
                   help="set function_prior.HOST_EIGH_MAX_DIM (0: every eigh on the device)")
    p.add_argument("--step-clip", choices=("eager", "iterative"), default=None,
                   help="set function_prior.STEP_CLIP (default: the library's, UNCERTAIN_AGENTS_STEP_CLIP or 'eager')")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.step_clip is not None:
        from uncertain_agents.posteriors import function_prior
        function_prior.STEP_CLIP = args.step_clip
    if args.host_eigh_max_dim is not None:
        from uncertain_agents.posteriors import function_prior
        function_prior.HOST_EIGH_MAX_DIM = args.host_eigh_max_dim
    results = []
    for method in args.methods.split(","):
        if args.trials > 1:
            r = profile_batched(method, args.trials, args.env, args.decisions, args.device, args.top)
            print(f"== {method}, {args.trials} trials batched on {args.env}: {r['refits']} refits in "
                  f"{r['seconds']:.2f} s = {r['ms_per_refit']:.1f} ms per refit (first capture included)", flush=True)
        else:
            r = profile_method(method, args.decisions, args.device, args.top)
            print(f"== {method}: {r['refits']} refits in {r['seconds']:.2f} s = {r['ms_per_refit']:.1f} ms per "
                  f"refit (captures {r['captures']}, failure {r['capture_failure']})", flush=True)
        print(r["profile"], flush=True)
        results.append(r)
    if args.out is not None:
        from uncertain_agents.posteriors import function_prior
        atomic_write_text(args.out, json.dumps({"manifest": run_manifest(), "device": args.device,
                                                "torch": torch.__version__,
                                                "host_eigh_max_dim": function_prior.HOST_EIGH_MAX_DIM,
                                                "step_clip": function_prior.STEP_CLIP,
                                                "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
