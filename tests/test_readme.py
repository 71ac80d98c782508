"""The README opens with exactly the two set-up commands, and CI runs the second."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def opening_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"```sh\n(.*?)\n```", text, re.S)
    assert match, "the README must open with a sh code block"
    return match.group(1).splitlines()


def test_two_commands_install_and_run() -> None:
    demo, tests = opening_commands()
    setup = "scripts/setup-system.sh && python3 -m venv .venv"
    assert demo.startswith(setup) and demo.endswith("tiller demo")
    # The suite also needs the browser the console test drives.
    with_browser = "scripts/setup-system.sh --browser && python3 -m venv .venv"
    assert tests.startswith(with_browser) and "'.[dev]'" in tests
    assert (ROOT / "scripts" / "setup-system.sh").stat().st_mode & 0o111, "must be executable"
    for tool in ("ruff check", "ruff format --check", "mypy", "pytest"):
        assert tool in tests


def test_ci_extracts_the_same_test_command() -> None:
    script = ROOT / ".ci" / "run"
    extract = re.search(r'test_command="\$\((.*)\)"', script.read_text())
    assert extract, ".ci/run must read its test command from the README"
    found = subprocess.run(
        ["bash", "-c", extract.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == opening_commands()[1]


def test_python_examples_run(capsys: object) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, re.S)
    assert blocks, "the README shows code"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
