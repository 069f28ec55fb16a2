"""MNIST IDX loader (on tiny generated IDX files) and the scikit-learn digits loader."""
import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from uncertain_agents.datasets import ChecksumError, DataNotFoundError
from uncertain_agents.datasets.digits import load_digits
from uncertain_agents.datasets.mnist import FILES, SHA256, load_mnist, read_idx


def _write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    header = struct.pack(">i", magic) + struct.pack(f">{array.ndim}i", *array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def _make_tiny_mnist(folder: Path, n_train=6, n_test=4, side=5, sums=True, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, side, side), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (n_test, side, side), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for key, name in FILES.items():
        _write_idx(folder / name, arrays[key], 2051 if key.endswith("images") else 2049)
        lines.append(f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}  {name}")
    if sums:
        (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return arrays


def test_reads_tiny_idx_files(tmp_path):
    arrays = _make_tiny_mnist(tmp_path / "mnist")
    data = load_mnist(tmp_path, download=False)
    assert data.image_shape == (5, 5) and data.in_dim == 25
    assert data.x_train.shape == (6, 25) and data.x_test.shape == (4, 25)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    np.testing.assert_allclose(data.x_train * 255.0, arrays["train_images"].reshape(6, 25), atol=1e-4)
    np.testing.assert_array_equal(data.y_test, arrays["test_labels"])
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    by_name = load_mnist(data_dir=tmp_path, download=False)      # the keyword load_mushroom takes too
    np.testing.assert_array_equal(by_name.x_test, data.x_test)


def test_environment_variable_selects_folder(tmp_path, monkeypatch):
    _make_tiny_mnist(tmp_path / "mnist", n_train=3)
    monkeypatch.setenv("UNCERTAIN_AGENTS_DATA", str(tmp_path))
    assert load_mnist(download=False).x_train.shape[0] == 3


def test_checksum_mismatch_is_reported(tmp_path):
    _make_tiny_mnist(tmp_path / "mnist")
    sums = tmp_path / "mnist" / "SHA256SUMS"
    sums.write_text(sums.read_text().replace(sums.read_text()[:8], "00000000", 1))
    with pytest.raises(ChecksumError, match="SHA-256"):
        load_mnist(tmp_path, download=False)


def test_without_sums_file_the_original_checksums_apply(tmp_path):
    """Tiny stand-ins are not the original files, so the built-in checksums reject them."""
    _make_tiny_mnist(tmp_path / "mnist", sums=False)
    with pytest.raises(ChecksumError, match=SHA256[FILES["train_images"]]):
        load_mnist(tmp_path, download=False)


def test_missing_file_names_file_and_folder(tmp_path):
    _make_tiny_mnist(tmp_path / "mnist")
    os.remove(tmp_path / "mnist" / FILES["test_labels"])
    with pytest.raises(DataNotFoundError, match="t10k-labels-idx1-ubyte.gz") as err:
        load_mnist(tmp_path, download=False)
    assert str(tmp_path) in str(err.value)


def test_download_from_url_is_atomic_and_verified(tmp_path):
    source = tmp_path / "mirror"
    _make_tiny_mnist(source)
    target = tmp_path / "data" / "mnist"
    target.mkdir(parents=True)
    (target / "SHA256SUMS").write_text((source / "SHA256SUMS").read_text())
    data = load_mnist(tmp_path / "data", base_url=source.resolve().as_uri() + "/")
    assert data.x_train.shape == (6, 25)
    assert sorted(p.name for p in target.iterdir()) == sorted([*FILES.values(), "SHA256SUMS"])


def test_bad_idx_files(tmp_path):
    path = tmp_path / "x.gz"
    _write_idx(path, np.zeros((2, 3, 3)), 2051)
    with pytest.raises(ValueError, match="magic number 2051, expected 2049"):
        read_idx(path, 2049)
    with gzip.open(path, "wb") as fh:
        fh.write(struct.pack(">iiii", 2051, 2, 3, 3) + bytes(10))
    with pytest.raises(ValueError, match="header says"):
        read_idx(path, 2051)


@pytest.mark.data
def test_real_mnist_when_available():
    folder = os.environ.get("UNCERTAIN_AGENTS_DATA")
    if not folder or not (Path(folder) / "mnist" / FILES["train_images"]).is_file():
        pytest.skip("real MNIST not in $UNCERTAIN_AGENTS_DATA")
    data = load_mnist(download=False)
    assert data.x_train.shape == (60000, 784) and data.x_test.shape == (10000, 784)
    assert np.bincount(data.y_test, minlength=10).min() > 800


def test_digits_loader():
    data = load_digits()
    assert data.x_train.shape[1] == 64 and data.image_shape == (8, 8)
    assert len(data.y_train) + len(data.y_test) == 1797
    assert data.x_train.min() == 0.0 and data.x_train.max() == 1.0
    assert set(np.unique(data.y_test)) == set(range(10))
    again = load_digits()
    np.testing.assert_array_equal(again.x_test, data.x_test)
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.5)
