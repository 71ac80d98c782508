"""A careless caller's command lines: every bad argument, of every command, is one line on
stderr saying what is allowed, exit code 2, and nothing made on disk (issue 18).

Before: `--mode yolo` printed a 62-line traceback, `-w some_file` a `FileExistsError`
traceback, `-w /nonexistent` made `/nonexistent/.tiller` and ran, `--max-turns -3` and
`--max-cost -1` were taken, and the other commands' mistakes came as a boxed panel.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiller.cli import app
from tiller.cli._options import ModeChoice
from tiller.tools import SafetyMode

from ..cli_support import tiller


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory, and no store from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TILLER_STORE", raising=False)
    (tmp_path / "some_file").write_text("not a directory\n")
    return tmp_path


def _tree(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


STORE = "sqlite:///{here}/store.db"

# (command line, what the one line must say)
BAD = [
    (["run", "x", "-m", "scripted:s.yaml", "--mode", "yolo"], "--mode: 'yolo' is not one of"),
    (["run", "x", "-m", "scripted:s.yaml", "-w", "some_file"], "is a file"),
    (["run", "x", "-m", "scripted:s.yaml", "-w", "{here}/nope"], "does not exist"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-turns", "-3"], "greater than or equal to 1"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-steps", "0"], "greater than or equal to 1"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-cost", "-1"], "--max-cost: must be a number"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-cost", "0"], "--max-cost: must be a number"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-cost", "inf"], "--max-cost: must be a number"),
    (["run", "x", "-m", "scripted:s.yaml", "--max-cost", "nan"], "--max-cost: must be a number"),
    (["run", "x", "-m", "scripted:s.yaml", "--store", "store.db"], "not a store URL"),
    (["run", "x", "-m", "scripted:s.yaml", "--config", "nope.toml"], "does not exist"),
    (["run", "x", "-m", "scripted:s.yaml", "--bogus"], "No such option: --bogus"),
    (["run"], "Missing argument 'task'"),
    (["run", "", "-m", "scripted:s.yaml"], "run: task: is empty; say what the agent should do"),
    (["run", " \n ", "-m", "scripted:s.yaml"], "run: task: is empty; say what the agent should do"),
    (["serve", "--port", "-1"], "--port: "),
    (["serve", "--port", "99999"], "--port: "),
    (["serve", "-w", "some_file"], "is a file"),
    (["serve", "-w", "{here}/nope"], "does not exist"),
    (["serve", "--interrupt-ttl", "0"], "must be a number of seconds more than 0"),
    (["serve", "--store", "redis://x"], "not a store URL"),
    (["worker", "--store", "store.db"], "not a store URL"),
    (["worker", "--concurrency", "0"], "--concurrency / -c: "),
    (["submit", "m:a", "hi", "--no-check", "--max-steps", "-1"], "--max-steps must be at least 1"),
    (["submit", "m:a", "hi", "--no-check", "--max-tokens", "0"], "--max-tokens must be at least"),
    (["submit", "m:a", "hi", "--no-check", "--max-cost", "-1"], "--max-cost must be a non-neg"),
    (["submit", "m:a", "hi", "--no-check", "--max-cost", "inf"], "--max-cost must be a non-neg"),
    (["submit", "m:a", "hi", "--no-check", "--max-cost", "nan"], "--max-cost must be a non-neg"),
    (["submit", "m:a", "hi", "--store", "store.db"], "not a store URL"),
    (["approve", "ap-1", "--store", STORE], "there is no store at"),
    (["deny", "ap-1", "--reason", "no", "--store", STORE], "there is no store at"),
    (["approvals", "list", "--store", STORE], "there is no store at"),
    (["runs", "list", "--store", STORE], "there is no store at"),
    (["runs", "show", "r1", "--store", STORE], "there is no store at"),
    (["runs", "resume", "r1", "--store", STORE], "there is no store at"),
    (["runs", "resume", "r1", "-w", "{here}/nope"], "does not exist"),
    (["replay", "r1", "--store", STORE], "there is no store at"),
    (["rewind", "r1", "--to", "1", "--store", STORE], "there is no store at"),
    (["rewind", "r1", "--to", "1", "-w", "some_file"], "is a file"),
    (["outbox", "list", "--store", STORE], "there is no store at"),
    (["outbox", "send", "o1", "-w", "some_file"], "is a file"),
    (["taint", "show", "-w", "{here}/nope"], "does not exist"),
    (["mail", "list", "--store", "mysql://x"], "not a store URL"),
    (["eval", "run", "evals.py", "--epochs", "0"], "--epochs"),
    (
        ["replay", "r1", "--tools", "bogus", "--store", "memory://"],
        "replay: --tools is 'recorded' or 'live'",
    ),
    (["demo", "--agui", "--city", "Paris"], "--city: is Oslo, Lisbon or Tokyo, not 'Paris'"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_exit_2_and_nothing_made(
    here: Path, args: list[str], says: str
) -> None:
    before = _tree(here)
    argv = [arg.replace("{here}", str(here)) for arg in args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]
    assert "Traceback" not in result.output
    assert _tree(here) == before  # no workspace, no .tiller, no store file


def test_without_a_terminal_a_bad_mode_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The real command, stdin not a terminal: what a script or CI sees."""
    done = tiller("run", "x", "-m", "scripted:s.yaml", "--mode", "yolo", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "tiller run: --mode: 'yolo' is not one of 'read_only', 'ask', 'auto', 'full_access' "
        "(see tiller run --help)"
    ]
    assert os.listdir(tmp_path) == []


def test_a_missing_workspace_is_refused_not_made(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent"
    done = tiller("run", "x", "-m", "scripted:s.yaml", "-w", str(target), cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert f"'{target}' does not exist" in done.stderr
    assert not target.exists()


def test_no_model_and_no_agent_says_which_to_give(here: Path) -> None:
    result = CliRunner().invoke(app, ["run", "x", "--store", "memory://"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "tiller: give --model MODEL for the built-in coding agent (e.g. -m "
        "ollama:qwen2.5-coder), or --agent MODULE:ATTR for your own"
    ]
    assert _tree(here) == ["some_file"]


def test_the_modes_offered_are_the_safety_modes() -> None:
    assert [m.value for m in ModeChoice] == [m.value for m in SafetyMode]
