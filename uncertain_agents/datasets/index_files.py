"""Reading and checking the integer index files of a data folder (UCI splits, columns).

An index file holds whitespace-separated non-negative integers (normally one per line).
Every problem is a ``ValueError`` that names the file and, where there is one, the line:
a token that is not an integer, an index outside the data, a repeated index, an empty
file, and (for a train/test pair) a row that is in both.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

_INTEGER = re.compile(r"[+-]?\d+")


class IndexFileError(ValueError):
    """An index file is malformed: its message names the file (and line) and the problem."""


def read_index_file(path: Path, *, size: int, what: str) -> np.ndarray:
    """The indices in ``path`` as an int64 array, checked against ``size`` entries.

    Args:
        path: the index file.
        size: number of entries the indices point into (rows or columns of the data);
            every index must lie in ``[0, size)``.
        what: what the indices point at, for messages (``"rows"``, ``"columns"``).

    Raises:
        IndexFileError: non-integer token, index out of range, duplicate index, or no
            index at all; the message names ``path`` and the line.
    """
    values: list[int] = []
    first_line: dict[int, int] = {}
    for number, line in enumerate(_read_lines(path), start=1):
        for token in line.split():
            index = _parse_token(token, path, number)
            _check_range(index, size, what, path, number)
            if index in first_line:
                raise IndexFileError(f"{path}, line {number}: index {index} is repeated "
                                     f"(first on line {first_line[index]}); each index may appear once")
            first_line[index] = number
            values.append(index)
    if not values:
        raise IndexFileError(f"{path} is empty: expected at least one integer index into the {size} data {what}")
    return np.asarray(values, dtype=np.int64)


def check_disjoint(train: np.ndarray, test: np.ndarray, train_path: Path, test_path: Path) -> None:
    """Raise :class:`IndexFileError` when a row index is in both a train and a test file."""
    shared = np.intersect1d(train, test)
    if shared.size:
        row = int(shared[0])
        raise IndexFileError(
            f"{test_path}, line {_line_of(test_path, row)}: row {row} is also in the training split "
            f"{train_path.name} ({shared.size} row(s) shared in all); train and test rows must be disjoint")


def _line_of(path: Path, index: int) -> int:
    """The first line of ``path`` that holds ``index`` (0 when none does)."""
    for number, line in enumerate(_read_lines(path), start=1):
        if any(_INTEGER.fullmatch(t) and int(t) == index for t in line.split()):
            return number
    return 0


def read_count_file(path: Path, *, what: str) -> int:
    """A file holding one positive integer (e.g. ``n_splits.txt``)."""
    tokens = [(number, token) for number, line in enumerate(_read_lines(path), start=1) for token in line.split()]
    if len(tokens) != 1:
        raise IndexFileError(f"{path} must hold exactly one positive integer ({what}), "
                             f"found {len(tokens)} value(s)")
    number, token = tokens[0]
    value = _parse_token(token, path, number)
    if value <= 0:
        raise IndexFileError(f"{path}, line {number}: {what} must be a positive integer, got {value}")
    return value


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except UnicodeDecodeError:
        raise IndexFileError(f"{path} is not a text file of integers (it holds undecodable bytes)") from None


def _parse_token(token: str, path: Path, line: int) -> int:
    if not _INTEGER.fullmatch(token):
        raise IndexFileError(f"{path}, line {line}: {token!r} is not an integer")
    return int(token)


def _check_range(index: int, size: int, what: str, path: Path, line: int) -> None:
    if not 0 <= index < size:
        raise IndexFileError(f"{path}, line {line}: index {index} is out of range; the data has {size} {what} "
                             f"(valid indices 0..{size - 1})")
