"""`tiller run --agent` refuses an agent whose code is in the run's workspace (law 11:
the model could rewrite it, and `tiller approve`/`deny` would import what it wrote), in
one line, before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

AGENT = """
from tiller.loop import Agent
from tiller.model import ScriptedModel


def make():
    return Agent(ScriptedModel(["hi"]))
"""


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiller", "run", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_agent_module_in_the_workspace_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "myagent.py").write_text(textwrap.dedent(AGENT))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    done = _run(project, "--agent", "myagent:make", "--store", store, "say hi")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "inside the run's workspace" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / ".tiller").exists()


def test_the_same_agent_with_its_workspace_elsewhere_runs(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "work").mkdir(parents=True)
    (project / "myagent.py").write_text(textwrap.dedent(AGENT))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    done = _run(project, "--agent", "myagent:make", "-w", "work", "--store", store, "say hi")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "hi" in done.stdout
