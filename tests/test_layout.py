"""The dependency direction: the core package never imports the CLI-layer packages."""
import subprocess
import sys


def test_core_imports_neither_envs_nor_attacks():
    code = ("import sys, uncertain_agents, uncertain_agents.agents, uncertain_agents.grid, uncertain_agents.regression; "
            "print(sorted(m for m in ('envs', 'attacks', 'foolbox') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
