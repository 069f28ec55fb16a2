"""Training-step time with and without :func:`uncertain_agents.allocator.keep_freed_memory`.

The setting is process-wide, so each configuration runs in its own process; the two
alternate ``--repeats`` times (a change of machine load hits both alike) and the medians are
printed, with the minor page faults and the system CPU time per step that the setting removes.
Every process fits through the public ``Posterior.fit`` on the bench's bandit batch
(117-100-100-2, batch 512; ``uncertain_agents.bench``) and times the plain PyTorch MLP step
in the same process::

    python experiments/bench_allocator.py --posteriors mfvi bb-alpha dropout-alpha fsvgd --repeats 3

About 2 minutes with these four on 2 threads. ``--out FILE.json`` keeps every process's figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ENV_VAR = "UNCERTAIN_AGENTS_KEEP_FREED_MEMORY"


def measure(names: list[str], steps: int, rounds: int, threads: int, network: str) -> dict:
    """In this process: per-step wall µs (median of ``rounds``), minor faults and user/system
    CPU µs per step, for the plain MLP and each posterior."""
    import resource
    import time

    import torch

    from uncertain_agents import make_posterior
    from uncertain_agents.allocator import freed_memory_kept
    from uncertain_agents.bench import get_network, make_batch, parse_candidate, plain_step_fn, posterior_step_fn

    torch.set_num_threads(threads)
    net = get_network(network)
    x, y = make_batch(net, net.batch)
    fns = {"plain": plain_step_fn(net, x, y, steps=steps)}
    for text in names:  # "name" or "name:key=value,..." as in ``uncertain-agents bench``
        _, name, options = parse_candidate(text)
        post = make_posterior(name, in_dim=net.in_dim, out_dim=net.out_dim, hidden=net.hidden,
                              likelihood=net.likelihood, seed=0, **options)
        fns[text] = posterior_step_fn(post, x, y, steps=steps)
    for fn in fns.values():
        fn()  # warm-up (and the first fit, which applies the setting unless it is switched off)
    out = {}
    for name, fn in fns.items():
        walls, faults, user, system = [], [], [], []
        for _ in range(rounds):
            before = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            fn()
            walls.append((time.perf_counter() - t0) / steps * 1e6)
            after = resource.getrusage(resource.RUSAGE_SELF)
            faults.append((after.ru_minflt - before.ru_minflt) / steps)
            user.append((after.ru_utime - before.ru_utime) / steps * 1e6)
            system.append((after.ru_stime - before.ru_stime) / steps * 1e6)
        out[name] = {"step_us": statistics.median(walls), "minor_faults_per_step": statistics.median(faults),
                     "user_us_per_step": statistics.median(user), "sys_us_per_step": statistics.median(system)}
    return {"kept": freed_memory_kept(), "figures": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posteriors", nargs="+", default=["mfvi", "bb-alpha", "dropout-alpha", "fsvgd"])
    parser.add_argument("--network", default="bandit")
    parser.add_argument("--repeats", type=int, default=3, help="process pairs (off, on), alternating")
    parser.add_argument("--rounds", type=int, default=5, help="timings per candidate within a process")
    parser.add_argument("--steps", type=int, default=30, help="training steps per timing")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="JSON file with every process's figures")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.posteriors, args.steps, args.rounds, args.threads, args.network)))
        return 0
    runs: dict[str, list[dict]] = {"default": [], "kept": []}
    for repeat in range(args.repeats):
        for label, value in (("default", "0"), ("kept", "1")):
            env = {**os.environ, ENV_VAR: value, "OMP_NUM_THREADS": str(args.threads)}
            cmd = [sys.executable, __file__, "--child", "--posteriors", *args.posteriors, "--network", args.network,
                   "--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(args.threads)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if result["kept"] != (label == "kept"):
                raise RuntimeError(f"the {label} process reports kept={result['kept']}")
            runs[label].append(result["figures"])
            print(f"repeat {repeat + 1}/{args.repeats}: {label} done", file=sys.stderr)
    names = ["plain", *args.posteriors]

    def med(label: str, name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in runs[label])

    print(f"{args.network} network, {args.threads} threads, {args.repeats} process pairs, medians")
    print(f"{'candidate':<24}{'default µs':>12}{'kept µs':>10}{'kept/default':>14}{'faults/step':>14}"
          f"{'sys µs/step':>14}{'ratio to plain (default → kept)':>34}")
    for name in names:
        d, k = med("default", name, "step_us"), med("kept", name, "step_us")
        ratios = ""
        if name != "plain":
            ratios = (f"{statistics.median(r[name]['step_us'] / r['plain']['step_us'] for r in runs['default']):.2f}× → "
                      f"{statistics.median(r[name]['step_us'] / r['plain']['step_us'] for r in runs['kept']):.2f}×")
        print(f"{name:<24}{d:>12.0f}{k:>10.0f}{k / d:>14.2f}"
              f"{med('default', name, 'minor_faults_per_step'):>7.0f} → {med('kept', name, 'minor_faults_per_step'):<4.0f}"
              f"{med('default', name, 'sys_us_per_step'):>7.0f} → {med('kept', name, 'sys_us_per_step'):<4.0f}{ratios:>34}")
    if args.out:
        from uncertain_agents.runs import atomic_write_text, run_manifest

        atomic_write_text(args.out, json.dumps({"manifest": run_manifest(), "args": vars(args), "runs": runs},
                                               indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
