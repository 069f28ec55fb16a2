"""``local_reparam_linear``: one dense layer of mean-field VI with the local
reparameterisation trick (Kingma, Salimans & Welling 2015), with a hand-written backward.

Forward, for inputs ``h[B, i]``, weight means/variances ``M, V [i, o]``, bias means/variances
``b_m, b_v [o]`` and standard-normal noise ``ε[B, o]``::

    out = h M + b_m + sqrt(h² V + b_v) ⊙ ε

Backward, with ``g = ∂L/∂out`` and ``g_v = g ⊙ ε / (2 sd)`` (the gradient reaching the
pre-activation variance; computed as ``2 g_v`` with the factor ½ applied to the small
weight-shaped results)::

    ∂M = hᵀ g,  ∂b_m = Σ_B g,  ∂V = (h²)ᵀ g_v,  ∂b_v = Σ_B g_v,  ∂h = g Mᵀ + 2 h ⊙ (g_v Vᵀ)

Autograd computes the same from the composed ops (square, addmm, sqrt, addcmul) but with
about three times as many elementwise passes over ``[B, o]`` tensors in the backward, which
on CPU is a large share of an ``mfvi`` step (docs/speed.md).
"""
from __future__ import annotations

import torch
from torch import Tensor


class _LocalReparamLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, w_mean: Tensor, b_mean: Tensor, w_var: Tensor, b_var: Tensor,
                eps: Tensor) -> Tensor:
        h_sq = h.square()
        sd = torch.addmm(b_var, h_sq, w_var).sqrt_()
        out = torch.addmm(b_mean, h, w_mean).addcmul_(sd, eps)
        # eps / sd = 2 g_v / g; the factor 1/2 is applied to the small weight-shaped results
        # (a power of two: the same bits as scaling the [B, o] tensor, one pass fewer)
        eps_over_sd = eps.div(sd)
        ctx.save_for_backward(h, h_sq, w_mean, w_var, eps_over_sd)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        h, h_sq, w_mean, w_var, eps_over_sd = ctx.saved_tensors
        g_var_twice = g * eps_over_sd
        grad_h = None
        if ctx.needs_input_grad[0]:
            grad_h = torch.mm(g, w_mean.t()).addcmul_(h, torch.mm(g_var_twice, w_var.t()))
        grad_w_mean = torch.mm(h.t(), g) if ctx.needs_input_grad[1] else None
        grad_b_mean = g.sum(0) if ctx.needs_input_grad[2] else None
        grad_w_var = torch.mm(h_sq.t(), g_var_twice).mul_(0.5) if ctx.needs_input_grad[3] else None
        grad_b_var = g_var_twice.sum(0).mul_(0.5) if ctx.needs_input_grad[4] else None
        return grad_h, grad_w_mean, grad_b_mean, grad_w_var, grad_b_var, None


def local_reparam_linear(h: Tensor, w_mean: Tensor, b_mean: Tensor, w_var: Tensor, b_var: Tensor,
                         eps: Tensor) -> Tensor:
    """``h[B, i] -> [B, o]``: ``h M + b_m + sqrt(h² V + b_v) ⊙ ε`` (see the module docstring);
    ``eps[B, o]`` is not differentiated."""
    return _LocalReparamLinear.apply(h, w_mean, b_mean, w_var, b_var, eps)
