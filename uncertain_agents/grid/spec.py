"""Grid specifications: a job kind, fixed settings, lists to cross and the methods to run.

A spec is a TOML file (or the equivalent dict)::

    name = "smoke"
    kind = "regress"                 # regress | bandit | attack | toy
    description = "two posteriors × two Boston splits × a few epochs"

    [settings]                       # one value each, shared by every cell
    dataset = "bostonHousing"
    epochs = 3

    [cross]                          # lists; every combination is a cell
    split = [0, 1]

    [[methods]]                      # what runs in every combination
    posterior = "mfvi"
    [[methods]]
    posterior = "bb-alpha"
    options = { alpha = 0.5 }

A key may sit in ``settings`` or in ``cross``, not both; keys a spec leaves out take the
job's defaults (:mod:`uncertain_agents.grid.jobs`), which are written into every cell so a
cell's configuration is complete. Everything is validated before any cell runs; errors name
the offending key.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

from .jobs import JOBS, Job, CellDims, check_method_options
from .reference import check_reference, reference_csv
from .table import method_label

SPEC_KEYS = {"name", "kind", "description", "settings", "cross", "methods", "reference"}
METHOD_KEYS = {"posterior", "options", "agent", "label"}


@dataclass(frozen=True)
class GridSpec:
    """A validated grid: ``cells()`` lists every cell's full configuration."""

    name: str
    kind: str
    settings: dict
    cross: dict
    methods: tuple[dict, ...]
    description: str = ""
    reference: dict = field(default_factory=dict)
    source: str = ""  # the spec file (reference CSVs are resolved against its folder)

    @property
    def job(self) -> Job:
        return JOBS[self.kind]

    def cells(self) -> list[dict]:
        """Every combination of ``cross`` × ``methods``, with settings and defaults filled in."""
        keys = list(self.cross)
        cells = []
        for method in self.methods:
            for values in itertools.product(*(self.cross[k] for k in keys)):
                config = {**self.job.defaults, **self.settings, **dict(zip(keys, values))}
                cells.append({"kind": self.kind, "method": dict(method), **config})
        return cells


def load_spec(source) -> GridSpec:
    """Read and validate a spec from a TOML path or a dict.

    A spec file's ``[reference] csv`` is resolved against the file's folder and must exist (a
    dict's is checked by :func:`~uncertain_agents.grid.run_grid`, against the grid folder).
    """
    if isinstance(source, dict):
        return parse_spec(source, "spec")
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no grid spec at {path}")
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            try:
                import tomli as tomllib
            except ModuleNotFoundError:
                raise ValueError("reading TOML specs needs Python ≥ 3.11 or `pip install tomli`") from None
        try:
            raw = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not valid TOML ({err})") from None
        where = str(path)
    spec = parse_spec(raw, where)
    if spec.reference:
        reference_csv(spec.reference, path.resolve().parent, where)
    return GridSpec(**{**spec.__dict__, "source": str(path.resolve())})


def parse_spec(raw: dict, where: str = "spec") -> GridSpec:
    """Validate ``raw`` (the parsed TOML) into a :class:`GridSpec`; errors name the key."""
    unknown = sorted(set(raw) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid: {sorted(SPEC_KEYS)}")
    kind = raw.get("kind")
    if kind not in JOBS:
        raise ValueError(f"{where}: kind must be one of {sorted(JOBS)}, got {kind!r}")
    job = JOBS[kind]
    name = raw.get("name", kind)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: name must be a non-empty string, got {name!r}")
    settings = _table(raw, "settings", where)
    cross = _table(raw, "cross", where)
    for key in settings:
        _check_key(job, key, where, "settings")
        settings[key] = job.check(key, settings[key], f"{where}: settings.{key}")
    for key, values in cross.items():
        _check_key(job, key, where, "cross")
        if key in settings:
            raise ValueError(f"{where}: {key!r} is in both settings and cross; keep one")
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: cross.{key} must be a non-empty list, got {values!r}")
        cross[key] = [job.check(key, v, f"{where}: cross.{key}[{i}]") for i, v in enumerate(values)]
    methods = raw.get("methods")
    if not isinstance(methods, list) or not methods:
        raise ValueError(f"{where}: methods must be a non-empty list of tables ([[methods]])")
    checked = tuple(job.check_method(_method(m, i, where), f"{where}: methods[{i}]")
                    for i, m in enumerate(methods))
    _check_labels(checked, where)
    reference = raw.get("reference", {})
    if not isinstance(reference, dict):
        raise ValueError(f"{where}: reference must be a table, got {reference!r}")
    check_reference(reference, where)
    spec = GridSpec(name, kind, settings, cross, checked, str(raw.get("description", "")), reference)
    cells, dims = spec.cells(), CellDims()
    for i, method in enumerate(checked):  # on the network every cell builds, not a probe's
        check_method_options(job, method, [c for c in cells if c["method"] == method], f"{where}: methods[{i}]",
                             dims)
    hashes = [cell_key(c) for c in spec.cells()]
    if len(set(hashes)) != len(hashes):
        raise ValueError(f"{where}: two cells have the same configuration (a repeated method or value)")
    return spec


def _check_labels(methods: tuple[dict, ...], where: str) -> None:
    """Two methods with one table label would be merged into one row: name the label."""
    seen: dict[str, int] = {}
    for i, method in enumerate(methods):
        label = method_label(method)
        if label in seen:
            raise ValueError(f"{where}: methods[{seen[label]}] and methods[{i}] have the same label {label!r}; "
                             "give one of them a different label")
        seen[label] = i


def _table(raw: dict, key: str, where: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {key} must be a table, got {value!r}")
    return dict(value)


def _check_key(job: Job, key: str, where: str, section: str) -> None:
    if key not in job.defaults and key not in job.optional:
        raise ValueError(f"{where}: unknown key {section}.{key} for kind {job.name!r}; valid: {job.keys}")


def _method(entry, i: int, where: str) -> dict:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: methods[{i}] must be a table, got {entry!r}")
    unknown = sorted(set(entry) - METHOD_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} in methods[{i}]; valid: {sorted(METHOD_KEYS)}")
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise ValueError(f"{where}: methods[{i}].options must be a table, got {options!r}")
    _check_finite(options, f"{where}: methods[{i}].options")
    return {**entry, "options": dict(options)}


def _check_finite(value, where: str) -> None:
    """A spec's numbers are finite (TOML ``inf`` / ``nan`` name no setting a run can take, and a
    cell's configuration is stored as JSON): the ``ValueError`` names the key."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for k, item in enumerate(value):
            _check_finite(item, f"{where}[{k}]")


def cell_key(config: dict) -> str:
    """The cell's file name: a hash of its full configuration (see :mod:`.store`)."""
    from .store import cell_hash

    return cell_hash(config)
