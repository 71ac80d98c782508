"""The web console's pure JavaScript (JSON Patch, the SSE parser, the thread reducer), checked
under node: the console has no build step, so node runs the very files the server hands out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("console_reducer_check.mjs")


def test_console_reducer_under_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the console's JavaScript checks need it")
    result = subprocess.run(
        [node, "--test", str(CHECK)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
