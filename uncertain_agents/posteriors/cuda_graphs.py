"""Training steps replayed from a CUDA graph (CUDA only, on by default; falls back to eager steps).

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
``Posterior.graph_safe_step = True``. A step that needs one operation the graph cannot hold
(f-SVGD's ``torch.linalg.eigh``, whose error flag is read on the host) is written as a staged
generator (``Posterior.training_stages``) that yields that operation as an
:class:`EagerStage`: it is captured as two segments with the operation run eagerly between
their replays (one synchronisation per step instead of hundreds of launches).

It is on by default for those methods on CUDA (every ``fit``, agents and experiment scripts
included); ``fit(..., cuda_graph=False)`` or the
environment variable ``UNCERTAIN_AGENTS_CUDA_GRAPHS=0`` turns it off. A capture that fails
(an older torch that cannot capture the posterior's own generator, an operation that cannot
be captured) is reported once as a warning and the fit goes on eagerly. A replayed step draws
its random numbers from the posterior's generator at the same offsets as the eager step
would, so a graphed fit follows the eager fit with the same seed (the bandit runs above
ended with the same regret; floating-point results may differ in the last bits).
"""
from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generator

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .base import Posterior

ENV_VAR = "UNCERTAIN_AGENTS_CUDA_GRAPHS"
#: Eager steps of a phase before its capture (lazy initialisation — the optimiser's state,
#: cuBLAS workspaces, autograd's buffers — happens outside the graph).
WARMUP_STEPS = 3
#: Eager steps of a phase before its capture once the posterior has captured a step before (a
#: bandit refit): the lazy initialisation is done, but a fit on new data may still build a cache
#: keyed by its shapes (f-SVGD's prior-point index) on its first step, which must not happen
#: inside a capture. One warm-up instead of three saves two eager steps of every 100-step refit.
REFIT_WARMUP_STEPS = 1


def cuda_graph_status(post: "Posterior") -> dict:
    """``{"captures": n, "failure": text or None}``: how many training steps ``post`` has captured in
    CUDA graphs so far, and why its last capture failed (after a failure it trains eagerly). A
    diagnostic for profiles and tests; a CPU posterior reports ``{"captures": 0, "failure": None}``."""
    return {"captures": getattr(post, "_cuda_graph_captures", 0), "failure": getattr(post, "_cuda_graph_failure", None)}


def warmup_steps(post: "Posterior") -> int:
    """Eager steps before this phase's capture: :data:`WARMUP_STEPS` until the posterior's first
    capture, :data:`REFIT_WARMUP_STEPS` after it."""
    return REFIT_WARMUP_STEPS if getattr(post, "_cuda_graph_captures", 0) else WARMUP_STEPS


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
    if getattr(post, "optimizer", "adam") == "adam" and getattr(post, "lr_decay", 0.0):
        # fused Adam takes its rate as a number, fixed in a capture; RMSProp's is a device tensor
        return "Adam is graphed at a constant learning rate only (this posterior sets lr_decay; RMSProp decays in graphs)"
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return f"torch {torch.__version__} cannot capture a posterior's own generator in a CUDA graph"
    if not hasattr(torch.cuda, "MemPool"):
        return f"torch {torch.__version__} has no torch.cuda.MemPool (a memory pool shared by a posterior's graphs)"
    return None


@dataclass
class EagerStage:
    """A piece of a staged training step that runs outside the graph, between two captured
    segments: ``fn(*inputs)`` returns one tensor, which the next segment reads (a host-side
    check such as ``torch.linalg.eigh``'s cannot be captured). ``inputs`` are the tensors the
    previous segment computed (and plain constants)."""

    fn: Callable[..., Tensor]
    inputs: tuple


def run_stages_eagerly(stages: Generator) -> dict[str, Tensor]:
    """Drive a staged step (a generator yielding :class:`EagerStage` s and returning the named
    losses) without graphs: each stage runs where it is yielded, so the operations and their
    order are those of the unstaged step."""
    value = None
    while True:
        try:
            request = stages.send(value)
        except StopIteration as stop:
            return stop.value
        value = request.fn(*request.inputs)


def _advance(stages: Generator, value: Tensor | None) -> tuple[EagerStage | None, dict | None]:
    try:
        return stages.send(value), None
    except StopIteration as stop:
        return None, stop.value


def _end_failed_capture(graph: "torch.cuda.CUDAGraph") -> None:
    """End a capture whose step raised (the step's error is the one reported)."""
    try:
        graph.capture_end()
    except Exception:  # noqa: BLE001 — an invalidated capture fails to end; the step's error stands
        pass


class GraphedStep:
    """One training step captured as CUDA-graph segments, for minibatches of a fixed size
    drawn from fixed data; constructing it also runs the step once (on ``index_like``).

    A plain step is one segment. A staged step (``step`` returns a generator, see
    :func:`run_stages_eagerly`) is one segment per stretch between its :class:`EagerStage` s,
    captured into one memory pool; a replay runs segment, stage, segment, ..., the stage's
    result copied into the tensor the next segment was captured reading.

    Args:
        step: ``step(index[B])`` -> ``{name: scalar tensor}`` or a staged generator; the eager
            step on the rows ``index`` (it gathers them itself, so the gather is captured too).
        index_like: ``[B]`` a minibatch index of the size every replay will use.
        generator: the posterior's generator on the device (registered with every segment, so
            every replay draws fresh numbers from it, at the offsets an eager step would use).
        pool: the memory pool the segments allocate from (default: a new one). Captures of one
            posterior share its pool (:func:`graph_pool`): the memory of a graph dropped at the end
            of a fit is reused by the next fit's capture. (A pool per capture is released to the
            device only by ``torch.cuda.empty_cache`` or an out-of-memory retry, and the retry is
            skipped while any thread captures: measured on an H200, a 50,000-decision bandit table
            filled 126 GiB with the pools of earlier refits, docs/speed.md.)
        side_stream: the stream to capture on when the current one is the default stream (which
            cannot capture); a posterior passes its own (:func:`graph_side_stream`), since the
            allocator reuses a pool's freed blocks only on the stream that freed them.
    """

    def __init__(self, step: Callable[[Tensor], dict[str, Tensor] | Generator], index_like: Tensor,
                 generator: torch.Generator, pool: "torch.cuda.MemPool | None" = None,
                 side_stream: "torch.cuda.Stream | None" = None):
        self.index = torch.empty_like(index_like)
        self.index.copy_(index_like)
        self.segments: list[tuple[torch.cuda.CUDAGraph, EagerStage | None, Tensor | None]] = []
        device = index_like.device
        pool = (torch.cuda.MemPool() if pool is None else pool).id
        # Capture in "thread_local" mode on this thread's stream, ordered after its own work only:
        # other threads (runs side by side, agents/experiment.py, each on its own stream) keep
        # launching, allocating and synchronising meanwhile. torch.cuda.graph would synchronise the
        # whole device, empty the allocator's cache and capture on one stream shared by every
        # thread. A capture cannot run on the default stream: from there it uses a side stream.
        home = torch.cuda.current_stream(device)
        if home != torch.cuda.default_stream(device):
            side = home
        else:
            side = torch.cuda.Stream(device) if side_stream is None else side_stream
        side.wait_stream(home)
        stages, value, outputs = None, None, None
        with torch.cuda.stream(side):
            while True:
                graph = torch.cuda.CUDAGraph()
                graph.register_generator_state(generator)  # before the capture begins
                graph.capture_begin(pool, capture_error_mode="thread_local")
                try:
                    if stages is None:
                        first = step(self.index)
                        if inspect.isgenerator(first):
                            stages = first
                            request, outputs = _advance(stages, None)
                        else:
                            request, outputs = None, first
                    else:
                        request, outputs = _advance(stages, value)
                except BaseException:
                    _end_failed_capture(graph)
                    raise
                graph.capture_end()
                graph.replay()  # a capture records without running: run this segment of the step now
                if request is None:
                    self.segments.append((graph, None, None))
                    break
                value = request.fn(*request.inputs)  # eagerly, on the values the segment computed
                self.segments.append((graph, request, value))
        home.wait_stream(side)
        self.outputs = outputs

    def __call__(self, index: Tensor) -> dict[str, Tensor]:
        """Run the captured step on the rows ``index[B]``; returns its (reused) outputs."""
        self.index.copy_(index)
        for graph, request, value in self.segments:
            graph.replay()
            if request is not None:
                value.copy_(request.fn(*request.inputs))
        return self.outputs


def graph_pool(post: "Posterior") -> "torch.cuda.MemPool":
    """The posterior's memory pool for its CUDA graphs, created at its first capture and shared by
    all of them (a fit's graph is held until the next fit has captured, :func:`try_capture`; the
    blocks it freed while capturing are reused by that capture)."""
    pool = getattr(post, "_cuda_graph_pool", None)
    if pool is None:
        pool = torch.cuda.MemPool()
        post._cuda_graph_pool = pool
    return pool


def graph_side_stream(post: "Posterior") -> "torch.cuda.Stream":
    """The stream a posterior captures on when its fit runs on the default stream: one per
    posterior, so every capture reuses the pool memory the previous one freed."""
    stream = getattr(post, "_cuda_graph_stream", None)
    if stream is None:
        stream = torch.cuda.Stream(post.device)
        post._cuda_graph_stream = stream
    return stream


def try_capture(post: "Posterior", step: Callable[[Tensor], dict[str, Tensor] | Generator], index: Tensor,
                generator: torch.Generator) -> GraphedStep | None:
    """A :class:`GraphedStep` (which has run this step: its ``outputs``), or None (with a
    warning, once per posterior) if capture fails; the posterior then trains eagerly for the
    rest of its life (a staged step may have run its first segments: the caller reruns the
    step eagerly, which only draws again)."""
    entry_stream = torch.cuda.current_stream(post.device)
    try:
        graphed = GraphedStep(step, index, generator, pool=graph_pool(post), side_stream=graph_side_stream(post))
        post._cuda_graph_captures = getattr(post, "_cuda_graph_captures", 0) + 1  # a diagnostic count
        # Hold the newest graph until the next capture has begun: PyTorch's pinned-host allocator
        # counts the graphs alive in a pool and (torch 2.11) asserts when a capture begins into a pool
        # whose count fell to zero — the previous fit's graph dropped before this fit captured, which
        # also leaves the device allocator and the generator mid-capture (measured on an H100: every
        # refit after the first failed). Its memory is the pool's, reused by the next capture anyway.
        post._cuda_graph_latest = graphed
        return graphed
    except Exception as err:  # noqa: BLE001 — any capture failure means: train eagerly
        post._cuda_graph_failure = f"{type(err).__name__}: {err}"
        # a capture that raised may leave its side stream current
        torch.cuda.set_stream(entry_stream)
        entry_stream.synchronize()
        warnings.warn(f"{post.name}: capturing its training step in a CUDA graph failed ({post._cuda_graph_failure}); "
                      f"training eagerly", RuntimeWarning, stacklevel=3)
        return None
