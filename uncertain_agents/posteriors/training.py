"""The training protocol: what a method declares, and the one loop that runs it.

A method (a :class:`~uncertain_agents.posteriors.base.Posterior` subclass) declares

* its optimisers — :meth:`Posterior.optimizer_groups` returns named
  :class:`OptimizerGroup` s (parameters with a learning-rate multiple of ``fit``'s ``lr``);
  each group gets its own Adam, kept across warm-started refits;
* one training step — :meth:`Posterior.training_step` takes a :class:`Batch` and a
  :class:`TrainingContext` and returns named losses; the context is the only way a step
  touches an optimiser (:meth:`TrainingContext.minimize`,
  :meth:`TrainingContext.apply_gradients`, :meth:`TrainingContext.reset_optimizer`), so a
  group's optimiser moves only that group's parameters;
* its phases — :attr:`Posterior.phases`, a tuple of :class:`Phase` s that split a
  ``fit``'s steps (one phase ``"train"`` for most methods), each with its meaning for
  warm-started refits.

:func:`run_training` is the loop: minibatches that sweep shuffled epochs, divergence
checks, the progress bar and the per-name loss traces of :class:`FitResult`.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from .cuda_graphs import cuda_graphs_requested, graph_unavailable_reason, try_capture, warmup_steps
from .optimizers import decayed_lr, make_optimizer, set_group_lr
from .progress import ProgressBar

if TYPE_CHECKING:  # pragma: no cover
    from .base import Posterior

#: Name of the main objective in every method's named losses (``FitResult.losses``).
MAIN_LOSS = "loss"
REFIT_MODES = ("continue", "restart")


class TrainingDivergedError(RuntimeError):
    """Raised when training diverges: the loss or the parameters become NaN or infinite, or
    the loss blows up while staying finite (see :data:`BLOW_UP_FACTOR`). The posterior is
    first restored to its last finite state, so it stays usable."""


#: A finite blow-up: the per-data-point training loss exceeds ``BLOW_UP_FACTOR`` ×
#: max(1, |loss at the fit's first step|). Healthy fits only decrease their loss from the
#: first step (a large network on a few rows starts high, from its KL, and goes down); a
#: learning rate far too large sends it up by orders of magnitude while it is still finite.
BLOW_UP_FACTOR = 1e4

#: A blow-up of the function itself (regression): at a check, 4 sampled functions on up to
#: 64 training rows exceed ``OUTPUT_BOUND_FACTOR`` × max(1 + max |y|, their peak before the
#: fit's first step), in training units.
OUTPUT_BOUND_FACTOR = 100.0


@dataclass
class Batch:
    """A training minibatch in training units.

    Attributes:
        x: ``[B, in_dim]`` standardised inputs.
        y: ``[B, out]`` standardised targets (regression) or ``[B]`` long labels.
        mask: ``[B, out]`` float observation mask (``[B]`` for classification) or None.
        index: ``[B]`` row indices into the data passed to ``fit``.
        n_data: ``N``, the number of rows passed to ``fit`` (minibatch scaling).
        x_pool: ``[N, in_dim]`` all standardised inputs (methods that need extra
            points, such as f-SVGD, draw from it).
        y_pool: ``[N, out]`` (or ``[N]``) all training-unit targets, and
        mask_pool: ``[N, out]`` their float mask or None (methods that score held-out rows).
    """

    x: Tensor
    y: Tensor
    mask: Tensor | None
    index: Tensor
    n_data: int
    x_pool: Tensor = field(repr=False, default=None)
    y_pool: Tensor = field(repr=False, default=None)
    mask_pool: Tensor | None = field(repr=False, default=None)


@dataclass
class FitResult:
    """What :meth:`Posterior.fit` returns.

    Attributes:
        losses: ``[steps]`` the main per-data-point objective at every step (the trace
            named ``"loss"``).
        steps: number of training steps taken.
        seconds: wall time of the fit.
        traces: ``{name: [steps]}`` every named loss the method's step returned (the
            main objective included); a name a phase does not report is NaN there.
        phase_steps: ``{phase name: steps}`` how the steps were split between phases.
        phase_seconds: ``{phase name: seconds}`` wall time of each phase.
        diagnostics: whatever the method reported with :meth:`TrainingContext.report`
            (arrays, e.g. refined VI's ELBO staircase).
    """

    losses: np.ndarray
    steps: int
    seconds: float
    traces: dict[str, np.ndarray] = field(default_factory=dict)
    phase_steps: dict[str, int] = field(default_factory=dict)
    diagnostics: dict[str, np.ndarray] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def final_loss(self) -> float:
        """The main loss of the last step recorded."""
        return float(self.losses[-1])

    def summary(self) -> dict[str, float]:
        """Flat scalars for a results row: ``fit_seconds``, ``seconds_<phase>`` (when a method
        has several phases) and every scalar diagnostic."""
        out = {"fit_seconds": float(self.seconds)}
        if len(self.phase_seconds) > 1:
            out.update({f"seconds_{name}": float(s) for name, s in self.phase_seconds.items()})
        out.update({name: float(v) for name, v in self.diagnostics.items() if np.size(v) == 1})
        return out

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.traces))
        return (f"FitResult(steps={self.steps}, final_loss={self.final_loss:.4g}, "
                f"seconds={self.seconds:.2f}, traces=[{names}])")


@dataclass(frozen=True)
class OptimizerGroup:
    """Parameters updated by one Adam optimiser.

    Attributes:
        params: the parameters (each in exactly one group).
        lr_scale: the group's learning rate as a multiple of ``fit``'s ``lr``.
    """

    params: tuple[nn.Parameter, ...]
    lr_scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        if not self.params:
            raise ValueError("an optimizer group needs at least one parameter")
        if not (self.lr_scale > 0 and math.isfinite(self.lr_scale)):
            raise ValueError(f"lr_scale must be a positive finite number, got {self.lr_scale!r}")


@dataclass(frozen=True)
class Phase:
    """One stage of a method's training.

    Attributes:
        name: the phase's name (``TrainingContext.phase``; keys ``FitResult.phase_steps``).
        share: its fraction of a ``fit``'s steps (the shares of a method's phases without
            ``steps`` sum to 1).
        steps: steps run in addition to ``fit``'s ``steps`` (``share`` is then ignored), for
            stages with their own schedule (refined VI's refinement): a fixed number, or a
            function of ``fit``'s ``steps`` returning one.
        on_refit: what a warm-started refit does with the phase's state —
            ``"continue"`` trains on from where the last fit stopped; ``"restart"``
            rebuilds it from the earlier phases' result (the method does so in
            :meth:`Posterior.start_phase`).
        graph_safe: whether this phase's step may be captured in a CUDA graph when its method
            declares a graph-safe step (:attr:`Posterior.graph_safe_step`); False for a phase
            whose step changes its optimiser or branches on the host (refined VI's refinement),
            which then trains eagerly while the method's other phases are still replayed.
    """

    name: str
    share: float = 1.0
    on_refit: str = "continue"
    steps: int | Callable[[int], int] | None = None
    graph_safe: bool = True

    def __post_init__(self) -> None:
        if self.steps is not None and not callable(self.steps):
            _check_phase_steps(self.steps)
        if not (0.0 < self.share <= 1.0):
            raise ValueError(f"phase share must lie in (0, 1], got {self.share!r}")
        if self.on_refit not in REFIT_MODES:
            raise ValueError(f"on_refit must be one of {REFIT_MODES}, got {self.on_refit!r}")
        if not isinstance(self.graph_safe, bool):
            raise TypeError(f"graph_safe must be True or False, got {self.graph_safe!r}")


def split_steps(phases: tuple[Phase, ...], steps: int) -> list[int]:
    """Steps per phase: a phase with fixed ``steps`` gets them; the others share ``steps``,
    ``round(share·steps)`` each, the last of them taking the remainder."""
    shared = [p for p in phases if p.steps is None]
    if not shared or abs(sum(p.share for p in shared) - 1.0) > 1e-6:
        raise ValueError(f"phase shares must sum to 1, got {[p.share for p in shared]}")
    counts = [int(round(p.share * steps)) for p in shared[:-1]]
    counts = [min(c, steps - sum(counts[:i])) for i, c in enumerate(counts)]
    counts.append(steps - sum(counts))
    it = iter(counts)
    return [next(it) if p.steps is None else _check_phase_steps(p.steps(steps) if callable(p.steps) else p.steps)
            for p in phases]


def _check_phase_steps(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"phase steps must be a non-negative int or None, got {value!r}")
    return value


class TrainingContext:
    """What a training step may use: its optimisers, the generator and where training stands.

    Attributes:
        generator: the posterior's seeded generator.
        lr: ``fit``'s learning rate (a group's is ``lr · lr_scale``).
        step: index of the current step within this ``fit``; ``steps`` its total.
        phase: the current :class:`Phase`; ``phase_step`` / ``phase_steps`` the step
            within it and its length.
        steps_before: training steps taken by earlier fits (0 on the first fit), so
            ``steps_before + step`` counts every step this posterior has trained.
        refit: True when an earlier fit already trained this posterior.
        lr_decay: the posterior's inverse-time learning-rate decay (0: none), which
            :func:`run_training` applies to every group's rate before each step.
    """

    def __init__(self, optimizers: Mapping[str, torch.optim.Optimizer], groups: Mapping[str, OptimizerGroup],
                 generator: torch.Generator, lr: float, steps: int, steps_before: int, lr_decay: float = 0.0):
        self._optimizers = optimizers
        self._groups = groups
        self.generator = generator
        self.lr = lr
        self.steps = steps
        self.steps_before = steps_before
        self.refit = steps_before > 0
        self.step = 0
        self.phase: Phase | None = None
        self.phase_step = 0
        self.phase_steps = 0
        self.diagnostics: dict[str, np.ndarray] = {}
        self.lr_decay = float(lr_decay)
        # {group: rate} pinned by set_learning_rate: the base rate the decay scales from then on
        self._base_lrs: dict[str, float] = {}

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def _group(self, name: str) -> OptimizerGroup:
        if name not in self._groups:
            raise KeyError(f"no optimizer group {name!r}; this method declares {list(self._groups)}")
        return self._groups[name]

    def group_params(self, group: str = "main") -> tuple[nn.Parameter, ...]:
        """The parameters of optimiser group ``group``."""
        return self._group(group).params

    def minimize(self, loss: Tensor, group: str = "main") -> Tensor:
        """One optimiser step of ``group`` on ``loss``; only that group's parameters get
        gradients and move. Returns the detached loss."""
        params = self._group(group).params
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        self.apply_gradients(dict(zip(params, grads)), group)
        return loss.detach()

    def apply_gradients(self, grads: Mapping[nn.Parameter, Tensor | None], group: str = "main") -> None:
        """One optimiser step of ``group`` with the given gradients of its parameters
        (methods whose update is a direction rather than a loss, such as SVGD)."""
        members = {id(p) for p in self._group(group).params}
        for param in grads:
            if id(param) not in members:
                raise ValueError(f"a gradient was given for a parameter outside group {group!r}")
        for param in self._group(group).params:
            g = grads.get(param)
            param.grad = None if g is None else g.detach()
        self._optimizers[group].step()
        for param in self._group(group).params:
            param.grad = None

    def reset_optimizer(self, group: str = "main") -> None:
        """Forget ``group``'s Adam moments (a fresh optimiser, as at the first fit)."""
        self._optimizers[group].state.clear()

    def set_learning_rate(self, group: str, lr: float) -> None:
        """Set ``group``'s learning rate for the rest of this fit (schedules within a phase).

        With ``lr_decay > 0``, ``lr`` becomes the group's *base* rate in place of
        ``fit``'s ``lr · lr_scale``: the step now being taken and every later step of this fit
        use ``lr / (1 + lr_decay · t)``, ``t`` the steps trained so far (``steps_before + step``),
        so the decay scales a pinned rate instead of overwriting it. Without a decay the rate
        is ``lr`` itself."""
        self._group(group)
        lr = float(lr)
        self._base_lrs[group] = lr
        if self.lr_decay:
            lr = decayed_lr(lr, self.lr_decay, self.steps_before + self.step)
        for pg in self._optimizers[group].param_groups:
            set_group_lr(pg, lr)

    def report(self, name: str, value) -> None:
        """Hand a diagnostic (array-like) to ``FitResult.diagnostics[name]``."""
        self.diagnostics[name] = np.asarray(value.detach().cpu() if isinstance(value, Tensor) else value)


class OptimizerSet:
    """The named optimisers of a posterior (Adam, or the one its ``optimizer`` option names; see
    :mod:`.optimizers`), built from its groups and kept across refits."""

    def __init__(self) -> None:
        self.groups: dict[str, OptimizerGroup] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.device: torch.device | None = None
        #: ``{group: optimizer.state_dict()}`` of a loaded posterior (:mod:`.resume`), given to the
        #: optimisers when they are built
        self.pending: dict[str, dict] = {}

    def get(self, posterior: "Posterior", lr: float) -> tuple[dict[str, torch.optim.Optimizer],
                                                              dict[str, OptimizerGroup]]:
        if not self.optimizers or self.device != posterior.device:
            if self.optimizers and not self.pending:
                # the posterior was moved to another device: its moments move with it (rebuilt there below)
                self.pending = {name: opt.state_dict() for name, opt in self.optimizers.items()}
            self.groups = dict(posterior.optimizer_groups())
            seen: set[int] = set()
            for name, group in self.groups.items():
                for p in group.params:
                    if id(p) in seen:
                        raise ValueError(f"{posterior.name}: a parameter appears in two optimizer groups "
                                         f"(second: {name!r})")
                    seen.add(id(p))
            kind = getattr(posterior, "optimizer", "adam")
            self.optimizers = {name: make_optimizer(kind, g.params, lr * g.lr_scale) for name, g in self.groups.items()}
            self.device = posterior.device
            for name, saved in self.pending.items():
                # the saved moments and step counts; the hyper-parameters stay as built for this device
                optimizer = self.optimizers[name]
                optimizer.load_state_dict({"state": saved["state"],
                                           "param_groups": optimizer.state_dict()["param_groups"]})
            self.pending = {}
        for name, group in self.groups.items():
            for pg in self.optimizers[name].param_groups:
                set_group_lr(pg, lr * group.lr_scale)
        return self.optimizers, self.groups


class _TrialIndexStream:
    """:class:`_IndexStream` for ``R`` trials at once: ``take(b)`` gives ``[R, b]``, every trial
    sweeping its own shuffled epochs (one batched shuffle for all trials)."""

    def __init__(self, trials: int, n: int, generator: torch.Generator, device):
        self.trials, self.n, self.generator, self.device = trials, n, generator, device
        self.buffer = torch.empty(trials, 0, dtype=torch.long, device=device)

    def take(self, b: int) -> Tensor:
        if self.buffer.shape[1] < b:
            keys = torch.rand(self.trials, self.n, generator=self.generator, device=self.device)
            self.buffer = torch.cat([self.buffer, keys.argsort(dim=1)], dim=1)
        idx, self.buffer = self.buffer[:, :b], self.buffer[:, b:]
        return idx


def _gather_rows(data: Tensor | None, idx: Tensor) -> Tensor | None:
    """Rows ``idx`` of ``data``: ``[N, ...]`` with ``idx[B]``, or per trial ``[R, N, ...]`` with ``idx[R, B]``."""
    if data is None:
        return None
    if idx.dim() == 1:
        return data.index_select(0, idx)  # a row gather ~5× faster than advanced indexing on CPU
    index = idx.view(*idx.shape, *([1] * (data.dim() - 2))).expand(*idx.shape, *data.shape[2:])
    return data.gather(1, index)


class _IndexStream:
    """Minibatch indices that sweep shuffled epochs without a partial last batch."""

    def __init__(self, n: int, generator: torch.Generator, device):
        self.n, self.generator, self.device = n, generator, device
        self.buffer = torch.empty(0, dtype=torch.long, device=device)

    def take(self, b: int) -> Tensor:
        if self.buffer.numel() < b:
            fresh = torch.randperm(self.n, generator=self.generator, device=self.device)
            self.buffer = torch.cat([self.buffer, fresh])
        idx, self.buffer = self.buffer[:b], self.buffer[b:]
        return idx


def run_training(post: "Posterior", xs: Tensor, ys: Tensor, mask: Tensor | None, *, steps: int,
                 batch_size: int, lr: float, progress: bool, cuda_graph: bool | None = None) -> FitResult:
    """Run ``steps`` training steps of ``post`` on training-unit data (the loop of ``fit``).

    Args:
        xs: ``[N, in_dim]`` standardised inputs; ys: ``[N, out]`` or ``[N]`` targets;
        mask: ``[N, out]`` / ``[N]`` float mask or None.
        cuda_graph: replay each phase's steps from a CUDA graph after
            a few eager ones (:func:`~.cuda_graphs.warmup_steps`, :mod:`.cuda_graphs`); ``None``
            follows ``UNCERTAIN_AGENTS_CUDA_GRAPHS`` (on unless it is 0).
    """
    trials = getattr(post, "n_trials", None)  # a trial-batched posterior (posteriors/trials.py): [R, N, ...] data
    n = xs.shape[0] if trials is None else xs.shape[1]
    post.prepare_data(n)
    bs = min(batch_size, n)
    gen = post.generator()
    optimizers, groups = post.optimizer_set.get(post, lr)
    steps_before = int(post.steps_trained)
    lr_decay = float(getattr(post, "lr_decay", 0.0))
    ctx = TrainingContext(optimizers, groups, gen, lr, steps, steps_before, lr_decay)
    phases = tuple(post.phases)
    counts = split_steps(phases, steps)
    total = sum(counts)
    traces: dict[str, Tensor] = {}
    stream = _IndexStream(n, gen, post.device) if trials is None else _TrialIndexStream(trials, n, gen, post.device)
    t0 = time.perf_counter()
    post.train()
    bar = ProgressBar.create(progress, total, f"fit {post.name}")
    step = 0
    phase_seconds: dict[str, float] = {}
    # the last state known to be sound, restored if training diverges: the state at the start,
    # then each check's state once the next check's loss (computed from it) has passed
    snapshot, candidate = _snapshot(post), None
    # steps of this fit behind the snapshot and the candidate (steps_trained after a restore)
    snapshot_steps, candidate_steps = 0, 0
    restored_steps: int | None = None
    first_loss: float | None = None
    checked = 0  # steps whose losses the divergence checks have looked at
    output_bound = _output_bound(post, xs, ys)
    graphs = _graphs_wanted(post, cuda_graph)

    def step_on(idx: Tensor, staged: bool = False):
        """The step on rows ``idx``: its named losses, or (``staged``, for a capture) the
        method's staged step, a generator (:meth:`Posterior.training_stages`)."""
        batch = Batch(_gather_rows(xs, idx), _gather_rows(ys, idx), _gather_rows(mask, idx), idx, n, xs, ys, mask)
        if staged:
            return post.training_stages(batch, ctx)
        return post.training_step(batch, ctx)

    staged = post.training_stages is not None and graphs

    try:
        for phase, count in zip(phases, counts):
            if count == 0:
                continue
            phase_t0 = time.perf_counter()
            ctx.phase, ctx.phase_steps = phase, count
            post.start_phase(phase, ctx)
            graphed = None  # one capture per phase (the data, N and the phase's state are fixed in it)
            warmup = warmup_steps(post)
            for phase_step in range(count):
                ctx.step, ctx.phase_step = step, phase_step
                if lr_decay:
                    _set_decayed_lr(optimizers, groups, lr, lr_decay, steps_before + step, ctx._base_lrs)
                idx = stream.take(bs)
                if graphed is not None:
                    named = graphed(idx)
                elif graphs and phase.graph_safe and phase_step >= warmup:
                    graphed = try_capture(post, lambda i: step_on(i, staged), idx, gen)
                    graphs = graphed is not None
                    named = graphed.outputs if graphed is not None else step_on(idx)
                else:
                    named = step_on(idx)
                if MAIN_LOSS not in named:
                    raise KeyError(f"{post.name}.training_step must return the main loss under {MAIN_LOSS!r}, "
                                   f"got {sorted(named)}")
                for key, value in named.items():
                    if key not in traces:
                        traces[key] = torch.full((total,), float("nan"), device=post.device)
                    traces[key][step] = value.detach()
                if step % 25 == 0 or step == total - 1:
                    value = float(traces[MAIN_LOSS][step])
                    first_loss = value if first_loss is None else first_loss
                    if step > checked:  # the steps since the last check too: a blow-up between two
                        # checks that falls back before the next one is still a divergence
                        worst = _worst_loss(traces[MAIN_LOSS], checked, step - 1)
                        _check_loss(post, first=first_loss, lr=lr, **worst)
                    _check_loss(post, value, first_loss, step, lr)
                    checked = step + 1
                    _check_outputs(post, xs, ys, output_bound, step, lr)
                    if candidate is not None:
                        snapshot, candidate = candidate, snapshot
                        snapshot_steps = candidate_steps
                    candidate = _snapshot(post, reuse=candidate)
                    candidate_steps = step + 1
                    if bar is not None:
                        bar.update(step + 1, float(traces[MAIN_LOSS][step]))
                step += 1
            if post.device.type == "cuda":  # this thread's stream only (runs in threads share the device)
                torch.cuda.current_stream(post.device).synchronize()
            phase_seconds[phase.name] = time.perf_counter() - phase_t0
    except TrainingDivergedError:
        _restore(post, snapshot, optimizers)
        restored_steps = snapshot_steps
        raise
    finally:
        # after a restore, the steps behind the restored state (not the rolled-back ones)
        post.steps_trained.fill_(steps_before + (step if restored_steps is None else restored_steps))
        if bar is not None:
            bar.close()
    post.eval()
    for pname, p in post.named_parameters():
        if not bool(torch.isfinite(p).all()):
            _restore(post, snapshot, optimizers)
            post.steps_trained.fill_(steps_before + snapshot_steps)
            raise TrainingDivergedError(f"{post.name}: parameter {pname} became NaN/inf during fit; the "
                                        f"posterior was restored to its last finite state; try a smaller lr "
                                        f"(now {lr})")
    out = {k: v.cpu().numpy() for k, v in traces.items()}
    return FitResult(out[MAIN_LOSS], total, time.perf_counter() - t0, out,
                     {p.name: c for p, c in zip(phases, counts)}, ctx.diagnostics, phase_seconds)


def _set_decayed_lr(optimizers: Mapping[str, torch.optim.Optimizer], groups: Mapping[str, OptimizerGroup],
                    lr: float, lr_decay: float, steps_before: int,
                    base_lrs: Mapping[str, float] | None = None) -> None:
    """Every group's learning rate for the next step under the inverse-time decay
    (:func:`~.optimizers.decayed_lr`; ``steps_before`` counts the steps of all fits so far) of its
    base rate: ``lr · lr_scale``, or the rate the method pinned with
    :meth:`TrainingContext.set_learning_rate` (``base_lrs``)."""
    for name, group in groups.items():
        base = base_lrs[name] if base_lrs and name in base_lrs else lr * group.lr_scale
        for pg in optimizers[name].param_groups:
            set_group_lr(pg, decayed_lr(base, lr_decay, steps_before))


def _graphs_wanted(post: "Posterior", cuda_graph: bool | None) -> bool:
    """Whether this fit replays its steps from CUDA graphs (warns when asked explicitly and
    impossible; the environment variable applies only where it can)."""
    if not cuda_graphs_requested(cuda_graph) or getattr(post, "_cuda_graph_failure", None) is not None:
        return False
    reason = graph_unavailable_reason(post)
    if reason is not None and cuda_graph:
        warnings.warn(f"fit(cuda_graph=True): {reason}; training eagerly", RuntimeWarning, stacklevel=4)
    return reason is None


def _worst_loss(trace: Tensor, start: int, stop: int) -> dict:
    """``{"value": loss, "step": step}`` of the worst main loss of steps ``start..stop`` of
    ``trace`` (the first non-finite one, else the largest in magnitude; one transfer from the device)."""
    window = trace[start:stop + 1]
    score = torch.where(torch.isfinite(window), window.abs(), torch.full_like(window, math.inf))
    i = score.argmax()  # the first maximum: the first NaN/inf when there is one
    at, value = torch.stack([i.to(window.dtype), window[i]]).tolist()
    return {"value": value, "step": start + int(at)}


def _check_loss(post: "Posterior", value: float, first: float, step: int, lr: float) -> None:
    """Raise :class:`TrainingDivergedError` for a non-finite loss or a finite blow-up."""
    hint = (f"the posterior was restored to its last finite state; try a smaller lr (now {lr}) "
            f"or standardised data")
    if not math.isfinite(value):
        raise TrainingDivergedError(f"{post.name}: the training loss became {value} at step {step}; {hint}")
    if abs(value) > BLOW_UP_FACTOR * max(1.0, abs(first)):
        raise TrainingDivergedError(f"{post.name}: the training loss blew up to {value:.3g} at step {step} "
                                    f"(from {first:.3g} at the start of the fit); {hint}")


@torch.no_grad()
def _output_peak(post: "Posterior", xs: Tensor, seed: int) -> float:
    """Largest |f| of 4 sampled functions on up to 64 training rows (a private generator keeps
    the training's random stream untouched)."""
    generator = torch.Generator(device=post.device).manual_seed(seed)
    if getattr(post, "n_trials", None) is None:
        params, _ = post._sample(4, generator)
        return float(post.spec.forward(params, xs[:64]).abs().max())
    params, _ = post._trial_functions(4, generator)  # [R, 4, D], each trial on its own rows
    R = params.shape[0]
    x = xs[:, :64].unsqueeze(1).expand(R, 4, *xs[:, :64].shape[1:]).reshape(R * 4, -1, xs.shape[-1])
    return float(post.spec.forward(params.reshape(R * 4, -1), x).abs().max())


def _output_bound(post: "Posterior", xs: Tensor, ys: Tensor) -> float | None:
    if post.kind != "gaussian":
        return None
    return OUTPUT_BOUND_FACTOR * max(1.0 + float(ys.abs().max()), _output_peak(post, xs, -1))


def _check_outputs(post: "Posterior", xs: Tensor, ys: Tensor, bound: float | None, step: int, lr: float) -> None:
    """Raise :class:`TrainingDivergedError` when sampled regression functions leave the scale
    of the targets (and of the functions before the fit) by far (:data:`OUTPUT_BOUND_FACTOR`)."""
    if bound is None:
        return
    peak = _output_peak(post, xs, step)
    if not peak <= bound:
        raise TrainingDivergedError(
            f"{post.name}: the network's outputs blew up to {peak:.3g} at step {step} (targets reach "
            f"{float(ys.abs().max()):.3g}); the posterior was restored to its last sound state; try a smaller "
            f"lr (now {lr})")


def _snapshot(post: "Posterior", reuse: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """A copy of the posterior's state (written into ``reuse`` when its tensors fit)."""
    state = post.state_dict()
    if reuse is not None and reuse.keys() == state.keys() and all(
            reuse[k].shape == v.shape and reuse[k].dtype == v.dtype for k, v in state.items()):
        for k, v in state.items():
            reuse[k].copy_(v)
        return reuse
    return {k: v.detach().clone() for k, v in state.items()}


def _restore(post: "Posterior", snapshot: dict[str, Tensor], optimizers: dict) -> None:
    """Put the last finite state back and clear the optimisers' moments (they may hold NaN)."""
    with torch.no_grad():
        post.load_state_dict(snapshot, strict=False)
    for opt in optimizers.values():
        opt.state.clear()
