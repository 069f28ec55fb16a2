"""``uncertain-agents bench``: a tiny run gives the table and the JSON; bad arguments fail first.

Never asserts on timings (only that they are positive and finite)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from uncertain_agents.bench import NETWORKS, interleaved, make_batch, plain_step_fn
from uncertain_agents.cli import main


def test_tiny_run_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", "--network", "boston", "--posteriors", "mfvi", "map", "--rounds", "1", "--steps", "2",
               "--act-calls", "20", "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    printed = captured.out
    for text in ("posterior", "plain PyTorch", "mfvi", "map", "13-50-1", f"wrote {out}"):
        assert text in printed
    assert "plain PyTorch" not in captured.err  # the tables on stdout only, the spinner on stderr
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["torch_version"] == torch.__version__
    assert result["threads"] >= 1 and result["network"]["name"] == "boston" and result["network"]["batch"] == 32
    assert result["manifest"]["argv"] and "git_commit" in result["manifest"]
    # timings are only comparable on one CPU model: the result names it, and the table shows it
    assert isinstance(result["cpu"], str) and result["cpu"] and result["cpu"].split()[0] in printed
    assert result["cpu_capability"] and result["gpu"] is None
    assert [e["posterior"] for e in result["posteriors"]] == ["mfvi", "map"]
    for entry in result["posteriors"]:
        for key in ("step_us", "step_ratio", "predict_ms", "predict_ratio", "act_median_us", "act_mean_us"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (entry["posterior"], key)
    assert result["plain"]["step_us"] > 0 and result["plain"]["predict_ms"] > 0
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary file


def test_comma_list_aliases_and_peers_note(tmp_path, capsys):
    out = tmp_path / "b.json"
    rc = main(["bench", "--network", "boston", "--posteriors", "map,map", "--rounds", "1", "--steps", "1",
               "--act-calls", "5", "--peers", "--threads", "64", "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    notes = captured.err  # notes on stderr, with the spinner: stdout holds the results alone
    result = json.loads(out.read_text())
    assert [e["posterior"] for e in result["posteriors"]] == ["map"]
    assert result["peers"]["requested"] is True
    for peer in result["peers"]["skipped"]:
        assert peer.replace("_", "-") in notes
    assert "lowered" in notes and "lowered" not in captured.out  # --threads capped at the cores
    assert "plain PyTorch" in captured.out


def _wide_table(label: str):
    from rich.table import Table

    table = Table(title="timings")
    for col in ("posterior", "step µs", "ratio to plain", "predict ms", "ratio", "act µs (median)"):
        table.add_column(col)
    table.add_row(label, "16073", "12.09×", "158.0", "11.00×", "1234")
    return table


def test_piped_report_is_as_wide_as_its_widest_table_at_least_the_default(monkeypatch, capsys):
    """Off a terminal the tables neither wrap nor cut a label (they did at 80 columns), and the
    report is no wider than they need (it was a fixed 150 columns); a narrow one keeps $COLUMNS."""
    from rich.console import Console
    from rich.table import Table

    from uncertain_agents.commands.bench import _report_console

    monkeypatch.setenv("COLUMNS", "80")  # what rich uses when the output is not a terminal
    label = "bb-alpha:alpha=0,train_samples=1"
    wide = _wide_table(label)
    needed = Console(width=1000).measure(wide).maximum
    assert needed > 80
    narrow = Table("posterior", title="narrow")
    narrow.add_row("map")
    console = _report_console([narrow, wide])
    assert console.width == needed
    console.print(wide)
    lines = capsys.readouterr().out.splitlines()
    assert any(label in line for line in lines)  # whole, on one line
    assert max(len(line.rstrip()) for line in lines) == needed
    assert _report_console([narrow]).width == 80


@pytest.mark.parametrize("argv, message", [
    (["--posteriors", "nope"], "unknown posterior 'nope'"),
    (["--network", "cifar"], "unknown network 'cifar'"),
    (["--rounds", "0"], "--rounds must be a positive integer"),
    (["--steps", "-1"], "--steps must be a positive integer"),
    (["--threads", "0"], "--threads must be a positive integer"),
])
def test_bad_arguments_exit_2_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "b.json"
    rc = main(["bench", "--network", "boston", "--rounds", "1", "--steps", "1", *argv, "--out", str(out)])
    assert rc == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.out == "" and not out.exists()


def test_interleaved_gives_one_sample_per_round_and_candidate():
    net = NETWORKS["mnist"]
    x, y = make_batch(net, 8)
    assert y.dtype == torch.int64 and x.shape == (8, 784)
    samples = interleaved({"a": plain_step_fn(NETWORKS["boston"], *make_batch(NETWORKS["boston"], 4), steps=1),
                           "b": lambda: None}, rounds=3, warmup=0)
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert all(t > 0 for v in samples.values() for t in v)


def test_bench_candidates_carry_options():
    from uncertain_agents.bench import DEFAULT_VARIANTS, parse_candidate
    assert parse_candidate("ensemble:n_members=20") == ("ensemble:n_members=20", "ensemble", {"n_members": 20})
    assert parse_candidate("VI") == ("mfvi", "mfvi", {})
    label, name, opts = parse_candidate("dropout-alpha: alpha=0.5, train_samples=3")
    assert (label, name, opts) == ("dropout-alpha:alpha=0.5,train_samples=3", "dropout-alpha",
                                   {"alpha": 0.5, "train_samples": 3})
    assert "ensemble:n_members=20" in DEFAULT_VARIANTS
    with pytest.raises(ValueError, match="key=value"):
        parse_candidate("mfvi:train_samples")
    with pytest.raises((KeyError, ValueError)):
        parse_candidate("nope:n=1")


def test_bench_times_a_variant_with_its_options():
    from uncertain_agents.bench import run_bench
    result = run_bench("boston", ["ensemble:n_members=3"], rounds=1, steps=2, act_calls=3)
    (entry,) = result["posteriors"]
    assert entry["posterior"] == "ensemble:n_members=3" and entry["step_us"] > 0


def test_bench_times_the_other_agents_act():
    from uncertain_agents.bench import OTHER_AGENTS, act_latency_us, get_network
    net = get_network("boston")
    for agent, post in OTHER_AGENTS:
        out = act_latency_us(post, net, calls=5, agent=agent)
        assert out["act_median_us"] > 0 and out["act_mean_us"] > 0
