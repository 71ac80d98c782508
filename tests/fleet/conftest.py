"""Stores for the fleet tests: memory, a SQLite file and the real NATS server, each opened
as several connections to the same store, as the workers of a fleet open it.

A memory store lives in one process, so its "connections" are one `MemoryBus`; SQLite
connections share the file; NATS connections share a namespace of their own, deleted at
the end so the shared server does not fill up."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiller.store import Bus, open_bus

NATS_URL = "nats://127.0.0.1:4222"
#: Connections each test gets to its store.
CONNECTIONS = 4


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def buses(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Bus]]:
    kind = request.param
    if kind == "memory":
        bus = await open_bus("memory://")
        try:
            yield [bus] * CONNECTIONS
        finally:
            await bus.aclose()
        return
    url = f"sqlite:///{tmp_path / 'store.db'}" if kind == "sqlite" else NATS_URL
    namespace = f"fleet{uuid.uuid4().hex[:12]}" if kind == "nats" else ""
    opened = [await open_bus(url, namespace=namespace) for _ in range(CONNECTIONS)]
    try:
        yield opened
    finally:
        if kind == "nats":
            await opened[0].delete_namespace()  # type: ignore[attr-defined]
        for bus in opened:
            await bus.aclose()


@pytest.fixture
def bus(buses: list[Bus]) -> Bus:
    """The first connection, for tests that need only one."""
    return buses[0]
