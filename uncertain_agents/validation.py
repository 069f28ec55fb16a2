"""Input checks that turn bad arguments into clear errors naming the argument."""
from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from typing import Union

import numpy as np
import torch
from torch import Tensor

#: What the public functions accept as data: a tensor, a numpy array or (nested) lists of numbers.
ArrayLike = Union[Tensor, np.ndarray, Sequence]

_REAL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

#: Unsigned integer types wider than 8 bits: torch holds them (from numpy) but lacks most operations
#: on them (``min``, comparisons), so :func:`as_tensor` widens them first.
_WIDE_UNSIGNED = tuple(getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n))


def _numpy_to_tensor(value) -> Tensor:
    """``torch.as_tensor`` of a numpy array / nested list / number, for every array numpy makes:
    negative strides (``a[::-1]``, ``np.flip``) and read-only arrays are copied, and unsigned integers wider than 8 bits
    become int64 (float64 for uint64 values beyond int64)."""
    arr = np.asarray(value)
    if arr.dtype.kind == "u" and arr.itemsize > 1:
        fits = arr.itemsize < 8 or arr.size == 0 or int(arr.max()) <= np.iinfo(np.int64).max
        arr = arr.astype(np.int64 if fits else np.float64)
    elif not arr.flags.writeable or any(stride < 0 for stride in arr.strides):
        # torch takes neither negative strides nor, without a warning, read-only memory (a pandas
        # Series, np.broadcast_to); silencing the warning instead would change the process's warning
        # filters on every call, which is not thread-safe
        arr = arr.copy()
    return torch.as_tensor(arr)


def as_tensor(value, name: str, *, device, dtype: torch.dtype | None = torch.float32) -> Tensor:
    """Convert a tensor / numpy array / nested list to a tensor on ``device``.

    Raises ``ValueError`` naming ``name`` when finite floating values overflow ``dtype`` (float64
    values beyond float32's range would otherwise become ±inf and be reported as such)."""
    if isinstance(value, Tensor):
        t = value
        if t.dtype in _WIDE_UNSIGNED:
            t = t.to(torch.float64 if t.dtype == torch.uint64 else torch.int64)
    elif isinstance(value, (np.ndarray, list, tuple, numbers.Number)) or hasattr(value, "__array__"):
        # ``__array__``: array-likes such as a pandas Series or DataFrame of numbers
        try:
            t = _numpy_to_tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name} must be numeric, could not convert it: {err}") from None
    else:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array (or an array-like), got {type(value).__name__}")
    if not (t.is_floating_point() or t.dtype in _REAL_DTYPES):
        raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if dtype is not None and t.dtype != dtype:
        source, t = t, t.to(dtype)
        if (source.is_floating_point() and dtype.is_floating_point
                and torch.finfo(source.dtype).max > torch.finfo(dtype).max
                and not bool(torch.isfinite(t.sum()))):  # rare: a NaN/inf entry, or an overflow
            overflow = torch.isfinite(source) & ~torch.isfinite(t)
            if bool(overflow.any()):
                raise ValueError(f"{name} holds {int(overflow.sum())} value(s) beyond the range of {dtype} "
                                 f"(up to {float(source[overflow].abs().max()):.3g}; the largest is "
                                 f"{torch.finfo(dtype).max:.3g}); rescale {name} (e.g. divide it by a constant)")
    # one memory layout whatever the caller's (a DataFrame's column-major array, a transposed tensor):
    # reductions over it (the standardisation's means) then sum in one order, so results are the same
    return t.to(device).contiguous()


def check_finite(t: Tensor, name: str) -> None:
    """Raise ValueError naming ``name`` if ``t`` holds a NaN or ±inf.

    The sum of a tensor is finite only if every entry is, so one reduction answers for the
    usual, finite case (a bandit's history of half a million rows: 13 ms instead of 520 for
    ``isfinite(t).all()``, which writes a bool per entry); only a non-finite sum — a NaN or
    ±inf entry, or finite entries whose sum overflows — is looked at entry by entry."""
    if not t.is_floating_point() or bool(torch.isfinite(t.sum())):
        return
    if not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s); clean the data first")


def check_inputs(x, in_dim: int, *, device, name: str = "x") -> Tensor:
    """Return ``x`` as a float tensor ``[N, in_dim]`` (``[N]`` is accepted when in_dim=1)."""
    t = as_tensor(x, name, device=device)
    if t.dim() == 1 and in_dim == 1:
        t = t.unsqueeze(-1)
    if t.dim() != 2:
        raise ValueError(f"{name} must have shape [N, {in_dim}], got {tuple(t.shape)}")
    if t.shape[1] != in_dim:
        raise ValueError(f"{name} must have {in_dim} columns (in_dim), got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} must have at least one row")
    check_finite(t, name)
    return t


def check_device(value, name: str = "device") -> torch.device:
    """A torch device that exists on this machine: ``cpu`` or ``cuda[:N]`` (a string or a
    ``torch.device``); anything else is a ``ValueError`` naming ``name``."""
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"{name} must be a torch device such as cpu, cuda or cuda:0, got {value!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={value!r}: CUDA is not available on this machine (use cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={value!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"{name} must be cpu or cuda[:N], got {value!r}")
    return device


#: Seeds are whole numbers in ``[0, MAX_SEED]``: numpy's generators refuse negative seeds, and the run
#: seeds in ``seed + trial`` / ``seed + split`` must still fit torch's 64-bit seed.
MAX_SEED = 2**63 - 1


def check_seed(value, name: str = "seed") -> int | None:
    """``value`` as an int seed in ``[0, MAX_SEED]`` (``None`` passes through: an unseeded run)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if not 0 <= int(value) <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**63 - 1], got {int(value)}")
    return int(value)


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_positive_float(value, name: str, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def plain_value(value):
    """``value`` with NumPy scalars (``np.int64(3)``, ``np.float32(0.5)``, ``np.bool_``), 0-d NumPy
    arrays and 0-d torch tensors of numbers turned into the Python ``int`` / ``float`` / ``bool``
    they hold (``np.float64``, a ``float`` subclass, too), also inside lists and tuples (a list stays
    a list, a tuple a tuple); anything else is returned unchanged. Method options pass through it,
    so that ``n_members=np.int64(3)`` builds the same posterior as ``n_members=3`` and the saved
    configuration (JSON) holds plain numbers."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.generic) and isinstance(value, (np.bool_, np.number)):
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, Tensor) and value.dim() == 0 and (value.is_floating_point() or value.dtype in _REAL_DTYPES):
        return value.item()
    if isinstance(value, (list, tuple)):
        items = [plain_value(v) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def check_saveable_options(options: dict, what: str) -> None:
    """Raise ``TypeError`` naming the first entry of ``options`` that JSON cannot write (a saved
    posterior's configuration is JSON): options must be numbers, strings, booleans, ``None`` or
    lists of them. ``what`` (e.g. ``"mfvi"``) starts the message."""
    try:
        json.dumps(options)
        return
    except (TypeError, ValueError):
        pass
    for key, value in options.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise TypeError(f"{what}: option {key}={value!r} ({type(value).__name__}) cannot be saved with the "
                            f"posterior; options must be numbers, strings, booleans, None or lists of "
                            f"them") from None
    raise TypeError(f"{what}: the options {options!r} cannot be saved with the posterior")  # pragma: no cover
