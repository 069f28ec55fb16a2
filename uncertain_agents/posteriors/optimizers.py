"""The optimisers a posterior can train with, and the inverse-time learning-rate decay.

Every method trains with Adam unless its ``optimizer`` option says otherwise:

* ``"adam"`` (default): PyTorch's fused Adam (:func:`make_adam`), its default betas and eps.
* ``"rmsprop"``: RMSProp as TensorFlow 1's ``tf.train.RMSPropOptimizer`` runs it with its
  defaults — mean-square decay 0.9, no momentum, epsilon 1e-10 and, unlike PyTorch's, the
  mean square of every parameter *started at 1* rather than 0 (:class:`TFRMSProp`). This is
  the optimiser of Riquelme, Tucker & Snoek's (2018) bandit networks (their ``BootRMS`` and
  ``RMS`` agents, also the baselines of Wang et al. 2019). Started at 0, the first step moves
  every parameter by about ``lr / sqrt(1 − 0.9) ≈ 3.2 lr`` whatever its gradient (0.32 at
  their ``lr = 0.1``); started at 1, small gradients make small first steps.

``lr_decay`` (a posterior option, default 0) divides the learning rate by
``1 + lr_decay · t``, ``t`` being the training steps the posterior has taken over all its fits
before this one (:func:`decayed_lr`): TensorFlow's ``inverse_time_decay(lr, global_step, 1,
lr_decay)``, the schedule of the same bandit code, where the global step is never reset
between refits.

On CUDA the learning rate of :class:`TFRMSProp` is a device tensor and its step is capturable, so
a CUDA graph of a training step (:mod:`.cuda_graphs`) reads the current rate at every replay and
the decay (a new rate every step) is replayed too; :func:`set_group_lr` writes a rate in place.
On CPU it is a Python float, as before.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .fused_adam import DirectFusedAdam, direct_fused_adam_available

#: Names accepted by a posterior's ``optimizer`` option.
OPTIMIZERS: tuple[str, ...] = ("adam", "rmsprop")
#: TensorFlow 1 RMSProp's defaults (``decay``, ``epsilon``) and its initial mean square.
TF_RMSPROP_DECAY = 0.9
TF_RMSPROP_EPS = 1e-10
TF_RMSPROP_INITIAL_MEAN_SQUARE = 1.0


def check_optimizer(name) -> str:
    """``name`` as a valid optimiser name, or ``ValueError`` naming the ``optimizer`` option."""
    if not isinstance(name, str) or name.strip().lower() not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}, got {name!r}")
    return name.strip().lower()


def check_lr_decay(value) -> float:
    """``lr_decay`` as a finite float ≥ 0, or ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= float(value) < float("inf")):
        raise ValueError(f"lr_decay must be a finite number >= 0 (0: no decay), got {value!r}")
    return float(value)


def decayed_lr(lr: float, lr_decay: float, steps_before: int) -> float:
    """The inverse-time decayed learning rate ``lr / (1 + lr_decay · steps_before)``."""
    return lr / (1.0 + lr_decay * steps_before)


def set_group_lr(param_group: dict, lr: float) -> None:
    """Set an optimiser param group's learning rate: written in place where it is a tensor (a
    CUDA :class:`TFRMSProp`'s, which a captured step reads at every replay), else replaced."""
    current = param_group["lr"]
    if isinstance(current, Tensor):
        current.fill_(lr)
    else:
        param_group["lr"] = lr


class TFRMSProp(torch.optim.RMSprop):
    """RMSProp with TensorFlow 1's defaults: ``alpha`` (decay) 0.9, ``eps`` 1e-10, no momentum,
    and the mean square started at 1 (PyTorch starts it at 0). PyTorch adds ``eps`` outside the
    square root and TensorFlow inside it; at 1e-10 the two differ only for a parameter whose
    gradients are all but zero."""

    def __init__(self, params, lr: float):
        params = list(params)
        # On CUDA: the rate as a device tensor and the step capturable (foreach kernels, the step
        # count on the device), so that a CUDA graph of the training step reads the rate of every
        # replay (the inverse-time decay changes it every step). On CPU: a float, as before.
        on_cuda = bool(params) and all(p.device.type == "cuda" for p in params)
        if on_cuda:
            lr = torch.tensor(float(lr), dtype=params[0].dtype, device=params[0].device)
        super().__init__(params, lr=lr, alpha=TF_RMSPROP_DECAY, eps=TF_RMSPROP_EPS,
                         capturable=on_cuda, foreach=True if on_cuda else None)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if p.grad is not None and len(state) == 0:  # fresh (or cleared) state: TF's start
                    step_device = p.device if group["capturable"] else "cpu"
                    state["step"] = torch.zeros((), dtype=torch.float32, device=step_device)
                    state["square_avg"] = torch.full_like(p, TF_RMSPROP_INITIAL_MEAN_SQUARE,
                                                          memory_format=torch.preserve_format)
        return super().step(closure)


def load_optimizer_machinery() -> None:
    """Build and drop one optimiser, once per process: ``torch.optim.Optimizer.__init__`` imports
    ``torch._dynamo`` on its first call (1–2 s on a CPU). The runners that time fits (UCI splits,
    bandit runs, toys, attack training) call this before their first timer starts, so that the
    first method of a table is not charged a one-off import (a grid's first `mfvi` cell read 2.7 s
    against 0.1 s of fitting, session 39)."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def make_adam(params, lr: float) -> torch.optim.Optimizer:
    """Adam with PyTorch's fused kernel where the parameters allow it (float tensors on CPU
    or CUDA: one kernel for all of them, about 10× faster than the default per-tensor loop
    on CPU for the ~300k parameters of AADM), called directly on plain steps
    (:class:`~uncertain_agents.posteriors.fused_adam.DirectFusedAdam`: the same update without
    ``torch.optim``'s per-step bookkeeping), else the default implementation."""
    params = list(params)
    fusable = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    if fusable:
        try:
            if direct_fused_adam_available():
                return DirectFusedAdam(params, lr=lr)
            return torch.optim.Adam(params, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.Adam(params, lr=lr)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """The optimiser ``name`` (:data:`OPTIMIZERS`) over ``params`` at learning rate ``lr``."""
    name = check_optimizer(name)
    if name == "rmsprop":
        return TFRMSProp(list(params), lr=lr)
    return make_adam(params, lr)
