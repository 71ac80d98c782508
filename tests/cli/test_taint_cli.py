"""`tiller taint show | clear`: a person sees which files carry taint, and clears it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tiller.cli import app
from tiller.conversation import Taint
from tiller.tools import IndexHealth, TaintIndex


def test_show_lists_the_entries_and_clear_forgets_them(tmp_path: Path) -> None:
    (tmp_path / "TODO.md").write_text("fetched")
    TaintIndex(tmp_path).mark(["TODO.md"], Taint.UNTRUSTED_INPUT, run="r1")
    (tmp_path / "TODO.md").write_text("edited by a person")
    runner = CliRunner()
    shown = runner.invoke(app, ["taint", "show", "-w", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.split("\n")[1].split() == ["TODO.md", "untrusted", "r1", "yes"]
    cleared = runner.invoke(app, ["taint", "clear", "TODO.md", "-w", str(tmp_path)])
    assert cleared.exit_code == 0 and "cleared 1 file(s): TODO.md" in cleared.output
    assert TaintIndex(tmp_path).load().entries == {}


def test_a_corrupt_index_is_reported_and_reset_only_by_clear_all(tmp_path: Path) -> None:
    (tmp_path / ".tiller").mkdir()
    (tmp_path / ".tiller" / "taint.json").write_text("{")
    runner = CliRunner()
    shown = runner.invoke(app, ["taint", "show", "-w", str(tmp_path)])
    assert shown.exit_code == 1 and "corrupt" in shown.output
    assert runner.invoke(app, ["taint", "clear", "-w", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, ["taint", "clear", "--all", "-w", str(tmp_path)]).exit_code == 0
    assert TaintIndex(tmp_path).load().health is IndexHealth.OK
