"""experiments/plug_in_matrix.py: cells record their seeding scheme, and a folder of an earlier scheme is
not silently resumed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_helpers import load_script

from uncertain_agents.seeding import SEEDING_SCHEME


def _script():
    return load_script("plug_in_matrix")


def _cell(out: Path, job: str, name: str, index: int, **fields) -> None:
    (out / "cells").mkdir(parents=True, exist_ok=True)
    record = {"job": job, "posterior": name, "index": index, **fields}
    (out / "cells" / f"{job}__{name.replace(':', '-')}__{index}.json").write_text(json.dumps(record))


def test_posterior_cells_of_an_earlier_seeding_scheme_block_new_posterior_cells(tmp_path):
    matrix = _script()
    out = tmp_path / "matrix"
    _cell(out, "boston", "map", 1, test_nll=2.6)                          # written before cells recorded a scheme
    _cell(out, "wheel", "agent:linear", 0, normalised_regret=5.0)          # reference agents never count
    _cell(out, "mushroom", "mfvi", 0, normalised_regret=9.0, seeding=SEEDING_SCHEME)
    assert matrix.cells_of_other_seeding(out, [("boston", "map", 0, "p")]) == "1 boston"
    assert matrix.cells_of_other_seeding(out, [("boston", "mfvi", 0, "p")]) == "1 boston"  # the job's realisations
    assert matrix.cells_of_other_seeding(out, [("wheel", "mfvi", 0, "p")]) == ""
    assert matrix.cells_of_other_seeding(out, [("mushroom", "mfvi", 1, "p")]) == ""
    assert matrix.cells_of_other_seeding(out, [("boston", "agent:linear", 0, "p")]) == ""
    # the script refuses before it runs or records anything
    with pytest.raises(SystemExit):
        matrix.main(["--out", str(out), "--jobs", "boston", "--posteriors", "map", "--splits", "0,1", "--workers", "1"])
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in (out / "cells").iterdir()) == [
        "boston__map__1.json", "mushroom__mfvi__0.json", "wheel__agent-linear__0.json"]


def test_a_cell_records_the_seeding_scheme_it_was_made_under(tmp_path, monkeypatch):
    matrix = _script()
    monkeypatch.setattr(matrix, "run_boston", lambda name, index: {"test_nll": 2.5, "test_rmse": 3.0})
    path = tmp_path / "boston__map__0.json"
    matrix.run_cell("boston", "map", 0, str(path))
    assert json.loads(path.read_text())["seeding"] == SEEDING_SCHEME


def test_recorded_scheme_reads_stored_values_and_refuses_malformed_ones():
    from uncertain_agents.seeding import recorded_scheme

    for missing in (None, float("nan"), "", "  "):
        assert recorded_scheme(missing) == 1  # results of scheme 1 recorded nothing
    assert recorded_scheme(2) == recorded_scheme(2.0) == recorded_scheme("2") == 2
    for bad in ("two", 1.5, 0, -2, [2]):
        with pytest.raises(ValueError, match="seeding scheme"):
            recorded_scheme(bad)
