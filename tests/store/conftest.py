"""The `bus` fixture: every contract test runs on memory, SQLite (a temp file) and NATS.

NATS is skipped only while `tiller.store._nats` does not exist; once it does, a server that
is down is a failure saying how to start it (`.ci/run` does), never a silent skip. Each
NATS test gets its own namespace, so tests never see each other's buckets.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiller.store import Bus, open_bus

NATS_URL = "nats://127.0.0.1:4222"


class FakeClock:
    """A clock that moves only when told to, so lease tests need no sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _nats_missing() -> str | None:
    try:
        importlib.import_module("tiller.store._nats")
    except ModuleNotFoundError as exc:
        if exc.name == "tiller.store._nats":
            return "tiller.store._nats is not written yet"
        raise  # the module exists but one of its imports is missing: a real failure
    return None


_NATS_MISSING = _nats_missing()

BACKENDS = [
    "memory",
    "sqlite",
    pytest.param(
        "nats",
        marks=pytest.mark.skipif(_NATS_MISSING is not None, reason=_NATS_MISSING or ""),
    ),
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def make_bus(kind: str, clock: FakeClock, tmp_path: Path, namespace: str) -> Bus:
    if kind == "memory":
        return await open_bus("memory://", clock=clock)
    if kind == "sqlite":
        return await open_bus(f"sqlite:///{tmp_path / 'bus.db'}", clock=clock)
    try:
        async with asyncio.timeout(10):
            # A generous per-call timeout: CI machines are small and the suite runs
            # concurrent claims against one server (a hang guard, not a timing test).
            from tiller.store._nats import NatsBus

            return await NatsBus.connect(
                NATS_URL,
                clock=clock,
                namespace=namespace,
                request_timeout=30.0,
                claim_wait=0.1,
            )
    except Exception as exc:
        pytest.fail(
            f"NATS JetStream is not reachable at {NATS_URL} ({exc!r}). Start it: run `.ci/run`, "
            "or `nats-server -js -a 127.0.0.1 -p 4222`.",
            pytrace=False,
        )


@pytest.fixture
def namespace() -> str:
    """The test's own store namespace (NATS: the server is shared)."""
    return f"t{uuid.uuid4().hex[:16]}"


@pytest.fixture(params=BACKENDS)
async def bus(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path, namespace: str
) -> AsyncIterator[Bus]:
    opened = await make_bus(request.param, clock, tmp_path, namespace)
    try:
        yield opened
    finally:
        await opened.aclose()
        if request.param == "nats":
            # The server is shared and lives on: leave none of this test's streams there
            # (through a fresh connection, since the test may have closed its own).
            from tiller.store._nats import NatsBus

            cleaner = await NatsBus.connect(NATS_URL, namespace=namespace)
            try:
                await cleaner.delete_namespace()
            finally:
                await cleaner.aclose()


@pytest.fixture
async def other_process_bus(
    bus: Bus, clock: FakeClock, tmp_path: Path, namespace: str
) -> AsyncIterator[Bus]:
    """The store of `bus` as another process sees it: a second connection to the same
    SQLite file or NATS namespace. (Memory has no other process: it is `bus` itself, the
    one place its queues live.) The `bus` fixture removes the namespace afterwards."""
    kind = bus.url.split(":", 1)[0]
    if kind == "memory":
        yield bus
        return
    other = await make_bus(kind, clock, tmp_path, namespace)
    try:
        yield other
    finally:
        await other.aclose()
