"""Checks shared by the sub-commands, run before any work starts."""
from __future__ import annotations

import argparse
import re

from ..runs import available_cores
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
    ``default`` or every available core."""
    cores = available_cores()
    if value is None:
        return min(default or cores, cores), None
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


def check_posterior_options(names, options: dict, *, likelihood: str = "gaussian", extra=None,
                            where: str | None = None) -> None:
    """Build each posterior once on a tiny network so an unknown or bad ``--option`` fails now.

    ``extra(name)`` may add options (a protocol's) that the real run will pass too. ``where``
    names what the options came from in the error (default ``--option for NAME``), for a
    command whose options come another way (``attack``: ``--posterior NAME:key=value``).
    """
    from ..registry import make_posterior

    for name in dict.fromkeys(names):
        merged = {**(extra(name) if extra else {}), **options}
        try:
            make_posterior(name, in_dim=2, out_dim=2, hidden=(2,), likelihood=likelihood, **merged)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where or f'--option for {name}'}: {err}") from None


def unit_name(*parts) -> str:
    """A file-name-safe name for one unit of a run (e.g. an agent's trial)."""
    return "__".join(re.sub(r"[^\w.\-\[\]]+", "-", str(p)) for p in parts)
