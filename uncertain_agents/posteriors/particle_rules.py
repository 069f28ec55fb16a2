"""Kernels and particle update rules shared by ``svgd`` and ``fsvgd``.

All functions are pure and batched over particles: ``z[n, M]`` holds one flattened
particle per row (weights for ``svgd``, function values for ``fsvgd``) and
``g[n, M]`` the gradient of the log target at each particle. A rule returns the
ascent direction ``phi[n, M]``; with one particle every rule reduces to ``g``.

Rules (Wang et al. 2019, Table 1; Liu & Wang 2016; Liu et al. 2019; Chen et al. 2018):

* ``svgd``:   ``phi_i = (1/n) Σ_j [K_ij g_j + ∇_{z_j} K_ij]``
* ``gfsf``:   ``phi_i = (1/n) [g_i + Σ_j (K⁻¹)_ij r_j]`` with ``r_j = Σ_k ∇_{z_k} K_jk``
* ``wsgld``:  ``phi_i = g_i + Σ_j ∇_{z_j} K_ij (1/k_i + 1/k_j)``, ``k_i = Σ_l K_il``
  (the "blob" discretisation of the Wasserstein gradient flow)
* ``pisgld``: the average of the ``svgd`` and ``wsgld`` directions.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

RULES = ("svgd", "gfsf", "wsgld", "pisgld")


def check_rule(rule) -> str:
    if not isinstance(rule, str) or rule.lower() not in RULES:
        raise ValueError(f"rule must be one of {list(RULES)}, got {rule!r}")
    return rule.lower()


def pairwise_sq_dists(z: Tensor) -> Tensor:
    """``z[n, M] -> [n, n]`` squared Euclidean distances (a batch ``[R, n, M] -> [R, n, n]``).

    Computed from the Gram matrix of the centred particles (``O(n²M)`` as one matmul,
    no ``[n, n, M]`` intermediate); centring keeps the cancellation error small.
    """
    zc = z - z.mean(-2, keepdim=True)
    sq = zc.square().sum(-1)
    d2 = (sq.unsqueeze(-1) + sq.unsqueeze(-2) - 2.0 * zc @ zc.mT).clamp_min(0.0)
    d2.diagonal(dim1=-2, dim2=-1).zero_()
    return d2


def median_bandwidth(sq_dists: Tensor) -> Tensor:
    """Median heuristic ``h = med(‖z_i - z_j‖²) / log(n + 1)`` over pairs ``i < j``.

    The kernel is ``K_ij = exp(-‖z_i - z_j‖² / h)``, so that ``Σ_j K_ij ≈ 1 + n·(1/(n+1))``
    at the median (Liu & Wang 2016). One particle gives ``h = 1`` (the kernel is then
    the constant 1 and has no gradient). Returns a scalar tensor (no gradient); a batch of
    distance matrices ``[R, n, n]`` gives ``[R]``, one bandwidth per set of particles.
    """
    n = sq_dists.shape[-1]
    if n < 2:
        return sq_dists.new_ones(sq_dists.shape[:-2])
    iu = torch.triu_indices(n, n, offset=1, device=sq_dists.device)
    pairs = sq_dists[..., iu[0], iu[1]]
    med = pairs.median() if pairs.dim() == 1 else pairs.median(dim=-1).values
    return (med / math.log(n + 1.0)).clamp_min(1e-8).detach()


def rbf_kernel(z: Tensor, bandwidth: Tensor | float | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """RBF kernel matrix and its repulsive term.

    Args:
        z: ``[n, M]`` particles.
        bandwidth: ``h``; ``None`` uses :func:`median_bandwidth`.

    Returns:
        ``K[n, n]``, ``repulse[n, M]`` with ``repulse_i = Σ_j ∇_{z_j} K(z_i, z_j)
        = (2/h) Σ_j K_ij (z_i - z_j)``, and ``h``.
    """
    K, h = kernel_matrix(z, bandwidth)
    repulse = (2.0 / h) * (K.sum(1, keepdim=True) * z - K @ z)
    return K, repulse, h


def kernel_matrix(z: Tensor, bandwidth: Tensor | float | None = None) -> tuple[Tensor, Tensor]:
    """``K[n, n] = exp(-‖z_i - z_j‖² / h)`` and ``h`` (``None``: :func:`median_bandwidth`)."""
    d2 = pairwise_sq_dists(z)
    h = median_bandwidth(d2) if bandwidth is None else torch.as_tensor(bandwidth, dtype=z.dtype,
                                                                        device=z.device)
    if h.dim() > 0:  # one bandwidth per set of particles, broadcast over its kernel matrix
        h = h.view(*h.shape, 1, 1)
    return torch.exp(-d2 / h), h


def particle_direction(z: Tensor, g: Tensor, rule: str = "svgd",
                       bandwidth: Tensor | float | None = None) -> Tensor:
    """Ascent direction ``phi[n, M]`` of a particle rule (see the module docstring).

    Args:
        z: ``[n, M]`` particles (detached); for ``rule="svgd"`` also ``[R, n, M]``, ``R``
            independent sets of particles, each with its own kernel and bandwidth.
        g: gradients of the log target at the particles, ``z``'s shape.
        rule: one of :data:`RULES`.
        bandwidth: RBF bandwidth ``h``; ``None`` = median heuristic.
    """
    rule = check_rule(rule)
    if z.shape != g.shape or z.dim() not in (2, 3) or (z.dim() == 3 and rule != "svgd"):
        raise ValueError(f"z and g must both be [n, M] (or [R, n, M] sets of particles for rule 'svgd'), "
                         f"got {tuple(z.shape)} and {tuple(g.shape)}")
    n = z.shape[-2]
    if rule == "svgd":
        # (K g + (2/h)(K·1 ⊙ z - K z)) / n with one product over the long axis instead of two:
        # K (g - (2/h) z) + (2/h)(K·1) ⊙ z
        K, h = kernel_matrix(z, bandwidth)
        c = 2.0 / h
        return (K @ (g - c * z)).addcmul_(c * K.sum(-1, keepdim=True), z).div_(n)
    K, repulse, h = rbf_kernel(z, bandwidth)
    if rule == "gfsf":
        eye = torch.eye(n, dtype=K.dtype, device=K.device)
        return (g + torch.linalg.solve(K + 1e-6 * eye, repulse)) / n
    wsgld = _wsgld(z, g, K, repulse, h)
    if rule == "wsgld":
        return wsgld
    return 0.5 * (wsgld + (K @ g + repulse) / n)


def _wsgld(z: Tensor, g: Tensor, K: Tensor, repulse: Tensor, h: Tensor) -> Tensor:
    k = K.sum(1)  # [n] kernel density estimate (unnormalised) at each particle
    Kc = K / k.unsqueeze(0)  # K_ij / k_j
    cross = (2.0 / h) * (Kc.sum(1, keepdim=True) * z - Kc @ z)
    return g + repulse / k.unsqueeze(1) + cross
