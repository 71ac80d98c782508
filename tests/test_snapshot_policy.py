"""Inline snapshots are specifications: a plain test run never rewrites one.

The repository's `[tool.inline-snapshot]` settings are copied into a scratch project whose
one test holds a snapshot that no longer matches. Run as in a terminal (where the library's
own default would offer to create and review changes) the test fails and its file is left as
it was; only an explicit `--inline-snapshot=fix`, a developer's deliberate update, rewrites
it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STALE = """\
from inline_snapshot import snapshot


def test_stale() -> None:
    assert ["a", "b"] == snapshot(["a", "c"])


def test_missing() -> None:
    assert 1 + 1 == snapshot()
"""


def _project(tmp_path: Path) -> Path:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["inline-snapshot"]
    lines = ["[tool.inline-snapshot]"]
    lines += [f"{key} = {list(value)!r}".replace("'", '"') for key, value in settings.items()]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (tmp_path / "test_stale.py").write_text(STALE)
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # As in a terminal (rich reads FORCE_COLOR), and not as an xdist worker, even when this
    # suite runs under xdist: a worker's environment would switch the library off.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["FORCE_COLOR"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--color=no",
            "-rfE",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_plain_run_fails_on_a_stale_or_missing_snapshot_and_rewrites_nothing(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    done = _pytest(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_stale.py::test_stale" in done.stdout
    # inline-snapshot reports a missing value as an error at teardown, or (with CI set)
    # as a failure of the test: either way the test does not pass.
    assert re.search(r"(FAILED|ERROR) test_stale\.py::test_missing", done.stdout), done.stdout
    assert (project / "test_stale.py").read_text() == STALE


def test_an_explicit_fix_run_is_how_a_snapshot_is_updated(tmp_path: Path) -> None:
    project = _project(tmp_path)
    _pytest(project, "--inline-snapshot=fix,create")
    fixed = (project / "test_stale.py").read_text()
    assert fixed != STALE
    assert "snapshot(2)" in fixed
    again = _pytest(project)
    assert again.returncode == 0, again.stdout + again.stderr
