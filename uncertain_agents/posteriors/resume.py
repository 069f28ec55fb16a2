"""The training state a saved posterior carries, so that a loaded one resumes training exactly.

``Posterior.save`` writes, beside the parameters and buffers, the state of every optimiser (Adam's
or RMSProp's moments and step counts, per optimiser group) and of the posterior's own training
generator (the stream of minibatch indices and of every training and sampling draw made without an
explicit ``generator``). ``load_posterior`` restores both: the optimisers' states wait in
:class:`~.training.OptimizerSet` until the first ``fit`` builds the optimisers on the posterior's
device, and a generator state waits until the posterior first asks for its generator on a device
of the same type. So ``fit`` after ``load_posterior`` continues as ``fit`` would have continued on
the saved posterior, to the bit on the same device type (tested for every method). Files without
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
    # a state not yet claimed by a generator (loaded, then saved again before any use) is kept
    generators = {**post._pending_generator_states, **generators}
    pending = post.optimizer_set.pending
    if not optimizers and not generators and not pending:
        return None
    saved = {name: opt.state_dict() for name, opt in optimizers.items()} if optimizers else dict(pending)
    return {"optimizers": _to_cpu(saved), "generators": _to_cpu(generators)}


def restore_training_state(post: "Posterior", saved: Any) -> None:
    """Give a freshly loaded ``post`` the ``saved`` training state (see the module docstring), or
    raise ``ValueError`` naming what does not fit it: the optimiser groups and their parameters are
    checked now, by loading each state into a throwaway optimiser of the posterior's groups."""
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
    if optimizers:
        probe, _ = OptimizerSet().get(post, lr=1e-3)
        if set(probe) != set(optimizers):
            raise ValueError(f"the saved optimiser groups {sorted(optimizers)} are not this method's "
                             f"{sorted(probe)}")
        for name, state in optimizers.items():
            try:
                probe[name].load_state_dict(state)
            except (ValueError, KeyError, TypeError, RuntimeError) as err:
                raise ValueError(f"the saved state of optimiser group {name!r} does not fit: {err}") from None
    cpu_generator = generators.get("cpu")
    if cpu_generator is not None:
        try:
            torch.Generator().set_state(cpu_generator)
        except RuntimeError as err:
            raise ValueError(f"the saved CPU generator state is invalid: {err}") from None
    post.optimizer_set.pending = dict(optimizers)
    post._pending_generator_states = dict(generators)
