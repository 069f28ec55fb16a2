"""``Posterior``: the base class every method implements — its state, sampling and saving.

A subclass stores its approximation (a Gaussian, particles, members, ...) as
parameters and buffers and implements

* ``_sample(n, generator) -> (params[n, D], log_noise_std[n, out] | None)``, and
* the training protocol (:mod:`.training`): :meth:`Posterior.loss` for methods that are
  plain gradient descent on one objective, or :meth:`Posterior.training_step` with its own
  :meth:`Posterior.optimizer_groups` and :attr:`Posterior.phases` for the others.

The loop (minibatching, divergence checks, progress) lives in :mod:`.training`, the
standardisation in :mod:`.units`, the data checks in :mod:`.data`; this module keeps the
state, ``fit``'s entry point, sampling, prediction and saving.
"""
from __future__ import annotations

import json
import math
import os
from typing import ClassVar

import torch
from torch import Tensor, nn

from ..allocator import keep_freed_memory
from ..function_sample import FunctionSample
from ..likelihoods import make_likelihood
from ..network import MLPSpec
from ..predictive import Predictive
from ..seeding import POSTERIOR_INIT_KEY, POSTERIOR_TRAIN_KEY, stream_seed
from ..validation import (ArrayLike, check_device, check_inputs, check_positive_float, check_positive_int,
                          check_saveable_options, check_seed, plain_value)
from .data import check_training_data
from .training import (MAIN_LOSS, Batch, FitResult, OptimizerGroup, OptimizerSet, Phase, TrainingContext,
                       TrainingDivergedError, run_training)
from .optimizers import check_lr_decay, check_optimizer
from .resume import training_state
from .storage import FORMAT_2, write_payload
from .units import TrainingUnits

__all__ = ["Batch", "FitResult", "OptimizerGroup", "Phase", "Posterior", "TrainingContext",
           "TrainingDivergedError", "DEFAULT_PRIOR_STD", "SAVE_FORMAT"]

SAVE_FORMAT = FORMAT_2  # see posteriors/storage.py

#: Default weight prior std per likelihood (``None``: ``1/sqrt(fan_in)`` per layer).
DEFAULT_PRIOR_STD: dict[str, float | None] = {"gaussian": None, "categorical": 1.0}


def prior_std_vector(spec: MLPSpec, prior_std) -> Tensor:
    """``[D]`` prior std of every flat parameter from the ``prior_std`` option: ``None`` gives
    ``1/sqrt(fan_in)`` per layer, a positive number the same std everywhere, a sequence one std
    per dense layer. Raises ``ValueError`` naming ``prior_std`` otherwise."""
    if prior_std is None:
        return 1.0 / spec.fan_in_per_param().sqrt()
    if isinstance(prior_std, (list, tuple)):
        n_layers = len(spec.layer_shapes)
        if len(prior_std) != n_layers:
            raise ValueError(f"prior_std as a sequence needs one std per dense layer ({n_layers} for widths "
                             f"{'-'.join(map(str, spec.widths))}), got {len(prior_std)}: {list(prior_std)!r}")
        return spec.per_layer([check_positive_float(v, f"prior_std[{i}]") for i, v in enumerate(prior_std)])
    return torch.full((spec.num_params,), check_positive_float(prior_std, "prior_std"))


#: Keyword arguments of a posterior's constructor that are not method options (not in ``config``
#: under their own name: the spec's fields and the likelihood are, ``device`` is not saved).
_NOT_OPTIONS = frozenset({"spec", "likelihood", "device", "seed"})


def construction_config(post: "Posterior", args: tuple, kwargs: dict) -> dict:
    """The configuration :func:`~uncertain_agents.make_posterior` records for a posterior built as
    ``cls(*args, **kwargs)``: the method name, the spec's fields, the likelihood, the seed and the
    method options passed (by keyword; options left at their defaults are not recorded, so agents
    can tell them from the user's choices). ``load_posterior`` rebuilds the posterior from it."""
    from ..registry import POSTERIORS

    spec = args[0] if args else kwargs.get("spec")
    if not isinstance(spec, MLPSpec):  # a subclass that builds its own spec from other arguments
        spec = post.spec
    # the method's name only for the class registered under it: an unregistered subclass inherits the
    # name, and its saved file must not load silently as its parent (it then has no name to load by)
    name = type(post).name if POSTERIORS.registered_now(type(post).name) is type(post) else None
    return {"name": name, "in_dim": spec.in_dim, "out_dim": spec.out_dim, "hidden": list(spec.hidden),
            "activation": spec.activation, "likelihood": post.kind, "seed": kwargs.get("seed"),
            **{key: value for key, value in kwargs.items() if key not in _NOT_OPTIONS}}


def _refuse_overflowing_inputs(f: Tensor, x: Tensor, params: Tensor) -> None:
    """Raise ``ValueError`` naming ``x`` when sampled functions ``f[n, B, out]`` are NaN or infinite at
    finite inputs ``x[B, in_dim]``: inputs near float32's range (3e38) overflow inside the network,
    and the predictive would otherwise be NaN without a word. Sampled weights ``params`` that are
    themselves NaN or infinite are named instead (no rescaling of ``x`` would help)."""
    bad = ~torch.isfinite(f).all(-1).all(0)
    if bool(bad.any()) and not bool(torch.isfinite(params).all()):
        raise ValueError(f"the posterior's sampled weights hold NaN or infinite values, so its functions are NaN or "
                         f"infinite at {int(bad.sum())} of {x.shape[0]} input row(s) whatever x is; its state is "
                         f"broken (changed by hand, or loaded from such a file): refit it or load a sound one")
    if bool(bad.any()):
        raise ValueError(f"x: the sampled functions overflow float32 (NaN or infinite) at {int(bad.sum())} of "
                         f"{x.shape[0]} input row(s), whose values reach {float(x[bad].abs().max()):.3g}: these "
                         f"inputs (or the posterior's weights) are too large to evaluate in float32; rescale x")


class _PlacedOnItsDevice(type):
    """Metaclass of :class:`Posterior`: a construction — every ``__init__`` of the class, its bases
    and any mixin — gets its keyword options as plain Python values (NumPy and 0-d torch scalars
    become ``int`` / ``float`` / ``bool``: :func:`~uncertain_agents.validation.plain_value`), and once
    it has finished the posterior

    * records its configuration (:func:`construction_config`: method name, spec, likelihood, seed,
      the options passed), so a class built directly — ``MeanFieldVI(spec, prior_std=3.0)`` — saves
      and loads, and agents respect its explicit options, as ``make_posterior`` does (its ``config``
      used to stay empty); an option JSON cannot save is a ``TypeError`` naming it;
    * moves to the ``device`` it was given. Each method builds its state on the CPU (a seeded
      initialisation is then the same on every device), so ``MeanFieldVI(spec, device="cuda")``
      lives on the GPU as ``make_posterior(..., device="cuda")`` does (before session 33 a class
      built directly stayed on the host)."""

    def __call__(cls, *args, **kwargs):
        kwargs = {key: plain_value(value) for key, value in kwargs.items()}
        post = super().__call__(*args, **kwargs)
        # whatever __init__ itself wrote into config (nothing, for the library's methods) wins
        post.config = {**construction_config(post, args, kwargs), **post.config}
        check_saveable_options(post.config, post.name)
        requested = post.__dict__.get("_requested_device")
        if requested is not None and requested != post.device:
            post.to(requested)
        return post


class Posterior(TrainingUnits, nn.Module, metaclass=_PlacedOnItsDevice):
    """An approximate posterior over the weights of one MLP.

    Args:
        spec: the network architecture.
        likelihood: ``"gaussian"`` (regression) or ``"categorical"`` (classification).
        device: where parameters live and computation runs.
        seed: seeds the initialisation and the default random generator.
        prior_std: Gaussian prior standard deviation of every weight and bias, or a sequence
            of one std per dense layer (its weights and bias; ``len(hidden) + 1`` values, e.g.
            ``(0.32, 0.32, 3.2)`` for a 2-hidden-layer network); ``None``
            (default) depends on the likelihood (:attr:`default_prior_std`, normally
            :data:`DEFAULT_PRIOR_STD`): regression uses
            ``1/sqrt(fan_in)`` per layer, which keeps the prior over functions O(1) in
            standardised units; classification uses N(0, 1), whose logits can be confident
            (with ``1/sqrt(fan_in)`` the logits stay O(1), clean digits keep ~1.5 nats of
            entropy and FGSM detection suffers; see docs/plug_in.md).
        noise_std: fixes the regression noise standard deviation (original units of y);
            ``None`` learns it.
        init_noise_std: starting value of a learned noise std (standardised units).
        standardize: standardise x (and y for regression) inside ``fit``; predictions are
            reported in original units either way.
        optimizer: ``"adam"`` (default) or ``"rmsprop"`` (TensorFlow 1's RMSProp, the optimiser
            of Riquelme et al.'s bandit networks); see :mod:`.optimizers`.
        lr_decay: inverse-time decay of the learning rate, ``lr / (1 + lr_decay · t)`` with ``t``
            the steps trained over all fits so far (default 0: a constant rate).
    """

    name: ClassVar[str] = "posterior"
    default_lr: ClassVar[float] = 1e-3
    #: Default weight prior std per likelihood (``None``: ``1/sqrt(fan_in)`` per layer).
    default_prior_std: ClassVar[dict[str, float | None]] = DEFAULT_PRIOR_STD
    #: Option values the method takes when an agent acts on its samples (Thompson sampling),
    #: for options the user left at their defaults; applied by :meth:`use_bandit_defaults`.
    #: Empty for most methods: their defaults hold in every job.
    bandit_defaults: ClassVar[dict[str, object]] = {}
    #: True when :meth:`training_step` is a fixed sequence of device work — no host reads of
    #: device values, no Python branches on the step, fixed shapes for a fixed batch — so
    #: ``fit`` on CUDA captures it once per phase and replays it (:mod:`.cuda_graphs`).
    graph_safe_step: ClassVar[bool] = False

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, device="cpu",
                 seed: int | None = None, prior_std: float | None = None,
                 noise_std: float | None = None, init_noise_std: float = 0.5,
                 standardize: bool = True, optimizer: str = "adam", lr_decay: float = 0.0):
        super().__init__()
        seed = check_seed(seed)
        if not isinstance(standardize, bool):
            raise TypeError(f"standardize must be True or False, got {standardize!r}")
        self.spec = spec
        self.seed = seed
        self.standardize = standardize
        self.optimizer = check_optimizer(optimizer)
        self.lr_decay = check_lr_decay(lr_decay)
        self.fixed_noise_std = check_positive_float(noise_std, "noise_std", allow_none=True)
        check_positive_float(init_noise_std, "init_noise_std")
        self.likelihood = make_likelihood(likelihood, spec.out_dim, noise_std=self.fixed_noise_std,
                                          init_noise_std=init_noise_std)
        self.kind = likelihood
        if prior_std is None:
            prior_std = self.default_prior_std.get(likelihood)
        self.register_buffer("prior_std", prior_std_vector(spec, prior_std))
        self._register_units(spec.in_dim, spec.out_dim)
        # training steps taken by all fits so far (warm-up schedules continue across refits)
        self.register_buffer("steps_trained", torch.tensor(0, dtype=torch.long))
        self.config: dict = {}
        self._generators: dict[str, torch.Generator] = {}
        # generator states of a loaded posterior ({device type: state}, :mod:`.resume`), claimed by
        # the first generator made for a device of that type
        self._pending_generator_states: dict[str, Tensor] = {}
        self.optimizer_set = OptimizerSet()
        self._init_generator = torch.Generator().manual_seed(self._stream_seed(POSTERIOR_INIT_KEY))
        self._requested_device = check_device(device)

    # ------------------------------------------------------- training protocol
    #: The stages of training (see :class:`~.training.Phase`); one phase for most methods.
    phases: ClassVar[tuple[Phase, ...]] = (Phase("train"),)

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The method's objective on a minibatch, per data point (scalar, differentiable).

        Used by the default :meth:`training_step`; methods that are not plain gradient
        descent on one loss override :meth:`training_step` instead.
        """
        raise NotImplementedError(f"{self.name} implements neither loss nor training_step")

    def optimizer_groups(self) -> dict[str, OptimizerGroup]:
        """Named parameter groups, each with its own Adam (default: every trainable
        parameter in one group ``"main"`` at ``fit``'s learning rate)."""
        return {"main": OptimizerGroup(tuple(p for p in self.parameters() if p.requires_grad))}

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """One training step on ``batch``; returns named detached losses, the main one
        under ``"loss"`` (default: one step of group ``"main"`` on :meth:`loss`)."""
        return {MAIN_LOSS: ctx.minimize(self.loss(batch, ctx.generator), "main")}

    #: A staged form of :meth:`training_step` for CUDA-graph capture, or None: a method whose
    #: step needs an operation that cannot be captured (one that reads a value on the host)
    #: writes its step as a generator that yields that operation as an
    #: :class:`~.cuda_graphs.EagerStage` and returns the named losses; its ``training_step`` is
    #: then ``run_stages_eagerly(self.training_stages(batch, ctx))`` (f-SVGD's prior ``eigh``).
    training_stages = None

    def start_phase(self, phase: Phase, ctx: TrainingContext) -> None:
        """Called at the start of every phase of every fit (``ctx.refit`` tells a warm
        refit); a ``"restart"`` phase rebuilds its state here."""

    def prepare_data(self, n_data: int) -> None:
        """Called at the start of ``fit`` with the number of rows (bootstrap weights,
        hold-outs); rows keep their index across warm-started refits."""

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """``(params[n, D], log_noise_std[n, out] | None)`` of ``n`` drawn functions."""
        functions, log_noise, index = self._sample_indexed(n, generator)
        return functions[index], (None if log_noise is None else log_noise[index])

    def _sample_indexed(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None, Tensor]:
        """For a posterior over a finite set of functions (members, particles):
        ``(functions[m, D], log_noise_std[m, out] | None, index[n])``, the draws being
        ``functions[index]``. Other posteriors implement :meth:`_sample` instead."""
        raise NotImplementedError

    def _on_prior_change(self) -> None:
        """Hook called by :meth:`set_prior_std`: refresh anything derived from ``prior_std``."""

    # -------------------------------------------------------------- helpers
    def to(self, *args, **kwargs):
        """``nn.Module.to``, with a CUDA device checked first (:func:`~uncertain_agents.validation.check_device`):
        ``post.to("cuda")`` on a machine without CUDA is the same clear ``ValueError`` as
        ``make_posterior(..., device="cuda")``, not torch's assertion. Other devices are passed on."""
        device = kwargs["device"] if "device" in kwargs else args[0] if args else None
        if isinstance(device, int) and not isinstance(device, bool):
            device = torch.device("cuda", device)  # an index: torch's current accelerator, CUDA here
        if isinstance(device, (str, torch.device)) and str(device).split(":")[0].strip().lower() == "cuda":
            check_device(device)  # other targets (cpu, meta, ...) are torch's to judge, as before
        return super().to(*args, **kwargs)

    def cuda(self, device=None):
        """``nn.Module.cuda``, with the device checked first as in :meth:`to`."""
        if device is None or (isinstance(device, int) and not isinstance(device, bool)):
            check_device(torch.device("cuda", device))
        else:
            check_device(device)
        return super().cuda(device)

    @property
    def device(self) -> torch.device:
        """The device the posterior's parameters and buffers live on."""
        return self.prior_std.device

    def _stream_seed(self, stream: int) -> int:
        """The torch seed of this posterior's stream ``stream`` (:mod:`uncertain_agents.seeding`):
        derived from ``seed``, or fresh when the posterior is unseeded."""
        if self.seed is None:
            return int(torch.randint(2**62, ()).item())
        return stream_seed(self.seed, stream)

    def generator(self, device=None) -> torch.Generator:
        """The posterior's own seeded generator for ``device`` (default: its device)."""
        device = torch.device(device or self.device)
        key = str(device)
        if key not in self._generators:
            g = torch.Generator(device=device)
            saved = self._pending_generator_states.pop(device.type, None)
            if saved is not None:  # a loaded posterior continues the saved stream
                g.set_state(saved)
            else:  # (an unseeded posterior's seed is a draw from torch's global stream: only when needed)
                g.manual_seed(self._stream_seed(POSTERIOR_TRAIN_KEY))
            self._generators[key] = g
        return self._generators[key]

    def _check_generator(self, generator) -> torch.Generator:
        if generator is None:
            return self.generator()
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if torch.device(generator.device).type != self.device.type:
            raise ValueError(f"generator is on {generator.device} but the posterior is on {self.device}")
        return generator

    def log_noise_std_train(self) -> Tensor:
        """``[out]`` log noise std in training units (fixed noise follows the y scale)."""
        if self.fixed_noise_std is not None:
            return math.log(self.fixed_noise_std) - self.y_scale.log()
        return self.likelihood.log_noise_std

    # ----------------------------------------------------------------- prior
    @property
    def has_default_prior(self) -> bool:
        """True when ``prior_std`` was not chosen by the user (the ``1/sqrt(fan_in)`` default)."""
        return self.config.get("prior_std") is None

    def initial_params(self, n: int, *, generator: torch.Generator) -> Tensor:
        """``[n, D]`` fresh networks under the method's initialisation (default
        :meth:`MLPSpec.init_params <uncertain_agents.network.MLPSpec.init_params>`)."""
        return self.spec.init_params(n, generator=generator)

    def set_prior_std(self, prior_std: float) -> None:
        """Replace the Gaussian weight prior by ``N(0, prior_std²)`` for every weight and bias.

        The prior lives in training units, so it can only change before they are fixed (before
        the first fit and before :meth:`set_units`). Anything the method derives from the prior
        (a mean-field posterior's initial std, dropout's weight decay, f-SVGD's layer scales)
        is re-derived, and the saved configuration records the new value. Jobs whose units
        need another prior than the regression default set it here (the bandit agents do).

        Raises:
            ValueError: for a non-positive or non-finite value, or once the units are fixed.
        """
        value = check_positive_float(prior_std, "prior_std")
        if self.units_are_fixed:
            raise ValueError(f"{self.name}: set_prior_std must be called before the first fit and before "
                             f"set_units (the prior is defined in the training units, which are fixed now)")
        self.prior_std.fill_(value)
        self.config["prior_std"] = value
        self._on_prior_change()

    def use_bandit_defaults(self) -> dict[str, object]:
        """Switch every option of :attr:`bandit_defaults` that the user did not choose to its
        bandit value; returns what changed. The bandit agents call it once, before the first
        fit; the saved configuration records the values.

        Raises:
            ValueError: once the first fit has fixed the training units.
        """
        changed = {k: v for k, v in self.bandit_defaults.items() if k not in self.config}
        if changed and self.units_are_fixed:
            raise ValueError(f"{self.name}: use_bandit_defaults must be called before the first fit")
        for key, value in changed.items():
            self._set_option(key, value)
            self.config[key] = value
        return changed

    def _set_option(self, key: str, value) -> None:
        """Hook of :meth:`use_bandit_defaults`: change option ``key`` of a fresh posterior."""
        raise NotImplementedError(f"{self.name} cannot change option {key!r} after construction")

    # ------------------------------------------------------------------- fit
    def fit(self, x: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None, *, steps: int, batch_size: int = 32,
            lr: float | None = None,
            progress: bool = False, cuda_graph: bool | None = None) -> FitResult:
        """Train (warm-started from the current state) for ``steps`` optimiser steps.

        Args:
            x: ``[N, in_dim]`` inputs.
            y: ``[N, out]`` or ``[N]`` regression targets; ``[N]`` integer labels for
                classification.
            mask: ``[N, out]`` bool, True where an output is observed (regression); ``[N]``
                rows to use (classification). ``None`` = everything observed.
            steps: number of optimiser steps.
            batch_size: minibatch size (capped at N); batches sweep shuffled epochs.
            lr: Adam learning rate; ``None`` uses the method's default.
            progress: show a rich progress bar (on stderr).
            cuda_graph: on a CUDA posterior whose method declares a graph-safe step
                (:attr:`graph_safe_step`), replay each phase's steps from a CUDA graph after a
                few eager ones (:mod:`uncertain_agents.posteriors.cuda_graphs`; several times
                faster on small networks); ``None`` (default) does so unless the
                environment variable ``UNCERTAIN_AGENTS_CUDA_GRAPHS=0`` is set; CPU posteriors
                and other methods train eagerly either way.

        The first fit of a CPU posterior in a process lets glibc keep freed memory
        (:func:`uncertain_agents.allocator.keep_freed_memory`: no page faults on reused
        tensors; opt out with ``UNCERTAIN_AGENTS_KEEP_FREED_MEMORY=0``).

        Raises:
            TrainingDivergedError: if the loss or the parameters become NaN/inf.
        """
        steps = check_positive_int(steps, "steps")
        batch_size = check_positive_int(batch_size, "batch_size")
        lr = self.default_lr if lr is None else check_positive_float(lr, "lr")
        if self.prior_std.dtype != torch.float32:  # cast by .double() / .to(dtype): torch would fail deep inside
            raise TypeError(f"{self.name}.fit: posteriors train in float32 (their data are converted to it), but this "
                            f"one was cast to {self.prior_std.dtype}; cast it back with .float() before fitting")
        x, y, mask = check_training_data(x, y, mask, spec=self.spec, kind=self.kind, device=self.device)
        self.fix_units_from_data(x, y, mask)
        xs, ys = self.to_train_units(x, y)
        maskf = None if mask is None else mask.to(xs.dtype)
        if self.device.type == "cpu":
            keep_freed_memory()
        return run_training(self, xs, ys, maskf, steps=steps, batch_size=batch_size, lr=lr, progress=progress,
                            cuda_graph=cuda_graph)

    # ---------------------------------------------------------------- sample
    @torch.no_grad()
    def sample(self, n: int, *, generator: torch.Generator | None = None) -> FunctionSample:
        """Draw ``n`` fixed functions; ``sample(n)(x)`` is ``[n, B, out]``."""
        n = check_positive_int(n, "n")
        gen = self._check_generator(generator)
        index = None
        if type(self)._sample_indexed is not Posterior._sample_indexed:
            params, log_noise, index = self._sample_indexed(n, gen)
            params = params.detach().clone()  # fixed functions: later training must not move them
        else:
            params, log_noise = self._sample(n, gen)
        noise = None
        if self.kind == "gaussian":
            if log_noise is None:
                log_noise = self.log_noise_std_train().expand(params.shape[0], -1)
            noise = log_noise.exp() * self.y_scale
        return FunctionSample(params.detach(), self.spec, self.x_loc, self.x_scale,
                              self.y_loc if self.kind == "gaussian" else torch.zeros_like(self.y_loc),
                              self.y_scale if self.kind == "gaussian" else torch.ones_like(self.y_scale),
                              None if noise is None else noise.detach(), index=index)

    @torch.no_grad()
    def predict(self, x: ArrayLike, *, n_samples: int = 100, generator: torch.Generator | None = None,
                max_elements: int = 2**24) -> Predictive:
        """Monte-Carlo predictive at ``x[B, in_dim]`` over ``n_samples`` functions.

        Inputs (and, when ``n_samples`` functions are too many for one input, the functions too)
        are processed in chunks so that no hidden activation tensor exceeds ``max_elements`` entries.
        """
        n_samples = check_positive_int(n_samples, "n_samples")
        max_elements = check_positive_int(max_elements, "max_elements")
        fs = self.sample(n_samples, generator=generator)
        x = check_inputs(x, self.spec.in_dim, device=self.device)
        width = max(self.spec.widths)
        per_chunk = max(1, min(n_samples, max_elements // width))  # functions evaluated at once
        rows = max(1, max_elements // (per_chunk * width))

        def rows_of(part: FunctionSample) -> Tensor:
            return torch.cat([part(x[i:i + rows]) for i in range(0, x.shape[0], rows)], dim=1)

        if per_chunk >= n_samples:
            f = rows_of(fs)
        else:
            f = torch.cat([rows_of(fs[s:s + per_chunk]) for s in range(0, n_samples, per_chunk)], dim=0)
        if not bool(torch.isfinite(f.sum())):  # rare: one reduction answers for the usual, finite case
            _refuse_overflowing_inputs(f, x, fs.distinct_params)
        noise_var = None if fs.noise_std is None else fs.noise_std.square().unsqueeze(1)
        return Predictive(f, self.kind, noise_var)

    # ------------------------------------------------------------- save/load
    def save(self, path: str | os.PathLike) -> None:
        """Write config (JSON) and tensors; restore with :func:`uncertain_agents.load_posterior`.

        Raises ``ValueError`` for an instance of a class that is not the one registered under its
        method name (an unregistered subclass): its file could not be loaded back."""
        if not isinstance(self.config.get("name"), str):
            raise ValueError(f"{type(self).__name__} is not the class registered as {self.name!r}, so a saved "
                             f"file could not be loaded back; register it under a name of its own "
                             f"(@uncertain_agents.register_posterior('my-name')) to save it")
        payload = {"format": SAVE_FORMAT, "method": self.name, "config": json.dumps(self.config),
                   "state": {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}}
        training = training_state(self)
        if training is not None:  # optimisers and the training stream: a loaded posterior resumes exactly
            payload["training"] = training
        write_payload(path, payload)

    #: State entries added after files were first saved: a file without them loads, and they
    #: keep their initial values (which reproduce the older behaviour).
    optional_state: ClassVar[frozenset[str]] = frozenset(
        {"layer_of_param", "log_prior_scale", "member_log_noise", "holdout_seed"})
    #: Buffers whose last dimension grows with the data (bootstrap's counts ``weights[M, N]``): the
    #: only entries a file may hold at another shape than a fresh posterior's.
    growing_state: ClassVar[frozenset[str]] = frozenset()

    def _load_tensors(self, state: dict[str, Tensor]) -> None:
        own = self.state_dict()
        missing = sorted(set(own) - set(state) - self.optional_state)
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(f"saved state does not match {self.name}: missing {missing}, unexpected {unexpected}")
        for key, value in state.items():
            target = own[key]
            if target.shape != value.shape:
                module_name, _, attr = key.rpartition(".")
                module = self.get_submodule(module_name) if module_name else self
                if (key in self.growing_state and attr in module._buffers and value.dim() == target.dim()
                        and value.shape[:-1] == target.shape[:-1]):  # a buffer that grows with the data
                    module._buffers[attr] = value.to(target.device, target.dtype).clone()
                    continue
                raise ValueError(f"saved tensor {key} has shape {tuple(value.shape)}, "
                                 f"expected {tuple(target.shape)}")
        own = self.state_dict()  # optional entries the file lacks keep their initial values
        self.load_state_dict({**{k: own[k] for k in own.keys() - state.keys()}, **state}, strict=True)

    def extra_repr(self) -> str:
        """The method, architecture and likelihood, for ``repr``."""
        return f"name={self.name!r}, spec={self.spec}, likelihood={self.kind!r}"
