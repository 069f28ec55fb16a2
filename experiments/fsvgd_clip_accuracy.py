"""How exact f-SVGD's clip by matrix products is, on the covariances its bandit steps really clip.

``function_prior.clipped_precision_iterative`` (session 38) computes the eigen-clipped precision of the
function prior without ``torch.linalg.eigh``, so that a CUDA step can hold it in its graph. This script
records every covariance the ``fsvgd-paper`` preset's steps clip in the first ``--decisions`` decisions of
Thompson sampling on the wheel (δ = 0.95) and on mushroom (CPU; ``--train-steps`` per refit instead of the
preset's decaying schedule, to keep it short), and compares the two clips on each: the ratio
``‖C − f·I‖_F / f`` that sets the iteration counts, how often the clip binds, and the largest relative
difference. A second part sweeps random covariances with eigenvalues spread over ``f·[ratio⁻¹, ratio]``
(30% of them zero) to show where the default counts stop being exact.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/fsvgd_clip_accuracy.py \\
        --out experiments/results/fsvgd_clip_accuracy/accuracy.json
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import torch

from uncertain_agents.agents import make_agent, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.posteriors import function_prior
from uncertain_agents.runs import atomic_write_text, record_run, run_manifest


def _relative_difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[R]`` Frobenius ``‖a − b‖ / ‖b‖`` per matrix of ``a, b[R, K, K]``."""
    return torch.linalg.matrix_norm(a - b) / torch.linalg.matrix_norm(b)


def bandit_covariances(env_name: str, decisions: int, train_steps: int, seed: int) -> tuple[torch.Tensor, float]:
    """Every covariance ``[S, K, K]`` the preset's steps clipped in one run, and the floor they used."""
    recorded: list[tuple[torch.Tensor, float]] = []
    eager_clip = function_prior.clipped_precision_for_step

    def recording_clip(cov: torch.Tensor, floor: float) -> torch.Tensor:
        recorded.append((cov.detach().clone(), floor))
        return eager_clip(cov, floor)

    env = make_env(env_name, steps=decisions, delta=0.95)
    agent = make_agent("thompson", n_actions=int(env.action_space.n), context_dim=int(env.observation_space.shape[0]),
                       posterior="fsvgd", protocol="fsvgd-paper", train_steps=train_steps, seed=seed)
    # the steps reach recording_clip only through the eager stage: with UNCERTAIN_AGENTS_STEP_CLIP=iterative in
    # the environment (as the GPU kit's table runs export it) nothing would be recorded
    step_clip, function_prior.STEP_CLIP = function_prior.STEP_CLIP, "eager"
    function_prior.clipped_precision_for_step = recording_clip
    try:
        run_bandit(env, agent, steps=decisions, seed=seed)
    finally:
        function_prior.clipped_precision_for_step = eager_clip
        function_prior.STEP_CLIP = step_clip
    floors = {floor for _, floor in recorded}
    if len(floors) != 1:
        raise RuntimeError(f"expected one eigenvalue floor, got {sorted(floors)}")
    return torch.stack([cov for cov, _ in recorded]), floors.pop()


def compare(cov: torch.Tensor, floor: float) -> dict:
    """The two clips on ``cov[S, K, K]``: sizes, ratios, binding, differences."""
    evals = torch.linalg.eigvalsh(cov)
    ratio = torch.linalg.matrix_norm(cov - floor * torch.eye(cov.shape[-1], dtype=cov.dtype)) / floor
    diff = _relative_difference(function_prior.clipped_precision_iterative(cov, floor),
                                function_prior.clipped_precision(cov, floor))
    return {"steps": int(cov.shape[0]), "K": int(cov.shape[-1]), "floor": floor,
            "ratio_max": float(ratio.max()), "ratio_median": float(ratio.median()),
            "smallest_eigenvalue": float(evals.min()),
            "steps_where_the_clip_binds": int((evals.min(-1).values < floor).sum()),
            "relative_difference_max": float(diff.max()), "relative_difference_median": float(diff.median())}


def random_sweep(ratios: list[float], per_ratio: int, seed: int) -> list[dict]:
    """Random covariances with eigenvalues ``f·exp(U(0, log ratio))`` (30% set to 0, the largest ``f·ratio``)."""
    g = torch.Generator().manual_seed(seed)
    floor, rows = 1e-3, []
    for ratio in ratios:
        worst, smallest = 0.0, float("inf")
        for _ in range(per_ratio):
            k = int(torch.randint(2, 25, (1,), generator=g))
            lam = (torch.rand(k, generator=g, dtype=torch.float64) * torch.log(torch.tensor(ratio))).exp() * floor
            lam[torch.rand(k, generator=g) < 0.3] = 0.0
            lam[0] = ratio * floor
            q = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))[0]
            cov = (q * lam) @ q.T
            exact = (q / lam.clamp_min(floor)) @ q.T
            got = function_prior.clipped_precision_iterative(cov, floor)
            worst = max(worst, float(torch.linalg.matrix_norm(got - exact) / torch.linalg.matrix_norm(exact)))
            smallest = min(smallest, float(torch.linalg.eigvalsh(got).min()) * floor)
        rows.append({"ratio": ratio, "matrices": per_ratio, "relative_error_max": worst,
                     "smallest_precision_eigenvalue_times_floor": smallest})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decisions", type=int, default=400)
    p.add_argument("--train-steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweep-per-ratio", type=int, default=50)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    result = {"iterations": list(function_prior.iterative_clip_iterations()),
              "max_ratio": function_prior.ITERATIVE_CLIP_MAX_RATIO,
              "tolerance": function_prior.ITERATIVE_CLIP_TOLERANCE, "bandits": {}}
    for env_name in ("wheel", "mushroom"):
        cov, floor = bandit_covariances(env_name, args.decisions, args.train_steps, args.seed)
        row = compare(cov, floor)
        result["bandits"][env_name] = row
        print(f"{env_name}: {row['steps']} steps, K = {row['K']}, floor {floor:g}; ‖C − fI‖/f up to "
              f"{row['ratio_max']:.3g} (median {row['ratio_median']:.3g}); smallest eigenvalue "
              f"{row['smallest_eigenvalue']:.3g}; clip binds in {row['steps_where_the_clip_binds']} steps; "
              f"iterative vs eigh: max relative difference {row['relative_difference_max']:.2g}", flush=True)
    result["random_sweep"] = random_sweep([1e6, 1e8, 1e10, 1e11, 1e12], args.sweep_per_ratio, args.seed)
    for row in result["random_sweep"]:
        print(f"random, ratio {row['ratio']:.0e}: max relative error {row['relative_error_max']:.2g}, smallest "
              f"precision eigenvalue × floor {row['smallest_precision_eigenvalue_times_floor']:.3g}", flush=True)
    if args.out is not None:
        result["manifest"] = run_manifest()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
        record_run(args.out.parent)  # the folder's manifest.json lists the runs that wrote it
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
