"""The job kinds a grid can run: each cell is one call of the library's own runner.

* ``regress``: one UCI split through :func:`uncertain_agents.regression.run_uci` (the runner
  of ``uncertain-agents regress``); replicate key ``split``.
* ``bandit``: one trial of one agent beside Uniform through
  :func:`uncertain_agents.agents.experiment.run_experiment` (the runner of
  ``uncertain-agents bandit``); replicate key ``trial``.
* ``attack``: train one classifier and attack it (``attacks.evaluate``, the runner of
  ``uncertain-agents attack``); replicate key ``seed``.
* ``toy``: the AADM / refined-VI one-dimensional toys (:mod:`uncertain_agents.toys`);
  replicate key ``seed``.

A job knows its keys and their defaults, checks values (errors name the key), checks a
method entry, the resources a cell asks an executor for, and runs a cell into a flat dict of
metrics.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

INT, FLOAT, STR, INTS, FLOATS, OPT_INT, OPT_FLOAT, OPT_INTS = (
    "int", "float", "str", "list[int]", "list[float]", "int|None", "float|None", "list[int]|None")


@dataclass(frozen=True)
class Job:
    name: str
    defaults: dict
    types: dict
    replicate: str
    run: Callable[[dict], dict]
    check_method: Callable[[dict, str], dict]
    choices: dict
    #: what the ``@`` in swept metric names (``accuracy@0.1``) ranges over, for tables and plots
    sweep_axis: str = "value"
    #: ``(prefix, axis)``: swept metrics whose name starts with ``prefix`` range over ``axis``
    sweep_axes: tuple = ()
    #: keys a spec may set that are *not* written into cells that leave them out (added after
    #: cells were stored, so those keep their names); ``{key: value used when absent}``
    optional: dict = field(default_factory=dict)
    #: ``check_cells(cells)``: checks that need several keys or the data (e.g. a UCI split that the
    #: data set does not have), run by ``run_grid`` before any cell; ``ValueError`` names the cell
    check_cells: Callable[[list[dict]], None] | None = None
    #: ``network(cell, dims)``: the posterior a cell builds, as ``(name, make_posterior keywords
    #: without the name)`` — its real network and the options it passes — or ``None`` for a cell
    #: without a posterior; the spec's options are checked on it (:func:`check_method_options`)
    network: Callable[[dict, "CellDims"], tuple[str, dict] | None] | None = None

    @property
    def keys(self) -> list[str]:
        return sorted({*self.defaults, *self.optional})

    def axis_of(self, base: str) -> str:
        """The sweep axis of swept metric ``base`` (the part of its name before ``@``)."""
        return next((axis for prefix, axis in self.sweep_axes if base.startswith(prefix)), self.sweep_axis)

    def check(self, key: str, value, where: str):
        """``value`` converted to the key's type, or a ``ValueError`` naming ``where``."""
        kind = self.types[key]
        if kind.endswith("|None") and value is None:
            return None
        kind = kind.removesuffix("|None")
        if kind == INT:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where} must be an integer, got {value!r}")
        elif kind == FLOAT:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where} must be a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{where} must be a finite number, got {value!r}")
        elif kind == STR:
            if not isinstance(value, str):
                raise ValueError(f"{where} must be a string, got {value!r}")
        elif kind in (INTS, FLOATS):
            ok = isinstance(value, list) and all(not isinstance(v, bool) and isinstance(
                v, int if kind == INTS else (int, float)) for v in value)
            if not ok:
                raise ValueError(f"{where} must be a list of {'integers' if kind == INTS else 'numbers'}, "
                                 f"got {value!r}")
            value = [int(v) if kind == INTS else float(v) for v in value]
            if kind == FLOATS and not all(math.isfinite(v) for v in value):
                raise ValueError(f"{where} must be a list of finite numbers, got {value!r}")
        if key in self.choices:
            value = self.choices[key](value, where)
        return value

    def resources(self, cell: dict) -> dict:
        """What one cell asks an executor for."""
        return {"num_cpus": 1, "num_gpus": 1 if str(cell.get("device", "cpu")).startswith("cuda") else 0}


# ------------------------------------------------------------------ checks
def _posterior_method(entry: dict, where: str) -> dict:
    """A method of a regress, attack or toy grid: a posterior name (its options are checked on
    every cell's network by :func:`check_method_options`)."""
    from ..registry import resolve_name

    if "agent" in entry:
        raise ValueError(f"{where}.agent: only bandit grids take an agent")
    if not isinstance(entry.get("posterior"), str):
        raise ValueError(f"{where}.posterior must be a posterior name, got {entry.get('posterior')!r}")
    try:
        name = resolve_name(entry["posterior"])
    except ValueError as err:
        raise ValueError(f"{where}.posterior: {err}") from None
    return {**entry, "posterior": name}


def _bandit_method(entry: dict, where: str) -> dict:
    from ..agents.factory import POSTERIOR_AGENTS, resolve_agent
    from ..registry import resolve_name

    try:
        agent = resolve_agent(entry.get("agent", "thompson"))
    except ValueError as err:
        raise ValueError(f"{where}.agent: {err}") from None
    posterior = entry.get("posterior")
    if agent in POSTERIOR_AGENTS:
        if not isinstance(posterior, str):
            raise ValueError(f"{where}.posterior: agent {agent!r} needs a posterior name, got {posterior!r}")
        try:
            posterior = resolve_name(posterior)
        except ValueError as err:
            raise ValueError(f"{where}.posterior: {err}") from None
    elif posterior is not None or entry["options"]:
        raise ValueError(f"{where}: agent {agent!r} takes no posterior or options")
    return {**entry, "agent": agent, "posterior": posterior}


class CellDims:
    """Input and output widths of the networks cells build, read once per data set. Where the
    data cannot be read here (a Ray cluster may hold data this machine lacks), a placeholder input
    width of 1 is used: the options are still checked on the cell's layers. (The image data sets'
    widths are known without reading them: ``attacks.evaluate.IMAGE_SHAPES``.)"""

    def __init__(self) -> None:
        self._uci: dict[str, int] = {}
        self._envs: dict[str, tuple[int, int]] = {}

    def uci_features(self, name: str) -> int:
        if name not in self._uci:
            from ..datasets.uci import UCIDataset

            try:
                self._uci[name] = len(UCIDataset(name).features)
            except (OSError, ValueError):  # missing here, or malformed (run_grid's split check names it)
                self._uci[name] = 1
        return self._uci[name]

    def env(self, name: str) -> tuple[int, int]:
        """``(context width, arms)`` of bandit ``name``."""
        if name not in self._envs:
            from ..agents.experiment import make_env

            mushroom = None
            if name == "mushroom":
                from ..datasets.mushroom import load_mushroom

                try:
                    mushroom = load_mushroom(download=False)
                except (OSError, ValueError):
                    self._envs[name] = (1, 2)
                    return self._envs[name]
            env = make_env(name, steps=1, mushroom_data=mushroom)
            self._envs[name] = (int(env.observation_space.shape[0]), int(env.action_space.n))
        return self._envs[name]


def _regress_network(cell: dict, dims: CellDims):
    method = cell["method"]
    return method["posterior"], dict(in_dim=dims.uci_features(cell["dataset"]), out_dim=1,
                                     hidden=tuple(cell["hidden"]), activation=cell["activation"],
                                     **method["options"])


def _bandit_network(cell: dict, dims: CellDims):
    from ..agents.protocols import get_protocol

    method = cell["method"]
    if not method.get("posterior"):
        return None
    proto = get_protocol(cell["protocol"])
    hidden = proto.hidden if cell["hidden"] is None else tuple(cell["hidden"])
    in_dim, arms = dims.env(cell["env"])
    # as make_agent builds it: the protocol's options for the method under the spec's
    options = proto.merged_options(method["posterior"], hidden, method["options"])
    return method["posterior"], dict(in_dim=in_dim, out_dim=arms, hidden=hidden, **options)


def _attack_network(cell: dict, dims: CellDims):
    method = cell["method"]
    from attacks.evaluate import IMAGE_SHAPES

    in_dim, classes = IMAGE_SHAPES[cell["dataset"]]
    return method["posterior"], dict(in_dim=in_dim, out_dim=classes, hidden=tuple(cell["hidden"]),
                                     likelihood="categorical", **method["options"])


def _toy_network(cell: dict, dims: CellDims):
    method = cell["method"]
    return method["posterior"], dict(in_dim=1, out_dim=1, hidden=tuple(cell["hidden"]),
                                     activation=cell["activation"], **method["options"])


def check_method_options(job: Job, method: dict, cells: list[dict], where: str, dims: CellDims | None = None) -> None:
    """Build ``method``'s posterior once per distinct network among its ``cells`` — the network the
    cell will build, with the options it will pass — so an unknown or bad option, or a per-layer
    option (a ``prior_std`` list) that does not fit a cell's layers, fails before any cell runs.
    The ``ValueError`` names ``where`` (``SPEC: methods[i]``) and the posterior."""
    from ..registry import make_posterior

    if job.network is None:
        return
    dims = dims or CellDims()
    seen = set()
    for cell in cells:
        name = method.get("posterior")
        try:
            built = job.network(cell, dims)
            if built is None:
                continue
            name, kwargs = built
            key = json.dumps(kwargs, sort_keys=True, default=repr)
            if key in seen:
                continue
            seen.add(key)
            make_posterior(name, **kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.options for {name!r}: {err}") from None


def _uci_name(value: str, where: str) -> str:
    from ..datasets.uci import resolve_uci_name

    try:
        return resolve_uci_name(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _uci_splits_exist(cells: list[dict]) -> None:
    """Every regression cell's ``split`` is one the data set has (``n_splits``), checked where the
    data can be read here (a Ray cluster may hold data this machine lacks: then the cell reports it)."""
    from ..datasets import DataNotFoundError
    from ..datasets.uci import UCIDataset

    counts: dict[str, int | None] = {}
    for cell in cells:
        name = cell["dataset"]
        if name not in counts:
            try:
                counts[name] = UCIDataset(name).n_splits
            except DataNotFoundError:
                counts[name] = None
        if counts[name] is not None and cell["split"] >= counts[name]:
            raise ValueError(f"split {cell['split']} of {name!r} does not exist: the data set has "
                             f"{counts[name]} standard splits (0–{counts[name] - 1})")


def _one_of(options: tuple[str, ...], resolve=None):
    def check(value: str, where: str) -> str:
        key = resolve(value) if resolve else value
        if key not in options:
            raise ValueError(f"{where} must be one of {list(options)}, got {value!r}")
        return key
    return check


def _env_name(value: str, where: str) -> str:
    from ..agents.experiment import resolve_env

    try:
        return resolve_env(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _protocol(value: str, where: str) -> str:
    from ..agents.protocols import PROTOCOLS

    if value not in PROTOCOLS:
        raise ValueError(f"{where} must be one of {sorted(PROTOCOLS)}, got {value!r}")
    return value


def _delta(value: float, where: str) -> float:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{where} must lie in (0, 1), got {value!r}")
    return value


def _non_negative(value: int, where: str) -> int:
    if value < 0:
        raise ValueError(f"{where} must be ≥ 0, got {value!r}")
    return value


def _activation(value: str, where: str) -> str:
    from ..network import ACTIVATIONS

    if value not in ACTIVATIONS:
        raise ValueError(f"{where} must be one of {sorted(ACTIVATIONS)}, got {value!r}")
    return value


def _widths(value, where: str):
    if value is not None and any(w <= 0 for w in value):
        raise ValueError(f"{where} must hold positive widths, got {value!r}")
    return value


def _positive(value, where: str):
    if value is not None and value <= 0:
        raise ValueError(f"{where} must be positive, got {value!r}")
    return value


# -------------------------------------------------------------------- runs
def run_regress(cell: dict) -> dict:
    from ..regression import UCIConfig, run_uci

    method = cell["method"]
    config = UCIConfig(dataset=cell["dataset"], posterior=method["posterior"], hidden=tuple(cell["hidden"]),
                       activation=cell["activation"], epochs=cell["epochs"], batch_size=cell["batch_size"],
                       lr=cell["lr"], n_samples=cell["n_samples"], splits=[cell["split"]], seed=cell["seed"],
                       device=cell["device"], options=dict(method["options"]))
    row = run_uci(config).iloc[0].to_dict()
    row.pop("split")
    return {k: float(v) for k, v in row.items()}


def run_bandit_trial(cell: dict) -> dict:
    from ..agents.experiment import agent_specs, run_experiment, summarize

    method = cell["method"]
    posteriors = [method["posterior"]] if method.get("posterior") else []
    specs = agent_specs([method["agent"]], posteriors, method["options"])
    steps = run_experiment(cell["env"], specs, steps=cell["steps"], trials=1, seed=cell["seed"] + cell["trial"],
                           delta=cell["delta"], protocol=cell["protocol"],
                           hidden=None if cell["hidden"] is None else tuple(cell["hidden"]),
                           train_every=cell["train_every"], train_steps=cell["train_steps"],
                           batch_size=cell["batch_size"], lr=cell["lr"], device=cell["device"])
    summary = summarize(steps).set_index("label")
    label = specs[-1].label
    row = summary.loc[label]
    out = {"cumulative_regret": float(row["cumulative_regret"]), "normalised_regret": float(row["normalised_regret"]),
           "uniform_regret": float(summary.loc["uniform", "cumulative_regret"]), "seconds": float(row["seconds"])}
    if cell["env"] == "mushroom":  # "never eat": the share of eat decisions over the last 1,000
        actions = steps.loc[steps["label"] == label, "action"].to_numpy()
        out["eat_fraction_last_1000"] = float((actions[-1000:] == 1).mean())
    return out


def run_attack(cell: dict) -> dict:
    import torch

    from attacks.evaluate import attack_subset, load_dataset, train_classifier
    from attacks.fgsm import fgsm
    from attacks.ifgsm import targeted_ifgsm

    from ..registry import make_posterior

    method = cell["method"]
    data = load_dataset(cell["dataset"])

    def train():
        post = make_posterior(method["posterior"], in_dim=data.in_dim, out_dim=data.n_classes,
                              hidden=tuple(cell["hidden"]), likelihood="categorical", seed=cell["seed"],
                              device=cell["device"], **method["options"])
        return post, train_classifier(post, data, epochs=cell["epochs"], batch_size=cell["batch_size"],
                                      lr=cell["lr"])

    post, seconds = _cached_training(cell, train)
    x, y = attack_subset(data, cell["n_attack"], seed=cell["seed"])
    epsilons = sorted({0.0, *cell["epsilons"]})
    frame = fgsm(post, torch.as_tensor(x), torch.as_tensor(y), epsilons=epsilons, n_samples=cell["n_samples"],
                 seed=cell["seed"]).set_index("epsilon")
    out = {"train_seconds": seconds, "clean_accuracy": float(frame.loc[0.0, "accuracy"]),
           "clean_entropy": float(frame.loc[0.0, "mean_entropy"])}
    for eps in epsilons[1:]:
        out.update(_attack_scores(frame.loc[eps], f"@{eps:g}"))
    steps = cell.get("targeted_steps", 0)
    if steps:  # targeted I-FGSM towards one class (Li & Gal Fig. 7), scored every few steps
        n_targeted = cell.get("n_targeted", cell["n_attack"])
        x, y = attack_subset(data, n_targeted, seed=cell["seed"])
        path = targeted_ifgsm(post, torch.as_tensor(x), torch.as_tensor(y), target=cell.get("target", 0),
                              step=cell.get("targeted_step", 0.01), steps=steps, n_samples=cell["n_samples"],
                              seed=cell["seed"]).set_index("step")
        every = cell.get("targeted_every", 5)
        for k in sorted({*range(0, steps + 1, every), steps}):
            out.update(_attack_scores(path.loc[k], f"@{k}", prefix="ifgsm_"))
            out[f"ifgsm_target_success@{k}"] = float(path.loc[k, "target_success"])
    return out


#: environment variable naming a folder where attack cells keep their trained classifiers
TRAINED_CACHE_ENV = "UNCERTAIN_AGENTS_TRAINED_CACHE"
TRAINING_KEYS = ("method", "dataset", "seed", "hidden", "epochs", "batch_size", "lr", "device")


def _cached_training(cell: dict, train):
    """``train()`` -> ``(posterior, seconds)``, through the cache named by
    ``$UNCERTAIN_AGENTS_TRAINED_CACHE`` when it is set: the trained classifier is saved there
    under the hash of its training configuration (method with options, data, seed, network,
    schedule, device, torch threads), and a cell of another attack spec with the same training loads it
    instead of training again (``seconds`` is then the recorded training time). Training is
    seeded, so a cached classifier is the one the cell would have trained; the cache never
    changes a cell's name or its metrics, only the time it takes."""
    import os

    from ..registry import load_posterior
    from ..runs import atomic_write_text
    from .store import cell_hash

    folder = os.environ.get(TRAINED_CACHE_ENV)
    if not folder:
        return train()
    import torch

    # the thread count too: a float sum split over another number of threads rounds differently, so
    # a classifier trained with 2 threads is not bit for bit the one a 1-thread cell trains
    training = {**{k: cell[k] for k in TRAINING_KEYS}, "threads": torch.get_num_threads()}
    key = cell_hash(training)
    model, record = Path(folder) / f"{key}.pt", Path(folder) / f"{key}.json"
    if model.is_file() and record.is_file():
        return load_posterior(model, map_location=cell["device"]), float(json.loads(record.read_text())["seconds"])
    post, seconds = train()
    model.parent.mkdir(parents=True, exist_ok=True)
    post.save(model)
    atomic_write_text(record, json.dumps({"seconds": seconds, "training": training}))
    return post, seconds


def _attack_scores(row, suffix: str, prefix: str = "") -> dict:
    return {f"{prefix}accuracy{suffix}": float(row["accuracy"]), f"{prefix}entropy{suffix}": float(row["mean_entropy"]),
            f"{prefix}auroc_entropy{suffix}": float(row["auroc_entropy"]),
            f"{prefix}auroc_mi{suffix}": float(row["auroc_mutual_information"])}


def run_toy(cell: dict) -> dict:
    from ..toys import run_toy as run

    method = cell["method"]
    return run(cell["toy"], method["posterior"], dict(method["options"]), seed=cell["seed"], steps=cell["steps"],
               hidden=tuple(cell["hidden"]), activation=cell["activation"], batch_size=cell["batch_size"],
               n_train=cell["n_train"], n_test=cell["n_test"])


JOBS: dict[str, Job] = {
    "regress": Job(
        "regress",
        defaults={"dataset": "bostonHousing", "split": 0, "hidden": [50], "activation": "relu", "epochs": 500,
                  "batch_size": 32, "lr": None, "n_samples": 100, "seed": 0, "device": "cpu"},
        types={"dataset": STR, "split": INT, "hidden": INTS, "activation": STR, "epochs": INT, "batch_size": INT,
               "lr": OPT_FLOAT, "n_samples": INT, "seed": INT, "device": STR},
        replicate="split", run=run_regress, check_method=_posterior_method,
        choices={"dataset": _uci_name, "split": _non_negative, "epochs": _positive, "batch_size": _positive,
                 "lr": _positive, "n_samples": _positive, "hidden": _widths, "activation": _activation},
        check_cells=_uci_splits_exist, network=_regress_network),
    "bandit": Job(
        "bandit",
        defaults={"env": "wheel", "delta": 0.95, "steps": 2000, "trial": 0, "seed": 0, "protocol": "default",
                  "hidden": None, "train_every": None, "train_steps": None, "batch_size": None, "lr": None,
                  "device": "cpu"},
        types={"env": STR, "delta": FLOAT, "steps": INT, "trial": INT, "seed": INT, "protocol": STR,
               "hidden": OPT_INTS, "train_every": OPT_INT, "train_steps": OPT_INT, "batch_size": OPT_INT,
               "lr": OPT_FLOAT, "device": STR},
        replicate="trial", run=run_bandit_trial, check_method=_bandit_method,
        choices={"env": _env_name, "delta": _delta, "protocol": _protocol, "steps": _positive,
                 "trial": _non_negative, "train_every": _positive, "train_steps": _positive,
                 "batch_size": _positive, "lr": _positive, "hidden": _widths},
        network=_bandit_network),
    "attack": Job(
        "attack",
        defaults={"dataset": "digits", "seed": 0, "hidden": [400, 400], "epochs": 5.0, "batch_size": 128,
                  "lr": None, "n_attack": None, "n_samples": 20, "epsilons": [0.0, 0.15, 0.3], "device": "cpu"},
        types={"dataset": STR, "seed": INT, "hidden": INTS, "epochs": FLOAT, "batch_size": INT, "lr": OPT_FLOAT,
               "n_attack": OPT_INT, "n_samples": INT, "epsilons": FLOATS, "device": STR,
               "targeted_steps": INT, "target": INT, "targeted_step": FLOAT, "targeted_every": INT,
               "n_targeted": OPT_INT},
        replicate="seed", run=run_attack,
        check_method=_posterior_method,
        choices={"dataset": _one_of(("digits", "mnist")), "epochs": _positive, "batch_size": _positive,
                 "lr": _positive, "n_attack": _positive, "n_samples": _positive, "targeted_steps": _non_negative,
                 "target": _non_negative, "targeted_step": _positive, "targeted_every": _positive,
                 "n_targeted": _positive, "hidden": _widths},
        network=_attack_network,
        sweep_axis="epsilon", sweep_axes=(("ifgsm_", "step"),),
        optional={"targeted_steps": 0, "target": 0, "targeted_step": 0.01, "targeted_every": 5, "n_targeted": None}),
    "toy": Job(
        "toy",
        defaults={"toy": "bimodal", "seed": 0, "steps": 20_000, "hidden": [50, 50], "activation": "leaky_relu",
                  "batch_size": 32, "n_train": 1000, "n_test": 1000},
        types={"toy": STR, "seed": INT, "steps": INT, "hidden": INTS, "activation": STR, "batch_size": INT,
               "n_train": INT, "n_test": INT},
        replicate="seed", run=run_toy, check_method=_posterior_method,
        choices={"toy": _one_of(("bimodal", "heteroscedastic")), "steps": _positive, "batch_size": _positive,
                 "n_train": _positive,
                 "n_test": _positive, "hidden": _widths, "activation": _activation},
        network=_toy_network),
}
