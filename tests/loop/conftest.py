"""Fixtures for the loop tests: a fresh jail per test, and a context over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.loop import RunContext
from tiller.policy import AllowAll


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> RunContext:
    """A context that allows every call (the approver tests build their own)."""
    return RunContext.sandboxed(workspace, AllowAll())
