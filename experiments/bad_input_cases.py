"""A catalogue of bad inputs a new user might give, and how the library answers each.

Every case is one call of the public API (or of the command line, in-process through
``uncertain_agents.cli.main``) with one bad input. Its outcome is classified as

* **clear error**: an exception of an expected type (``ValueError``, ``TypeError``,
  ``FileNotFoundError`` / ``IsADirectoryError`` / ``NotADirectoryError``, ``IndexError``,
  gymnasium's ``ResetNeeded``; never ``KeyError``) whose one-line
  message names the offending argument or file; for the command line, a non-zero exit
  with a one-line ``error:`` that names it and no traceback; for a few cases whose
  documented answer is a warning (an AUROC from single scores), that warning;
* **bad outcome**: any other exception type (``KeyError``, ``AttributeError``, a raw
  numpy/torch error, ...), a message that does not name what is wrong, an exception that
  escapes ``main`` (a raw traceback), silent acceptance, or NaN in the output.

Everything runs on files built in a temporary folder (tiny UCI and mushroom folders,
scikit-learn's digits for attacks), offline, on one CPU thread, in a couple of minutes::

    GIT_PYTHON_REFRESH=quiet OMP_NUM_THREADS=1 python experiments/bad_input_cases.py

It prints a table per category and writes ``experiments/results/bad_input_cases.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import math
import os
import pickle
import re
import signal
import struct
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
os.environ.pop("UNCERTAIN_AGENTS_DEBUG", None)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from gymnasium.error import ResetNeeded  # noqa: E402

EXPECTED = (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError, IndexError,
            ResetNeeded)
CASE_SECONDS = 60
RESULTS = Path(__file__).resolve().parent / "results" / "bad_input_cases.md"
#: Where a case's bad outcome lives when the fix belongs to a module another change owns.
WHERE = {
    "device tpu": "uncertain_agents/registry.py (make_posterior calls torch.device unchecked)",
    "map_location tpu": "uncertain_agents/registry.py (load_posterior moves to map_location unchecked)",
    "path None": "uncertain_agents/registry.py (load_posterior passes path to Path unchecked)",
    "path is a number": "uncertain_agents/registry.py (load_posterior passes path to Path unchecked)",
    "make_agent n_actions 2.7": "uncertain_agents/agents/factory.py (make_agent truncates with int())",
    "make_agent n_actions '3'": "uncertain_agents/agents/factory.py (make_agent converts with int())",
    "make_agent context_dim 2.5": "uncertain_agents/agents/factory.py (make_agent truncates with int())",
    "make_agent context_dim 0": "uncertain_agents/agents/factory.py (the error comes from MLPSpec as in_dim)",
}


class CaseTimeout(BaseException):
    """A case ran past :data:`CASE_SECONDS` (raised from a timer signal)."""


@dataclass
class Case:
    """One bad input: ``run()`` makes the call; ``names`` are words a clear message contains
    (any one of them, case-insensitive); ``warns`` a warning class that is the right answer."""

    category: str
    label: str
    run: Callable[[], object]
    names: tuple[str, ...]
    cli: bool = False
    warns: type | None = None


@dataclass
class Outcome:
    case: Case
    clear: bool
    detail: str


@dataclass
class Catalogue:
    """Collects cases by category while the builders below run."""

    cases: list[Case] = field(default_factory=list)
    category: str = ""

    def api(self, label: str, fn: Callable[[], object], *names: str, warns: type | None = None) -> None:
        self.cases.append(Case(self.category, label, fn, names, warns=warns))

    def cli(self, label: str, argv: list[str], *names: str) -> None:
        self.cases.append(Case(self.category, label, lambda: run_cli(argv), names, cli=True))


# ------------------------------------------------------------------ running
@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(signum, frame):
        raise CaseTimeout(f"ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(argv: list[str]) -> CliResult:
    """``main(argv)`` in-process with stdout/stderr captured; SystemExit becomes the code."""
    from uncertain_agents.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(int(code), out.getvalue(), err.getvalue())


def names_in(message: str, names: tuple[str, ...]) -> bool:
    """True when ``message`` has one of ``names`` as a whole word (case-insensitive), so that
    ``x`` is found in "x must be ..." but not in "max"."""
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message, re.IGNORECASE)
               for n in names)


def has_nan(value) -> bool:
    """True when a returned value holds NaN (float, array, tensor, DataFrame, sequence)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and bool(torch.isnan(value).any())
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f" and bool(np.isnan(value).any())
    if isinstance(value, pd.DataFrame):
        return bool(value.select_dtypes("number").isna().any().any())
    if isinstance(value, (list, tuple)):
        return any(has_nan(v) for v in value)
    if hasattr(value, "params") and isinstance(value.params, torch.Tensor):
        return has_nan(value.params)
    return False


def classify(case: Case) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with time_limit(CASE_SECONDS):
                result = case.run()
        except CaseTimeout as exc:
            return Outcome(case, False, f"no answer: {exc}")
        except BaseException as exc:  # noqa: BLE001 - every escape is classified
            return classify_exception(case, exc)
    if case.cli:
        return classify_cli(case, result)
    if case.warns is not None:
        hits = [w for w in caught if issubclass(w.category, case.warns)]
        if hits and names_in(str(hits[0].message), case.names):
            return Outcome(case, True, f"{case.warns.__name__}: {first_line(str(hits[0].message))}")
    if has_nan(result):
        return Outcome(case, False, "NaN in the output, no error")
    return Outcome(case, False, f"silently accepted (returned {type(result).__name__})")


def classify_exception(case: Case, exc: BaseException) -> Outcome:
    kind = type(exc).__name__
    message = str(exc).strip()
    if case.cli:
        return Outcome(case, False, f"raw traceback from the CLI: {kind}: {first_line(message)}")
    if isinstance(exc, KeyError) or not isinstance(exc, EXPECTED):
        return Outcome(case, False, f"unexpected {kind}: {first_line(message)}")
    if "\n" in message:
        return Outcome(case, False, f"multi-line {kind} message: {first_line(message)}")
    if not names_in(message, case.names):
        return Outcome(case, False, f"{kind} does not name {case.names[0]!r}: {message}")
    return Outcome(case, True, f"{kind}: {message}")


def classify_cli(case: Case, result: CliResult) -> Outcome:
    text = result.out + result.err
    if "Traceback" in text:
        return Outcome(case, False, f"traceback printed (exit {result.code})")
    if result.code == 0:
        return Outcome(case, False, "silently accepted (exit 0)")
    errors = [line.strip() for line in result.err.splitlines() if "error:" in line]
    shown = errors[-1] if errors else first_line(result.out.strip() or result.err.strip())
    if not errors and not names_in(text, case.names):
        return Outcome(case, False, f"exit {result.code} without an error line: {shown}")
    if errors and not names_in(" ".join(errors), case.names):
        return Outcome(case, False, f"exit {result.code}, error does not name {case.names[0]!r}: {shown}")
    return Outcome(case, True, f"exit {result.code}: {shown}")


def first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


# ---------------------------------------------------------------- fixtures
class Files:
    """The temporary folders the cases read: tiny UCI and mushroom data, saved posteriors."""

    def __init__(self, root: Path):
        self.root = root
        self._n = 0
        self.data = root / "data"
        self.uci = write_uci(self.data, "yacht")
        self.mushroom = write_mushroom(self.data / "mushroom")
        self.empty = root / "empty"
        self.empty.mkdir()
        self.a_file = root / "a_file.txt"
        self.a_file.write_text("not a folder\n")

    def out(self) -> str:
        """A fresh run folder for one CLI case."""
        self._n += 1
        return str(self.root / "runs" / f"run{self._n}")

    def folder(self, name: str) -> Path:
        """A fresh empty folder."""
        self._n += 1
        path = self.root / f"{name}{self._n}"
        path.mkdir(parents=True)
        return path

    def uci_copy(self, edit: Callable[[Path], None]) -> Path:
        """A data root holding a tiny ``uci/yacht`` changed by ``edit(folder)``."""
        root = self.folder("uci_data")
        edit(write_uci(root, "yacht"))
        return root

    def file(self, name: str, content: bytes | str) -> Path:
        self._n += 1
        path = self.root / "files" / f"{self._n}_{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path


def write_uci(root: Path, name: str, n: int = 24, d: int = 3, splits: int = 2) -> Path:
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    np.savetxt(folder / "data.txt", np.column_stack([x, x.sum(1) + 0.1 * rng.normal(size=n)]))
    np.savetxt(folder / "index_features.txt", np.arange(d), fmt="%d")
    np.savetxt(folder / "index_target.txt", [d], fmt="%d")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    for k in range(splits):
        perm = rng.permutation(n)
        np.savetxt(folder / f"index_train_{k}.txt", perm[:20], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[20:], fmt="%d")
    return folder


def mushroom_rows(n: int = 12) -> str:
    from uncertain_agents.datasets.mushroom import ATTRIBUTES

    rows = [",".join(["ep"[i % 2]] + ["ab"[(i + j) % 2] for j in range(len(ATTRIBUTES))]) for i in range(n)]
    return "\n".join(rows) + "\n"


def write_mushroom(folder: Path, content: str | None = None, *, sums: bool = True) -> Path:
    """A mushroom folder whose SHA256SUMS matches its (possibly malformed) file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agaricus-lepiota.data"
    path.write_text(mushroom_rows() if content is None else content)
    if sums:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        (folder / "SHA256SUMS").write_text(f"{digest}  agaricus-lepiota.data\n")
    return folder


def write_mnist(folder: Path, *, bad: str) -> Path:
    """Four MNIST-named files listed in SHA256SUMS; ``bad`` spoils one of them."""
    from uncertain_agents.datasets.mnist import FILES, IMAGE_MAGIC, LABEL_MAGIC

    folder.mkdir(parents=True)
    payloads = {}
    for key, name in FILES.items():
        if key.endswith("images"):
            header = struct.pack(">iiii", IMAGE_MAGIC, 4, 28, 28)
            raw = header + bytes(4 * 28 * 28)
        else:
            raw = struct.pack(">ii", LABEL_MAGIC, 4) + bytes([0, 1, 2, 3])
        payloads[name] = gzip.compress(raw)
    target = FILES["train_images"]
    if bad == "not-gzip":
        payloads[target] = b"hello, not gzip"
    elif bad == "magic":
        payloads[target] = gzip.compress(struct.pack(">iiii", 1234, 4, 28, 28) + bytes(4 * 28 * 28))
    elif bad == "truncated":
        payloads[target] = gzip.compress(struct.pack(">iiii", IMAGE_MAGIC, 4, 28, 28) + bytes(100))
    elif bad == "labels":
        payloads[FILES["train_labels"]] = gzip.compress(struct.pack(">ii", LABEL_MAGIC, 3) + bytes([0, 1, 2]))
    sums = []
    for name, payload in payloads.items():
        (folder / name).write_bytes(payload)
        sums.append(f"{hashlib.sha256(payload).hexdigest()}  {name}")
    (folder / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return folder.parent


# ------------------------------------------------------------------- cases
def cli_regress(c: Catalogue, f: Files) -> None:
    c.category = "cli regress"
    data = str(f.data)

    def regress(*extra: str, dataset: str = "yacht", data_dir: str = data) -> list[str]:
        return ["regress", dataset, "--data-dir", data_dir, "--out", f.out(), "--epochs", "1", "--hidden", "4",
                "--n-samples", "5", "--splits", "1", *extra]

    c.cli("unknown data set", regress(dataset="nope"), "nope")
    c.cli("data set not in the folder", regress(dataset="concrete"), "concrete")
    c.cli("no data set given", ["regress"], "dataset")
    c.cli("unknown posterior", regress("--posterior", "nonsense"), "nonsense")
    c.cli("empty posterior name", regress("--posterior", ""), "posterior")
    c.cli("--epochs 0", regress("--epochs", "0"), "--epochs")
    c.cli("--epochs -3", regress("--epochs", "-3"), "--epochs")
    c.cli("--epochs abc", regress("--epochs", "abc"), "--epochs")
    c.cli("--epochs 1.5", regress("--epochs", "1.5"), "--epochs")
    c.cli("--batch-size 0", regress("--batch-size", "0"), "--batch-size")
    c.cli("--lr 0", regress("--lr", "0"), "--lr")
    c.cli("--lr -0.1", regress("--lr", "-0.1"), "--lr")
    c.cli("--lr nan", regress("--lr", "nan"), "--lr")
    c.cli("--lr inf", regress("--lr", "inf"), "lr")
    c.cli("--hidden 0", regress("--hidden", "0"), "--hidden")
    c.cli("--hidden -5", regress("--hidden", "-5"), "--hidden")
    c.cli("--hidden x", regress("--hidden", "x"), "--hidden")
    c.cli("--activation nope", regress("--activation", "nope"), "activation")
    c.cli("--alpha on map", regress("--posterior", "map", "--alpha", "0.5"), "alpha")
    c.cli("--alpha inf on bb-alpha", regress("--posterior", "bb-alpha", "--alpha", "inf"), "alpha")
    c.cli("--train-samples 0", regress("--posterior", "mfvi", "--train-samples", "0"), "train_samples")
    c.cli("--option without =", regress("--option", "prior_std"), "--option")
    c.cli("--option =1", regress("--option", "=1"), "--option")
    c.cli("--option unknown key", regress("--option", "colour=1"), "colour")
    c.cli("--option prior_std=-1", regress("--option", "prior_std=-1"), "prior_std")
    c.cli("--option prior_std=abc", regress("--option", "prior_std=abc"), "prior_std")
    c.cli("--option noise_std=0", regress("--option", "noise_std=0"), "noise_std")
    c.cli("--splits 0", regress("--splits", "0"), "--splits")
    c.cli("--splits -2", regress("--splits", "-2"), "--splits")
    c.cli("--n-samples 0", regress("--n-samples", "0"), "--n-samples")
    c.cli("--seed abc", regress("--seed", "abc"), "--seed")
    c.cli("--device tpu", regress("--device", "tpu"), "--device")
    c.cli("--device cuda:7", regress("--device", "cuda:7"), "--device")
    c.cli("--device cpu:x", regress("--device", "cpu:x"), "--device")
    c.cli("--threads 0", regress("--threads", "0"), "--threads")
    c.cli("--threads -1", regress("--threads", "-1"), "--threads")
    c.cli("--data-dir missing", regress(data_dir=str(f.root / "missing")), "missing")
    c.cli("--data-dir is a file", regress(data_dir=str(f.a_file)), "a_file.txt")
    c.cli("--out is a file", regress("--out", str(f.a_file)), "a_file.txt")
    c.cli("unknown flag", regress("--colour", "red"), "--colour")
    bad_index = f.uci_copy(lambda d: (d / "index_train_0.txt").write_text("0\n1\n999\n"))
    c.cli("index file out of range", regress(data_dir=str(bad_index)), "index_train_0.txt")
    no_splits = f.uci_copy(lambda d: (d / "n_splits.txt").write_text("twenty\n"))
    c.cli("n_splits.txt not a number", regress(data_dir=str(no_splits)), "n_splits.txt")
    leak = f.uci_copy(lambda d: (d / "index_train_0.txt").write_text(
        (d / "index_train_0.txt").read_text() + (d / "index_test_0.txt").read_text().split()[0] + "\n"))
    c.cli("test row in the train index", regress(data_dir=str(leak)), "index_test_0.txt")


def cli_bandit(c: Catalogue, f: Files) -> None:
    c.category = "cli bandit"

    def bandit(*extra: str, env: str = "wheel") -> list[str]:
        return ["bandit", env, "--out", f.out(), "--steps", "5", "--trials", "1", "--agent", "uniform",
                "--data-dir", str(f.data), *extra]

    c.cli("unknown env", bandit(env="moon"), "moon")
    c.cli("empty env", bandit(env=""), "env", "environment")
    c.cli("no env given", ["bandit"], "env")
    c.cli("unknown agent", bandit("--agent", "smart"), "smart")
    c.cli("empty --agent", bandit("--agent", ""), "--agent")
    c.cli("--agent ,,", bandit("--agent", ",,"), "--agent")
    c.cli("unknown posterior", bandit("--agent", "thompson", "--posterior", "nope"), "nope")
    c.cli("empty --posterior", bandit("--agent", "thompson", "--posterior", ""), "--posterior")
    c.cli("--option without =", bandit("--agent", "thompson", "--option", "noise_std"), "--option")
    c.cli("--option unknown key", bandit("--agent", "thompson", "--option", "colour=1"), "colour")
    c.cli("--option noise_std=-1", bandit("--agent", "thompson", "--option", "noise_std=-1"), "noise_std")
    c.cli("--delta 0", bandit("--delta", "0"), "--delta")
    c.cli("--delta 1", bandit("--delta", "1"), "--delta")
    c.cli("--delta 1.5", bandit("--delta", "1.5"), "--delta")
    c.cli("--delta -0.2", bandit("--delta", "-0.2"), "--delta")
    c.cli("--delta nan", bandit("--delta", "nan"), "--delta")
    c.cli("--delta abc", bandit("--delta", "abc"), "--delta")
    c.cli("--steps 0", bandit("--steps", "0"), "--steps")
    c.cli("--steps -5", bandit("--steps", "-5"), "--steps")
    c.cli("--steps 2.5", bandit("--steps", "2.5"), "--steps")
    c.cli("--trials 0", bandit("--trials", "0"), "--trials")
    c.cli("--protocol nope", bandit("--protocol", "nope"), "--protocol")
    c.cli("--hidden 0", bandit("--agent", "thompson", "--hidden", "0"), "hidden")
    c.cli("--hidden a,b", bandit("--agent", "thompson", "--hidden", "a,b"), "--hidden")
    c.cli("--hidden empty", bandit("--agent", "thompson", "--hidden", ""), "hidden")
    c.cli("--hidden -3", bandit("--agent", "thompson", "--hidden", "-3"), "hidden")
    c.cli("--train-every 0", bandit("--train-every", "0"), "--train-every")
    c.cli("--train-steps 0", bandit("--train-steps", "0"), "--train-steps")
    c.cli("--batch-size 0", bandit("--batch-size", "0"), "--batch-size")
    c.cli("--lr 0", bandit("--lr", "0"), "--lr")
    c.cli("--lr -1", bandit("--lr", "-1"), "--lr")
    c.cli("--device tpu", bandit("--device", "tpu"), "--device")
    c.cli("--threads 0", bandit("--threads", "0"), "--threads")
    c.cli("--seed x", bandit("--seed", "x"), "--seed")
    c.cli("--seed -5", bandit("--seed", "-5"), "--seed")
    c.cli("mushroom, --no-download, empty folder",
          ["bandit", "mushroom", "--no-download", "--data-dir", str(f.empty), "--out", f.out(), "--steps", "5",
           "--trials", "1", "--agent", "uniform"], "agaricus-lepiota.data")
    corrupt = f.folder("mushroom_corrupt")
    write_mushroom(corrupt / "mushroom", sums=False)
    (corrupt / "mushroom" / "SHA256SUMS").write_text(f"{'0' * 64}  agaricus-lepiota.data\n")
    c.cli("mushroom checksum mismatch",
          ["bandit", "mushroom", "--data-dir", str(corrupt), "--out", f.out(), "--steps", "5", "--trials", "1",
           "--agent", "uniform"], "agaricus-lepiota.data")
    malformed = f.folder("mushroom_rows")
    write_mushroom(malformed / "mushroom", "e,x,s\n")
    c.cli("mushroom file with short rows",
          ["bandit", "mushroom", "--data-dir", str(malformed), "--out", f.out(), "--steps", "5", "--trials", "1",
           "--agent", "uniform"], "agaricus-lepiota.data")
    out = f.out()
    run_cli(["bandit", "wheel", "--out", out, "--steps", "3", "--trials", "1", "--agent", "uniform"])
    c.cli("different run in --out without --force",
          ["bandit", "wheel", "--out", out, "--steps", "4", "--trials", "1", "--agent", "uniform"], "--force")


def cli_attack(c: Catalogue, f: Files) -> None:
    c.category = "cli attack"

    def attack(*extra: str, posterior: tuple[str, ...] = ("map",)) -> list[str]:
        return ["attack", "--dataset", "digits", "--posterior", *posterior, "--out", f.out(), "--hidden", "4",
                "--epochs", "0.05", "--n-attack", "10", "--n-samples", "2", "--epsilons", "0.1", "--steps", "1",
                "--no-progress", *extra]

    c.cli("no --posterior", ["attack", "--out", f.out()], "--posterior")
    c.cli("no --out", ["attack", "--posterior", "map"], "--out")
    c.cli("unknown posterior", attack(posterior=("nope",)), "nope")
    c.cli("unknown posterior option", attack(posterior=("map:alpha=0.5",)), "alpha")
    c.cli("posterior option without =", attack(posterior=("map:alpha",)), "alpha")
    c.cli("empty posterior name", attack(posterior=(":alpha=1",)), "posterior")
    c.cli("posterior twice", attack(posterior=("map", "map")), "--posterior")
    c.cli("bad option value", attack(posterior=("dropout-alpha:dropout=1.5",)), "dropout")
    c.cli("--dataset cifar", attack("--dataset", "cifar"), "--dataset")
    c.cli("--attack pgd", attack("--attack", "pgd"), "--attack")
    c.cli("--epochs 0", attack("--epochs", "0"), "--epochs")
    c.cli("--epochs nan", attack("--epochs", "nan"), "--epochs")
    c.cli("--epochs inf", attack("--epochs", "inf"), "epochs")
    c.cli("--batch-size 0", attack("--batch-size", "0"), "--batch-size")
    c.cli("--n-attack 0", attack("--n-attack", "0"), "--n-attack")
    c.cli("--n-samples 0", attack("--n-samples", "0"), "--n-samples")
    c.cli("--eval-samples 0", attack("--eval-samples", "0"), "eval-samples", "eval_samples")
    c.cli("--epsilons -0.1", attack("--epsilons", "-0.1"), "epsilons")
    c.cli("--epsilons nan", attack("--epsilons", "nan"), "epsilons")
    c.cli("--epsilons x", attack("--epsilons", "x"), "--epsilons")
    c.cli("--step 0 with ifgsm", attack("--attack", "ifgsm", "--step", "0"), "step")
    c.cli("--steps 0", attack("--attack", "ifgsm", "--steps", "0"), "--steps")
    c.cli("--target 10", attack("--attack", "ifgsm", "--target", "10"), "target")
    c.cli("--target -1", attack("--attack", "ifgsm", "--target", "-1"), "target")
    c.cli("--lr 0", attack("--lr", "0"), "--lr")
    c.cli("--hidden 0", attack("--hidden", "0"), "hidden")
    c.cli("--device tpu", attack("--device", "tpu"), "--device")
    c.cli("--threads 0", attack("--threads", "0"), "--threads")
    c.cli("--load missing folder", attack("--load", str(f.root / "no_models")), "no_models")
    models = f.folder("models")
    (models / "map.pt").write_text("not a model")
    c.cli("--load a text file as model", attack("--load", str(models)), "map.pt")
    regressor = f.folder("models_reg")
    import uncertain_agents as ua

    ua.make_posterior("map", in_dim=64, out_dim=1, hidden=(2,), seed=0).save(regressor / "map.pt")
    c.cli("--load a regression model", attack("--load", str(regressor)), "map.pt")
    mnist_root = write_mnist(f.folder("mnist_data") / "mnist", bad="not-gzip")
    c.cli("mnist file not gzip", attack("--dataset", "mnist", "--data-dir", str(mnist_root)), "train-images")


def cli_grid_and_list(c: Catalogue, f: Files) -> None:
    c.category = "cli grid"
    spec = f.file("empty.toml", "")
    bad_toml = f.file("bad.toml", "name = \n[[[")
    bad_kind = f.file("kind.toml", 'name = "x"\nkind = "juggle"\n[[methods]]\nposterior = "map"\n')
    bad_post = f.file("post.toml", 'name = "x"\nkind = "regress"\n[settings]\ndataset = "yacht"\n'
                                   '[[methods]]\nposterior = "nope"\n')
    bad_key = f.file("key.toml", 'name = "x"\nkind = "regress"\ncolour = 1\n[[methods]]\nposterior = "map"\n')
    no_methods = f.file("nomethods.toml", 'name = "x"\nkind = "regress"\n[settings]\ndataset = "yacht"\n')
    c.cli("no sub-command", ["grid"], "run", "table")
    c.cli("run: spec missing", ["grid", "run", str(f.root / "no.toml"), "--out", f.out()], "no.toml")
    c.cli("run: spec is a folder", ["grid", "run", str(f.empty), "--out", f.out()], "empty")
    c.cli("run: empty spec", ["grid", "run", str(spec), "--out", f.out()], spec.name)
    c.cli("run: invalid TOML", ["grid", "run", str(bad_toml), "--out", f.out()], bad_toml.name)
    c.cli("run: unknown job kind", ["grid", "run", str(bad_kind), "--out", f.out()], "juggle")
    c.cli("run: unknown posterior", ["grid", "run", str(bad_post), "--out", f.out()], "nope")
    c.cli("run: unknown spec key", ["grid", "run", str(bad_key), "--out", f.out()], "colour")
    c.cli("run: no methods", ["grid", "run", str(no_methods), "--out", f.out()], "methods")
    c.cli("run: no --out", ["grid", "run", "experiments/specs/smoke.toml"], "--out")
    c.cli("run: --workers 0", ["grid", "run", "experiments/specs/smoke.toml", "--out", f.out(), "--workers", "0"],
          "--workers", "workers")
    c.cli("run: --threads 0", ["grid", "run", "experiments/specs/smoke.toml", "--out", f.out(), "--threads", "0"],
          "--threads", "threads")
    c.cli("run: --executor slurm", ["grid", "run", "experiments/specs/smoke.toml", "--out", f.out(),
                                    "--executor", "slurm"], "--executor")
    twins = f.file("twins.toml", 'name = "x"\nkind = "regress"\n[settings]\ndataset = "yacht"\n'
                                 '[[methods]]\nposterior = "map"\nlabel = "m"\n'
                                 '[[methods]]\nposterior = "mfvi"\nlabel = "m"\n')
    c.cli("run: two methods with one label", ["grid", "run", str(twins), "--out", f.out()], "label")
    threads_key = f.file("threads.toml", 'name = "x"\nkind = "regress"\nthreads = 7\n[settings]\n'
                                         'dataset = "yacht"\n[[methods]]\nposterior = "map"\n')
    c.cli("run: a threads key in the spec", ["grid", "run", str(threads_key), "--out", f.out()], "threads")
    no_ref = f.file("noref.toml", 'name = "x"\nkind = "regress"\n[settings]\ndataset = "yacht"\n'
                                  '[[methods]]\nposterior = "map"\n[reference]\ncsv = "no_such.csv"\n')
    c.cli("run: reference CSV missing", ["grid", "run", str(no_ref), "--out", f.out()], "no_such.csv")
    c.cli("table: folder missing", ["grid", "table", str(f.root / "no_grid")], "no_grid")
    c.cli("table: a file", ["grid", "table", str(f.a_file)], "a_file.txt")
    c.cli("table: unknown flag", ["grid", "table", str(f.empty), "--colour"], "--colour")

    c.category = "cli list / top level"
    c.cli("list with an argument", ["list", "extra"], "extra")
    c.cli("list with a flag", ["list", "--all"], "--all")
    c.cli("no command", [], "command", "regress")
    c.cli("unknown command", ["train"], "train")
    c.cli("misspelt command", ["regres", "boston"], "regres")
    c.cli("option before command", ["--epochs", "3", "regress"], "--epochs")


def checks_and_plugins(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua
    from uncertain_agents.posteriors.mfvi import MeanFieldVI

    c.category = "cli check"
    c.cli("unknown posterior", ["check", "nosuch"], "nosuch")
    c.cli("bad option value", ["check", "ensemble", "--option", "n_members=0"], "n_members")
    c.cli("option without =", ["check", "mfvi", "--option", "prior_std"], "--option", "prior_std")
    c.cli("unknown option", ["check", "mfvi", "--option", "colour=1"], "colour")
    c.cli("unknown likelihood", ["check", "mfvi", "--likelihood", "poisson"], "--likelihood")
    c.cli("device tpu", ["check", "mfvi", "--device", "tpu"], "device")

    c.category = "check_posterior / register_posterior"
    c.api("check: unknown name", lambda: ua.check_posterior("nosuch"), "nosuch")
    c.api("check: name is a number", lambda: ua.check_posterior(3), "name")
    c.api("check: likelihoods a string", lambda: ua.check_posterior("mfvi", likelihoods="gaussian"), "likelihoods")
    c.api("check: likelihoods empty", lambda: ua.check_posterior("mfvi", likelihoods=()), "likelihoods")
    c.api("check: unknown likelihood", lambda: ua.check_posterior("mfvi", likelihoods=("poisson",)), "likelihoods")
    c.api("check: steps 0", lambda: ua.check_posterior("mfvi", steps=0), "steps")
    c.api("check: device tpu", lambda: ua.check_posterior("mfvi", device="tpu"), "device")
    c.api("check: unknown option", lambda: ua.check_posterior("mfvi", colour=1), "colour")
    c.api("register: not a class", lambda: ua.register_posterior("bad-input-a")(len), "Posterior")
    c.api("register: not a Posterior", lambda: ua.register_posterior("bad-input-b")(dict), "Posterior")
    c.api("register: class named otherwise", lambda: ua.register_posterior("bad-input-c")(MeanFieldVI), "name")
    c.api("register: a taken name", lambda: ua.register_posterior("mfvi")(MeanFieldVI), "mfvi")
    c.api("register: a taken alias", lambda: ua.register_posterior("bad-input-d", "vi")(MeanFieldVI), "vi")
    c.api("register: name not a string", lambda: ua.register_posterior(3)(MeanFieldVI), "name")
    c.api("register: empty name", lambda: ua.register_posterior(" ")(MeanFieldVI), "name")
    c.api("unregister: unknown name", lambda: ua.unregister_posterior("nosuch"), "nosuch")


def posteriors(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua

    c.category = "make_posterior"

    def make(name="mfvi", **kw):
        args = {"in_dim": 2, "out_dim": 1, "hidden": (4,), **kw}
        return lambda: ua.make_posterior(name, **args)

    c.api("unknown name", make("nonsense"), "nonsense")
    c.api("empty name", make(""), "posterior")
    c.api("name None", make(None), "name")
    c.api("name is a number", make(3), "name")
    c.api("unknown option", make("mfvi", colour=1), "colour")
    c.api("option of another method", make("map", alpha=0.5), "alpha")
    c.api("in_dim 0", make(in_dim=0), "in_dim")
    c.api("in_dim -1", make(in_dim=-1), "in_dim")
    c.api("in_dim 2.5", make(in_dim=2.5), "in_dim")
    c.api("in_dim '3'", make(in_dim="3"), "in_dim")
    c.api("in_dim None", make(in_dim=None), "in_dim")
    c.api("out_dim 0", make(out_dim=0), "out_dim")
    c.api("out_dim 1.5", make(out_dim=1.5), "out_dim")
    c.api("hidden (0,)", make(hidden=(0,)), "hidden")
    c.api("hidden (-1,)", make(hidden=(-1,)), "hidden")
    c.api("hidden '50'", make(hidden="50"), "hidden")
    c.api("hidden [2.5]", make(hidden=[2.5]), "hidden")
    c.api("hidden None", make(hidden=None), "hidden")
    c.api("activation nope", make(activation="nope"), "activation")
    c.api("likelihood poisson", make(likelihood="poisson"), "likelihood")
    c.api("device tpu", make(device="tpu"), "device")
    c.api("device cuda:9", make(device="cuda:9"), "cuda", "device")
    c.api("seed 'x'", make(seed="x"), "seed")
    c.api("seed 1.5", make(seed=1.5), "seed")
    c.api("seed -1", make(seed=-1), "seed")
    c.api("seed 2**64 - 1", make(seed=2**64 - 1), "seed")
    c.api("bb-alpha alpha inf", make("bb-alpha", alpha=float("inf")), "alpha")
    c.api("bb-alpha alpha 'x'", make("bb-alpha", alpha="x"), "alpha")
    c.api("mfvi train_samples 0", make("mfvi", train_samples=0), "train_samples")
    c.api("mfvi init_std 0", make("mfvi", init_std=0.0), "init_std")
    c.api("prior_std 0", make(prior_std=0.0), "prior_std")
    c.api("prior_std -1", make(prior_std=-1.0), "prior_std")
    c.api("prior_std nan", make(prior_std=float("nan")), "prior_std")
    c.api("prior_std 'big'", make(prior_std="big"), "prior_std")
    c.api("noise_std 0", make(noise_std=0.0), "noise_std")
    c.api("noise_std inf", make(noise_std=float("inf")), "noise_std")
    c.api("standardize 'yes'", make(standardize="yes"), "standardize")
    c.api("svgd n_particles 0", make("svgd", n_particles=0), "n_particles")
    c.api("svgd n_particles 2.5", make("svgd", n_particles=2.5), "n_particles")
    c.api("dropout-alpha dropout 1.5", make("dropout-alpha", dropout=1.5), "dropout")
    c.api("dropout-alpha dropout -0.1", make("dropout-alpha", dropout=-0.1), "dropout")
    c.api("ensemble n_members 0", make("ensemble", n_members=0), "n_members")
    c.api("bootstrap scheme nope", make("bootstrap", scheme="nope"), "scheme")
    c.api("svgd rule nope", make("svgd", rule="nope"), "rule")
    c.api("likelihood categorical, out_dim 1", make(likelihood="categorical", out_dim=1), "out_dim", "class")


def fit_predict_sample(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua

    c.category = "fit / predict / sample"
    g = torch.Generator().manual_seed(0)
    x = torch.rand(16, 2, generator=g)
    y = torch.rand(16, 1, generator=g)
    labels = torch.randint(0, 3, (16,), generator=g)

    def reg():
        return ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)

    def cls():
        return ua.make_posterior("map", in_dim=2, out_dim=3, hidden=(4,), likelihood="categorical", seed=0)

    def fit(xv=x, yv=y, make=reg, **kw):
        return lambda: make().fit(xv, yv, **{"steps": 2, **kw})

    nan_x = x.clone()
    nan_x[3, 1] = float("nan")
    nan_y = y.clone()
    nan_y[5, 0] = float("inf")
    c.api("fit: x with NaN", fit(nan_x), "x")
    c.api("fit: y with inf", fit(yv=nan_y), "y")
    c.api("fit: x wrong width", fit(torch.rand(16, 3)), "x")
    c.api("fit: x 1-D", fit(torch.rand(16)), "x")
    c.api("fit: x empty", fit(torch.rand(0, 2), torch.rand(0, 1)), "x")
    c.api("fit: x strings", fit([["a", "b"]] * 16), "x")
    c.api("fit: x None", fit(None), "x")
    c.api("fit: x a dict", fit({"a": 1}), "x")
    c.api("fit: y wrong length", fit(yv=torch.rand(15, 1)), "y")
    c.api("fit: y 3-D", fit(yv=torch.rand(16, 1, 1)), "y")
    c.api("fit: y two columns for out_dim 1", fit(yv=torch.rand(16, 2)), "y")
    c.api("fit: labels non-integer", fit(yv=labels.float() + 0.5, make=cls), "y", "label")
    c.api("fit: label out of range", fit(yv=labels + 3, make=cls), "y", "label")
    c.api("fit: negative label", fit(yv=labels - 1, make=cls), "y", "label")
    c.api("fit: labels as one-hot", fit(yv=torch.nn.functional.one_hot(labels, 3), make=cls), "y", "label")
    c.api("fit: mask wrong shape", fit(mask=torch.ones(3, 3, dtype=torch.bool)), "mask")
    c.api("fit: mask all False", fit(mask=torch.zeros(16, 1, dtype=torch.bool)), "mask")
    c.api("fit: steps 0", fit(steps=0), "steps")
    c.api("fit: steps -1", fit(steps=-1), "steps")
    c.api("fit: steps 1.5", fit(steps=1.5), "steps")
    c.api("fit: steps '10'", fit(steps="10"), "steps")
    c.api("fit: batch_size 0", fit(batch_size=0), "batch_size")
    c.api("fit: lr 0", fit(lr=0.0), "lr")
    c.api("fit: lr -1", fit(lr=-1.0), "lr")
    c.api("fit: lr nan", fit(lr=float("nan")), "lr")
    c.api("fit: lr inf", fit(lr=float("inf")), "lr")
    c.api("fit: unknown keyword", fit(epochs=3), "epochs")
    post = reg()
    c.api("predict: x with NaN", lambda: post.predict(nan_x), "x")
    c.api("predict: x wrong width", lambda: post.predict(torch.rand(4, 5)), "x")
    c.api("predict: x empty", lambda: post.predict(torch.rand(0, 2)), "x")
    c.api("predict: x complex", lambda: post.predict(torch.rand(4, 2, dtype=torch.cfloat)), "x")
    c.api("predict: n_samples 0", lambda: post.predict(x, n_samples=0), "n_samples")
    c.api("predict: n_samples 1.5", lambda: post.predict(x, n_samples=1.5), "n_samples")
    c.api("predict: generator not a Generator", lambda: post.predict(x, generator=0), "generator")
    c.api("sample: n 0", lambda: post.sample(0), "n")
    c.api("sample: n -3", lambda: post.sample(-3), "n")
    c.api("sample: n '3'", lambda: post.sample("3"), "n")
    c.api("sample: generator is a seed", lambda: post.sample(3, generator=42), "generator")
    fs = post.sample(7, generator=torch.Generator().manual_seed(0))
    c.api("function sample: fs[100]", lambda: fs[100], "100")
    c.api("function sample: fs[-8]", lambda: fs[-8], "-8")
    c.api("function sample: fs[1.5]", lambda: fs[1.5], "index")
    c.api("function sample: fs[10:20]", lambda: fs[10:20], "selects no function")
    c.api("function sample: fs(x) wrong width", lambda: fs(torch.rand(3, 4)), "x")
    c.api("function sample: fs(x) NaN", lambda: fs(nan_x), "x")
    c.api("save: to a folder path", lambda: post.save(f.empty), "empty")
    from uncertain_agents import metrics
    pred = post.predict(x, n_samples=4)
    c.api("metrics: rmse with y of another length", lambda: metrics.rmse(pred, torch.zeros(3)), "y")
    c.api("fit: y spread overflowing float32", lambda: ua.make_posterior("mfvi", in_dim=2, out_dim=1, seed=0).fit(
        x, torch.linspace(-1e19, 1e19, x.shape[0]).unsqueeze(1), steps=1), "y")
    classifier = ua.make_posterior("map", in_dim=2, out_dim=3, hidden=(4,), likelihood="categorical", seed=0)
    probs = classifier.predict(x, n_samples=2)
    c.api("metrics: accuracy with too few labels", lambda: metrics.accuracy(probs, torch.zeros(3, dtype=torch.long)),
          "y")
    c.api("metrics: log_prob with a label out of range", lambda: probs.log_prob(torch.full((x.shape[0],), 7)), "y")
    c.api("metrics: ECE n_bins 2.5", lambda: metrics.expected_calibration_error(probs, torch.zeros(x.shape[0]),
                                                                               n_bins=2.5), "n_bins")
    c.api("Predictive: noise_var 0", lambda: ua.Predictive(torch.zeros(2, 3, 1), "gaussian", 0.0), "noise_var")


def load_files(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua

    c.category = "load_posterior"
    good = f.root / "files" / "good.pt"
    good.parent.mkdir(parents=True, exist_ok=True)
    ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(3,), seed=0).save(good)
    raw = good.read_bytes()
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    buffer = io.BytesIO()
    torch.save({"hello": torch.zeros(2)}, buffer)
    cases = {
        "empty file": b"",
        "text file": b"hello world\n",
        "truncated file": raw[: len(raw) // 2],
        "one byte flipped": bytes(flipped),
        "trailing garbage": raw + b"junk",
        "a pickle": pickle.dumps({"config": "{}", "state": {}}),
        "JSON": b'{"format": 2, "config": {"name": "mfvi"}}',
        "random bytes": bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
        "a foreign torch file": buffer.getvalue(),
        "a gzip file": gzip.compress(raw),
    }
    for label, content in cases.items():
        path = f.file("model.pt", content)
        c.api(label, lambda p=path: ua.load_posterior(p), path.name)
    c.api("missing file", lambda: ua.load_posterior(f.root / "nothing.pt"), "nothing.pt")
    c.api("a folder", lambda: ua.load_posterior(f.empty), "empty")
    c.api("path None", lambda: ua.load_posterior(None), "path")
    c.api("path is a number", lambda: ua.load_posterior(3), "path")
    c.api("map_location tpu", lambda: ua.load_posterior(good, map_location="tpu"), "tpu", "map_location")


def data_folders(c: Catalogue, f: Files) -> None:
    from uncertain_agents.datasets.mnist import load_mnist
    from uncertain_agents.datasets.mushroom import load_mushroom, parse_mushroom
    from uncertain_agents.datasets.uci import UCIDataset

    c.category = "data folders / index files"

    def uci(edit: Callable[[Path], None], split: int | None = 0):
        root = f.uci_copy(edit)
        return lambda: UCIDataset("yacht", root).split(split) if split is not None else UCIDataset("yacht", root)

    def set_file(name: str, text: str) -> Callable[[Path], None]:
        return lambda d: (d / name).write_text(text)

    def remove(name: str) -> Callable[[Path], None]:
        return lambda d: (d / name).unlink()

    def append_test_row(d: Path) -> None:
        row = (d / "index_test_0.txt").read_text().split()[0]
        (d / "index_train_0.txt").write_text((d / "index_train_0.txt").read_text() + row + "\n")

    c.api("index: a word", uci(set_file("index_train_0.txt", "0\n1\nseven\n")), "index_train_0.txt")
    c.api("index: a float", uci(set_file("index_train_0.txt", "0\n1.5\n")), "index_train_0.txt")
    c.api("index: out of range", uci(set_file("index_train_0.txt", "0\n1\n999\n")), "index_train_0.txt")
    c.api("index: negative", uci(set_file("index_test_0.txt", "-1\n2\n")), "index_test_0.txt")
    c.api("index: duplicate", uci(set_file("index_train_0.txt", "0\n1\n1\n")), "index_train_0.txt")
    c.api("index: empty train", uci(set_file("index_train_0.txt", "")), "index_train_0.txt")
    c.api("index: empty test", uci(set_file("index_test_0.txt", "\n")), "index_test_0.txt")
    c.api("index: test row in train", uci(append_test_row), "index_test_0.txt")
    c.api("index: binary bytes", uci(lambda d: (d / "index_test_0.txt").write_bytes(b"\xff\xfe\x00")),
          "index_test_0.txt")
    c.api("index: split file missing", uci(remove("index_test_1.txt"), None), "index_test_1.txt")
    c.api("n_splits.txt: a word", uci(set_file("n_splits.txt", "twenty\n"), None), "n_splits.txt")
    c.api("n_splits.txt: zero", uci(set_file("n_splits.txt", "0\n"), None), "n_splits.txt")
    c.api("n_splits.txt: more than present", uci(set_file("n_splits.txt", "20\n"), None), "index_train_2.txt")
    def remove_splits(d: Path) -> None:
        for path in [*d.glob("index_t*_*.txt"), d / "n_splits.txt"]:
            path.unlink()

    c.api("n_splits.txt missing, no split files", uci(remove_splits, None), "split files")
    c.api("features: out of range", uci(set_file("index_features.txt", "0\n9\n"), None), "index_features.txt")
    c.api("features: missing", uci(remove("index_features.txt"), None), "index_features.txt")
    c.api("target: also a feature", uci(set_file("index_target.txt", "0\n"), None), "index_target.txt")
    c.api("target: empty", uci(set_file("index_target.txt", ""), None), "index_target.txt")
    c.api("data.txt: text", uci(set_file("data.txt", "a b c d\n"), None), "data.txt")
    c.api("data.txt: ragged rows", uci(set_file("data.txt", "1 2 3 4\n1 2\n"), None), "data.txt")
    c.api("data.txt: NaN", uci(set_file("data.txt", "1 2 3 4\nnan 2 3 4\n"), None), "data.txt")
    c.api("data.txt: empty", uci(set_file("data.txt", ""), None), "data.txt")
    c.api("data.txt: checksum mismatch",
          uci(lambda d: (d / "SHA256SUMS").write_text(f"{'0' * 64}  data.txt\n"), None), "data.txt")
    c.api("data.txt: missing", uci(remove("data.txt"), None), "data.txt")
    data = UCIDataset("yacht", f.data)
    c.api("split -1", lambda: data.split(-1), "split")
    c.api("split 99", lambda: data.split(99), "split")
    c.api("split '0'", lambda: data.split("0"), "split")
    c.api("split 1.0", lambda: data.split(1.0), "split")
    c.api("UCI name unknown", lambda: UCIDataset("housing", f.data), "housing")
    c.api("UCI name None", lambda: UCIDataset(None, f.data), "name", "data set")
    c.api("UCI name a number", lambda: UCIDataset(5, f.data), "name", "data set")
    c.api("UCI data folder is a file", lambda: UCIDataset("yacht", f.a_file), "a_file.txt")

    empty = f.folder("nothing")
    c.api("mushroom: missing, no download", lambda: load_mushroom(empty, download=False), "agaricus-lepiota.data")
    bad_sum = f.folder("mush_sum")
    write_mushroom(bad_sum / "mushroom", sums=False)
    (bad_sum / "mushroom" / "SHA256SUMS").write_text(f"{'1' * 64}  agaricus-lepiota.data\n")
    c.api("mushroom: checksum mismatch", lambda: load_mushroom(bad_sum, download=False), "agaricus-lepiota.data")
    for label, content in {"short rows": "e,x,s\n", "class letter z": mushroom_rows().replace("e,", "z,", 1),
                           "empty file": "", "multi-letter value": mushroom_rows().replace(",a,", ",aa,", 1)}.items():
        root = f.folder("mush")
        write_mushroom(root / "mushroom", content)
        c.api(f"mushroom: {label}", lambda r=root: load_mushroom(r, download=False), "agaricus-lepiota.data")
    c.api("mushroom: sha256 'abc'", lambda: load_mushroom(f.data, download=False, sha256="abc"), "sha256")
    c.api("mushroom: download 'no'", lambda: load_mushroom(f.data, download="no"), "download")
    c.api("parse_mushroom: missing file", lambda: parse_mushroom(f.root / "none.data"), "none.data")
    c.api("mnist: missing, no download", lambda: load_mnist(f.folder("nomnist"), download=False), "mnist")
    for bad in ("not-gzip", "magic", "truncated", "labels"):
        root = write_mnist(f.folder("mnist") / "mnist", bad=bad)
        c.api(f"mnist: {bad}", lambda r=root: load_mnist(r, download=False), "train-images", "train-labels", "train")


def environments(c: Catalogue, f: Files) -> None:
    import gymnasium as gym

    import envs  # noqa: F401
    from envs import ClassificationBandit, MushroomBandit, WheelBandit

    c.category = "envs"
    c.api("wheel delta 0", lambda: WheelBandit(delta=0.0), "delta")
    c.api("wheel delta 1", lambda: WheelBandit(delta=1.0), "delta")
    c.api("wheel delta -0.5", lambda: WheelBandit(delta=-0.5), "delta")
    c.api("wheel delta '0.5'", lambda: WheelBandit(delta="0.5"), "delta")
    c.api("wheel delta nan", lambda: WheelBandit(delta=float("nan")), "delta")
    c.api("wheel delta None", lambda: WheelBandit(delta=None), "delta")
    c.api("horizon 0", lambda: WheelBandit(horizon=0), "horizon")
    c.api("horizon -1", lambda: WheelBandit(horizon=-1), "horizon")
    c.api("horizon 2.5", lambda: WheelBandit(horizon=2.5), "horizon")
    c.api("horizon '10'", lambda: WheelBandit(horizon="10"), "horizon")

    def stepped(action, *, reset: bool = True, steps_before: int = 0, horizon: int = 50):
        def run():
            env = WheelBandit(delta=0.5, horizon=horizon)
            if reset:
                env.reset(seed=0)
            for _ in range(steps_before):
                env.step(0)
            return env.step(action)
        return run

    c.api("step before reset", stepped(0, reset=False), "reset")
    c.api("step past the horizon", stepped(0, steps_before=3, horizon=3), "reset", "horizon")
    c.api("action 5 of 5 arms", stepped(5), "action")
    c.api("action -1", stepped(-1), "action")
    c.api("action 1.5", stepped(1.5), "action")
    c.api("action '0'", stepped("0"), "action")
    c.api("action None", stepped(None), "action")
    c.api("action array of two", stepped(np.array([0, 1])), "action")
    c.api("gym.make unknown kwarg", lambda: gym.make("envs:WheelBandit-v0", colour=1), "colour")
    x, y = np.random.default_rng(0).normal(size=(8, 2)), np.arange(8) % 2
    c.api("classification x 1-D", lambda: ClassificationBandit(x[:, 0], y), "x")
    c.api("classification x NaN", lambda: ClassificationBandit(np.where(x > 1, np.nan, x), y), "x")
    c.api("classification x strings", lambda: ClassificationBandit(np.full((8, 2), "a"), y), "x")
    c.api("classification y length", lambda: ClassificationBandit(x, y[:5]), "y")
    c.api("classification y 0.5", lambda: ClassificationBandit(x, y + 0.5), "y")
    c.api("classification y -1", lambda: ClassificationBandit(x, y - 1), "y")
    c.api("classification n_classes 1", lambda: ClassificationBandit(x, y * 0, n_classes=1), "n_classes")
    c.api("classification n_classes 2.7", lambda: ClassificationBandit(x, y, n_classes=2.7), "n_classes")
    c.api("classification labels beyond n_classes", lambda: ClassificationBandit(x, y * 3, n_classes=2), "y")
    c.api("mushroom data not MushroomData", lambda: MushroomBandit(data="x"), "data")
    c.api("mushroom missing, no download", lambda: MushroomBandit(f.empty, download=False), "agaricus-lepiota.data")


def agent_cases(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua
    from envs import WheelBandit
    from uncertain_agents.agents import (BayesianLinearArms, LinearThompson, NeuralLinear, ThompsonSampling,
                                         Uniform, make_agent, run_bandit)

    c.category = "agents"

    def make(name="thompson", **kw):
        args = {"n_actions": 2, "context_dim": 2, "posterior": "mfvi", "hidden": (4,), **kw}
        return lambda: make_agent(name, **args)

    c.api("make_agent unknown name", make("smart"), "smart")
    c.api("make_agent name None", make(None), "agent name", "name")
    c.api("make_agent thompson without posterior", make(posterior=None), "posterior")
    c.api("make_agent unknown posterior", make(posterior="nope"), "nope")
    c.api("make_agent n_actions 2.7", make(n_actions=2.7), "n_actions")
    c.api("make_agent n_actions 1", make(n_actions=1), "n_actions", "out_dim")
    c.api("make_agent context_dim 0", make(context_dim=0), "context_dim")
    c.api("make_agent context_dim 2.5", make(context_dim=2.5), "context_dim")
    c.api("make_agent n_actions '3'", make(n_actions="3"), "n_actions")
    c.api("make_agent protocol nope", make(protocol="nope"), "nope")
    c.api("make_agent train_every 0", make(train_every=0), "train_every")
    c.api("make_agent unknown posterior option", make(posterior_options={"colour": 1}), "colour")
    c.api("Uniform n_actions 1", lambda: Uniform(1), "n_actions")
    c.api("Uniform n_actions 2.7", lambda: Uniform(2.7), "n_actions")
    c.api("Uniform seed 'x'", lambda: Uniform(2, seed="x"), "seed")
    c.api("Uniform seed -1", lambda: Uniform(2, seed=-1), "seed")
    c.api("make_agent posterior_options 5", make(posterior="mfvi", posterior_options=5), "posterior_options")
    c.api("LinearThompson context_dim 0", lambda: LinearThompson(0, 2), "context_dim")
    c.api("LinearThompson a0 -1", lambda: LinearThompson(2, 2, a0=-1.0), "a0")
    c.api("NeuralLinear hidden ()", lambda: NeuralLinear(2, 2, hidden=()), "hidden")
    c.api("BayesianLinearArms n_actions 2.7", lambda: BayesianLinearArms(2.7, 3), "n_actions")
    c.api("BayesianLinearArms lambda_prior 0", lambda: BayesianLinearArms(2, 3, lambda_prior=0), "lambda_prior")
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=3, hidden=(4,), seed=0)
    c.api("Thompson out_dim != n_actions", lambda: ThompsonSampling(post, 2), "out_dim", "n_actions")
    c.api("Thompson train_every 0", lambda: ThompsonSampling(post, 3, train_every=0), "train_every")
    c.api("Thompson with a classifier",
          lambda: ThompsonSampling(ua.make_posterior("map", in_dim=2, out_dim=3, likelihood="categorical"), 3),
          "posterior", "gaussian", "likelihood", "regression")
    agent = Uniform(3, context_dim=2, seed=0)
    c.api("act: context wrong length", lambda: agent.act([0.1, 0.2, 0.3]), "context")
    c.api("act: context NaN", lambda: agent.act([np.nan, 0.2]), "context")
    c.api("act: context text", lambda: agent.act("ab"), "context")
    c.api("update: action 9", lambda: agent.update([0.1, 0.2], 9, 1.0), "action")
    c.api("update: action 1.0", lambda: agent.update([0.1, 0.2], 1.0, 1.0), "action")
    c.api("update: reward nan", lambda: agent.update([0.1, 0.2], 1, float("nan")), "reward")
    c.api("update: reward 'x'", lambda: agent.update([0.1, 0.2], 1, "x"), "reward")
    env = WheelBandit(delta=0.5)
    c.api("run_bandit steps 0", lambda: run_bandit(env, Uniform(5), steps=0, seed=0), "steps")
    c.api("run_bandit steps 2.5", lambda: run_bandit(env, Uniform(5), steps=2.5, seed=0), "steps")
    c.api("run_bandit seed 'x'", lambda: run_bandit(env, Uniform(5), steps=3, seed="x"), "seed")
    c.api("run_bandit agent without act", lambda: run_bandit(env, object(), steps=3, seed=0), "agent")
    c.api("run_bandit agent with too few arms", lambda: run_bandit(env, Uniform(2, seed=0), steps=3, seed=0),
          "action", "arms", "n_actions")
    c.api("run_bandit agent with too many arms",
          lambda: run_bandit(env, Uniform(9, context_dim=2, seed=0), steps=40, seed=0), "n_actions")
    c.api("LinearThompson a0 True", lambda: LinearThompson(2, 2, a0=True), "a0")
    from uncertain_agents.agents.experiment import agent_specs, run_experiment
    c.api("run_experiment trials 0", lambda: run_experiment("wheel", agent_specs(["uniform"], []), steps=5, trials=0),
          "trials")
    c.api("run_experiment steps 0", lambda: run_experiment("wheel", agent_specs(["uniform"], []), steps=0, trials=1),
          "steps")
    from uncertain_agents.agents.lockstep import run_bandit_trials
    from uncertain_agents.posteriors.trials import make_trial_posterior
    c.api("run_bandit_trials posterior of other context width",
          lambda: run_bandit_trials([WheelBandit(delta=0.5)], make_trial_posterior("mfvi", trials=1, in_dim=3, out_dim=5),
                                    steps=5, seeds=[0]), "in_dim")
    c.api("run_bandit_trials seeds [0.9]",
          lambda: run_bandit_trials([WheelBandit(delta=0.5)], make_trial_posterior("mfvi", trials=1, in_dim=2, out_dim=5),
                                    steps=5, seeds=[0.9]), "seeds")


def attack_cases(c: Catalogue, f: Files) -> None:
    import uncertain_agents as ua
    from attacks import AUROCWarning, auroc, clean_accuracy, fgsm, targeted_ifgsm, uncertainty_scores
    from attacks.evaluate import load_dataset, parse_posterior

    c.category = "attack helpers"
    c.api("auroc: empty clean", lambda: auroc([], [0.1, 0.2]), "clean_scores")
    c.api("auroc: empty adversarial", lambda: auroc([0.1], []), "adversarial_scores")
    c.api("auroc: NaN score", lambda: auroc([0.1, float("nan")], [0.2]), "clean_scores")
    c.api("auroc: 2-D scores", lambda: auroc(np.zeros((2, 2)), [0.1, 0.2]), "clean_scores")
    c.api("auroc: strings", lambda: auroc(["a", "b"], [0.1, 0.2]), "clean_scores")
    c.api("auroc: None", lambda: auroc(None, [0.1, 0.2]), "clean_scores")
    c.api("auroc: one score each", lambda: auroc([0.1], [0.2]), "single score", warns=AUROCWarning)
    c.api("auroc: one adversarial score", lambda: auroc([0.1, 0.3, 0.5], [0.2]), "single score", warns=AUROCWarning)
    clf = ua.make_posterior("map", in_dim=4, out_dim=3, hidden=(3,), likelihood="categorical", seed=0)
    reg = ua.make_posterior("map", in_dim=4, out_dim=1, hidden=(3,), seed=0)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 4, generator=g)
    y = torch.tensor([0, 1, 2, 0, 1, 2])

    def attack(fn=fgsm, post=clf, xv=x, yv=y, **kw):
        return lambda: fn(post, xv, yv, **{"n_samples": 2, **kw})

    c.api("fgsm: regression posterior", attack(post=reg), "posterior", "categorical", "classifier")
    c.api("fgsm: not a posterior", attack(post="map"), "posterior")
    c.api("fgsm: x above 1", attack(xv=x * 3), "x")
    c.api("fgsm: x wrong width", attack(xv=torch.rand(6, 5)), "x")
    c.api("fgsm: x NaN", attack(xv=torch.full((6, 4), float("nan"))), "x")
    c.api("fgsm: x empty", attack(xv=torch.rand(0, 4), yv=torch.tensor([], dtype=torch.long)), "x")
    c.api("fgsm: y out of range", attack(yv=y + 3), "y")
    c.api("fgsm: y wrong length", attack(yv=y[:4]), "y")
    c.api("fgsm: y non-integer", attack(yv=y.float() + 0.5), "y")
    c.api("fgsm: epsilons negative", attack(epsilons=[-0.1]), "epsilons")
    c.api("fgsm: epsilons empty", attack(epsilons=[]), "epsilons")
    c.api("fgsm: epsilons text", attack(epsilons="big"), "epsilons")
    c.api("fgsm: epsilons inf", attack(epsilons=[float("inf")]), "epsilons")
    c.api("fgsm: n_samples 0", attack(n_samples=0), "n_samples")
    c.api("fgsm: eval_samples 0", attack(eval_samples=0), "eval_samples")
    c.api("fgsm: batch_size 0", attack(batch_size=0), "batch_size")
    c.api("fgsm: a single row", attack(xv=x[:1], yv=y[:1], epsilons=[0.1]), "single score", warns=AUROCWarning)
    c.api("ifgsm: target 3 of 3 classes", attack(targeted_ifgsm, target=3, steps=1), "target")
    c.api("ifgsm: target -1", attack(targeted_ifgsm, target=-1, steps=1), "target")
    c.api("ifgsm: target 1.5", attack(targeted_ifgsm, target=1.5, steps=1), "target")
    c.api("ifgsm: step 0", attack(targeted_ifgsm, step=0.0, steps=1), "step")
    c.api("ifgsm: steps 0", attack(targeted_ifgsm, steps=0), "steps")
    c.api("ifgsm: epsilon -1", attack(targeted_ifgsm, epsilon=-1.0, steps=1), "epsilon")
    c.api("ifgsm: every input is the target", attack(targeted_ifgsm, yv=y * 0, steps=1), "target")
    c.api("clean_accuracy: n_samples 0", lambda: clean_accuracy(clf, x, y, n_samples=0), "n_samples")
    c.api("uncertainty_scores: regression predictive", lambda: uncertainty_scores(reg.predict(x)), "pred")
    c.api("parse_posterior: empty", lambda: parse_posterior(""), "posterior")
    c.api("parse_posterior: unknown", lambda: parse_posterior("nope:alpha=1"), "nope")
    c.api("parse_posterior: option without =", lambda: parse_posterior("map:alpha"), "alpha")
    c.api("load_dataset: cifar", lambda: load_dataset("cifar"), "cifar")


BUILDERS = (cli_regress, cli_bandit, cli_attack, cli_grid_and_list, checks_and_plugins, posteriors, fit_predict_sample,
            load_files, data_folders, environments, agent_cases, attack_cases)


# ------------------------------------------------------------------ report
def summarize(outcomes: list[Outcome]) -> pd.DataFrame:
    frame = pd.DataFrame({"category": [o.case.category for o in outcomes], "clear": [o.clear for o in outcomes]})
    order = list(dict.fromkeys(frame["category"]))
    table = frame.groupby("category", sort=False).agg(cases=("clear", "size"), clear_error=("clear", "sum"))
    table = table.reindex(order)
    table["bad_outcome"] = table["cases"] - table["clear_error"]
    total = pd.DataFrame({"cases": [table["cases"].sum()], "clear_error": [table["clear_error"].sum()],
                          "bad_outcome": [table["bad_outcome"].sum()]}, index=["total"])
    return pd.concat([table, total])


def print_table(table: pd.DataFrame, seconds: float) -> None:
    from rich.console import Console
    from rich.table import Table

    view = Table(title=f"bad inputs: {int(table.loc['total', 'cases'])} cases in {seconds:.0f} s")
    for col in ("category", "cases", "clear error", "bad outcome"):
        view.add_column(col, justify="left" if col == "category" else "right")
    for name, row in table.iterrows():
        style = "bold" if name == "total" else None
        view.add_row(str(name), str(int(row["cases"])), str(int(row["clear_error"])), str(int(row["bad_outcome"])),
                     style=style)
    Console().print(view)


def write_markdown(table: pd.DataFrame, outcomes: list[Outcome], path: Path, command: str) -> None:
    from uncertain_agents.runs import atomic_write_text

    lines = ["# Bad inputs a new user might give", "",
             f"Produced by `{command}` (in-process CLI calls and public-API calls on files built in a "
             "temporary folder; offline).", "",
             "A **clear error** is an exception of an expected type (ValueError, TypeError, FileNotFoundError, "
             "IsADirectoryError, NotADirectoryError, IndexError, gymnasium's ResetNeeded) whose one-line message "
             "names the offending argument or file (for the CLI: a non-zero exit with a one-line `error:` naming it, no traceback), or the documented "
             "warning; anything else is a **bad outcome**.", "",
             "| category | cases | clear error | bad outcome |", "| --- | ---: | ---: | ---: |"]
    for name, row in table.iterrows():
        cells = [str(name), str(int(row["cases"])), str(int(row["clear_error"])), str(int(row["bad_outcome"]))]
        if name == "total":
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    bad = [o for o in outcomes if not o.clear]
    lines += ["", "## Bad outcomes", ""]
    if bad:
        lines += [f"* **{o.case.category} — {o.case.label}**: {escape_md(o.detail)}"
                  + (f" — in {WHERE[o.case.label]}" if o.case.label in WHERE else "") for o in bad]
    else:
        lines.append("None.")
    lines += ["", "## Every case", "", "| category | case | answer |", "| --- | --- | --- |"]
    for o in outcomes:
        mark = "" if o.clear else "**bad** "
        lines.append(f"| {o.case.category} | {escape_md(o.case.label)} | {mark}{escape_md(o.detail[:200])} |")
    atomic_write_text(path, "\n".join(lines) + "\n")


def escape_md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown report (default: %(default)s)")
    parser.add_argument("--only", default=None, help="run only the categories whose name contains this text")
    parser.add_argument("--verbose", action="store_true", help="print every case's answer")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        cwd = os.getcwd()
        files = Files(Path(tmp))
        catalogue = Catalogue()
        for build in BUILDERS:
            build(catalogue, files)
        cases = [c for c in catalogue.cases if args.only is None or args.only in c.category]
        outcomes = []
        os.chdir(Path(__file__).resolve().parents[1])  # spec paths are relative to the project
        try:
            for case in cases:
                outcome = classify(case)
                outcome.detail = outcome.detail.replace(tmp, "$TMP")  # the same report on every run
                outcomes.append(outcome)
                if args.verbose or not outcome.clear:
                    mark = "ok " if outcome.clear else "BAD"
                    print(f"{mark} {case.category} | {case.label} | {outcome.detail[:220]}", file=sys.__stdout__)
        finally:
            os.chdir(cwd)
    seconds = time.perf_counter() - start
    table = summarize(outcomes)
    print_table(table, seconds)
    command = "GIT_PYTHON_REFRESH=quiet OMP_NUM_THREADS=1 python experiments/bad_input_cases.py"
    if args.only is None:
        write_markdown(table, outcomes, args.out, command)
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
