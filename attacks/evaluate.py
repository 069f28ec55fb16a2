"""Train (or load) several classifiers on an image data set and attack each of them.

Used by the ``uncertain-agents attack`` command and ``experiments/mnist_attacks.py``.
A posterior is chosen by a spec string ``NAME[:key=value,...]``, e.g. ``map`` or
``dropout-alpha:alpha=0.5``; the whole string labels its rows in the results.
"""
from __future__ import annotations

import inspect
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from uncertain_agents.datasets.images import ImageDataset
from uncertain_agents.options import parse_posterior_spec
from uncertain_agents.registry import load_posterior, make_posterior, posterior_class, resolve_name
from uncertain_agents.runs import atomic_write_text
from uncertain_agents.seeding import ATTACK_SUBSET_KEY, stream_generator
from uncertain_agents.validation import check_positive_int, check_seed

from .fgsm import DEFAULT_EPSILONS, clean_accuracy, fgsm
from .ifgsm import targeted_ifgsm
from .inputs import check_positive_number
from .plots import detection_metrics, plot_attack_curves
from uncertain_agents.posteriors.optimizers import load_optimizer_machinery

DATASETS = ("mnist", "digits")
#: ``(pixels, classes)`` of each data set: the classifier's input and output widths, known before loading
IMAGE_SHAPES = {"mnist": (784, 10), "digits": (64, 10)}
ATTACKS = ("fgsm", "ifgsm")


@dataclass(frozen=True)
class PosteriorChoice:
    """A posterior named on the command line: ``label = "name:key=value,..."``."""

    label: str
    name: str
    options: dict = field(default_factory=dict)

    @property
    def file_stem(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.label)


def parse_posterior(text: str) -> PosteriorChoice:
    """Parse ``"NAME[:key=value,...]"`` (the name is checked against the registry)."""
    name, options = parse_posterior_spec(text)
    return PosteriorChoice(text.strip(), resolve_name(name), options)


def load_dataset(name: str, data_dir=None) -> ImageDataset:
    """``"mnist"`` (data folder / download) or ``"digits"`` (scikit-learn, offline)."""
    if name == "mnist":
        from uncertain_agents.datasets.mnist import load_mnist

        return load_mnist(data_dir)
    if name == "digits":
        from uncertain_agents.datasets.digits import load_digits

        return load_digits()
    raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {name!r}")


def build_classifier(choice: PosteriorChoice, data: ImageDataset, *, hidden=(400, 400),
                     activation: str = "relu", seed: int = 0, device="cpu"):
    """A categorical posterior for ``data``: ``make_posterior`` with the choice's options only."""
    return make_posterior(choice.name, in_dim=data.in_dim, out_dim=data.n_classes, hidden=tuple(hidden),
                          activation=activation, likelihood="categorical", device=device, seed=seed,
                          **choice.options)


def train_classifier(post, data: ImageDataset, *, epochs: float, batch_size: int = 128,
                     lr: float | None = None, progress: bool = False) -> float:
    """Fit for ``epochs`` passes over the training set; returns the wall time in seconds.

    The attack job trains on pixels as they are: before the first fit it fixes the
    posterior's input units to the identity (``post.set_units()``, unless they are already
    fixed), so an ε in pixel units means the same for every model, and a pixel that is
    almost constant in the training set is not blown up by a per-pixel standardisation.
    """
    epochs = check_positive_number(epochs, "epochs")
    batch_size = check_positive_int(batch_size, "batch_size")
    if not post.units_are_fixed:
        post.set_units()
    steps = max(1, int(math.ceil(epochs * len(data.y_train) / batch_size)))
    x = torch.as_tensor(data.x_train)
    y = torch.as_tensor(data.y_train)
    load_optimizer_machinery()  # a one-off import, not this training's time
    t0 = time.perf_counter()
    post.fit(x, y, steps=steps, batch_size=batch_size, lr=lr, progress=progress)
    return time.perf_counter() - t0


def attack_subset(data: ImageDataset, n: int | None, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random subset of ``n`` test images (all of them when ``n`` is None)."""
    x, y = torch.as_tensor(data.x_test), torch.as_tensor(data.y_test)
    if n is None or n >= len(y):
        return x, y
    idx = torch.randperm(len(y), generator=stream_generator(check_seed(seed), ATTACK_SUBSET_KEY))[:n]
    return x[idx], y[idx]


def is_deterministic(post, draws: int = 16) -> bool:
    """True when ``draws`` seeded samples are all the same function (e.g. ``map``); then one
    sample is as good as many and attacks use ``n_samples=1``."""
    params = post.sample(draws, generator=torch.Generator(device=post.device).manual_seed(0)).params
    return bool((params == params[:1]).all())


def attack_units(n_inputs: int, attacks=ATTACKS, steps: int = 40) -> int:
    """How many times :func:`evaluate` calls its ``progress`` per posterior: one per chunk of rows
    FGSM attacks (``fgsm``'s default ``batch_size``) and one per I-FGSM step."""
    units = 0
    if "fgsm" in attacks:
        units += math.ceil(n_inputs / inspect.signature(fgsm).parameters["batch_size"].default)
    if "ifgsm" in attacks:
        units += steps
    return units


def evaluate(posteriors: dict, x_test, y_test, x_attack, y_attack, *, attacks=ATTACKS,
             epsilons=DEFAULT_EPSILONS, step: float = 0.01, steps: int = 40, target: int = 0,
             n_samples: int = 20, eval_samples: int | None = None, seed: int = 0,
             log=None, progress: Callable[[], None] | None = None) -> dict[str, pd.DataFrame]:
    """Clean accuracy on ``x_test`` and the chosen attacks on ``x_attack`` for each posterior.

    ``progress`` (no arguments) is called as the attacks advance, :func:`attack_units` times per
    posterior (for a progress bar; the ``attack`` command draws one).

    Returns:
        ``{"clean": ..., "fgsm": ..., "ifgsm": ...}`` long DataFrames with a ``posterior``
        column (only the attacks asked for). A deterministic posterior is attacked and
        scored with one sample.
    """
    bad = sorted(set(attacks) - set(ATTACKS))
    if bad:
        raise ValueError(f"attacks must be among {ATTACKS}, got {bad}")
    n_samples = check_positive_int(n_samples, "n_samples")
    evals_default = n_samples if eval_samples is None else check_positive_int(eval_samples, "eval_samples")
    clean, frames = [], {a: [] for a in attacks}
    for label, post in posteriors.items():
        t0 = time.perf_counter()
        att, evals = (1, 1) if is_deterministic(post) else (n_samples, evals_default)
        acc = clean_accuracy(post, x_test, y_test, n_samples=evals, seed=seed)
        clean.append({"posterior": label, "clean_accuracy": acc, "n_test": int(len(y_test))})
        if "fgsm" in attacks:
            frame = fgsm(post, x_attack, y_attack, epsilons=epsilons, n_samples=att,
                         eval_samples=evals, seed=seed, progress=progress)
            frames["fgsm"].append(frame.assign(posterior=label))
        if "ifgsm" in attacks:
            frame = targeted_ifgsm(post, x_attack, y_attack, target=target, step=step, steps=steps,
                                   n_samples=att, eval_samples=evals, seed=seed, progress=progress)
            frames["ifgsm"].append(frame.assign(posterior=label))
        if log is not None:
            log(f"attacked {label}: clean accuracy {acc:.4f} ({time.perf_counter() - t0:.1f} s)")
    out = {"clean": pd.DataFrame(clean)}
    for name, parts in frames.items():
        frame = pd.concat(parts, ignore_index=True)
        out[name] = frame[["posterior", *[c for c in frame.columns if c != "posterior"]]]
    return out


def write_outputs(results: dict[str, pd.DataFrame], out_dir, config: dict) -> list[Path]:
    """CSV per table, PNG plots and ``summary.json``.

    ``fgsm.png`` draws accuracy and mean entropy against ε, ``ifgsm.png`` accuracy, target success
    and mean entropy against the step; both add one panel per detection AUROC the table holds
    (entropy, mutual information) with a chance line at 0.5."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in results.items():
        written.append(atomic_write_text(out_dir / f"{name}.csv", frame.to_csv(index=False)))
    if "fgsm" in results:
        written.append(plot_attack_curves(results["fgsm"], out_dir / "fgsm.png", x="epsilon",
                                          title=f"FGSM on {config.get('dataset', '')}"))
    if "ifgsm" in results:
        written.append(plot_attack_curves(results["ifgsm"], out_dir / "ifgsm.png", x="step",
                                          metrics=("accuracy", "target_success", "mean_entropy",
                                                   *detection_metrics(results["ifgsm"])),
                                          title=f"targeted I-FGSM (target {config.get('target', 0)})"))
    summary = {"config": config,
               "tables": {k: json.loads(v.to_json(orient="records")) for k, v in results.items()}}
    written.append(atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2, default=_json_default)))
    return written


def _json_default(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


#: What ``make_posterior`` records in a posterior's ``config`` besides the method's options.
NETWORK_KEYS = ("name", "in_dim", "out_dim", "hidden", "activation", "likelihood", "seed")
_NO_DEFAULT = object()


def option_defaults(name: str) -> dict:
    """The default of every keyword option of posterior ``name`` (the most derived class's wins)."""
    defaults: dict = {}
    for klass in posterior_class(name).__mro__:
        if "__init__" in vars(klass):
            for param in inspect.signature(vars(klass)["__init__"]).parameters.values():
                if param.kind == param.KEYWORD_ONLY and param.default is not param.empty:
                    defaults.setdefault(param.name, param.default)
    return defaults


def _as_saved(value):
    """``value`` as a saved configuration reads it back (JSON: tuples become lists)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def _describe(name: str, options: dict, hidden, activation) -> str:
    opts = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items())) or "default options"
    return f"method {name!r} ({opts}), hidden {list(hidden)}, activation {activation!r}"


def check_loaded(post, choice: PosteriorChoice, path, *, hidden=(400, 400), activation: str = "relu") -> None:
    """Raise ``ValueError`` unless the loaded ``post`` is the model ``choice`` with ``hidden`` and
    ``activation`` asks for: the same registered method (names compared after ``resolve_name``), the
    same options (as its saved ``config`` holds them; an option left out counts as its default) and
    the same network (hidden widths, activation). The message names the file, what it holds and
    what was asked for."""
    hidden = [int(h) for h in ((hidden,) if isinstance(hidden, int) else hidden)]
    config = dict(post.config)
    held_name = resolve_name(str(config.get("name", post.name)))
    held_options = {k: v for k, v in config.items() if k not in NETWORK_KEYS}
    held_hidden = list(config.get("hidden", post.spec.hidden))
    held_activation = config.get("activation", post.spec.activation)
    wanted_options = {k: _as_saved(v) for k, v in choice.options.items()}
    differences = []
    if held_name != choice.name:
        differences.append(f"method {held_name!r} instead of {choice.name!r}")
    else:
        defaults = option_defaults(held_name)
        for key in sorted(set(held_options) | set(wanted_options)):
            default = _as_saved(defaults.get(key, _NO_DEFAULT))
            held, wanted = held_options.get(key, default), wanted_options.get(key, default)
            if held != wanted or isinstance(held, bool) != isinstance(wanted, bool):
                shown = ["(not set)" if value is _NO_DEFAULT else
                         repr(value) + ("" if key in given else " (the default)")
                         for value, given in ((held, held_options), (wanted, wanted_options))]
                differences.append(f"{key}={shown[0]} instead of {shown[1]}")
    if held_hidden != hidden:
        differences.append(f"hidden {held_hidden} instead of {hidden}")
    if held_activation != activation:
        differences.append(f"activation {held_activation!r} instead of {activation!r}")
    if differences:
        raise ValueError(
            f"{path} holds {_describe(held_name, held_options, held_hidden, held_activation)}, but "
            f"posterior {choice.label!r} asks for {_describe(choice.name, choice.options, hidden, activation)} "
            f"({'; '.join(differences)}); load a file saved for this posterior and network")


def load_or_train(choices, data: ImageDataset, *, load_dir=None, save_dir=None, hidden=(400, 400),
                  activation="relu", epochs: float = 5, batch_size: int = 128, lr=None, seed: int = 0,
                  device="cpu", progress: bool = False, log=None) -> tuple[dict, pd.DataFrame]:
    """Posteriors by label, loaded from ``load_dir/<label>.pt`` or trained (and saved to
    ``save_dir``), plus a table of training times.

    A loaded file must hold the model that would be trained in its place: a classifier for
    ``data`` of the choice's method and options with ``hidden`` and ``activation``
    (:func:`check_loaded`); anything else raises ``ValueError`` naming the file.
    """
    posteriors, times = {}, []
    for choice in choices:
        if load_dir is not None:
            path = Path(load_dir) / f"{choice.file_stem}.pt"
            post = load_posterior(path, map_location=device)
            if (post.kind != "categorical" or post.spec.in_dim != data.in_dim
                    or post.spec.out_dim != data.n_classes):
                raise ValueError(f"{path} is not a classifier for {data.name} ({data.in_dim} inputs, "
                                 f"{data.n_classes} classes): it holds likelihood {post.kind!r} with "
                                 f"{post.spec.in_dim} inputs and {post.spec.out_dim} outputs")
            check_loaded(post, choice, path, hidden=hidden, activation=activation)
            seconds = float("nan")
        else:
            post = build_classifier(choice, data, hidden=hidden, activation=activation, seed=seed, device=device)
            seconds = train_classifier(post, data, epochs=epochs, batch_size=batch_size, lr=lr, progress=progress)
            if save_dir is not None:
                Path(save_dir).mkdir(parents=True, exist_ok=True)
                post.save(Path(save_dir) / f"{choice.file_stem}.pt")
        if log is not None:
            log(f"{'loaded' if load_dir else 'trained'} {choice.label}"
                + ("" if math.isnan(seconds) else f" in {seconds:.1f} s"))
        posteriors[choice.label] = post
        times.append({"posterior": choice.label, "train_seconds": seconds})
    return posteriors, pd.DataFrame(times)
