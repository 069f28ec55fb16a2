"""One ``Registry`` class for every name lookup, the posterior registry, ``make_posterior`` and ``load_posterior``.

:class:`Registry` maps names (and their aliases) to objects. The library keeps three:
``POSTERIORS`` here (posterior classes), ``uncertain_agents.agents.factory.AGENTS`` (agent
builders) and ``uncertain_agents.agents.experiment.ENVS`` (bandit-environment factories).
"""
from __future__ import annotations

import importlib
import inspect
from importlib import metadata
import json
import os
import pkgutil
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, TypeVar

import torch

from .network import MLPSpec
from .validation import check_device

if TYPE_CHECKING:  # pragma: no cover
    from .posteriors.base import Posterior

T = TypeVar("T")


class Registry(Generic[T]):
    """Names and their aliases → registered objects (classes, builders, factories).

    Names and aliases are matched case-insensitively and without surrounding spaces; every
    name or alias is registered once. ``load``, if given, is called once before the first
    lookup (the posterior registry uses it to import the modules that register themselves).
    A ``load`` that fails with an ``ImportError`` (a broken plugin) keeps what it registered
    and is tried again by the next lookup that needs every name (:meth:`names`, an unknown
    name), which raises it again; a name already registered still resolves, so a broken
    plugin does not take down the names it does not provide.

    Example::

        SHAPES = Registry("shape")

        @SHAPES.register("circle", "round")   # as a decorator
        class Circle: ...

        SHAPES.register("square")(Square)     # as a call
        SHAPES.resolve("Round")               # -> "circle"
        SHAPES.get("circle")                  # -> Circle
        SHAPES.aliases("circle")              # -> ["round"]
    """

    def __init__(self, kind: str, *, load: Callable[[], None] | None = None,
                 validate: Callable[[str, T], None] | None = None) -> None:
        """``kind`` names what is registered in error messages ("unknown {kind} 'x'; ...");
        ``validate(name, obj)``, if given, raises for an object that may not be registered."""
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._load = load
        self._load_error: ImportError | None = None  # the last failed load (a broken plugin)
        self._validate = validate

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Register an object under ``name`` and ``aliases``; returns a decorator that returns the object.

        Use it as ``@registry.register("name", "alias")`` or ``registry.register("name")(obj)``.
        Raises ``ValueError`` when a name or alias is already taken.
        """
        for key in (name, *aliases):
            if not isinstance(key, str) or not key.strip():
                raise TypeError(f"a {self.kind} name or alias must be a non-empty string, got {key!r}")
        keys = [self._key(key) for key in (name, *aliases)]

        def add(obj: T) -> T:
            taken = sorted({key for key in keys if key in self._items or key in self._aliases}
                           | {key for key in keys if keys.count(key) > 1})
            if taken:
                raise ValueError(f"{self.kind} name(s) {taken} registered twice")
            if self._validate is not None:
                self._validate(keys[0], obj)
            self._items[keys[0]] = obj
            self._aliases.update(dict.fromkeys(keys[1:], keys[0]))
            return obj

        return add

    def unregister(self, name: str) -> T:
        """Remove ``name`` (or the name an alias of it stands for) with all its aliases; returns the
        object. Lets a notebook re-run a cell that registers, and a test clean up after itself.
        Raises ``ValueError`` (listing the valid names) for an unknown name."""
        key = self.resolve(name)
        for alias in [alias for alias, target in self._aliases.items() if target == key]:
            del self._aliases[alias]
        return self._items.pop(key)

    def resolve(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases.

        Raises ``TypeError`` for a non-string and ``ValueError`` listing the valid names and
        aliases for an unknown name.
        """
        if not isinstance(name, str):
            raise TypeError(f"{self.kind} name must be a string, got {type(name).__name__}")
        key = self._registered(name)
        if key is not None and self._load_error is not None:
            return key  # registered before a plugin failed to load: not tried (and refused) again
        key = self._load_for(name)
        if key is None:
            aliases = f" (aliases: {', '.join(sorted(self._aliases))})" if self._aliases else ""
            raise ValueError(f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names())}{aliases}")
        return key

    def get(self, name: str) -> T:
        """The object registered under ``name`` (or an alias of it)."""
        return self._items[self.resolve(name)]

    def names(self) -> list[str]:
        """The registered names (no aliases), sorted."""
        self._ensure_loaded()
        return sorted(self._items)

    def aliases(self, name: str) -> list[str]:
        """The aliases of ``name`` (or of the name an alias stands for), sorted."""
        key = self.resolve(name)
        return sorted(alias for alias, target in self._aliases.items() if target == key)

    def alias_table(self) -> dict[str, str]:
        """Every alias → the name it stands for (a copy)."""
        self._ensure_loaded()
        return dict(self._aliases)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a registered name or alias."""
        if not isinstance(name, str):
            return False
        if self._registered(name) is not None and self._load_error is not None:
            return True
        return self._load_for(name) is not None

    def _load_for(self, name: str) -> str | None:
        """Load (see :meth:`_ensure_loaded`), then the registered name for ``name`` or None. A load
        that fails with an ``ImportError`` (a broken plugin) is raised only when ``name`` is not
        registered (a name the broken plugin may provide), the message then naming ``name`` too."""
        try:
            self._ensure_loaded()
        except ImportError as err:
            key = self._registered(name)
            if key is not None:
                return key
            if isinstance(err, PluginImportError):
                raise PluginImportError(f"unknown {self.kind} {name!r}, perhaps one a broken plugin provides: "
                                        f"{err}", err.failures) from err
            raise
        return self._registered(name)

    def _registered(self, name: str) -> str | None:
        """The registered name ``name`` or its alias stands for, if registered already (no loading)."""
        key = self._key(name)
        key = self._aliases.get(key, key)
        return key if key in self._items else None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"

    @staticmethod
    def _key(name: str) -> str:
        return name.strip().lower()

    def _ensure_loaded(self) -> None:
        if self._load is not None:
            load, self._load = self._load, None  # cleared first: what it imports may look names up
            try:
                load()
            except BaseException as err:
                self._load = load  # a failed load (a broken plugin) is tried, and reported, again
                if isinstance(err, ImportError):
                    self._load_error = err
                raise
            self._load_error = None

    def registered_now(self, name: str) -> T | None:
        """The object registered under ``name`` (or an alias of it) so far, or None; never loads."""
        key = self._registered(name) if isinstance(name, str) else None
        return None if key is None else self._items[key]

    def loaded_names(self) -> list[str]:
        """The names registered so far, sorted, without loading (after a failed ``load`` — a
        broken plugin — the names it did register; :meth:`names` raises the failure instead)."""
        return sorted(self._items)


#: Entry-point group through which an installed package adds posteriors: each entry point names
#: a module whose import registers them (``@register_posterior``), e.g. in that package's
#: ``pyproject.toml``: ``[project.entry-points."uncertain_agents.posteriors"]`` /
#: ``my-method = "my_package.my_posterior"``. The CLI and worker processes then know the method too.
PLUGIN_GROUP = "uncertain_agents.posteriors"


def _import_posteriors() -> None:
    """Import every module of ``uncertain_agents.posteriors`` so that they register, then the
    modules that installed packages name under :data:`PLUGIN_GROUP`."""
    package = importlib.import_module("uncertain_agents.posteriors")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"uncertain_agents.posteriors.{info.name}")
    import_posterior_plugins()


class PluginImportError(ImportError):
    """A posterior plugin (an entry point under :data:`PLUGIN_GROUP`) failed to import. The message
    is one line naming each broken plugin; ``failures`` maps their entry-point names to what their
    import raised. The command line reports it as ``error: ...`` (exit code 2)."""

    def __init__(self, message: str, failures: dict[str, str]) -> None:
        super().__init__(message)
        self.failures = failures


def import_posterior_plugins() -> list[str]:
    """Import the modules named under the entry-point group :data:`PLUGIN_GROUP`; returns their
    entry-point names. Every plugin is tried; raises :class:`PluginImportError` (an ``ImportError``)
    naming each plugin whose module fails to import (the others stay registered)."""
    loaded, failures, first = [], {}, None
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        before = set(POSTERIORS.loaded_names())
        try:
            entry.load()
        except Exception as err:  # noqa: BLE001 - any failure of a plugin's import is reported as one
            for name in set(POSTERIORS.loaded_names()) - before:  # a half-imported plugin registers nothing
                POSTERIORS.unregister(name)  # (and its next try does not find its names taken)
            lines = str(err).strip().splitlines()
            failures[entry.name] = (f"posterior plugin {entry.name!r} ({entry.value}, entry-point group "
                                    f"{PLUGIN_GROUP!r}) failed to import: {type(err).__name__}"
                                    + (f": {lines[0]}" if lines else ""))
            first = first or err
            continue
        loaded.append(entry.name)
    if failures:
        raise PluginImportError("; ".join(failures.values()), failures) from first
    return loaded


def _check_posterior_class(name: str, cls: object) -> None:
    """A registered posterior is a :class:`~.posteriors.Posterior` subclass whose ``name`` is the name
    it is registered under (``save`` writes that name; ``load_posterior`` looks it up)."""
    from .posteriors.base import Posterior

    if not (isinstance(cls, type) and issubclass(cls, Posterior)):
        raise TypeError(f"register_posterior({name!r}) expects a subclass of uncertain_agents.Posterior, "
                        f"got {cls!r}")
    if cls.name != name:
        raise ValueError(f"register_posterior({name!r}): class {cls.__name__} has name = {cls.name!r}; set "
                         f"name = {name!r} in the class (save() writes it and load_posterior() looks it up)")


POSTERIORS: Registry[type] = Registry("posterior", load=_import_posteriors, validate=_check_posterior_class)
"""Posterior classes by name; a method registers with ``@register("name", "alias", ...)``."""

register = POSTERIORS.register
register_posterior = POSTERIORS.register
"""Public: ``@register_posterior("name", "alias")`` adds a :class:`~.posteriors.Posterior` subclass to the
registry, so that ``make_posterior``, ``load_posterior`` and the agents know it in this process (an
installed package's entry point under :data:`PLUGIN_GROUP` makes it known to the CLI and worker
processes too; docs/posteriors.md, "Adding a method"). Check it with
:func:`~uncertain_agents.check_posterior`."""
unregister_posterior = POSTERIORS.unregister
resolve_name = POSTERIORS.resolve
posterior_class = POSTERIORS.get


def available_posteriors(*, include_aliases: bool = False) -> list[str]:
    """Sorted names accepted by :func:`make_posterior` (with ``include_aliases``, their aliases too)."""
    names = POSTERIORS.names()
    if include_aliases:
        names += list(POSTERIORS.alias_table())
    return sorted(names)


def method_options(name: str) -> list[str]:
    """Keyword options a posterior accepts beyond the common ones (an option its class fixes,
    listed in its ``fixed_options``, such as ``map``'s ``n_members``, is not one of them)."""
    cls = posterior_class(name)
    options: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            sig = inspect.signature(vars(klass)["__init__"])
            options |= {p.name for p in sig.parameters.values()
                        if p.kind == p.KEYWORD_ONLY}
    return sorted(options - {"device", "seed"} - set(getattr(cls, "fixed_options", ())))


def make_posterior(name: str, *, in_dim: int, out_dim: int, hidden: Sequence[int] | int = (50,),
                   activation: str = "relu", likelihood: str = "gaussian", device: str | torch.device = "cpu",
                   seed: int | None = None, **method_kwargs: Any) -> "Posterior":
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
    cls = POSTERIORS.get(key)
    allowed = method_options(key)
    # an option the class fixes goes on to its constructor, whose error says why (e.g. "use 'ensemble'")
    unknown = sorted(set(method_kwargs) - set(allowed) - set(getattr(cls, "fixed_options", ())))
    if unknown:
        raise TypeError(f"{key} got unknown option(s) {unknown}; it accepts {allowed}")
    if isinstance(hidden, int):
        hidden = (hidden,)
    try:  # text goes on as given: MLPSpec names it (tuple("50") would be ('5', '0'))
        hidden = hidden if isinstance(hidden, (str, bytes)) else tuple(hidden)
    except TypeError:
        raise TypeError(f"hidden must be a sequence of layer widths, got {hidden!r}") from None
    device = check_device(device)
    spec = MLPSpec(in_dim, out_dim, hidden, activation)
    # the construction records post.config — name, spec fields, likelihood, seed, the options given,
    # NumPy scalars as Python numbers — and refuses an option JSON cannot save (posteriors/base.py)
    post = cls(spec, likelihood, device=device, seed=seed, **method_kwargs)
    return post.to(device)


def load_posterior(path: str | os.PathLike, map_location: str | torch.device | None = None) -> "Posterior":
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
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike), got {type(path).__name__}")
    path = Path(path)
    if map_location is not None:
        map_location = check_device(map_location, "map_location")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a saved posterior; give the path of a file "
                                f"written by Posterior.save")
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
    if name not in POSTERIORS:  # a registered name loads even when some other plugin is broken
        raise _LoadError(f"unknown method {name!r} (known: {', '.join(POSTERIORS.loaded_names())})")
    if "method" in payload and payload["method"] != name:
        raise _LoadError(f"the file says method {payload['method']!r} but its configuration says {name!r}")
    missing = sorted({"in_dim", "out_dim", "hidden"} - set(config))
    if missing:
        raise _LoadError(f"the saved configuration lacks {missing}")
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise _LoadError(f"tensor {key!r} holds NaN or infinite values")
    try:
        spec = MLPSpec(config["in_dim"], config["out_dim"], config["hidden"], config.get("activation", "relu"))
    except (TypeError, ValueError) as err:
        raise _LoadError(f"the saved configuration is invalid: {err}") from None
    for key, size in (("prior_std", spec.num_params), ("x_loc", spec.in_dim), ("y_loc", spec.out_dim)):
        if key in state and tuple(state[key].shape) != (size,):
            raise _LoadError(f"the tensors do not match a {name} posterior of this configuration: its "
                             f"{'-'.join(map(str, spec.widths))} network has {key} of shape ({size},), "
                             f"the file's {tuple(state[key].shape)}")
    try:
        post = make_posterior(name, device="cpu", **config)
    except (TypeError, ValueError, RuntimeError, MemoryError) as err:
        raise _LoadError(f"the saved configuration is invalid: {err}") from None
    dtypes = {value.dtype for value in state.values() if value.is_floating_point()}
    if len(dtypes) == 1 and dtypes != {torch.float32}:  # saved after .double() / .half(): keep its precision
        post.to(dtypes.pop())
    try:
        post._load_tensors(state)
    except (ValueError, RuntimeError) as err:
        raise _LoadError(f"the tensors do not match a {name} posterior of this configuration: "
                         f"{str(err).splitlines()[0]}") from None
    if "training" in payload:  # optimisers and the training stream (posteriors/resume.py)
        from .posteriors.resume import restore_training_state

        try:
            restore_training_state(post, payload["training"])
        except ValueError as err:
            raise _LoadError(str(err)) from None
    return post.to(map_location or "cpu")
