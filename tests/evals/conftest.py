"""Eval runner tests: the stores results go to, a real SQLite file and the memory bus."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiller.store import Bus, MemoryBus, open_bus


@pytest.fixture(params=["sqlite", "memory"])
async def bus(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bus]:
    """A real SQLite file, or the memory bus, open for the whole test."""
    if request.param == "sqlite":
        opened = await open_bus(f"sqlite:///{tmp_path / 'evals.db'}")
    else:
        opened = MemoryBus()
    async with opened:
        yield opened
