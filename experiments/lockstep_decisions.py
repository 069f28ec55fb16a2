"""Thompson decisions of ten lock-step trials: one at a time against a window at a time.

Between two refits the lock-step runner (``uncertain_agents/agents/lockstep.py``) decides a
window of ``W`` decisions of all ``R`` trials at once: it reads the contexts ahead
(``ContextualBanditEnv.peek_contexts``), evaluates the ``R × W`` drawn functions in one batched
forward (``MLPSpec.forward_each``; a finite set evaluates its members at the window's contexts) and plays the actions (``ContextualBanditEnv.play``). Before,
each decision of each trial was a host evaluation of one drawn function (``HostFunctions``, built
per trial after every refit) and one ``env.step``. This times both ways on the same drawn
functions and the same environments (``fsvgd-paper`` network 2×100, ``R = 10``, ``W = 50``, one
thread, interleaved rounds; drawing the functions timed apart from deciding), checks that they
choose the same actions, and counts the ATen
operations of a window (on a GPU, kernel launches; the one-at-a-time way launches none but runs
``R × W`` host evaluations under the GIL).

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/lockstep_decisions.py \\
        --out experiments/results/lockstep_decisions.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from _timing import CountOps  # noqa: E402  (experiments/ is the script's folder)

from uncertain_agents.agents.experiment import make_env
from uncertain_agents.agents.host_functions import HostFunctions
from uncertain_agents.agents.lockstep import DrawnFunctions
from uncertain_agents.posteriors.trials import make_trial_posterior
from uncertain_agents.runs import atomic_write_text, run_manifest


def _posterior(method: str, env_name: str, trials: int, device: str):
    env = make_env(env_name, steps=10)
    post = make_trial_posterior(method, trials=trials, in_dim=env.observation_space.shape[0],
                                out_dim=int(env.action_space.n), hidden=(100, 100), seed=0, noise_std=0.1,
                                device=device, **({"n_members": 20} if method == "bootstrap" else {}))
    post.set_units()
    return post


def _generator(post, seed: int) -> torch.Generator:
    return torch.Generator(device=post.device).manual_seed(seed)


def _sync(post) -> None:
    """The draw finished before the clock moves on (CUDA works asynchronously)."""
    if post.device.type == "cuda":
        torch.cuda.synchronize(post.device)


def _one_at_a_time(post, envs, seeds, window, gen_seed):
    """Returns (actions [R, W], seconds drawing, seconds deciding)."""
    t0 = time.perf_counter()
    samples = post.sample_trials(window, generator=_generator(post, gen_seed))
    _sync(post)
    t1 = time.perf_counter()
    functions = [HostFunctions(fs) for fs in samples]
    obs = [env.reset(seed=s)[0] for env, s in zip(envs, seeds)]
    chosen = np.empty((len(envs), window), dtype=np.int64)
    for i in range(window):
        for r, env in enumerate(envs):
            chosen[r, i] = functions[r].greedy(i, obs[r])
            obs[r] = env.step(int(chosen[r, i]))[0]
    return chosen, t1 - t0, time.perf_counter() - t1


def _windowed(post, envs, seeds, window, gen_seed):
    t0 = time.perf_counter()
    functions = DrawnFunctions(post, window, _generator(post, gen_seed))
    _sync(post)
    t1 = time.perf_counter()
    for env, s in zip(envs, seeds):
        env.reset(seed=s)
    x = torch.from_numpy(np.stack([env.peek_contexts(window) for env in envs])).to(post.device)
    chosen = functions.greedy(x).cpu().numpy()
    for r, env in enumerate(envs):
        env.play(chosen[r])
    return chosen, t1 - t0, time.perf_counter() - t1


def measure(method: str, env_name: str, trials: int, window: int, rounds: int, device: str = "cpu") -> dict:
    post = _posterior(method, env_name, trials, device)
    envs = [make_env(env_name, steps=10 * window) for _ in range(trials)]
    seeds = list(range(trials))
    draw = {"one_at_a_time": [], "window": []}
    decide = {"one_at_a_time": [], "window": []}
    for k in range(rounds):
        for way, fn in (("one_at_a_time", _one_at_a_time), ("window", _windowed)):
            chosen, drawing, deciding = fn(post, envs, seeds, window, gen_seed=k)
            draw[way].append(drawing)
            decide[way].append(deciding)
            if way == "one_at_a_time":
                reference = chosen
        if not np.array_equal(reference, chosen):
            raise AssertionError(f"{method} {env_name}: the two ways chose different actions in round {k}")
    counter = CountOps()
    with counter:
        _windowed(post, envs, seeds, window, gen_seed=0)
    per = lambda times: {way: float(np.median(v)) * 1e6 / (trials * window) for way, v in times.items()}
    decide_us = per(decide)
    return {"method": method, "env": env_name, "device": device, "trials": trials, "window": window, "rounds": rounds,
            "us_per_trial_decision_deciding": decide_us, "us_per_trial_decision_drawing": per(draw),
            "deciding_ratio_one_at_a_time_over_window": decide_us["one_at_a_time"] / decide_us["window"],
            "aten_ops_per_window": counter.count, "same_actions": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="mfvi,bootstrap")
    parser.add_argument("--envs", default="wheel,mushroom")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--device", default="cpu", help="the posterior's device (cuda: the drawn functions and "
                        "the window's forward there; one at a time copies them to the host, as the runner did)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for env_name in args.envs.split(","):
        for method in args.methods.split(","):
            row = measure(method, env_name, args.trials, args.window, args.rounds, args.device)
            per, draw = row["us_per_trial_decision_deciding"], row["us_per_trial_decision_drawing"]
            print(f"{env_name:9s} {method:10s} deciding: one at a time {per['one_at_a_time']:6.1f} µs, window "
                  f"{per['window']:6.1f} µs per trial-decision "
                  f"({row['deciding_ratio_one_at_a_time_over_window']:.1f}×); drawing {draw['one_at_a_time']:.1f} / "
                  f"{draw['window']:.1f} µs; {row['aten_ops_per_window']} ATen ops per window of "
                  f"{args.trials}×{args.window}; same actions", flush=True)
            rows.append(row)
    if args.out is not None:
        atomic_write_text(args.out, json.dumps({"manifest": run_manifest(), "torch": torch.__version__, "rows": rows},
                                               indent=1))


if __name__ == "__main__":
    main()
