"""One-dimensional regression toys of the AADM paper (Rodríguez Santana & Hernández-Lobato,
Table 1; PROTOCOLS.md §1.1), as data and as one runner.

* ``bimodal``: x ~ U[−2, 2], y = 10 sin x + ε or 10 cos x + ε with probability ½ each, ε ~ N(0, 1);
* ``heteroscedastic``: x ~ U[−4, 4], y = 7 sin x + 3|cos(x/2)| ε.
"""
from __future__ import annotations

import time

import torch

from .posteriors.optimizers import load_optimizer_machinery

TOYS = ("bimodal", "heteroscedastic")


def make_toy_data(problem: str, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[n, 1]``, ``y[n, 1]`` drawn from ``problem``."""
    if problem == "bimodal":
        x = torch.rand(n, 1, generator=generator) * 4.0 - 2.0
        first = torch.rand(n, 1, generator=generator) < 0.5
        mean = torch.where(first, 10.0 * torch.sin(x), 10.0 * torch.cos(x))
        return x, mean + torch.randn(n, 1, generator=generator)
    if problem == "heteroscedastic":
        x = torch.rand(n, 1, generator=generator) * 8.0 - 4.0
        return x, 7.0 * torch.sin(x) + 3.0 * torch.cos(x / 2).abs() * torch.randn(n, 1, generator=generator)
    raise ValueError(f"problem must be one of {TOYS}, got {problem!r}")


def toy_split(problem: str, seed: int, n_train: int = 1000, n_test: int = 1000):
    """``(x, y), (x_test, y_test)`` of ``problem`` for ``seed`` (the same for every method)."""
    if problem not in TOYS:
        raise ValueError(f"problem must be one of {TOYS}, got {problem!r}")
    g = torch.Generator().manual_seed(1000 * seed + TOYS.index(problem))
    return make_toy_data(problem, n_train, g), make_toy_data(problem, n_test, g)


def run_toy(problem: str, posterior: str, options: dict, *, seed: int = 0, steps: int = 20_000,
            hidden: tuple[int, ...] = (50, 50), activation: str = "leaky_relu", batch_size: int = 32,
            n_train: int = 1000, n_test: int = 1000, n_samples: int = 100) -> dict:
    """Fit ``posterior`` on one seed of ``problem``; test NLL per point (original units) and
    the RMSE of the predictive mean."""
    from .registry import make_posterior

    (x, y), (xt, yt) = toy_split(problem, seed, n_train, n_test)
    post = make_posterior(posterior, in_dim=1, out_dim=1, hidden=hidden, activation=activation, seed=seed,
                          **options)
    load_optimizer_machinery()  # a one-off import, not this fit's time
    t0 = time.perf_counter()
    post.fit(x, y, steps=steps, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    pred = post.predict(xt, n_samples=n_samples, generator=torch.Generator().manual_seed(seed))
    return {"test_nll": float(-pred.log_prob(yt).mean()), "test_rmse": float((pred.mean - yt).square().mean().sqrt()),
            "fit_seconds": seconds}
