"""`--agent` naming code that fails as it loads: one line, exit 2, no traceback (review of
issue 18). Before: a module that raised as it was imported (or had a syntax error), or a
factory that raised, came out as rich's boxed traceback, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..cli_support import tiller

MODULES = {
    "raises_at_import": ('raise RuntimeError("no config file")\n', "RuntimeError: no config file"),
    "bad_syntax": ("def make(model=None:\n", "SyntaxError"),
    "factory_fails": (
        'def make(model=None):\n    raise ValueError("no key")\n',
        "ValueError: no key",
    ),
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_an_agent_that_fails_to_load_is_one_line(tmp_path: Path, module: str) -> None:
    source, says = MODULES[module]
    (tmp_path / f"{module}.py").write_text(source)
    (tmp_path / "ws").mkdir()
    done = tiller("run", "x", "--agent", f"{module}:make", "-w", "ws", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("tiller: ") and f"{module}:make" in line and says in line, line
    assert done.stdout == ""
