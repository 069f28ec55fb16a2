"""UCI Mushroom (agaricus-lepiota) for the mushroom contextual bandit.

The file has 8,124 rows of 23 comma-separated one-letter fields: the class (``e``
edible / ``p`` poisonous) and 22 categorical attributes. Every attribute is one-hot
encoded over the values that occur in the file, ``?`` (missing stalk-root) being a
value of its own, which gives 117 binary features for the original file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import data_dir as resolve_data_dir
from . import fetch_file, read_checksums

RELATIVE_PATH = "mushroom/agaricus-lepiota.data"
URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/mushroom/agaricus-lepiota.data"
#: SHA-256 of the original file (as listed in the data folder's ``SHA256SUMS``).
SHA256 = "e65d082030501a3ebcbcd7c9f7c71aa9d28fdfff463bf4cf4716a3fe13ac360e"

ATTRIBUTES = (
    "cap-shape", "cap-surface", "cap-color", "bruises", "odor", "gill-attachment",
    "gill-spacing", "gill-size", "gill-color", "stalk-shape", "stalk-root",
    "stalk-surface-above-ring", "stalk-surface-below-ring", "stalk-color-above-ring",
    "stalk-color-below-ring", "veil-type", "veil-color", "ring-number", "ring-type",
    "spore-print-color", "population", "habitat",
)


@dataclass(frozen=True)
class MushroomData:
    """One-hot encoded mushrooms.

    Attributes:
        contexts: ``[N, F]`` float32 one-hot features (F = 117 for the original file).
        edible: ``[N]`` bool, True for edible rows.
        feature_names: ``F`` names ``"attribute=value"``.
    """

    contexts: np.ndarray
    edible: np.ndarray
    feature_names: tuple[str, ...]


def parse_mushroom(path: str | os.PathLike) -> MushroomData:
    """Parse and one-hot encode a file in the agaricus-lepiota format."""
    rows = [line.strip().split(",") for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} holds no rows")
    bad = [i for i, r in enumerate(rows) if len(r) != 1 + len(ATTRIBUTES)]
    if bad:
        raise ValueError(f"{path}: row {bad[0] + 1} has {len(rows[bad[0]])} fields, expected "
                         f"{1 + len(ATTRIBUTES)} (class + 22 attributes)")
    long_fields = [(i, j) for i, r in enumerate(rows) for j, v in enumerate(r) if len(v) != 1]
    if long_fields:
        i, j = long_fields[0]
        raise ValueError(f"{path}: row {i + 1}, field {j + 1} is {rows[i][j]!r}; every field must be one "
                         f"letter (the agaricus-lepiota coding)")
    table = np.array(rows, dtype="<U1")
    labels = table[:, 0]
    unknown = sorted(set(labels) - {"e", "p"})
    if unknown:
        raise ValueError(f"{path}: class field must be 'e' or 'p', found {unknown}")
    blocks, names = [], []
    for j, attribute in enumerate(ATTRIBUTES, start=1):
        values, codes = np.unique(table[:, j], return_inverse=True)
        blocks.append(np.eye(len(values), dtype=np.float32)[codes])
        names += [f"{attribute}={v}" for v in values]
    return MushroomData(np.concatenate(blocks, axis=1), labels == "e", tuple(names))


AUTO = "auto"


def load_mushroom(data_dir: str | os.PathLike | None = None, *, sha256: str | None = AUTO,
                  download: bool = True) -> MushroomData:
    """Load the mushroom data from the data folder, downloading it from UCI when missing.

    Args:
        data_dir: the data folder (else ``$UNCERTAIN_AGENTS_DATA``, else the user cache);
            the file is ``<data_dir>/mushroom/agaricus-lepiota.data``.
        sha256: expected checksum. ``"auto"`` (default): the one the folder's
            ``mushroom/SHA256SUMS`` lists for the file, else the original file's
            (:data:`SHA256`, used to verify a download). ``None`` skips the check.
        download: fetch the file from the UCI repository when it is missing.

    Raises:
        DataNotFoundError: the file is missing and could not be downloaded.
        ChecksumError: the file is not the expected one.
    """
    if not isinstance(download, bool):
        raise TypeError(f"download must be True or False, got {download!r}")
    if isinstance(sha256, str) and sha256 == AUTO:
        folder = resolve_data_dir(data_dir) / Path(RELATIVE_PATH).parent
        sha256 = read_checksums(folder).get(Path(RELATIVE_PATH).name, SHA256)
    elif sha256 is not None and not isinstance(sha256, str):
        raise TypeError(f"sha256 must be a hex string, 'auto' or None, got {type(sha256).__name__}")
    path = fetch_file(RELATIVE_PATH, data_dir_arg=data_dir, sha256=sha256, url=URL,
                      download_if_missing=download, check_sha256=sha256 is not None)
    return parse_mushroom(path)
