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
    """Restore a posterior written by ``Posterior.save``.

    Tensors are loaded with ``weights_only=True`` (no code in the file ever runs). Every
    malformed file — empty, truncated, corrupted (a SHA-256 checksum covers the whole file,
    see :mod:`uncertain_agents.posteriors.storage`), not a torch file, a pickle, missing or mistyped entries, an unknown
    method, a method name that does not match the tensors, non-finite tensors — raises one
    ``ValueError`` naming the file and what is wrong.

    Args:
        path: the file.
        map_location: device to load onto (default: CPU).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved posterior at {path}")
    try:
        return _load(path, map_location)
    except _LoadError as err:
        raise ValueError(f"{path}: {err}") from None


class _LoadError(Exception):
    pass


def _load(path: Path, map_location):
    from .posteriors.storage import PayloadError, read_payload

    try:
        payload = read_payload(path.read_bytes())
    except PayloadError as err:
        raise _LoadError(str(err)) from None
    config_text, state = payload.get("config"), payload.get("state")
    if not isinstance(config_text, str):
        raise _LoadError("the saved configuration is missing or not text")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in state.items()):
        raise _LoadError("the saved tensors are missing or not a {name: tensor} table")
    try:
        config = json.loads(config_text)
    except ValueError as err:
        raise _LoadError(f"the saved configuration is not valid JSON ({err})") from None
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise _LoadError("the saved configuration has no method name")
    name = config.pop("name")
    if name not in _REGISTRY:
        raise _LoadError(f"unknown method {name!r} (known: {', '.join(available_posteriors())})")
    if "method" in payload and payload["method"] != name:
        raise _LoadError(f"the file says method {payload['method']!r} but its configuration says {name!r}")
    missing = sorted({"in_dim", "out_dim", "hidden"} - set(config))
    if missing:
        raise _LoadError(f"the saved configuration lacks {missing}")
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise _LoadError(f"tensor {key!r} holds NaN or infinite values")
    try:
        post = make_posterior(name, device="cpu", **config)
    except (TypeError, ValueError) as err:
        raise _LoadError(f"the saved configuration is invalid: {err}") from None
    try:
        post._load_tensors(state)
    except (ValueError, RuntimeError) as err:
        raise _LoadError(f"the tensors do not match a {name} posterior of this configuration: "
                         f"{str(err).splitlines()[0]}") from None
    return post.to(map_location or "cpu")
