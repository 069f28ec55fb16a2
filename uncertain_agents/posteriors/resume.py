"""The training state a saved posterior carries, so that a loaded one resumes training exactly.

``Posterior.save`` writes, beside the parameters and buffers, the state of every optimiser (Adam's
or RMSProp's moments and step counts, per optimiser group) and of the posterior's own training
generator (the stream of minibatch indices and of every training and sampling draw made without an
explicit ``generator``). ``load_posterior`` restores both: the optimisers' states wait in
:class:`~.training.OptimizerSet` until the first ``fit`` builds the optimisers on the posterior's
device, and a generator state waits until the posterior first asks for its generator on a device
of the same type. So ``fit`` after ``load_posterior`` continues as ``fit`` would have continued on
the saved posterior: to the bit on the CPU (tested for every method), to rounding on CUDA (the loaded
posterior captures its step's graph after its own warm-up steps). Files without
this entry (saved before it, or before any fit) load as before, with fresh optimisers and the
stream restarted from ``seed``.

Layout (all plain containers and CPU tensors, read with ``weights_only=True``)::

    {"optimizers": {group: optimizer.state_dict()}, "generators": {device type: generator state}}
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .base import Posterior


def _to_cpu(value: Any) -> Any:
    """``value`` with every tensor in it (nested dicts, lists, tuples) copied to the host."""
    if isinstance(value, Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def training_state(post: "Posterior") -> dict | None:
    """What :func:`restore_training_state` needs, or ``None`` for a posterior that has neither
    optimisers nor a generator yet (nothing to resume: a fresh posterior's load is already exact)."""
    optimizers = post.optimizer_set.optimizers
    generators = {torch.device(key).type: g.get_state() for key, g in post._generators.items()}
    own = post._generators.get(str(post.device))
    if own is not None:  # two generators of one device type (cuda:0 and cuda:1): the posterior's own wins
        generators[post.device.type] = own.get_state()
    # a state not yet claimed by a generator (loaded, then saved again before any use) is kept
    generators = {**post._pending_generator_states, **generators}
    pending = post.optimizer_set.pending
    if not optimizers and not generators and not pending:
        return None
    saved = {name: opt.state_dict() for name, opt in optimizers.items()} if optimizers else dict(pending)
    return {"optimizers": _to_cpu(saved), "generators": _to_cpu(generators)}


#: The per-parameter state entries each optimiser kind (``Posterior.optimizer``) steps with, besides
#: ``"step"``; ``"exp_avg_sq"`` and ``"square_avg"`` are mean squares (never negative).
_MOMENTS = {"adam": ("exp_avg", "exp_avg_sq"), "rmsprop": ("square_avg",)}
_SQUARES = ("exp_avg_sq", "square_avg")
#: Sizes of a CUDA generator's state (seed and Philox offset; torch also reads the seed alone).
_CUDA_GENERATOR_STATE_SIZES = (8, 16)


def _checked_moments(group: str, kind: str, params: list[Tensor], state: Any) -> dict[int, dict[str, Tensor]]:
    """The saved per-parameter ``state`` of optimiser ``group`` as the optimiser will read it — parameter
    indices into ``params`` (the group's parameters in the optimiser's order), each entry empty or holding
    ``"step"`` (a scalar) and the moments of :data:`_MOMENTS` (the parameter's shape), all finite — with every
    tensor copied contiguous, or ``ValueError`` naming the first entry that is not. The fused kernels read
    these tensors as dense arrays of their parameter's size: a wrong shape or an overlapping (expanded) view
    would make them read and write outside the tensor."""
    where = f"the saved state of optimiser group {group!r}"
    if not isinstance(state, dict):
        raise ValueError(f"{where} is not a {{parameter index: moments}} table")
    required = ("step", *_MOMENTS.get(kind, ()))
    checked: dict[int, dict[str, Tensor]] = {}
    for index, entry in state.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(params):
            raise ValueError(f"{where} names parameter {index!r}; the group has parameters 0..{len(params) - 1}")
        if not isinstance(entry, dict) or not all(isinstance(k, str) and isinstance(v, Tensor)
                                                  for k, v in entry.items()):
            raise ValueError(f"{where} for parameter {index} is not a {{name: tensor}} table")
        if entry and not set(required) <= set(entry):
            raise ValueError(f"{where} for parameter {index} holds {sorted(entry)}, not {sorted(required)} "
                             f"({kind})")
        for key, value in entry.items():
            if not value.is_floating_point():
                raise ValueError(f"{where}: {key!r} of parameter {index} is not a floating-point tensor")
            if key == "step":
                if value.dim() != 0:
                    raise ValueError(f"{where}: 'step' of parameter {index} is not a scalar")
            elif value.shape != params[index].shape:
                raise ValueError(f"{where}: {key!r} of parameter {index} has shape {tuple(value.shape)}, "
                                 f"the parameter {tuple(params[index].shape)}")
            if not bool(torch.isfinite(value).all()) or ((key == "step" or key in _SQUARES)
                                                         and bool((value < 0).any())):
                raise ValueError(f"{where}: {key!r} of parameter {index} holds NaN, infinite or negative values")
        checked[index] = {key: value.clone(memory_format=torch.contiguous_format) for key, value in entry.items()}
    return checked


def _check_generators(generators: dict) -> None:
    """``ValueError`` for a generator entry that no generator could take: a key that is not a device type,
    a CPU state that a CPU generator refuses, a CUDA state of the wrong size."""
    for key, state in generators.items():
        try:
            valid_key = torch.device(key).type == key
        except RuntimeError:
            valid_key = False
        if not valid_key:
            raise ValueError(f"the saved generator states name {key!r}, which is not a device type")
        if not state.is_contiguous():
            raise ValueError(f"the saved {key} generator state is not a contiguous byte tensor")
    cpu_generator = generators.get("cpu")
    if cpu_generator is not None:
        try:
            torch.Generator().set_state(cpu_generator)
        except RuntimeError as err:
            raise ValueError(f"the saved CPU generator state is invalid: {err}") from None
    cuda_generator = generators.get("cuda")
    if cuda_generator is not None and cuda_generator.numel() not in _CUDA_GENERATOR_STATE_SIZES:
        raise ValueError(f"the saved CUDA generator state is invalid: {cuda_generator.numel()} bytes, not 16")


def restore_training_state(post: "Posterior", saved: Any) -> None:
    """Give a freshly loaded ``post`` the ``saved`` training state (see the module docstring), or
    raise ``ValueError`` naming what does not fit it: the optimiser groups, their parameter groups
    (by loading each state into a throwaway optimiser of the posterior's groups) and every moment
    (:func:`_checked_moments`: the shapes and values the optimiser will step with) are checked now."""
    from .training import OptimizerSet

    if not isinstance(saved, dict) or set(saved) != {"optimizers", "generators"}:
        raise ValueError("the saved training state is not an {'optimizers', 'generators'} table")
    optimizers, generators = saved["optimizers"], saved["generators"]
    if not isinstance(generators, dict) or not all(isinstance(k, str) and isinstance(v, Tensor)
                                                   and v.dtype == torch.uint8 for k, v in generators.items()):
        raise ValueError("the saved generator states are not a {device type: byte tensor} table")
    if not isinstance(optimizers, dict) or not all(isinstance(k, str) and isinstance(v, dict)
                                                   for k, v in optimizers.items()):
        raise ValueError("the saved optimiser states are not a {group: state} table")
    pending = {}
    if optimizers:
        probe, _ = OptimizerSet().get(post, lr=1e-3)
        if set(probe) != set(optimizers):
            raise ValueError(f"the saved optimiser groups {sorted(optimizers)} are not this method's "
                             f"{sorted(probe)}")
        kind = getattr(post, "optimizer", "adam")
        for name, state in optimizers.items():
            params = [p for group in probe[name].param_groups for p in group["params"]]
            moments = _checked_moments(name, kind, params, state.get("state"))
            try:
                probe[name].load_state_dict(state)
            except (ValueError, KeyError, TypeError, RuntimeError, AttributeError) as err:
                raise ValueError(f"the saved state of optimiser group {name!r} does not fit: {err}") from None
            pending[name] = {**state, "state": moments}
    _check_generators(generators)
    post.optimizer_set.pending = pending
    post._pending_generator_states = dict(generators)
