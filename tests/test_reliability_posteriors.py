"""Saved posteriors that are malformed in any way give one clear ValueError; divergence leaves
a usable posterior."""
import io
import json
import pickle
import random

import numpy as np
import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.posteriors.training import TrainingDivergedError


def fitted(name: str, **kw):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    post = ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(8,), seed=0, **kw)
    post.fit(x, x[:, :1] * 2, steps=5, batch_size=32)
    return post


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved")
    files = {}
    for name, kw in (("mfvi", {}), ("bb-alpha", {"alpha": 0.5})):
        files[name] = folder / f"{name}.pt"
        fitted(name, **kw).save(files[name])
    return files


def only_value_error(path):
    """load_posterior must raise ValueError naming the file — nothing else, and never succeed."""
    with pytest.raises(ValueError) as info:
        ua.load_posterior(path)
    assert str(path) in str(info.value)
    assert "weights_only=False" not in str(info.value)
    return str(info.value)


def test_a_save_round_trips_with_its_method_and_options(saved):
    post = ua.load_posterior(saved["bb-alpha"])
    assert post.name == "bb-alpha" and post.alpha == 0.5


def test_truncated_files(saved, tmp_path):
    data = saved["mfvi"].read_bytes()
    for i, cut in enumerate(sorted({0, 1, 10, 100, len(data) // 3, len(data) // 2, len(data) - 100, len(data) - 1})):
        path = tmp_path / f"cut{i}.pt"
        path.write_bytes(data[:cut])
        only_value_error(path)


def test_every_bit_flip_is_detected(saved, tmp_path):
    data = saved["bb-alpha"].read_bytes()
    rng = random.Random(0)
    for i in range(60):
        corrupted = bytearray(data)
        pos = rng.randrange(len(data))
        corrupted[pos] ^= 1 << rng.randrange(8)
        path = tmp_path / f"flip{i}.pt"
        path.write_bytes(bytes(corrupted))
        only_value_error(path)


def test_files_that_are_not_posteriors(tmp_path):
    cases = {"empty.pt": b"", "text.pt": b"hello, I am a text file\n" * 10, "random.pt": bytes(range(256)) * 8,
             "json.pt": json.dumps({"format": "uncertain-agents/2"}).encode()}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        assert "empty" in only_value_error(tmp_path / name) or name != "empty.pt"


class Exploit:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(MARKER),))


MARKER = ""


def test_a_pickle_never_runs_code(tmp_path):
    global MARKER
    MARKER = str(tmp_path / "pwned")
    for i, dump in enumerate((lambda f: pickle.dump(Exploit(), f), lambda f: torch.save({"x": Exploit()}, f))):
        path = tmp_path / f"exploit{i}.pt"
        with open(path, "wb") as f:
            dump(f)
        only_value_error(path)
    assert not (tmp_path / "pwned").exists()


def _payload(saved_path):
    from uncertain_agents.posteriors.storage import read_payload

    return read_payload(saved_path.read_bytes())


def _write(path, payload):
    """A well-formed file around tampered content: the checks behind the checksum must hold too."""
    from uncertain_agents.posteriors.storage import write_payload

    write_payload(path, payload)


@pytest.mark.parametrize("tamper, expected", [
    (lambda p: p.pop("state"), "tensors"),
    (lambda p: p.pop("config"), "configuration"),
    (lambda p: p.update(config="{not json"), ""),
    (lambda p: p.update(config=json.dumps([1, 2])), ""),
    (lambda p: p.update(format="something-else/9"), "format"),
    (lambda p: p.update(state={"mean": "not a tensor"}), "tensors"),
    (lambda p: p.update(state={**p["state"], "mean": torch.full_like(p["state"]["mean"], float("nan"))}), ""),
])
def test_tampered_payloads(saved, tmp_path, tamper, expected):
    payload = _payload(saved["mfvi"])
    tamper(payload)
    path = tmp_path / "tampered.pt"
    _write(path, payload)
    assert expected in only_value_error(path)


@pytest.mark.parametrize("tamper, expected", [
    (lambda p, c: c.update(name="no-such-method"), "unknown method"),
    (lambda p, c: c.update(name="bb-alpha"), "says method"),  # an mfvi file relabelled
    (lambda p, c: c.update(hidden=[9]), "do not match"),  # another architecture
    (lambda p, c: c.update(in_dim="three"), "invalid"),
    (lambda p, c: c.pop("out_dim"), "lacks"),
    (lambda p, c: c.update(no_such_option=1), "invalid"),
    (lambda p, c: p["state"].update(mean=torch.full_like(p["state"]["mean"], float("inf"))), "NaN or infinite"),
    (lambda p, c: p["state"].pop("mean"), "do not match"),
])
def test_mismatched_payloads_behind_a_valid_checksum(saved, tmp_path, tamper, expected):
    payload = _payload(saved["mfvi"])
    config = json.loads(payload["config"])
    tamper(payload, config)
    payload["config"] = json.dumps(config)
    path = tmp_path / "mismatched.pt"
    _write(path, payload)
    assert expected in only_value_error(path)


def test_old_format_without_checksum_still_loads(saved, tmp_path):
    payload = _payload(saved["mfvi"])
    payload.pop("method")
    payload["format"] = "uncertain-agents/1"
    path = tmp_path / "old.pt"
    torch.save(payload, path)  # format 1: a bare torch file
    assert ua.load_posterior(path).name == "mfvi"
    payload["format"] = "uncertain-agents/2"  # a format-2 payload outside its checked container
    torch.save(payload, path)
    only_value_error(path)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        ua.load_posterior("/no/such/file.pt")


# ------------------------------------------------------------------ divergence
def data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 3, generator=g) * 2 - 1
    return x, torch.sin(3 * x[:, :1])


def _assert_initial_parameters(post, name):
    """Every learned tensor equals that of a fresh posterior of the same seed (the state before the fit)."""
    fresh = dict(ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(16,), seed=0).named_parameters())
    for key, p in post.named_parameters():
        assert torch.equal(p.detach(), fresh[key].detach()), key


def _mse(post, x, y):
    return float((post.predict(x, n_samples=10, generator=torch.Generator().manual_seed(0)).mean - y).square().mean())


@pytest.mark.parametrize("name, lr", [("mfvi", 1e8), ("map", 1e6), ("dropout-alpha", 1e8)])
def test_divergence_restores_a_usable_posterior(name, lr):
    x, y = data()
    post = ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(16,), seed=0)
    with pytest.raises(TrainingDivergedError, match="at step 0.*lr"):
        post.fit(x, y, steps=200, batch_size=32, lr=lr)
    # the blow-up came at the first check: the restored state is the one before the fit
    assert int(post.steps_trained) == 0
    _assert_initial_parameters(post, name)
    pred = post.predict(x, n_samples=10)
    assert bool(torch.isfinite(pred.mean).all())
    before = _mse(post, x, y)
    result = post.fit(x, y, steps=50, batch_size=32)  # and it trains on normally afterwards
    assert np.isfinite(result.losses).all() and int(post.steps_trained) == 50
    assert _mse(post, x, y) < 0.7 * before


@pytest.mark.parametrize("name", ["fsvgd", "svgd"])
def test_a_finite_blow_up_is_divergence(name):
    x, y = data()
    post = ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(16,), seed=0)
    with pytest.raises(TrainingDivergedError, match="blew up"):
        post.fit(x, y, steps=200, batch_size=32, lr=10.0)
    assert int(post.steps_trained) == 0
    _assert_initial_parameters(post, name)


def test_a_large_network_on_few_rows_is_not_a_blow_up():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 64, generator=g)
    post = ua.make_posterior("mfvi", in_dim=64, out_dim=10, hidden=(400, 400), likelihood="categorical", seed=0)
    post.fit(x, torch.arange(10), steps=60, batch_size=10)
    pred = post.predict(x, n_samples=8)
    assert bool(torch.isfinite(pred.samples).all()) and bool(torch.isfinite(pred.probs).all())
