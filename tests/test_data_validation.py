"""Data loaders refuse malformed files with errors that name the file (and line).

Every folder here is built in ``tmp_path``: tiny UCI-format tables with their index
files, a tiny mushroom file. Nothing touches the network (a failing download uses a
``file://`` address that does not exist).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from uncertain_agents.datasets import ChecksumError, DataNotFoundError, fetch_file
from uncertain_agents.datasets.index_files import IndexFileError
from uncertain_agents.datasets.mushroom import ATTRIBUTES, URL, load_mushroom
from uncertain_agents.datasets.uci import UCIDataset

N_ROWS, N_FEATURES = 20, 3


def write_uci(root: Path, *, splits: int = 3, n_splits_file: bool = True) -> Path:
    """A tiny ``uci/yacht`` folder: 20 rows, 3 features + target, ``splits`` 16/4 splits."""
    folder = root / "uci" / "yacht"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savetxt(folder / "data.txt", rng.normal(size=(N_ROWS, N_FEATURES + 1)))
    np.savetxt(folder / "index_features.txt", np.arange(N_FEATURES), fmt="%d")
    np.savetxt(folder / "index_target.txt", [N_FEATURES], fmt="%d")
    if n_splits_file:
        (folder / "n_splits.txt").write_text(f"{splits}\n")
    for k in range(splits):
        perm = rng.permutation(N_ROWS)
        write_index(folder / f"index_train_{k}.txt", perm[:16])
        write_index(folder / f"index_test_{k}.txt", perm[16:])
    return folder


def write_index(path: Path, values) -> None:
    path.write_text("".join(f"{v}\n" for v in values))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def split_error(tmp_path: Path, k: int = 0) -> str:
    """The message of the error ``UCIDataset(...).split(k)`` raises (it must be an IndexFileError)."""
    with pytest.raises(IndexFileError) as err:
        UCIDataset("yacht", tmp_path).split(k)
    assert isinstance(err.value, ValueError)
    return str(err.value)


# ------------------------------------------------------------- index files
def test_valid_folder_loads(tmp_path):
    write_uci(tmp_path)
    data = UCIDataset("yacht", tmp_path)
    assert data.n_splits == 3
    split = data.split(2)
    assert split.x_train.shape == (16, N_FEATURES) and split.y_test.shape == (4, 1)


def test_non_integer_index_names_file_and_line(tmp_path):
    folder = write_uci(tmp_path)
    path = folder / "index_train_0.txt"
    rows = lines(path)
    rows[2] = "3.5"
    path.write_text("\n".join(rows) + "\n")
    message = split_error(tmp_path)
    assert "index_train_0.txt, line 3" in message and "'3.5' is not an integer" in message


def test_out_of_range_and_negative_indices(tmp_path):
    folder = write_uci(tmp_path)
    path = folder / "index_test_0.txt"
    rows = lines(path)
    write_index(path, [*rows[:1], N_ROWS + 5, *rows[2:]])
    message = split_error(tmp_path)
    assert "index_test_0.txt, line 2" in message and f"index {N_ROWS + 5} is out of range" in message
    assert f"{N_ROWS} rows" in message
    write_index(path, [-1, *rows[1:]])  # numpy would silently take the last row
    message = split_error(tmp_path)
    assert "index_test_0.txt, line 1" in message and "index -1 is out of range" in message


def test_duplicate_index_names_both_lines(tmp_path):
    folder = write_uci(tmp_path)
    path = folder / "index_train_1.txt"
    rows = lines(path)
    write_index(path, [*rows, rows[0]])
    message = split_error(tmp_path, 1)
    assert f"index_train_1.txt, line {len(rows) + 1}" in message
    assert "repeated (first on line 1)" in message


def test_test_row_copied_into_train_is_refused(tmp_path):
    folder = write_uci(tmp_path)
    train, test = folder / "index_train_0.txt", folder / "index_test_0.txt"
    leaked = lines(test)[1]
    train.write_text(train.read_text() + f"{leaked}\n")
    message = split_error(tmp_path)
    assert "index_test_0.txt, line 2" in message and f"row {leaked} is also in the training split" in message
    assert "index_train_0.txt" in message and "disjoint" in message


def test_empty_index_file(tmp_path):
    folder = write_uci(tmp_path)
    (folder / "index_test_2.txt").write_text("\n\n")
    message = split_error(tmp_path, 2)
    assert "index_test_2.txt is empty" in message


def test_feature_and_target_columns_are_checked(tmp_path):
    folder = write_uci(tmp_path)
    write_index(folder / "index_features.txt", [0, 1, 7])
    with pytest.raises(IndexFileError, match=r"index_features\.txt, line 3: index 7 is out of range.*4 columns"):
        UCIDataset("yacht", tmp_path)
    write_index(folder / "index_features.txt", [0, 1, 2, 3])
    with pytest.raises(IndexFileError, match=r"index_target\.txt.*target column 3 is also listed"):
        UCIDataset("yacht", tmp_path)


def test_index_files_must_be_text(tmp_path):
    folder = write_uci(tmp_path)
    (folder / "index_train_0.txt").write_bytes(b"\xff\xfe\x00\x01")
    message = split_error(tmp_path)
    assert "index_train_0.txt" in message and "not a text file" in message


# ---------------------------------------------------------------- splits
def test_split_count_from_files_when_n_splits_txt_is_missing(tmp_path):
    write_uci(tmp_path, splits=5, n_splits_file=False)
    data = UCIDataset("yacht", tmp_path)
    assert data.n_splits == 5  # never an assumed 20
    data.split(4)
    with pytest.raises(ValueError, match=r"split must be in \[0, 4\], got 5"):
        data.split(5)


def test_gap_in_split_files_names_the_missing_file(tmp_path):
    folder = write_uci(tmp_path, splits=4, n_splits_file=False)
    (folder / "index_test_2.txt").unlink()
    with pytest.raises(DataNotFoundError, match=r"index_test_2\.txt.*no n_splits\.txt"):
        UCIDataset("yacht", tmp_path)


def test_no_split_files_at_all(tmp_path):
    folder = write_uci(tmp_path, splits=0, n_splits_file=False)
    with pytest.raises(DataNotFoundError, match="no split files in .*yacht"):
        UCIDataset("yacht", tmp_path)
    assert folder.is_dir()


def test_n_splits_txt_promising_more_splits_than_present(tmp_path):
    folder = write_uci(tmp_path, splits=5)
    (folder / "n_splits.txt").write_text("20\n")
    with pytest.raises(DataNotFoundError, match=r"index_train_5\.txt \(n_splits\.txt says 20 splits\)"):
        UCIDataset("yacht", tmp_path)


@pytest.mark.parametrize("text, expected", [("abc\n", r"line 1: 'abc' is not an integer"),
                                            ("0\n", "must be a positive integer, got 0"),
                                            ("2 3\n", "exactly one positive integer"),
                                            ("", "exactly one positive integer")])
def test_malformed_n_splits_txt(tmp_path, text, expected):
    folder = write_uci(tmp_path)
    (folder / "n_splits.txt").write_text(text)
    with pytest.raises(IndexFileError, match=expected) as err:
        UCIDataset("yacht", tmp_path)
    assert "n_splits.txt" in str(err.value)


def test_split_number_must_be_an_integer(tmp_path):
    write_uci(tmp_path)
    data = UCIDataset("yacht", tmp_path)
    for bad in ("1", 1.0, True):
        with pytest.raises(TypeError, match="split must be an integer"):
            data.split(bad)


@pytest.mark.parametrize("content, expected", [("1 2 3 4\n1 2 x 4\n", "not a whitespace-separated numeric table"),
                                               ("", "holds no data rows"),
                                               ("1 2 3 4\n1 2 nan 4\n", "data row 2 holds NaN")])
def test_malformed_data_txt(tmp_path, content, expected):
    folder = write_uci(tmp_path)
    (folder / "data.txt").write_text(content)
    with pytest.raises(ValueError, match=expected) as err:
        UCIDataset("yacht", tmp_path)
    assert "data.txt" in str(err.value)


def test_regress_command_reports_a_bad_index_file(tmp_path, capsys):
    from uncertain_agents.cli import main

    folder = write_uci(tmp_path)
    write_index(folder / "index_train_1.txt", [0, 1, 99])
    code = main(["regress", "yacht", "--data-dir", str(tmp_path), "--out", str(tmp_path / "run"), "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "index_train_1.txt" in err and "line 3" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "units").exists() or not any((tmp_path / "run" / "units").iterdir())


@pytest.mark.data
def test_real_split_counts_when_available():
    from uncertain_agents.datasets import data_dir

    root = data_dir() / "uci"
    if not (root / "protein-tertiary-structure" / "data.txt").is_file():
        pytest.skip("real data folder not available")
    assert UCIDataset("protein").n_splits == 5
    assert UCIDataset("boston").n_splits == 20


# ------------------------------------------------------------- mushroom / fetch
def write_mushroom(root: Path, *, listed_sha256: str | None) -> Path:
    """``mushroom/agaricus-lepiota.data`` with 4 rows, and a SHA256SUMS listing ``listed_sha256``."""
    folder = root / "mushroom"
    folder.mkdir(parents=True)
    rows = [",".join([label] + ["a" if i % 2 else "b"] * len(ATTRIBUTES)) for i, label in enumerate("epep")]
    (folder / "agaricus-lepiota.data").write_text("\n".join(rows) + "\n")
    if listed_sha256 is not None:
        (folder / "SHA256SUMS").write_text(f"{listed_sha256}  agaricus-lepiota.data\n")
    return folder


def test_mushroom_sha256_none_skips_every_check(tmp_path):
    write_mushroom(tmp_path, listed_sha256="0" * 64)  # the folder's SHA256SUMS is wrong
    with pytest.raises(ChecksumError, match="SHA-256"):
        load_mushroom(tmp_path, download=False)  # "auto" uses the folder's entry
    data = load_mushroom(tmp_path, download=False, sha256=None)
    assert data.contexts.shape[0] == 4 and data.edible.tolist() == [True, False, True, False]


def test_mushroom_checksum_matching_the_file_passes(tmp_path):
    folder = write_mushroom(tmp_path, listed_sha256=None)
    digest = hashlib.sha256((folder / "agaricus-lepiota.data").read_bytes()).hexdigest()
    assert load_mushroom(tmp_path, download=False, sha256=digest).contexts.shape[0] == 4


@pytest.mark.parametrize("sha256, error", [("xyz", ValueError), (123, TypeError)])
def test_mushroom_malformed_sha256_argument(tmp_path, sha256, error):
    write_mushroom(tmp_path, listed_sha256=None)
    with pytest.raises(error, match="sha256"):
        load_mushroom(tmp_path, download=False, sha256=sha256)


def test_mushroom_download_flag_must_be_bool(tmp_path):
    with pytest.raises(TypeError, match="download must be True or False"):
        load_mushroom(tmp_path, download="no")


def test_no_download_message_says_download_is_disabled(tmp_path):
    with pytest.raises(DataNotFoundError) as err:
        load_mushroom(tmp_path / "data", download=False)
    message = str(err.value)
    assert "no download source is known" not in message
    assert "downloading is disabled" in message and "--no-download" in message and URL in message
    assert str(tmp_path / "data" / "mushroom" / "agaricus-lepiota.data") in message
    assert not (tmp_path / "data").exists()


def test_bandit_cli_no_download_message(tmp_path, capsys):
    from uncertain_agents.cli import main

    code = main(["bandit", "mushroom", "--no-download", "--data-dir", str(tmp_path / "empty"),
                 "--out", str(tmp_path / "run"), "--steps", "5", "--trials", "1", "--agent", "uniform"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "agaricus-lepiota.data" in err and "downloading is disabled" in err and "Traceback" not in err


def test_failed_download_leaves_no_empty_folders(tmp_path):
    root = tmp_path / "cache"
    missing_url = (tmp_path / "nowhere" / "file.data").as_uri()
    with pytest.raises(DataNotFoundError, match="downloading .* failed"):
        fetch_file("deep/er/file.data", data_dir_arg=root, url=missing_url)
    assert not root.exists()
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "keep.txt").write_text("x")
    with pytest.raises(DataNotFoundError):
        fetch_file("deep/er/file.data", data_dir_arg=root, url=missing_url)
    assert sorted(p.name for p in root.rglob("*")) == ["deep", "keep.txt"]  # only what was there


def test_fetch_file_without_address_says_so(tmp_path):
    with pytest.raises(DataNotFoundError, match="it has no download address. Put the file at"):
        fetch_file("x/y.data", data_dir_arg=tmp_path)


# ------------------------------------- found by experiments/bad_input_cases.py
@pytest.mark.parametrize("name", [None, 5, ["yacht"]])
def test_uci_name_must_be_a_string(tmp_path, name):
    with pytest.raises(TypeError, match="UCI data set name must be a string"):
        UCIDataset(name, tmp_path)


def test_mushroom_multi_letter_field_is_refused(tmp_path):
    """numpy's one-letter table used to cut 'xy' to 'x' silently."""
    from uncertain_agents.datasets.mushroom import parse_mushroom

    fields = ["e"] + ["x"] * len(ATTRIBUTES)
    fields[4] = "xy"
    path = tmp_path / "m.data"
    path.write_text(",".join(fields) + "\n")
    with pytest.raises(ValueError, match=r"m\.data: row 1, field 5 is 'xy'; every field must be one letter"):
        parse_mushroom(path)


def test_mnist_file_that_is_not_gzip_names_the_file(tmp_path):
    from uncertain_agents.datasets.mnist import IMAGE_MAGIC, read_idx

    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"plain bytes, not gzip")
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz is not a readable gzip file"):
        read_idx(path, IMAGE_MAGIC)
    import gzip

    path.write_bytes(gzip.compress(b"\x00\x00\x08\x03" + bytes(40))[:-12])  # cut short
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz is not a readable gzip file"):
        read_idx(path, IMAGE_MAGIC)
