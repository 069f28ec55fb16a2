"""The dependency direction: the core package never imports the CLI-layer packages."""
import subprocess
import sys


def test_core_imports_neither_envs_nor_attacks():
    code = ("import sys, uncertain_agents, uncertain_agents.agents, uncertain_agents.grid, uncertain_agents.regression; "
            "print(sorted(m for m in ('envs', 'attacks', 'foolbox') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_results_folder_says_how_it_was_made():
    # experiments/results keeps what the docs cite, each folder with a manifest.json whose
    # "runs" lists the runs that wrote it (older folders: the commits from git history)
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "experiments" / "results"
    folders = [d for d in results.iterdir() if d.is_dir()]
    assert folders
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        assert isinstance(manifest["runs"], list), folder
        assert manifest["runs"] or manifest["made_before_manifests"]["last_commit"], folder


def test_record_run_appends_one_manifest_per_run_and_keeps_the_rest(tmp_path):
    import json

    import pytest

    from uncertain_agents.runs import record_run

    out = tmp_path / "results"
    record_run(out, argv=["script.py", "--out", str(out)])
    path = record_run(out, argv=["script.py", "--resume"])
    manifest = json.loads(path.read_text())
    assert [r["argv"] for r in manifest["runs"]] == [["script.py", "--out", str(out)], ["script.py", "--resume"]]
    assert {"git_commit", "torch_version", "package_version", "started"} <= set(manifest["runs"][0])
    # the machine, since timings and the last bits of chaotic runs depend on the CPU model
    assert isinstance(manifest["runs"][0]["cpu"], str) and manifest["runs"][0]["cpu"]
    assert "cpu_capability" in manifest["runs"][0] and "gpu" in manifest["runs"][0]
    path.write_text(json.dumps({"runs": [], "made_before_manifests": {"last_commit": "abc"}}))
    record_run(out, argv=["x"])
    manifest = json.loads(path.read_text())
    assert manifest["made_before_manifests"] == {"last_commit": "abc"} and len(manifest["runs"]) == 1
    path.write_text("not json")
    with pytest.raises(ValueError, match="is not a JSON manifest"):
        record_run(out)
    assert path.read_text() == "not json"
