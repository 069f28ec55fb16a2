"""Which operations of a training step wait for the GPU (host-device synchronisations).

A step that synchronises cannot run ahead of the device: with several processes sharing one
GPU (the bandit table's ``--workers``), each sync also waits for the other processes' time
slices. This runs a few ``fit`` steps of each posterior of the ``fsvgd-paper`` preset on the
bandit network under ``torch.cuda.set_sync_debug_mode("warn")`` and lists, per posterior,
the Python lines whose operations synchronised and how often per step (the checks that
``run_training`` makes every 25 steps are outside the window: steps 1–24 of the fit are
counted):

    python experiments/gpu_sync_probe.py --out experiments/results/gpu_sync_probe.json
"""
from __future__ import annotations

import argparse
import json
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch

import gpu_projection as gp
from uncertain_agents.agents import get_protocol
from uncertain_agents.runs import atomic_write_text, run_manifest

PACKAGE_MARK = "uncertain_agents"


def probe(name: str, steps: int = 20) -> dict:
    protocol = get_protocol("fsvgd-paper")
    post = gp.make(name, protocol, protocol.hidden, "cuda")
    x, y, mask = gp.batch(2 * protocol.batch_size, "cuda")
    post.fit(x, y, mask=mask, steps=30, batch_size=protocol.batch_size)  # warm-up
    torch.cuda.synchronize()
    sites: Counter = Counter()
    original = warnings.showwarning

    with warnings.catch_warnings():
        warnings.simplefilter("always")

        def record(message, category, filename, lineno, file=None, line=None):
            if "synchroniz" not in str(message):
                return original(message, category, filename, lineno, file, line)
            frames = [f for f in traceback.extract_stack()[:-1] if PACKAGE_MARK in f.filename]
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in reversed(frames[-3:]))
            sites[where or f"{filename}:{lineno}"] += 1

        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            post.fit(x, y, mask=mask, steps=steps + 1, batch_size=protocol.batch_size)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = original
    # the fit's own checks run at its step 0 and its last step; report per step regardless
    return {"steps": steps + 1, "syncs_total": sum(sites.values()),
            "sites": {k: v for k, v in sites.most_common()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--posteriors", default="fsvgd,bootstrap,mfvi")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_sync_probe.py needs a CUDA device")
    result = {"manifest": run_manifest(), "device_name": torch.cuda.get_device_name(), "posteriors": {}}
    for name in args.posteriors.split(","):
        row = probe(name, args.steps)
        result["posteriors"][name] = row
        print(f"{name}: {row['syncs_total']} synchronising operations in a fit of {row['steps']} steps")
        for site, count in row["sites"].items():
            print(f"  {count:4d}  {site}")
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
