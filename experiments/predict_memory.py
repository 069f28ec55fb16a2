"""Peak memory of ``predict`` on 10,000 MNIST-sized inputs with 100 sampled functions.

One process per posterior (peak RSS is per process), a 784-400-400-10 classifier as built by
``make_posterior`` (untrained: memory does not depend on the weights' values):

    python experiments/predict_memory.py --posteriors mfvi dropout-alpha fsvgd ensemble aadm refined-vi
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def measure(name: str, rows: int, samples: int) -> dict:
    """Build the posterior, then ``predict`` ``rows`` inputs with ``samples`` functions; peak RSS in MB."""
    import torch

    import uncertain_agents as ua

    torch.set_num_threads(2)
    post = ua.make_posterior(name, in_dim=784, out_dim=10, hidden=(400, 400), likelihood="categorical", seed=0)
    x = torch.rand(rows, 784, generator=torch.Generator().manual_seed(0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    post.predict(x, n_samples=samples)
    return {"posterior": name, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_predict_mb": before, "predict_seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", default=["mfvi", "dropout-alpha", "fsvgd", "ensemble", "aadm",
                                                             "refined-vi"])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.rows, args.samples)))
        return
    print(f"| posterior | peak RSS (MB) | RSS before predict (MB) | predict (s) |\n|---|---|---|---|")
    for name in args.posteriors:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--rows", str(args.rows),
                              "--samples", str(args.samples)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {name} | {r['peak_rss_mb']:.0f} | {r['rss_before_predict_mb']:.0f} | {r['predict_seconds']:.1f} |")


if __name__ == "__main__":
    main()
