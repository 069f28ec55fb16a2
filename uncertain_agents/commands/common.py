"""Checks shared by the sub-commands, run before any work starts."""
from __future__ import annotations

import argparse
import math
import re

from ..runs import available_cores, default_threads, json_safe  # noqa: F401  (json_safe: the commands import it from here)
from ..validation import MAX_SEED


def seed_arg(text: str) -> int:
    """argparse type of ``--seed``: a whole number in ``[0, 2**63 - 1]`` (as ``validation.check_seed``),
    refused while the arguments are parsed, before any work."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63 - 1], got {value}")
    return value


def check_threads(value: int | None, *, default: int | None = None, name: str = "--threads") -> tuple[int, str | None]:
    """``--threads`` (or another per-core count, ``name``): a positive integer, at most the cores
    this process may use (larger values are lowered to that, with a note). ``None`` gives
    ``default`` or every available core, and never more than an ``OMP_NUM_THREADS`` the user set
    (:func:`~uncertain_agents.runs.default_threads`)."""
    cores = available_cores()
    if value is None:
        return default_threads(default), None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value > cores:
        return cores, f"{name} {value} lowered to {cores}, the cores this process may use"
    return value, None


def check_device(text: str) -> str:
    """``--device``: a torch device that exists on this machine."""
    from ..validation import check_device as check_torch_device

    check_torch_device(text, "--device")
    return text


def check_posterior_options(names, options: dict, *, in_dim: int, out_dim: int, hidden,
                            activation: str = "relu", likelihood: str = "gaussian", merge=None,
                            where: str | None = None) -> None:
    """Build each posterior once, on the network the run will build, so an unknown or bad
    ``--option`` fails now, before any work or file.

    ``in_dim``, ``out_dim``, ``hidden`` and ``activation`` are the run's network (a per-layer
    option such as a ``prior_std`` list must fit *its* layers). ``merge(name, options)`` returns
    the whole options the run passes (a bandit protocol's ``merged_options``, which also refuses a
    protocol's per-layer option that does not fit ``hidden``). ``where`` names what the options
    came from in the error (default ``--option for NAME``), for a command whose options come
    another way (``attack``: ``--posterior NAME:key=value``).
    """
    from ..registry import make_posterior

    network = dict(in_dim=in_dim, out_dim=out_dim, hidden=tuple(hidden), activation=activation)
    for name in dict.fromkeys(names):
        label = where or f"--option for {name}"
        try:
            merged = merge(name, dict(options)) if merge is not None else dict(options)
            make_posterior(name, likelihood=likelihood, **network, **merged)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{label}: {err}") from None


def finite_number(value, flag: str, *, positive: bool = False):
    """``value`` of a numeric flag, refused unless finite (and ``> 0`` with ``positive``);
    ``None`` (the flag left out) passes. The message names ``flag``."""
    if value is None:
        return None
    if not math.isfinite(value) or (positive and not value > 0):
        what = "a positive finite number" if positive else "a finite number"
        raise ValueError(f"{flag} must be {what}, got {value}")
    return value


def _widths(text: str) -> list[int]:
    """One ``--hidden`` word: ``50`` or ``50,50`` -> ``[50]`` / ``[50, 50]``."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    try:
        if not parts:
            raise ValueError
        return [int(v) for v in parts]
    except ValueError:
        hint = ("; put positional arguments (such as the bandit or dataset name) before --hidden, "
                "which takes every word after it" if not any(c.isdigit() for c in text) else "")
        raise argparse.ArgumentTypeError(
            f"expects a comma-separated list of whole-number widths such as 50,50 (or 50 50), got {text!r}{hint}") from None


class _HiddenAction(argparse.Action):
    """``--hidden 50 50`` and ``--hidden 50,50`` (and a mix) -> ``[50, 50]``; a repeated flag replaces."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, [w for word in values for w in word])


def add_hidden_argument(parser: argparse.ArgumentParser, *, default, help: str) -> None:
    """``--hidden`` as every command takes it: widths separated by spaces or commas (``50 50`` or
    ``50,50``), stored as a list of ints (``default`` when left out). Whether the widths are
    positive is checked with the other arguments (:func:`check_hidden`)."""
    parser.add_argument("--hidden", nargs="+", type=_widths, action=_HiddenAction, default=default,
                        metavar="WIDTH", help=help)


def check_hidden(hidden) -> None:
    """``--hidden`` widths: positive integers (``None``, left out, passes)."""
    if hidden is not None and (not hidden or any(h <= 0 for h in hidden)):
        raise ValueError(f"--hidden widths must be positive integers, got {' '.join(map(str, hidden))}")


def check_writable_file(path, flag: str, shown=None) -> None:
    """``flag``'s output file ``path`` can be written: not a folder, and a file can be made in its
    folder (or, where the folder does not exist yet, the folder in its nearest existing parent).
    Tried for real (a file made and removed), so a read-only or special file system (``/proc``)
    is refused before any work; permission bits alone say nothing for root. The error names
    ``flag`` and ``shown`` (default ``path``: a command that writes into a folder names the folder)."""
    from ..runs import check_writable

    try:
        check_writable(path)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise ValueError(f"{flag} {path if shown is None else shown}: {reason}") from None


def unit_name(*parts) -> str:
    """A file-name-safe name for one unit of a run (e.g. an agent's trial)."""
    return "__".join(re.sub(r"[^\w.\-\[\]]+", "-", str(p)) for p in parts)


def add_no_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``, as every command with a progress display takes it (for logs). The display
    is on stderr (:func:`uncertain_agents.posteriors.progress.status_console`), never among the
    results on stdout."""
    parser.add_argument("--no-progress", action="store_true",
                        help="hide progress bars and spinners, which go to stderr (e.g. when stderr goes to a log "
                             "file)")


DEVICE_HELP = "torch device, e.g. cpu, cuda or cuda:1 (default: cpu)"


def titled_table(title: str, **kwargs):
    """A ``rich`` table whose title stays on one line (as far as the console is wide): a title
    wider than its table's columns would otherwise wrap to the columns' width."""
    from rich.table import Table

    return Table(title=title, min_width=len(title) + 2, **kwargs)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a command whose message is not the run-folder one (``bench`` and ``check`` keep
    nothing and resume nothing): raised with that message, which :func:`uncertain_agents.cli.main`
    prints in place of its own (exit 130)."""
