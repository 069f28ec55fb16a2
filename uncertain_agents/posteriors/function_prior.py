"""A Gaussian over function values, fitted by moment matching to prior network draws.

f-SVGD (Wang et al. 2019, §3.2) needs ``∇_f log p(f(X))`` for the prior over functions
implied by the weight prior. It is intractable, so a Gaussian is fitted to the function
values of fresh prior draws at a few points ``X``; its covariance is eigen-clipped from
below so that the (possibly rank-deficient) estimate has a well-defined precision.
Everything here is computed in float64 and carries no gradient to the draws.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Generator

import torch
from torch import Tensor

from ..network import ACTIVATIONS, MLPSpec
from .cuda_graphs import EagerStage


@dataclass
class GaussianFunctionPrior:
    """``N(mean, precision⁻¹)`` over flattened function values ``[K]`` (float64)."""

    mean: Tensor
    precision: Tensor

    def log_prob(self, z: Tensor) -> Tensor:
        """``z[n, K]`` -> ``[n]`` log density up to its constant (in ``z``'s dtype,
        differentiable in ``z``); a batch of priors (``mean[R, 1, K]``, ``precision[R, K, K]``)
        takes ``z[R, n, K]`` to ``[R, n]``."""
        diff = z.double() - self.mean
        return (-0.5 * ((diff @ self.precision) * diff).sum(-1)).to(z.dtype)

    def grad_log_prob(self, z: Tensor) -> Tensor:
        """``z[n, K]`` -> ``[n, K]`` the score ``-P (z - mean)``."""
        return (-(z.double() - self.mean) @ self.precision).to(z.dtype)


def moment_match(draws: Tensor) -> tuple[Tensor, Tensor]:
    """``draws[M, K]`` -> float64 ``mean[K]`` and unbiased covariance ``[K, K]`` (a batch
    ``[R, M, K]`` gives ``[R, K]`` and ``[R, K, K]``)."""
    if draws.dim() not in (2, 3) or draws.shape[-2] < 2:
        raise ValueError(f"draws must be [M >= 2, K] or [R, M >= 2, K], got {tuple(draws.shape)}")
    d = draws.detach().double()
    mean = d.mean(-2)
    centred = d - mean.unsqueeze(-2)
    return mean, centred.mT @ centred / (d.shape[-2] - 1)


def clipped_precision(cov: Tensor, floor: float) -> Tensor:
    """Inverse of ``cov[K, K]`` (or of each of a batch ``[R, K, K]``) after clipping its eigenvalues to at
    least ``floor``."""
    evals, evecs = torch.linalg.eigh(cov)
    return (evecs / evals.clamp_min(floor).unsqueeze(-2)) @ evecs.mT  # [..., K, K]: batches too


#: Largest ``K`` whose clipped precision a CUDA step computes on the host (:func:`clipped_precision_for_step`);
#: 0 keeps every eigen-decomposition on the device. f-SVGD's function prior is ``K = prior_points × outputs``
#: (8 on mushroom, 20 on the wheel with the default four points).
HOST_EIGH_MAX_DIM = 64


def clipped_precision_for_step(cov: Tensor, floor: float) -> Tensor:
    """:func:`clipped_precision` as a training step's eager stage: for a small CUDA ``cov`` (``K`` up to
    :data:`HOST_EIGH_MAX_DIM`) computed by the host's LAPACK and copied back, otherwise where ``cov`` is.

    On CUDA ``torch.linalg.eigh`` reads its error flag on the host, so the step waits for the device
    either way (``posteriors/cuda_graphs.py``); for matrices this small the host's ``eigh`` takes
    microseconds, where the device path adds cuSOLVER's launches and its own error-flag copy, and the
    clip, scaling and product are three more launches. In session 18's profile of single-trial ``fsvgd``
    refits on an H200, :func:`clipped_precision` took 0.65 s of 1.25 s of host time, 0.53 s of it inside
    ``eigh`` (waiting for the device included; docs/speed.md, session 30). A CPU ``cov`` is computed as it
    is (the same bits as :func:`clipped_precision`)."""
    if cov.device.type != "cuda" or cov.shape[-1] > HOST_EIGH_MAX_DIM:
        return clipped_precision(cov, floor)
    return clipped_precision(cov.cpu(), floor).to(cov.device)


#: The odd quintic of the sign iteration's first phase (the coefficients of Jordan et al.'s Muon
#: orthogonaliser): slope 3.4445 at 0, so a small eigenvalue grows 3.4× per iteration (1.5× for the cubic
#: Newton–Schulz step), and it maps ``(0, 1.2025]`` into itself; iterates settle in ``[0.68, 1.2025]``
#: without converging there, which the cubic phase then does.
_QUINTIC = (3.4445, -4.7750, 2.0315)
_QUINTIC_BAND = (0.68, 1.2025)

#: :func:`clipped_precision_iterative` is exact (to rounding) for covariances with
#: ``‖C − f·I‖_F ≤ ITERATIVE_CLIP_MAX_RATIO · f`` and eigenvalues ``λ`` with
#: ``|λ − f| ≥ ITERATIVE_CLIP_TOLERANCE · f``. f-SVGD's bandit preset reaches ratios of 6e8 (docs/speed.md,
#: session 38); at 1e12 the inverse's rounding (about ratio × 1e-16, as for any inverse of such a matrix)
#: can already leave a precision with a slightly negative eigenvalue.
ITERATIVE_CLIP_MAX_RATIO = 1e10
ITERATIVE_CLIP_TOLERANCE = 1e-8


@lru_cache(maxsize=None)
def iterative_clip_iterations(max_ratio: float = ITERATIVE_CLIP_MAX_RATIO,
                              tolerance: float = ITERATIVE_CLIP_TOLERANCE, dim: int = 1) -> tuple[int, int, int]:
    """``(quintic, cubic, inverse)`` iteration counts of :func:`clipped_precision_iterative` that make it
    exact (to float64 rounding) for ``‖C − f·I‖_F / f ≤ max_ratio`` and ``|λ − f| / f ≥ tolerance``, for
    ``K × K`` covariances with ``K ≤ dim`` (``dim`` matters only where ``√dim`` is not small against
    ``max_ratio``: :func:`clipped_precision_iterative` passes its ``K``).

    Each phase's count is its worst case, found by running the scalar map: the sign iteration starts an
    eigenvalue at ``(λ − f) / ‖C − f·I‖_F``, at least ``tolerance / max_ratio`` in size; the quintic
    brings it into ``[0.68, 1.2025]`` and the cubic from either end of that band to 1 within 2⁻⁵²; the
    inverse's Newton iteration starts every eigenvalue's error ``1 − μ / ‖M‖_F`` in ``[0, 1 − 1 / (2·(max_ratio
    + √dim))]`` (``μ ≥ f / 2``, ``‖M‖_F ≤ ‖A‖_F + f·√K``) and squares it per iteration."""
    if not (1.0 <= max_ratio < math.inf and 0.0 < tolerance < 1.0 and tolerance / max_ratio >= 1e-300):
        # (a start that underflows to 0 would never reach the band: the loop below would not end)
        raise ValueError(f"need 1 <= max_ratio < inf, 0 < tolerance < 1 and tolerance / max_ratio >= 1e-300, "
                         f"got {max_ratio!r}, {tolerance!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be an int >= 1, got {dim!r}")
    a, b, c = _QUINTIC
    lo, hi = _QUINTIC_BAND
    x, quintic = tolerance / max_ratio, 0
    while not lo <= x <= hi:
        x, quintic = x * (a + b * x * x + c * x ** 4), quintic + 1
    cubic = 0
    for x in (lo, hi):
        n = 0
        while abs(1.0 - x) > 2.0 ** -52:
            x, n = 1.5 * x - 0.5 * x ** 3, n + 1
        cubic = max(cubic, n)
    inverse = math.ceil(math.log2(math.log(2.0 ** 53) * 2.0 * (max_ratio + math.sqrt(dim))))
    return quintic, cubic, inverse


def clipped_precision_iterative(cov: Tensor, floor: float, iterations: tuple[int, int, int] | None = None) -> Tensor:
    """:func:`clipped_precision` by matrix products only (float64 ``cov[K, K]`` or ``[R, K, K]``).

    ``torch.linalg.eigh`` reads its error flag on the host, so a CUDA step that calls it waits for the
    device; this computes the same precision with batched matrix products and elementwise operations,
    which a CUDA graph can hold. With ``A = C − f·I`` and its matrix sign ``S`` (``±1`` on ``A``'s
    eigenvectors), the clipped covariance is ``max(C, f·I) = (C + f·I + S·A) / 2``: ``C`` where
    ``λ > f``, ``f`` where ``λ < f``. ``S`` comes from ``A / ‖A‖_F`` by an odd quintic that grows small
    eigenvalues fast (:data:`_QUINTIC`), then cubic Newton–Schulz steps ``X ← (3X − X³) / 2`` that converge
    quadratically; the precision is the Newton–Schulz inverse ``Y ← 2Y − Y·M·Y`` from ``Y = I / ‖M‖_F``
    (every eigenvalue's error ``1 − μY`` starts in ``[0, 1)`` and is squared per iteration).

    ``iterations``: ``(quintic, cubic, inverse)``, default :func:`iterative_clip_iterations` (exact for
    ``‖A‖_F ≤ 10¹⁰ f``, :data:`ITERATIVE_CLIP_MAX_RATIO`; relative error against :func:`clipped_precision`
    about ratio × 1e-16 either way, the rounding of the inverse itself). With too few iterations (a
    larger ratio, or an eigenvalue closer to the floor than the counts resolve) an eigenvalue whose sign
    ``s`` has not converged is clipped to ``(λ + f + s·(λ − f)) / 2`` — every odd polynomial step keeps the
    sign and stays within ``[-1.2025, 1.2025]``, so that is between ``(λ + f) / 2`` and ``max(λ, f)`` plus
    ``0.10125·|λ − f|`` — and the clipped covariance keeps eigenvalues of at least ``(λ + f) / 2``; and an
    inverse that has not converged underestimates the precision along small
    eigenvalues (``Y``'s eigenvalues stay in ``(0, 1/μ]`` in exact arithmetic) rather than diverging."""
    shape, k = cov.shape, cov.shape[-1]
    if iterations is None:
        iterations = iterative_clip_iterations(ITERATIVE_CLIP_MAX_RATIO, ITERATIVE_CLIP_TOLERANCE, max(k, 1))
    quintic, cubic, inverse = iterations
    c = cov.reshape(-1, k, k)
    eye = torch.eye(k, dtype=c.dtype, device=c.device)
    a = c - floor * eye
    a = 0.5 * (a + a.mT)
    scale = torch.linalg.matrix_norm(a).clamp_min(torch.finfo(c.dtype).tiny)[:, None, None]
    x = a / scale
    qa, qb, qc = _QUINTIC
    qa_eye = qa * eye
    for _ in range(quintic):
        x2 = torch.bmm(x, x)
        x = torch.bmm(x, torch.baddbmm(torch.add(qa_eye, x2, alpha=qb), x2, x2, alpha=qc))
    for _ in range(cubic):
        x = torch.baddbmm(x, x, torch.bmm(x, x), beta=1.5, alpha=-0.5)
    m = torch.baddbmm(c + floor * eye, x, a, alpha=1.0) * 0.5  # (C + f·I + S·A) / 2
    m = 0.5 * (m + m.mT)
    y = (1.0 / torch.linalg.matrix_norm(m))[:, None, None] * eye
    for _ in range(inverse):
        y = torch.baddbmm(y, y, torch.bmm(m, y), beta=2.0, alpha=-1.0)
    return (0.5 * (y + y.mT)).reshape(shape)


#: How a training step computes the prior's clipped precision (:func:`step_precision`), read from the
#: environment variable ``UNCERTAIN_AGENTS_STEP_CLIP`` at import: ``"eager"`` (the default) runs
#: :func:`clipped_precision_for_step` as an eager stage between the step's CUDA-graph segments (on CUDA:
#: LAPACK on the host, one synchronisation per step); ``"iterative"`` runs
#: :func:`clipped_precision_iterative` inside the step, so a CUDA step is one graph with no
#: synchronisation. Both give the same precision to rounding, on any device; which is faster on a GPU is
#: measured by the kit step ``fsvgd_clip`` (docs/speed.md, session 38).
STEP_CLIP = os.environ.get("UNCERTAIN_AGENTS_STEP_CLIP", "eager")
STEP_CLIPS = ("eager", "iterative")


def check_step_clip() -> str:
    """:data:`STEP_CLIP`, or ``ValueError`` naming ``UNCERTAIN_AGENTS_STEP_CLIP`` and the accepted values (checked
    when an f-SVGD posterior is built, so a misspelt variable is named before any training, not inside a
    CUDA capture)."""
    if STEP_CLIP not in STEP_CLIPS:
        raise ValueError(f"UNCERTAIN_AGENTS_STEP_CLIP / function_prior.STEP_CLIP must be one of {STEP_CLIPS}, "
                         f"got {STEP_CLIP!r}")
    return STEP_CLIP


def step_precision(cov: Tensor, floor: float) -> Generator[EagerStage, Tensor, Tensor]:
    """The clipped precision in a staged training step: ``precision = yield from step_precision(cov, floor)``
    (:mod:`.cuda_graphs`), by the method :data:`STEP_CLIP` names."""
    if check_step_clip() == "iterative":
        return clipped_precision_iterative(cov, floor)
    return (yield EagerStage(clipped_precision_for_step, (cov, floor)))


def layer_prior_stds(spec: MLPSpec, prior_std: Tensor) -> list[tuple[float, float]] | None:
    """Per-layer ``(weight std, bias std)`` scalars if ``prior_std[D]`` is constant within
    every weight matrix and every bias vector, else ``None``."""
    out = []
    for w, b in spec.unflatten(prior_std.unsqueeze(0)):
        if not (bool((w == w.reshape(-1)[0]).all()) and bool((b == b.reshape(-1)[0]).all())):
            return None
        out.append((float(w.reshape(-1)[0]), float(b.reshape(-1)[0])))
    return out


def prior_function_draws(spec: MLPSpec, prior_std: Tensor, x: Tensor, m: int,
                         generator: torch.Generator, layer_stds: list | None | str = "auto") -> Tensor:
    """``[m, P, out]``: outputs at ``x[P, d]`` of ``m`` networks with weights ~ N(0, prior_std²)
    (``x[R, P, d]``: ``[R, m, P, out]``, every set of points with its own ``m`` networks).

    Exact in distribution but cheaper than drawing all ``D`` weights when ``P`` is small:
    for a layer with ``fan_in > P`` and i.i.d. N(0, s²) weights, ``a W`` given the layer
    input ``a[P, fan_in]`` equals ``Rᵀ E`` with ``aᵀ = Q R`` (thin QR) and ``E = Qᵀ W``,
    whose entries are again i.i.d. N(0, s²) — so only ``P × fan_out`` normals are drawn
    per layer instead of ``fan_in × fan_out``. Falls back to drawing full weight vectors
    when the prior std is not constant within each layer.

    Args:
        layer_stds: the result of :func:`layer_prior_stds` (``"auto"`` computes it).
    """
    stds = layer_prior_stds(spec, prior_std) if layer_stds == "auto" else layer_stds
    kw = dict(generator=generator, device=x.device, dtype=x.dtype)
    if x.dim() == 3:  # R sets of points, each with its own m networks: m·R networks at once
        R, P = x.shape[0], x.shape[1]
        per_network = x.unsqueeze(1).expand(R, m, P, x.shape[2]).reshape(R * m, P, x.shape[2])
        return _draws_at(spec, prior_std, per_network, stds, kw).view(R, m, P, -1)
    return _draws_at(spec, prior_std, x.unsqueeze(0).expand(m, -1, -1), stds, kw)


def _draws_at(spec: MLPSpec, prior_std: Tensor, h: Tensor, stds, kw: dict) -> Tensor:
    """Outputs ``[m, P, out]`` of ``m`` fresh prior networks, network ``j`` at points ``h[j]`` (``[m, P, d]``)."""
    m, P = h.shape[0], h.shape[1]
    if stds is None:
        eps = torch.randn(m, spec.num_params, **kw)
        return spec.forward(eps * prior_std, h)
    act = ACTIVATIONS[spec.activation]
    for i, ((fan_in, fan_out), (s_w, s_b)) in enumerate(zip(spec.layer_shapes, stds)):
        if i > 0:
            h = act(h)
        bias = s_b * torch.randn(m, 1, fan_out, **kw)
        if fan_in > P:
            r = torch.linalg.qr(h.transpose(1, 2), mode="r")[1]  # [m, P, P], hᵀ = Q r
            h = torch.baddbmm(bias, r.transpose(1, 2), s_w * torch.randn(m, P, fan_out, **kw))
        else:
            h = torch.baddbmm(bias, h, s_w * torch.randn(m, fan_in, fan_out, **kw))
    return h
