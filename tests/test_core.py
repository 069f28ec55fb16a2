"""Batched network, Predictive, metrics, data loading and the regress command."""
import hashlib
import json
import math

import numpy as np
import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.datasets import ChecksumError, DataNotFoundError, fetch_file
from uncertain_agents.datasets.uci import UCIDataset
from uncertain_agents.metrics import accuracy, expected_calibration_error, rmse


def test_batched_forward_matches_per_network_loop():
    spec = ua.MLPSpec(4, 3, (7, 5), "tanh")
    params = spec.init_params(6, generator=torch.Generator().manual_seed(0))
    params = params + 0.1 * torch.randn_like(params)
    x = torch.randn(9, 4)
    batched = spec.forward(params, x)
    for i in range(6):
        h = x
        for j, (w, b) in enumerate(spec.unflatten(params[i:i + 1])):
            h = torch.tanh(h) if j > 0 else h
            h = h @ w[0] + b[0]
        assert torch.allclose(batched[i], h, atol=1e-5)
    assert spec.num_params == 4 * 7 + 7 + 7 * 5 + 5 + 5 * 3 + 3
    assert torch.equal(spec.flatten(spec.unflatten(params)), params)


@pytest.mark.parametrize("activation,hidden", [("relu", (7, 5)), ("tanh", (6,)), ("relu", ())])
def test_forward_each_is_every_network_at_its_own_input(activation, hidden):
    spec = ua.MLPSpec(4, 3, hidden, activation)
    params = spec.init_params(6, generator=torch.Generator().manual_seed(1)) + 0.05
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    each = spec.forward_each(params, x)
    assert each.shape == (6, 3)
    for i in range(6):
        assert torch.allclose(each[i], spec.forward(params[i:i + 1], x[i:i + 1])[0, 0], atol=1e-6)


@pytest.mark.parametrize("activation,hidden", [("relu", (7, 5)), ("tanh", (6,)), ("relu", ())])
def test_forward_in_cache_sized_groups_equals_one_pass(monkeypatch, activation, hidden):
    """On CPU without autograd, ``forward`` runs the networks in groups (``CPU_CHUNK_BYTES``);
    forcing one or two networks per group must give the one-pass result, features included,
    for shared inputs ``x[B, d]`` and per-network inputs ``x[n, B, d]``."""
    import uncertain_agents.network as network
    spec = ua.MLPSpec(4, 3, hidden, activation)
    params = spec.init_params(7, generator=torch.Generator().manual_seed(0)) + 0.1
    shared, own = torch.randn(9, 4), torch.randn(7, 9, 4)
    ref = {name: spec.forward(params.requires_grad_(), x, return_features=True)
           for name, x in (("shared", shared), ("own", own))}   # with autograd: one pass
    params = params.detach()
    width = max(hidden + (3,))
    for per_group in (1, 2):
        monkeypatch.setattr(network, "CPU_CHUNK_BYTES", per_group * 9 * width * 4)
        with torch.no_grad():
            assert spec._cpu_chunk(params, shared) == per_group
            for name, x in (("shared", shared), ("own", own)):
                f, feats = spec.forward(params, x, return_features=True)
                assert f.shape == (7, 9, 3) and f.is_contiguous()
                assert torch.allclose(f, ref[name][0], atol=1e-6)
                assert torch.allclose(feats, ref[name][1], atol=1e-6)
                assert torch.allclose(spec.forward(params, x), ref[name][0], atol=1e-6)


@pytest.mark.parametrize("fan_out", [1, 2, 10, 17])
def test_rows_times_weight_is_the_product_and_its_gradient_whatever_the_layout(fan_out):
    from uncertain_agents.network import is_narrow, output_major, rows_times_weight
    g = torch.Generator().manual_seed(fan_out)
    h = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, fan_out, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(fan_out, generator=g, dtype=torch.float64, requires_grad=True)
    assert is_narrow(fan_out) == (2 <= fan_out <= 16)
    laid_out = output_major(w)
    assert torch.equal(laid_out, w) and (laid_out.stride() == (1, 5)) == is_narrow(fan_out)
    out = rows_times_weight(h, w, b)
    assert torch.allclose(out, h @ w + b, atol=1e-12)
    upstream = torch.randn(7, fan_out, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * upstream).sum(), [h, w, b])
    ref = torch.autograd.grad(((h @ w + b) * upstream).sum(), [h, w, b])
    for ours, theirs in zip(grads, ref):
        assert torch.allclose(ours, theirs, atol=1e-12)


def test_predictive_gaussian_log_prob_is_log_mean_exp():
    f = torch.tensor([[[0.0]], [[2.0]]])  # two samples, one input
    pred = ua.Predictive(f, "gaussian", noise_var=torch.tensor([1.0]))
    y = torch.tensor([[1.0]])
    expected = math.log(0.5 * 2 * math.exp(-0.5) / math.sqrt(2 * math.pi))
    assert pred.log_prob(y).item() == pytest.approx(expected, abs=1e-6)
    assert pred.mean.item() == pytest.approx(1.0)
    assert pred.epistemic_variance.item() == pytest.approx(1.0)
    assert pred.variance.item() == pytest.approx(2.0)


def test_predictive_categorical_entropy_and_mutual_information():
    big = 30.0
    f = torch.tensor([[[big, 0.0]], [[0.0, big]]])  # two confident, disagreeing samples
    pred = ua.Predictive(f, "categorical")
    assert torch.allclose(pred.probs, torch.tensor([[0.5, 0.5]]), atol=1e-6)
    assert pred.entropy().item() == pytest.approx(math.log(2), abs=1e-5)
    assert pred.mutual_information().item() == pytest.approx(math.log(2), abs=1e-4)
    agree = ua.Predictive(torch.zeros(3, 1, 2), "categorical")
    assert agree.mutual_information().item() == pytest.approx(0.0, abs=1e-6)
    assert pred.log_prob(torch.tensor([0])).item() == pytest.approx(math.log(0.5), abs=1e-5)


def test_mutual_information_of_identical_functions_is_exactly_zero():
    # a deterministic network's draws are one function repeated: MI is 0 by definition, not the
    # round-off of entropy minus expected entropy (which grows with the entropy and would give an
    # AUROC(MI) above 0.5 for a network that has no epistemic spread at all)
    logits = torch.randn(1, 500, 10, generator=torch.Generator().manual_seed(0)) * 3
    repeated = ua.Predictive(logits.expand(10, -1, -1), "categorical")
    assert torch.equal(repeated.mutual_information(), torch.zeros(500))
    # rows where the draws differ keep their positive MI; rows where they agree are 0
    f = logits.expand(10, -1, -1).clone()
    f[0, :250, 0] += 2.0  # one draw favours class 0 more on the first 250 inputs
    mixed = ua.Predictive(f, "categorical").mutual_information()
    assert (mixed[:250] > 0).all() and torch.equal(mixed[250:], torch.zeros(250))


def test_metrics_on_hand_made_examples():
    f = torch.log(torch.tensor([[[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]]]))
    pred = ua.Predictive(f, "categorical")
    y = torch.tensor([0, 1, 1])
    assert accuracy(pred, y) == pytest.approx(2 / 3)
    # bins: 0.9 (correct), 0.6 (wrong), 0.8 (correct) -> |0.9-1| + |0.6-0| + |0.8-1| over 3
    assert expected_calibration_error(pred, y, n_bins=10) == pytest.approx((0.1 + 0.6 + 0.2) / 3, abs=1e-6)
    # a float64 predictive (a posterior moved with .double() may predict) used to fail in index_add_
    pred64 = ua.Predictive(torch.log(torch.tensor([[[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]]], dtype=torch.float64)),
                           "categorical")
    assert expected_calibration_error(pred64, y, n_bins=10) == pytest.approx((0.1 + 0.6 + 0.2) / 3, abs=1e-12)
    reg = ua.Predictive(torch.tensor([[[1.0], [3.0]]]), "gaussian", noise_var=torch.tensor([1.0]))
    assert rmse(reg, torch.tensor([[2.0], [3.0]])) == pytest.approx(math.sqrt(0.5))


def write_tiny_uci(root, name="yacht", n=30, d=3, splits=2):
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=n)
    np.savetxt(folder / "data.txt", np.column_stack([x, y]))
    np.savetxt(folder / "index_features.txt", np.arange(d), fmt="%d")
    np.savetxt(folder / "index_target.txt", [d], fmt="%d")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    for k in range(splits):
        perm = rng.permutation(n)
        np.savetxt(folder / f"index_train_{k}.txt", perm[:25], fmt="%d")
        np.savetxt(folder / f"index_test_{k}.txt", perm[25:], fmt="%d")
    digest = hashlib.sha256((folder / "data.txt").read_bytes()).hexdigest()
    (folder / "SHA256SUMS").write_text(f"{digest}  data.txt\n")
    return folder


def test_uci_loader_reads_standard_split_files(tmp_path):
    write_tiny_uci(tmp_path)
    data = UCIDataset("yacht", tmp_path)
    assert data.n_splits == 2
    split = data.split(1)
    assert split.x_train.shape == (25, 3) and split.y_test.shape == (5, 1)
    with pytest.raises(ValueError, match="split"):
        data.split(2)


def test_uci_loader_checks_sha256(tmp_path):
    folder = write_tiny_uci(tmp_path)
    with open(folder / "data.txt", "a") as fh:
        fh.write("1 2 3 4\n")
    with pytest.raises(ChecksumError, match="SHA-256"):
        UCIDataset("yacht", tmp_path)


def test_missing_data_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("UNCERTAIN_AGENTS_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="bostonHousing"):
        UCIDataset("boston")
    with pytest.raises(DataNotFoundError, match="mushroom/agaricus-lepiota.data"):
        fetch_file("mushroom/agaricus-lepiota.data", url=None)
    with pytest.raises(ValueError, match="unknown UCI data set"):
        UCIDataset("nope", tmp_path)


def test_regress_command_writes_run_folder(tmp_path, capsys):
    from uncertain_agents.cli import main

    write_tiny_uci(tmp_path)
    out = tmp_path / "run"
    code = main(["regress", "yacht", "--posterior", "bb-alpha", "--epochs", "3", "--hidden", "8",
                 "--alpha", "0.5", "--data-dir", str(tmp_path), "--out", str(out), "--n-samples", "10"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_splits"] == 2 and math.isfinite(summary["test_nll_mean"])
    assert (out / "splits.csv").read_text().startswith("split,test_nll,test_rmse")
    assert (out / "splits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"   # the per-split plot
    assert "test NLL" in capsys.readouterr().out


def test_cli_reports_bad_posterior_name(tmp_path, capsys):
    from uncertain_agents.cli import main

    write_tiny_uci(tmp_path)
    code = main(["regress", "yacht", "--posterior", "nonsense", "--data-dir", str(tmp_path)])
    assert code == 2
    assert "valid names" in capsys.readouterr().err


def test_load_posterior_rejects_foreign_files(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"hello": torch.zeros(1)}, path)
    with pytest.raises(ValueError, match="not a posterior"):
        ua.load_posterior(path)
    with pytest.raises(FileNotFoundError):
        ua.load_posterior(tmp_path / "missing.pt")


@pytest.mark.data
def test_real_boston_splits_when_available():
    from uncertain_agents.datasets import data_dir

    if not (data_dir() / "uci" / "bostonHousing" / "data.txt").is_file():
        pytest.skip("real data folder not available")
    data = UCIDataset("boston")  # verifies the SHA-256 listed in the folder
    split = data.split(0)
    assert data.n_splits == 20
    assert split.x_train.shape == (455, 13) and split.x_test.shape == (51, 13)


def test_option_parsing():
    from uncertain_agents.options import parse_key_value, parse_posterior_spec

    assert parse_key_value("noise_std=0.1") == ("noise_std", 0.1)
    assert parse_key_value("hidden=[50, 50]") == ("hidden", [50, 50])
    assert parse_key_value("standardize=False") == ("standardize", False)
    assert parse_key_value("rule=gfsf") == ("rule", "gfsf")
    assert parse_posterior_spec("dropout-alpha:alpha=0.5,train_samples=3") == (
        "dropout-alpha", {"alpha": 0.5, "train_samples": 3})
    assert parse_posterior_spec("map") == ("map", {})
    # a comma inside a list, a tuple or a quoted value belongs to the value, not between options
    assert parse_posterior_spec("fsvgd:prior_std=[0.1, 1.0],n_particles=5") == (
        "fsvgd", {"prior_std": [0.1, 1.0], "n_particles": 5})
    assert parse_posterior_spec("mfvi:hidden=(50,50),activation='a,b'") == (
        "mfvi", {"hidden": (50, 50), "activation": "a,b"})
    with pytest.raises(ValueError, match="key=value"):
        parse_posterior_spec("mfvi:hidden=50,50")        # unbracketed: the second 50 is no option
    with pytest.raises(ValueError, match="key=value"):
        parse_key_value("noise_std")
