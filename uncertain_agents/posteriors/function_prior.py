"""A Gaussian over function values, fitted by moment matching to prior network draws.

f-SVGD (Wang et al. 2019, §3.2) needs ``∇_f log p(f(X))`` for the prior over functions
implied by the weight prior. It is intractable, so a Gaussian is fitted to the function
values of fresh prior draws at a few points ``X``; its covariance is eigen-clipped from
below so that the (possibly rank-deficient) estimate has a well-defined precision.
Everything here is computed in float64 and carries no gradient to the draws.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..network import ACTIVATIONS, MLPSpec


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
