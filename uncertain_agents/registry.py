"""Name -> posterior class registry, ``make_posterior`` and ``load_posterior``."""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import torch

from .network import MLPSpec

_REGISTRY: dict[str, type] = {}
_ALIASES: dict[str, str] = {}
_LOADED = False


def register(name: str, *aliases: str):
    """Class decorator: make a ``Posterior`` subclass available under ``name`` (and aliases)."""

    def decorate(cls):
        _REGISTRY[name] = cls
        for alias in aliases:
            _ALIASES[alias] = name
        return cls

    return decorate


def _load_all() -> None:
    """Import every module of ``uncertain_agents.posteriors`` so that they register."""
    global _LOADED
    if _LOADED:
        return
    package = importlib.import_module("uncertain_agents.posteriors")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"uncertain_agents.posteriors.{info.name}")
    _LOADED = True


def available_posteriors(*, include_aliases: bool = False) -> list[str]:
    """Sorted names accepted by :func:`make_posterior`."""
    _load_all()
    names = set(_REGISTRY)
    if include_aliases:
        names |= set(_ALIASES)
    return sorted(names)


def resolve_name(name: str) -> str:
    _load_all()
    if not isinstance(name, str):
        raise TypeError(f"posterior name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        raise ValueError(f"unknown posterior {name!r}; valid names: {', '.join(available_posteriors())}"
                         f" (aliases: {', '.join(sorted(_ALIASES))})")
    return key


def posterior_class(name: str) -> type:
    return _REGISTRY[resolve_name(name)]


def method_options(name: str) -> list[str]:
    """Keyword options a posterior accepts beyond the common ones."""
    cls = posterior_class(name)
    options: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            sig = inspect.signature(vars(klass)["__init__"])
            options |= {p.name for p in sig.parameters.values()
                        if p.kind == p.KEYWORD_ONLY}
    return sorted(options - {"device", "seed"})


def make_posterior(name: str, *, in_dim: int, out_dim: int, hidden=(50,), activation: str = "relu",
                   likelihood: str = "gaussian", device="cpu", seed: int | None = None,
                   **method_kwargs):
    """Build a posterior by name.

    Args:
        name: one of :func:`available_posteriors` (aliases such as ``vi``/``bbb`` work).
        in_dim, out_dim: network input and output widths (out_dim = classes or arms).
        hidden: hidden-layer widths, e.g. ``(50,)`` or ``(100, 100)``.
        activation: hidden non-linearity.
        likelihood: ``"gaussian"`` or ``"categorical"``.
        device: ``"cpu"``, ``"cuda"``, a ``torch.device``.
        seed: makes initialisation and sampling reproducible.
        **method_kwargs: method options (``alpha``, ``train_samples``, ``prior_std``,
            ``noise_std``, ``dropout``, ``n_particles``, ``n_members``, ...).
    """
    key = resolve_name(name)
    cls = _REGISTRY[key]
    allowed = method_options(key)
    unknown = sorted(set(method_kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"{key} got unknown option(s) {unknown}; it accepts {allowed}")
    if isinstance(hidden, int):
        hidden = (hidden,)
    try:
        hidden = tuple(hidden)
    except TypeError:
        raise TypeError(f"hidden must be a sequence of layer widths, got {hidden!r}") from None
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but CUDA is not available")
    spec = MLPSpec(in_dim, out_dim, hidden, activation)
    post = cls(spec, likelihood, device=device, seed=seed, **method_kwargs)
    post.config = {"name": key, "in_dim": spec.in_dim, "out_dim": spec.out_dim, "hidden": list(spec.hidden),
                   "activation": activation, "likelihood": likelihood, "seed": seed,
                   **method_kwargs}
    json.dumps(post.config)  # fail early if an option cannot be saved
    return post.to(device)


def load_posterior(path, map_location=None):
    """Restore a posterior written by ``Posterior.save`` (tensors loaded with ``weights_only=True``).

    Args:
        path: the file.
        map_location: device to load onto (default: CPU).
    """
    from .posteriors.base import SAVE_FORMAT

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved posterior at {path}")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != SAVE_FORMAT:
        raise ValueError(f"{path} is not a posterior saved by uncertain-agents ({SAVE_FORMAT})")
    config = json.loads(payload["config"])
    name = config.pop("name")
    post = make_posterior(name, device="cpu", **config)
    post._load_tensors(payload["state"])
    return post.to(map_location or "cpu")
