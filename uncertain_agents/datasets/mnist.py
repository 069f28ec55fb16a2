"""MNIST (LeCun, Cortes & Burges) from its four original gzipped IDX files.

Files live in ``<data folder>/mnist/``. Each is verified against the folder's
``SHA256SUMS`` when it has one, else against the checksums of the original
distribution below, and is downloaded from the original address when missing (and
``download=True``). IDX format: a big-endian int32 magic number (2051 for images,
2049 for labels), one big-endian int32 per dimension, then raw uint8 values.
"""
from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

import os

from . import data_dir as resolve_data_dir, fetch_file, read_checksums
from .images import ImageDataset

BASE_URL = "http://yann.lecun.com/exdb/mnist/"
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
# SHA-256 of the original distribution (as listed in the data folder's SHA256SUMS).
SHA256 = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049


def read_idx(path: str | Path, expected_magic: int) -> np.ndarray:
    """Read a gzipped IDX file of unsigned bytes into an array of its stated shape.

    Raises:
        ValueError: wrong magic number (not an IDX file of the expected kind) or a
            payload whose length does not match the header.
    """
    path = Path(path)
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(f"{path} is not a readable gzip file ({err}); delete it and fetch it again") from None
    if len(data) < 4:
        raise ValueError(f"{path} is too short to be an IDX file")
    (magic,) = struct.unpack(">i", data[:4])
    if magic != expected_magic:
        raise ValueError(f"{path} has IDX magic number {magic}, expected {expected_magic}")
    n_dims = magic & 0xFF
    header = 4 + 4 * n_dims
    dims = struct.unpack(f">{n_dims}i", data[4:header])
    payload = np.frombuffer(data, dtype=np.uint8, offset=header)
    expected = int(np.prod(dims))
    if payload.size != expected:
        raise ValueError(f"{path}: header says {dims} ({expected} values) but the file holds {payload.size}")
    return payload.reshape(dims)


def _fetch(name: str, data_dir, download: bool, base_url: str) -> Path:
    folder = resolve_data_dir(data_dir) / "mnist"
    sha = read_checksums(folder).get(name, SHA256[name])
    return fetch_file(f"mnist/{name}", data_dir_arg=data_dir, sha256=sha,
                      url=base_url + name, download_if_missing=download)


def load_mnist(data_dir: str | os.PathLike | None = None, *, download: bool = True,
               base_url: str = BASE_URL) -> ImageDataset:
    """MNIST as flattened ``[N, 784]`` float32 pixels in ``[0, 1]`` and int64 labels.

    Args:
        data_dir: data folder (else ``$UNCERTAIN_AGENTS_DATA``, else the user cache); the same
            name as :func:`~uncertain_agents.datasets.mushroom.load_mushroom`'s.
        download: fetch missing files from ``base_url`` (atomic write, checksum checked).
        base_url: where the original files are served.

    Raises:
        DataNotFoundError: a file is missing and could not be downloaded.
        ChecksumError: a file does not match its SHA-256.
        ValueError: a file is not a well-formed IDX file or images and labels disagree.
    """
    if not isinstance(download, bool):
        raise TypeError(f"download must be True or False, got {download!r}")
    arrays = {}
    for key, name in FILES.items():
        magic = IMAGE_MAGIC if key.endswith("images") else LABEL_MAGIC
        arrays[key] = read_idx(_fetch(name, data_dir, download, base_url), magic)
    splits = []
    for part in ("train", "test"):
        images, labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(f"MNIST {part} images {images.shape} and labels {labels.shape} do not match")
        splits.append((images.reshape(images.shape[0], -1).astype(np.float32) / 255.0,
                       labels.astype(np.int64)))
    (x_train, y_train), (x_test, y_test) = splits
    shape = tuple(int(s) for s in arrays["train_images"].shape[1:])
    return ImageDataset("mnist", x_train, y_train, x_test, y_test, shape, 10)
