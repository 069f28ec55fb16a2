"""``check_posterior``: the sampler interface's contract, checked on any registered posterior.

What gymnasium's ``check_env`` is for environments: a method written outside the library
(a class registered with :func:`~uncertain_agents.register_posterior`) is put through the
rules every built-in method is held to, so that agents, attacks and metrics can rely on
it. The rules, each checked on a small seeded problem (64 rows, 3 features, a 1×8 network):

* construction: ``make_posterior`` builds a :class:`Posterior` as ``cls(spec, likelihood, device=...,
  seed=..., **options)``, so the constructor accepts ``**kwargs`` and passes them on to the base
  class (the posterior keeps the seed and the device it was given); its parameters and buffers
  live on its device;
* ``_sample(n, generator)`` returns ``(params, log_noise_std or None)``: ``params`` a finite float
  torch tensor ``[n, D]`` (``D`` the network's weights) on the posterior's device, ``log_noise_std``
  (regression) ``None`` or a finite ``[n, out]`` tensor — checked before ``fit``, which samples too;
* ``fit`` returns a :class:`FitResult` with a finite loss per step, accepts numpy arrays and a
  mask of observed outputs (a bandit observes one arm per row), and counts its steps across
  warm-started refits;
* the first fit fixes the training units: a refit on other data keeps them;
* ``sample(n)`` gives ``n`` *fixed* functions: ``fs(x)`` is ``[n, B, out]``, finite, on the
  posterior's device; the same input gives the same output, a row's output does not depend on
  the other rows of the batch, ``fs[i]`` is function ``i``, the same generator seed draws
  the same functions, and gradients flow from ``fs(x)`` to ``x`` (the attacks need them);
* ``predict`` gives a :class:`Predictive` with ``[B, out]`` mean and positive variance and
  finite ``[B]`` log-probabilities, entropies and mutual informations (≥ 0); for
  classification, probabilities that sum to one and an entropy of at most ``log C``;
* two posteriors built with the same seed and trained alike draw the same functions;
* ``save`` / ``load_posterior`` round-trips: the same class, the same draws;
* bad input is refused with a ``ValueError`` (``sample(0)``, a wrong number of columns, NaN).

A broken rule raises :class:`PosteriorCheckError`, which names the method, the rule and what
was found. ``check_posterior`` returns ``None`` when every rule holds.
"""
from __future__ import annotations

import inspect
import math
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from .function_sample import FunctionSample
from .network import MLPSpec
from .posteriors import FitResult, Posterior
from .predictive import Predictive
from .registry import load_posterior, make_posterior, method_options, posterior_class, resolve_name
from .validation import check_device, check_positive_int

LIKELIHOODS = ("gaussian", "categorical")
_ROWS, _IN_DIM, _CLASSES = 64, 3, 3


class PosteriorCheckError(AssertionError):
    """A posterior broke a rule of the sampler interface (the message names the rule)."""


def check_posterior(name: str, *, device: str | torch.device = "cpu",
                    likelihoods: tuple[str, ...] = LIKELIHOODS, steps: int = 3, **options: Any) -> None:
    """Check that the registered posterior ``name`` keeps the sampler interface's contract.

    Args:
        name: a registered posterior name or alias (built-in, or registered with
            :func:`~uncertain_agents.register_posterior`).
        device: where to build and run it.
        likelihoods: which jobs to check it in (``"gaussian"`` regression, ``"categorical"``
            classification); a method that supports only one names it.
        steps: optimiser steps per fit (the checks are about the interface, not about
            convergence; a few steps suffice).
        **options: method options passed to ``make_posterior`` (e.g. ``n_particles=4``).

    Raises:
        PosteriorCheckError: the first rule the posterior breaks, with what was expected and
            what was found (module docstring lists the rules).
        ValueError: ``name`` is not registered, ``likelihoods`` names an unknown job, or
            ``device`` / ``steps`` / an option value is not valid (a constructor that fails
            without any option is a broken rule, construction, instead).
        TypeError: an option the method does not accept.
    """
    key = resolve_name(name)
    if isinstance(likelihoods, str) or not isinstance(likelihoods, (tuple, list)) or not likelihoods \
            or sorted(set(likelihoods) - set(LIKELIHOODS)):
        raise ValueError(f"likelihoods must be a non-empty tuple of {list(LIKELIHOODS)}, got {likelihoods!r}")
    device = check_device(device)
    steps = check_positive_int(steps, "steps")
    data = _Problem()

    def build(likelihood: str) -> Posterior:
        return _build(key, likelihood, device, options)

    fit_kw = dict(steps=steps, batch_size=16)
    if "gaussian" in likelihoods:
        post = build("gaussian")
        _check_raw_sample(key, build("gaussian"), device)  # a fresh one: the rules below see post untouched
        x, y, mask = data.regression()
        with _rule(key, "fit trains on a regression problem with one observed output per row"):
            result = post.fit(x, y, mask=mask, **fit_kw)
        _check_fit_result(key, result, steps)
        _check_device(key, post, device)
        with _rule(key, "sample(n) draws n fixed functions of the network"):
            _check_functions(key, post, x, out_dim=2, device=device)
        with _rule(key, "predict(x) gives the predictive mixture at x"):
            _check_predictive(key, post.predict(x, n_samples=5), rows=_ROWS, out_dim=2)
        with _rule(key, "two posteriors built with the same seed and trained alike draw the same functions"):
            twin = build("gaussian")
            twin.fit(x, y, mask=mask, **fit_kw)
            _require(torch.equal(_draws(post, x, seed=5), _draws(twin, x, seed=5)), key,
                     "two posteriors built with the same seed and trained alike draw the same functions",
                     "their draws with the same generator seed differ")
        with _rule(key, "a warm-started refit keeps the units of the first fit"):
            _check_refit(key, post, x, y, mask, fit_kw)
        with _rule(key, "save / load_posterior round-trips"):
            _check_save_load(key, post, x)
        with _rule(key, "fit and sample accept numpy arrays like tensors"):
            _check_numpy_inputs(key, build("gaussian"), data, fit_kw)
        _check_bad_input(key, post, x, y, fit_kw)
    if "categorical" in likelihoods:
        post = build("categorical")
        _check_raw_sample(key, build("categorical"), device)
        x, labels = data.classification()
        with _rule(key, "fit trains on a classification problem (integer labels)"):
            result = post.fit(x, labels, **fit_kw)
        _check_fit_result(key, result, steps)
        with _rule(key, "sample(n) draws n fixed functions of the network (classification)"):
            _check_functions(key, post, x, out_dim=_CLASSES, device=device)
        with _rule(key, "predict(x) gives the predictive mixture at x (classification)"):
            pred = post.predict(x, n_samples=5)
            _check_predictive(key, pred, rows=_ROWS, out_dim=_CLASSES, labels=labels)
            probs = pred.probs
            _require(tuple(probs.shape) == (_ROWS, _CLASSES) and
                     torch.allclose(probs.sum(-1), torch.ones(_ROWS, device=probs.device), atol=1e-4), key,
                     "classification probabilities are [B, classes] and sum to one",
                     f"shape {tuple(probs.shape)}, sums from {float(probs.sum(-1).min()):.6g} to "
                     f"{float(probs.sum(-1).max()):.6g}")
            entropy = pred.entropy()
            _require(bool((entropy <= math.log(_CLASSES) + 1e-4).all()), key,
                     f"the predictive entropy is at most log(classes) = {math.log(_CLASSES):.4f}",
                     f"largest {float(entropy.max()):.4f}")
    return None


class _Problem:
    """The seeded data of the checks: ``[64, 3]`` inputs, two regression outputs with one
    observed per row (NaN where unobserved, as a bandit's history), three classes."""

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(_ROWS, _IN_DIM, generator=gen)
        noise = 0.1 * torch.randn(_ROWS, 2, generator=gen)
        self.y = torch.stack([torch.sin(self.x[:, 0]), self.x[:, 1] - self.x[:, 2]], 1) + noise
        self.mask = torch.zeros(_ROWS, 2, dtype=torch.bool)
        self.mask[0::2, 0] = True
        self.mask[1::2, 1] = True

    def regression(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.x, torch.where(self.mask, self.y, torch.full_like(self.y, float("nan"))), self.mask

    def classification(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, (self.x[:, 0] > 0).long() + (self.x[:, 1] > 0).long()


@contextmanager
def _rule(name: str, rule: str) -> Iterator[None]:
    """An error the posterior raises inside this block is reported as breaking ``rule``."""
    try:
        yield
    except PosteriorCheckError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the method raised, the rule names where
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: {rule} "
                                  f"(raised {type(err).__name__}: {err})") from err


def _require(condition: bool, name: str, rule: str, found: str) -> None:
    if not condition:
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: {rule} ({found})")


_CONSTRUCTION = "construction: make_posterior builds it as {cls}(spec, likelihood, device=..., seed=..., **options)"
_KWARGS_HINT = ("the constructor must accept **kwargs (device, seed, prior_std, ...) and pass them on to the "
                "base class: super().__init__(spec, likelihood, **kwargs)")


def _build(name: str, likelihood: str, device: torch.device, options: dict) -> Posterior:
    """``make_posterior`` on the checks' problem; a constructor that cannot be called as
    ``make_posterior`` calls it, or that raises, breaks the rule "construction". An error an option
    of the user's causes (``make_posterior`` refuses it, or the method builds without it) is raised as is."""
    cls = posterior_class(name)
    rule = _CONSTRUCTION.format(cls=cls.__name__)
    out_dim = _CLASSES if likelihood == "categorical" else 2
    spec = MLPSpec(_IN_DIM, out_dim, (8,), "relu")
    known = {key: value for key, value in options.items() if key in method_options(name)}
    try:
        inspect.signature(cls.__init__).bind(None, spec, likelihood, device=device, seed=0, **known)
    except TypeError as err:
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: {rule} ({cls.__name__}.__init__ cannot "
                                  f"be called so: {err}; {_KWARGS_HINT})") from None
    except ValueError:  # no signature to read (a builtin): the call below tells
        pass

    def make(**method_options: Any) -> Posterior:
        return make_posterior(name, in_dim=_IN_DIM, out_dim=out_dim, hidden=(8,), likelihood=likelihood,
                              device=device, seed=0, **method_options)

    try:
        post = make(**options)
    except Exception as err:  # noqa: BLE001 - whatever the constructor raised, the rule names it
        if isinstance(err, (TypeError, ValueError)) and options and _builds_without(make, name, options):
            raise  # the user's option is at fault, not the method
        hint = f"; {_KWARGS_HINT}" if "unexpected keyword argument" in str(err) else ""
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: {rule} "
                                  f"(raised {type(err).__name__}: {err}{hint})") from err
    _require(isinstance(post, Posterior), name, "make_posterior builds a Posterior", f"got {type(post).__name__}")
    _require(post.seed == 0 and post.device.type == device.type, name,
             f"{rule}: the posterior keeps the seed and the device it is given ({_KWARGS_HINT})",
             f"seed {post.seed!r}, device {post.device} for seed 0, device {device}")
    return post


def _builds_without(make: Callable[..., Posterior], name: str, options: dict) -> bool:
    """Whether the failure of a construction with ``options`` is theirs: ``make_posterior`` refuses
    one the method does not know, or the method builds without them."""
    if set(options) - set(method_options(name)):
        return True
    try:
        make()
    except Exception:  # noqa: BLE001 - it fails without the options too: the method is at fault
        return False
    return True


def _check_raw_sample(name: str, post: Posterior, device: torch.device) -> None:
    """``_sample`` (what ``sample`` and ``fit``'s divergence checks build on) returns what the
    docs promise, checked on its own so that a wrong return value is not blamed on ``fit``."""
    n, width, out = 3, post.spec.num_params, post.spec.out_dim
    indexed = type(post)._sample_indexed is not Posterior._sample_indexed
    via = " (through _sample_indexed)" if indexed else ""
    rule = (f"_sample(n, generator){via} returns (params, log_noise_std or None): params a finite float torch "
            f"tensor [n, D] (here [{n}, {width}]) on the posterior's device ({device})"
            + (", log_noise_std None or a finite [n, out] tensor there" if post.kind == "gaussian" else ""))
    generator = torch.Generator(device=post.device).manual_seed(11)
    try:
        with torch.no_grad():
            drawn = post._sample(n, generator)
    except Exception as err:  # noqa: BLE001 - whatever it raised, the rule names it
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: {rule} "
                                  f"(_sample({n}, generator) raised {type(err).__name__}: {err})") from err
    _require(isinstance(drawn, (tuple, list)) and len(drawn) == 2, name, rule,
             f"it returned {_describe(drawn)}, not a (params, log_noise_std) pair")
    params, log_noise = drawn
    _require(_tensor_problem(params, (n, width), device) is None, name, rule,
             f"params: {_tensor_problem(params, (n, width), device)}")
    if post.kind == "gaussian" and log_noise is not None:
        _require(_tensor_problem(log_noise, (n, out), device) is None, name, rule,
                 f"log_noise_std: {_tensor_problem(log_noise, (n, out), device)}")


def _describe(value: object) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"a {type(value).__module__.split('.')[0]} {type(value).__name__} of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _tensor_problem(value: object, shape: tuple[int, ...], device: torch.device) -> str | None:
    """What is wrong with ``value`` as a finite float tensor of ``shape`` on ``device`` (None: nothing)."""
    if not isinstance(value, torch.Tensor):
        return f"{_describe(value)}, not a torch tensor"
    if tuple(value.shape) != shape:
        return f"shape {tuple(value.shape)}, expected {shape}"
    if not value.dtype.is_floating_point:
        return f"dtype {value.dtype}, not a float"
    if value.device.type != device.type:
        return f"on {value.device}, not on the posterior's device"
    if not bool(torch.isfinite(value).all()):
        return "holds NaN or inf"
    return None


def _draws(post: Posterior, x: torch.Tensor, *, seed: int, n: int = 4) -> torch.Tensor:
    return post.sample(n, generator=torch.Generator(device=post.device).manual_seed(seed))(x).cpu()


def _check_fit_result(name: str, result: object, steps: int) -> None:
    _require(isinstance(result, FitResult), name, "fit returns a FitResult", f"got {type(result).__name__}")
    losses = np.asarray(result.losses)
    _require(losses.ndim == 1 and len(losses) == result.steps and result.steps >= steps, name,
             f"FitResult.losses holds one loss per step taken (at least the {steps} asked for)",
             f"{losses.shape} losses for {result.steps} steps")
    _require(bool(np.isfinite(losses).all()), name, "every training loss is finite",
             f"losses {losses.tolist()}")


def _check_device(name: str, post: Posterior, device: torch.device) -> None:
    stray = [key for key, value in post.state_dict().items() if value.device.type != device.type]
    _require(not stray, name, f"every parameter and buffer lives on the posterior's device ({device})",
             f"elsewhere: {stray}")


def _check_functions(name: str, post: Posterior, x: torch.Tensor, *, out_dim: int, device: torch.device) -> None:
    fs = post.sample(5)
    _require(isinstance(fs, FunctionSample), name, "sample(n) returns a FunctionSample", f"got {type(fs).__name__}")
    f = fs(x)
    _require(tuple(f.shape) == (5, _ROWS, out_dim), name, "sample(5)(x) is [5, rows, out]",
             f"shape {tuple(f.shape)}")
    _require(f.dtype.is_floating_point and f.device.type == device.type, name,
             f"function values are floats on the posterior's device ({device})", f"{f.dtype} on {f.device}")
    _require(bool(torch.isfinite(f).all()), name, "sampled function values are finite", "NaN or inf found")
    _require(torch.equal(f, fs(x)), name, "a sampled function is fixed: the same input gives the same output",
             "two evaluations of the same FunctionSample differ")
    part = fs(x[:10])
    _require(torch.allclose(part, f[:, :10], rtol=1e-4, atol=1e-5), name,
             "a row's output does not depend on the other rows of the batch",
             f"largest difference {float((part - f[:, :10]).abs().max()):.3g}")
    one = fs[1](x)
    _require(tuple(one.shape) == (1, _ROWS, out_dim) and torch.allclose(one, f[1:2], rtol=1e-4, atol=1e-5),
             name, "fs[i] is function i of the sample", f"shape {tuple(one.shape)}")
    _require(torch.equal(_draws(post, x, seed=3), _draws(post, x, seed=3)), name,
             "sampling is reproducible: the same generator seed draws the same functions",
             "two draws with generators seeded alike differ")
    x_grad = x.detach().clone().requires_grad_(True)
    found = "no finite gradient reached x"
    try:
        with torch.enable_grad():
            fs(x_grad).sum().backward()
    except RuntimeError as err:  # e.g. outputs cut from the graph
        found = f"backward raised {str(err).splitlines()[0]}"
    _require(x_grad.grad is not None and bool(torch.isfinite(x_grad.grad).all()), name,
             "sampled functions are differentiable in x (the attacks take gradients through them)", found)


def _check_predictive(name: str, pred: object, *, rows: int, out_dim: int,
                      labels: torch.Tensor | None = None) -> None:
    _require(isinstance(pred, Predictive), name, "predict returns a Predictive", f"got {type(pred).__name__}")
    if labels is None:
        mean, variance = pred.mean, pred.variance
        _require(tuple(mean.shape) == (rows, out_dim) and tuple(variance.shape) == (rows, out_dim), name,
                 "the predictive mean and variance are [B, out]",
                 f"shapes {tuple(mean.shape)} and {tuple(variance.shape)}")
        _require(bool(torch.isfinite(mean).all()) and bool(torch.isfinite(variance).all())
                 and bool((variance > 0).all()), name,
                 "the predictive mean is finite and its variance finite and positive",
                 f"variance from {float(variance.min()):.3g} to {float(variance.max()):.3g}")
        targets = mean.detach().clone()
    else:
        targets = labels
    for what, values in (("log_prob(y)", pred.log_prob(targets)), ("entropy()", pred.entropy()),
                         ("mutual_information()", pred.mutual_information())):
        _require(tuple(values.shape) == (rows,) and bool(torch.isfinite(values).all()), name,
                 f"Predictive.{what} is a finite [B] tensor", f"shape {tuple(values.shape)}")
    _require(bool((pred.mutual_information() >= -1e-5).all()), name,
             "the mutual information is not negative", f"smallest {float(pred.mutual_information().min()):.3g}")


def _check_refit(name: str, post: Posterior, x, y, mask, fit_kw: dict) -> None:
    _require(bool(post.units_are_fixed), name, "the first fit fixes the training units", "units_are_fixed is False")
    units = {key: getattr(post, key).clone() for key in ("x_loc", "x_scale", "y_loc", "y_scale")}
    before = int(post.steps_trained)
    post.fit(x * 3 + 1, y * 10 - 4, mask=mask, **fit_kw)
    moved = [key for key, value in units.items() if not torch.equal(value, getattr(post, key))]
    _require(not moved, name, "a warm-started refit keeps the units of the first fit", f"changed: {moved}")
    _require(int(post.steps_trained) > before, name, "a refit continues counting the steps trained",
             f"steps_trained {before} -> {int(post.steps_trained)}")


def _check_save_load(name: str, post: Posterior, x: torch.Tensor) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "posterior.pt"
        post.save(path)
        same = load_posterior(path, map_location=post.device)
    _require(type(same) is type(post), name, "load_posterior restores the same class",
             f"saved {type(post).__name__}, loaded {type(same).__name__}")
    _require(torch.equal(_draws(post, x, seed=7), _draws(same, x, seed=7)), name,
             "a saved and reloaded posterior draws the same functions with the same generator seed",
             "the draws differ")


def _check_numpy_inputs(name: str, post: Posterior, data: _Problem, fit_kw: dict) -> None:
    x, y, mask = data.regression()
    result = post.fit(x.numpy(), y.numpy(), mask=mask.numpy(), **fit_kw)
    _require(bool(np.isfinite(np.asarray(result.losses)).all()), name,
             "fit accepts numpy arrays (with a mask) like tensors", "non-finite losses")
    f = post.sample(2)(x.numpy())
    _require(tuple(f.shape) == (2, _ROWS, 2), name, "a FunctionSample accepts a numpy x", f"shape {tuple(f.shape)}")


def _check_bad_input(name: str, post: Posterior, x: torch.Tensor, y: torch.Tensor, fit_kw: dict) -> None:
    bad_x = x.clone()
    bad_x[3, 1] = float("nan")
    cases: list[tuple[str, Callable[[], object]]] = [
        ("sample(0)", lambda: post.sample(0)),
        ("predict on inputs with a wrong number of columns", lambda: post.predict(torch.randn(5, _IN_DIM + 2))),
        ("fit on inputs that hold NaN", lambda: post.fit(bad_x, y, mask=torch.isfinite(y), **fit_kw)),
    ]
    for what, call in cases:
        try:
            call()
        except ValueError:
            continue
        except Exception as err:  # noqa: BLE001 - the rule is about which error
            raise PosteriorCheckError(f"posterior {name!r} breaks the rule: bad input raises ValueError "
                                      f"({what} raised {type(err).__name__}: {err})") from err
        raise PosteriorCheckError(f"posterior {name!r} breaks the rule: bad input raises ValueError "
                                  f"({what} raised nothing)")
