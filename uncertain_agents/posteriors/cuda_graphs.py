"""Training steps replayed from a CUDA graph (optional; CUDA only; falls back to eager steps).

A bandit refit trains a small network (117-100-100-2, batch 512) for 100–2,000 steps; on a
GPU each step is a few hundred kernels too small to fill the device, so its time is the
host's kernel launches. Measured on an H200 machine (docs/speed.md, "GPU"): an ``mfvi`` step
through ``fit`` 4.0 ms eager, 0.56 ms replayed from a graph; ``bb-alpha`` (K = 10) 4.4 → 0.64
ms; the first 1,000 decisions of an ``fsvgd-paper`` wheel trial with ``mfvi`` 69.6 s → 19.0 s,
with the same regret to the last digit. :class:`GraphedStep` captures one call of a method's
``training_step`` — minibatch gather, forward, backward, the fused Adam update, its random
draws from the posterior's generator — once per phase of a ``fit``, and replays it for the
phase's remaining steps with a fresh minibatch index copied into its input buffer.

It applies to methods whose step is a fixed sequence of device work (no host reads of
device values, no Python branches on the step number), declared by
``Posterior.graph_safe_step = True``. It is on by default for those methods on CUDA (every
``fit``, agents and experiment scripts included); ``fit(..., cuda_graph=False)`` or the
environment variable ``UNCERTAIN_AGENTS_CUDA_GRAPHS=0`` turns it off. A capture that fails
(an older torch that cannot capture the posterior's own generator, an operation that cannot
be captured) is reported once as a warning and the fit goes on eagerly. A replayed step draws
its random numbers from the posterior's generator at the same offsets as the eager step
would, so a graphed fit follows the eager fit with the same seed (the bandit runs above
ended with the same regret; floating-point results may differ in the last bits).
"""
from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .base import Posterior

ENV_VAR = "UNCERTAIN_AGENTS_CUDA_GRAPHS"
#: Eager steps of a phase before its capture (lazy initialisation — the optimiser's state,
#: cuBLAS workspaces, autograd's buffers — happens outside the graph).
WARMUP_STEPS = 3


def cuda_graphs_requested(value: bool | None) -> bool:
    """``fit``'s ``cuda_graph`` argument, or (``None``) the environment variable's value
    (on unless it is 0 / false / no / off)."""
    if value is not None:
        if not isinstance(value, bool):
            raise TypeError(f"cuda_graph must be True, False or None, got {value!r}")
        return value
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def graph_unavailable_reason(post: "Posterior") -> str | None:
    """Why ``post``'s steps cannot be graphed here (None when they can)."""
    if post.device.type != "cuda":
        return f"CUDA graphs need a CUDA posterior (this one is on {post.device})"
    if not getattr(post, "graph_safe_step", False):
        return f"{post.name} does not declare a graph-safe training step"
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return f"torch {torch.__version__} cannot capture a posterior's own generator in a CUDA graph"
    return None


class GraphedStep:
    """One captured ``training_step`` on minibatches of a fixed size drawn from fixed data.

    Args:
        step: ``step(index[B]) -> {name: scalar tensor}``, the eager step on the rows
            ``index`` (it gathers them itself, so the gather is captured too).
        index_like: ``[B]`` a minibatch index of the size every replay will use.
        generator: the posterior's generator on the device (registered with the graph, so
            every replay draws fresh numbers from it).
    """

    def __init__(self, step: Callable[[Tensor], dict[str, Tensor]], index_like: Tensor,
                 generator: torch.Generator):
        self.index = torch.empty_like(index_like)
        self.index.copy_(index_like)
        self.graph = torch.cuda.CUDAGraph()
        self.graph.register_generator_state(generator)  # before the capture begins
        torch.cuda.synchronize(index_like.device)  # the eager warm-up steps have finished
        with torch.cuda.graph(self.graph):
            self.outputs = step(self.index)

    def __call__(self, index: Tensor) -> dict[str, Tensor]:
        """Run the captured step on the rows ``index[B]``; returns its (reused) outputs."""
        self.index.copy_(index)
        self.graph.replay()
        return self.outputs


def try_capture(post: "Posterior", step: Callable[[Tensor], dict[str, Tensor]], index: Tensor,
                generator: torch.Generator) -> GraphedStep | None:
    """A :class:`GraphedStep`, or None (with a warning, once per posterior) if capture fails;
    the posterior then trains eagerly for the rest of its life."""
    entry_stream = torch.cuda.current_stream(post.device)
    try:
        graphed = GraphedStep(step, index, generator)
        post._cuda_graph_captures = getattr(post, "_cuda_graph_captures", 0) + 1  # a diagnostic count
        return graphed
    except Exception as err:  # noqa: BLE001 — any capture failure means: train eagerly
        post._cuda_graph_failure = f"{type(err).__name__}: {err}"
        # a capture that raised may leave its side stream current (torch restores it only
        # when the capture ends cleanly)
        torch.cuda.set_stream(entry_stream)
        torch.cuda.synchronize(post.device)
        warnings.warn(f"{post.name}: capturing its training step in a CUDA graph failed ({post._cuda_graph_failure}); "
                      f"training eagerly", RuntimeWarning, stacklevel=3)
        return None
