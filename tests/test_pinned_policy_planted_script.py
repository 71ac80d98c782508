"""A hook script missing when the policy was pinned is refused if it appears later."""

from __future__ import annotations

from pathlib import Path

from tiller.policy import changed_pins, pin_files


def test_a_script_planted_after_pinning_counts_as_changed(tmp_path: Path) -> None:
    script = tmp_path / "policy-check.sh"
    pins = pin_files([script])
    assert pins[0].sha256 is None
    assert changed_pins(pins) == []
    script.write_text("#!/bin/sh\nexit 0\n")
    assert changed_pins(pins) == [f"{script} appeared"]


def test_a_directory_named_by_a_hook_is_not_a_change(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    assert changed_pins(pin_files([tmp_path / "src"])) == []
