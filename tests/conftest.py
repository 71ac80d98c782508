"""Suite-wide: a `tiller` command a test starts never writes to the user's own store."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_default_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tiller run` checkpoints to `TILLER_STORE` (default `~/.tiller/tiller.db`): point it
    at a file of this test session, for this process and the processes it starts."""
    store: Path = tmp_path_factory.getbasetemp() / "default-store.db"
    monkeypatch.setenv("TILLER_STORE", f"sqlite:///{store}")
