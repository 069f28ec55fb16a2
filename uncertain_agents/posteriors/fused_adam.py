"""``DirectFusedAdam``: ``torch.optim.Adam(fused=True)`` whose plain steps call the fused kernel
directly.

A posterior's step on a small network is a millisecond or two on CPU, and about 100 µs of
it went to the bookkeeping around the fused kernel in ``torch.optim.Adam.step`` (the
kernel itself takes about 20 µs for the 44k parameters of ``mfvi`` on the bandit network).
This subclass keeps the optimiser, its state and its ``state_dict`` exactly those of
``torch.optim.Adam(fused=True)`` and, for the case the library uses (one parameter group,
no closure, no AMSGrad / weight decay / maximise, a float learning rate, the parameters
with a gradient on one device and dtype with their state already created; those without a
gradient are skipped, as the stock step skips them), makes the same two calls
the stock step ends in: ``torch._foreach_add_`` on the step counts and ``torch._fused_adam_``.
Anything else (including the first step, which creates the state) goes through
``torch.optim.Adam.step``. The update is bit-identical to the stock optimiser's
(``tests/test_fused_kernels.py``).
"""
from __future__ import annotations

import torch
from torch import Tensor


class DirectFusedAdam(torch.optim.Adam):
    """``torch.optim.Adam(params, lr=lr, fused=True)`` with a direct call of the fused kernel
    on plain steps (see the module docstring)."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr, fused=True)

    def _direct_lists(self) -> tuple[list[Tensor], ...] | None:
        """``(params, grads, exp_avgs, exp_avg_sqs, steps)`` when the direct call applies."""
        if len(self.param_groups) != 1:
            return None
        group = self.param_groups[0]
        if (group.get("amsgrad") or group.get("maximize") or group.get("weight_decay", 0) != 0
                or group.get("differentiable") or group.get("capturable") or group.get("decoupled_weight_decay")
                or isinstance(group["lr"], Tensor) or isinstance(group["betas"][0], Tensor)
                or isinstance(group["betas"][1], Tensor) or getattr(self, "grad_scale", None) is not None
                or getattr(self, "found_inf", None) is not None):
            return None
        # parameters without a gradient are skipped, as the stock step skips them (a point
        # estimate's unused likelihood noise, for instance)
        params = [p for p in group["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        if not params or any(g.is_sparse for g in grads):
            return None
        device, dtype = params[0].device, params[0].dtype
        if any(p.device != device or p.dtype != dtype or p.is_complex() for p in params):
            return None
        states = [self.state.get(p) for p in params]
        if any(not s for s in states):
            return None
        return (params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states])

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            return super().step(closure)
        lists = self._direct_lists()
        if lists is None:
            return super().step()
        params, grads, exp_avgs, exp_avg_sqs, steps = lists
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
                           beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"], maximize=False,
                           grad_scale=None, found_inf=None)
        return None


def direct_fused_adam_available() -> bool:
    """True when this torch has the fused Adam kernel this optimiser calls."""
    return hasattr(torch, "_fused_adam_")
