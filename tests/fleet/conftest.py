"""Fleet tests: a test agent module written to a temp dir (importable by reference, in
this process and in worker subprocesses), and buses on memory, SQLite and NATS."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tiller.fleet import Worker
from tiller.store import Bus, open_bus

NATS_URL = "nats://127.0.0.1:4222"

AGENT_MODULE = '''
"""Agents for the fleet tests. `note` is read-only (it runs without asking) and appends
its call id to the ledger file the LEDGER environment variable (or `LEDGER`) names."""

import asyncio
import os
import time
from pathlib import Path

from pydantic import BaseModel

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, tool

LEDGER = os.environ.get("FLEET_LEDGER", "")
#: In-process tests: the note of step N waits for GATES[N] (an asyncio.Event) if set.
GATES = {}
#: Set from step N on, the tool tells ENTERED[N] it started.
ENTERED = {}


def ledger_lines():
    path = Path(LEDGER)
    return path.read_text().splitlines() if path.exists() else []


@tool(read_only=True)
async def note(step: int, ctx: ExecContext) -> str:
    """Record that a step ran."""
    if step in ENTERED:
        ENTERED[step].set()
    Path(LEDGER + f".entered.{step}").touch()  # for tests that watch a worker process
    slow = os.environ.get("FLEET_SLOW_TOOL")
    if slow and int(slow) == step and Path(os.environ["FLEET_SLOW_MARK"]).exists():
        await asyncio.sleep(float(os.environ.get("FLEET_SLOW_SECONDS", "2")))
    if step in GATES:
        await GATES[step].wait()
    with open(LEDGER, "a") as out:
        out.write(ctx.call_id + "\\n")
    return f"noted {step}"


@tool
def write(text: str, ctx: ExecContext) -> str:
    """Write a file (asks for approval)."""
    (ctx.workdir / "out.txt").write_text(text)
    return "written"


def _steps(count, *, final="done"):
    def answer(messages, info):
        made = sum(1 for m in messages if getattr(m, "tool_calls", ()))
        slow = os.environ.get("FLEET_SLOW_TURN")
        if slow and int(slow) == made + 1 and Path(os.environ["FLEET_SLOW_MARK"]).exists():
            time.sleep(60)  # a worker killed here dies between steps
        if made < count:
            return {"tool_calls": [{"name": "note", "arguments": {"step": made + 1}}]}
        return f"{final} after {made} notes"

    return answer


def three():
    return Agent(ScriptedModel(_steps(3)), [note], name="three")


def five():
    return Agent(ScriptedModel(_steps(5)), [note], name="five")


def factory(model="scripted-a"):
    return Agent(ScriptedModel(_steps(1, final=model), name=model), [note], name="factory")


def writer():
    def answer(messages, info):
        results = getattr(messages[-1], "tool_results", ()) if messages else ()
        if results:
            return "wrote: " + results[0].content
        return {"tool_calls": [{"name": "write", "arguments": {"text": "hello"}}]}

    return Agent(ScriptedModel(answer), [write], name="writer")


class Answer(BaseModel):
    value: int


def structured():
    return Agent(ScriptedModel(['{"value": 42}']), [], name="structured", output_type=Answer)


def broken():
    raise RuntimeError("this factory always fails")


@tool(read_only=True)
def scribble(text: str, ctx: ExecContext) -> str:
    """Write `text` to mine.txt and add it to notes.txt; say what mine.txt held before.
    (Read-only like `note`, so it runs without asking: the test is about workspaces.)"""
    mine = ctx.workdir / "mine.txt"
    before = mine.read_text() if mine.exists() else "nothing"
    mine.write_text(text)
    notes = ctx.workdir / "notes.txt"
    notes.write_text(notes.read_text() + text + "\\n")
    return "before: " + before


def scribe():
    def answer(messages, info):
        results = getattr(messages[-1], "tool_results", ()) if messages else ()
        if results:
            return results[0].content
        return {"tool_calls": [{"name": "scribble", "arguments": {"text": messages[0].text}}]}

    return Agent(ScriptedModel(answer), [scribble], name="scribe")


@tool(read_only=True, name="recall")
def recall_here(ctx: ExecContext) -> str:
    """What mine.txt holds in the run's workspace now (or that it is missing)."""
    mine = ctx.workdir / "mine.txt"
    return mine.read_text() if mine.exists() else "missing"


def keeper():
    """Writes mine.txt, notes step 2 (a gate a test can hold), then reads mine.txt back.
    With FLEET_SLOW_TURN=2 (and the slow mark), its second model turn sleeps: a worker
    killed there has written mine.txt and journaled the write as completed."""

    def answer(messages, info):
        made = sum(1 for m in messages if getattr(m, "tool_calls", ()))
        slow = os.environ.get("FLEET_SLOW_TURN")
        if slow and int(slow) == made + 1 and Path(os.environ["FLEET_SLOW_MARK"]).exists():
            time.sleep(60)
        if made == 0:
            return {"tool_calls": [{"name": "scribble", "arguments": {"text": messages[0].text}}]}
        if made == 1:
            return {"tool_calls": [{"name": "note", "arguments": {"step": 2}}]}
        if made == 2:
            return {"tool_calls": [{"name": "recall", "arguments": {}}]}
        return "recalled: " + messages[-1].tool_results[0].content

    return Agent(ScriptedModel(answer), [scribble, note, recall_here], name="keeper")


def asker():
    """Writes mine.txt, then asks to write out.txt (held for a person), then reads mine.txt."""

    def answer(messages, info):
        made = sum(1 for m in messages if getattr(m, "tool_calls", ()))
        if made == 0:
            return {"tool_calls": [{"name": "scribble", "arguments": {"text": messages[0].text}}]}
        if made == 1:
            return {"tool_calls": [{"name": "write", "arguments": {"text": "approved"}}]}
        if made == 2:
            return {"tool_calls": [{"name": "recall", "arguments": {}}]}
        return "recalled: " + messages[-1].tool_results[0].content

    return Agent(ScriptedModel(answer), [scribble, write, recall_here], name="asker")


#: Where `occupy` says a run came in (+run) and went out (-run); one line each, appended.
OCCUPANCY = LEDGER + ".occupancy"


@tool(read_only=True)
async def occupy(phase: str, who: str) -> str:
    """Say run `who` is in (`enter`: at its first step) or out (`leave`: at its last)."""
    sign = "+" if phase == "enter" else "-"
    fd = os.open(OCCUPANCY, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{sign}{who}\\n".encode())
    finally:
        os.close(fd)
    if phase == "enter":
        await asyncio.sleep(0.05)  # a chance for another run to come in meanwhile
    return phase


def occupier():
    def answer(messages, info):
        made = sum(1 for m in messages if getattr(m, "tool_calls", ()))
        if made < 2:
            phase = "enter" if made == 0 else "leave"
            arguments = {"phase": phase, "who": messages[0].text}
            return {"tool_calls": [{"name": "occupy", "arguments": arguments}]}
        return "done"

    return Agent(ScriptedModel(answer), [occupy], name="occupier")


#: Wall-clock times of the calls `timed`'s and `throttled`'s models answered.
CALL_TIMES = []
THROTTLED = []


def throttled():
    """Its first call in this process gets a 429 asking to wait a second."""

    def answer(messages, info):
        if not THROTTLED:
            THROTTLED.append(time.time())
            return {"error": {"status": 429, "retry_after": 1.0, "message": "slow down"}}
        CALL_TIMES.append(("throttled", time.time()))
        return "after the pause"

    return Agent(ScriptedModel(answer), [], name="throttled")


def timed():
    def answer(messages, info):
        CALL_TIMES.append(("timed", time.time()))
        return "timed"

    return Agent(ScriptedModel(answer), [], name="timed")


#: Subagent model calls (`SUB_MODEL`): in flight now, the most at once, and how many the
#: fleet's limits saw begin (a test's limits call `sub_asked`).
SUB = {"in": 0, "peak": 0, "asked": 0}
#: Set once two subagent calls began: both in the model, or one waiting for a slot.
BOTH_ASKED = asyncio.Event()


def _both_asked():
    if SUB["in"] >= 2 or SUB["asked"] >= 2:
        BOTH_ASKED.set()


def sub_asked():
    SUB["asked"] += 1
    _both_asked()


async def _sub_answer(messages, info):
    SUB["in"] += 1
    SUB["peak"] = max(SUB["peak"], SUB["in"])
    _both_asked()
    try:
        await BOTH_ASKED.wait()  # until the other run's subagent has called too
    finally:
        SUB["in"] -= 1
    return "the sub's report"


#: The model a subagent type of the tests names (so its key is `scripted:sub`).
SUB_MODEL = ScriptedModel(_sub_answer, name="sub")


def _sub_throttled(messages, info):
    if not THROTTLED:
        THROTTLED.append(time.time())
        return {"error": {"status": 429, "retry_after": 1.0, "message": "slow down"}}
    return "the sub's report after the pause"


#: A subagent model whose first call gets a 429 asking to wait a second (`scripted:sub429`).
SUB_THROTTLED = ScriptedModel(_sub_throttled, name="sub429")


def delegator():
    """Hands its prompt to a subagent of the type the prompt names, then reports; the
    times of its own calls go to CALL_TIMES."""
    from tiller.tools.builtin import agent as agent_tool

    def answer(messages, info):
        CALL_TIMES.append(("delegator", time.time()))
        results = getattr(messages[-1], "tool_results", ()) if messages else ()
        if results:
            return "delegated: " + results[0].content.splitlines()[0]
        arguments = {"description": "help", "prompt": "help me", "subagent_type": messages[0].text}
        return {"tool_calls": [{"name": "agent", "arguments": arguments}]}

    return Agent(ScriptedModel(answer, name="parent"), [agent_tool], name="delegator")


@tool(risk="network")
def ping(host: str) -> str:
    """Ping a host (network: in auto mode the classifier vets it)."""
    return "pong from " + host


def pinger():
    def answer(messages, info):
        results = getattr(messages[-1], "tool_results", ()) if messages else ()
        if results:
            return "pinged: " + results[0].content
        return {"tool_calls": [{"name": "ping", "arguments": {"host": "example.com"}}]}

    return Agent(ScriptedModel(answer, name="parent"), [ping], name="pinger")
'''


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh importable module of test agents; its `LEDGER` file is in `tmp_path`."""
    name = f"fleet_agents_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("FLEET_LEDGER", str(tmp_path / "ledger.txt"))
    module = importlib.import_module(name)
    module.LEDGER = str(tmp_path / "ledger.txt")
    return module


def ref(agents: ModuleType, attr: str) -> str:
    return f"{agents.__name__}:{attr}"


def gate(agents: ModuleType, step: int) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the `note` call of `step` in this process: the first event lets it go on,
    the second says it started (the module's GATES and ENTERED)."""
    agents.GATES[step], agents.ENTERED[step] = asyncio.Event(), asyncio.Event()
    return agents.GATES[step], agents.ENTERED[step]


@dataclass(frozen=True)
class Store:
    """A store the test's "processes" share: each `open()` is another connection (a
    memory store has none: it is the one bus)."""

    url: str
    namespace: str = ""
    memory: Bus | None = None

    async def open(self) -> Bus:
        if self.memory is not None:
            return _Borrowed(self.memory)
        async with asyncio.timeout(10):
            return await open_bus(self.url, namespace=self.namespace)


class _Borrowed:
    """The memory bus, lent: closing it closes nothing (its owner does)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    def __getattr__(self, name: str) -> object:
        return getattr(self._bus, name)

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> Bus:
        return self._bus

    async def __aexit__(self, *exc: object) -> None:
        pass


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    kind = request.param
    if kind == "memory":
        async with await open_bus("memory://") as memory:
            yield Store("memory://", memory=memory)
    elif kind == "sqlite":
        yield Store(f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02")
    else:
        yield Store(NATS_URL, namespace=f"t{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def bus(store: Store) -> AsyncIterator[Bus]:
    async with await store.open() as opened:
        yield opened


@contextlib.asynccontextmanager
async def running_worker(store: Store, **options: Any) -> AsyncIterator[Worker]:
    """A worker on its own connection to `store`, running until the block ends (then
    drained, and its connection closed)."""
    options.setdefault("poll_interval", 0.02)
    options.setdefault("control_poll", 0.05)
    async with await store.open() as bus:
        worker = Worker(bus, **options)
        running = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running


async def until(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    """Poll `check` until it holds (a hang guard of `within` seconds, not a timing test)."""
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(0.02)


#: Connections each `buses` test gets to its store.
CONNECTIONS = 4


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def buses(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Bus]]:
    """Several connections to one store, as the workers of a fleet open it. A memory
    store lives in one process, so its "connections" are one `MemoryBus`; SQLite
    connections share the file; NATS connections share a namespace of their own, deleted
    at the end so the shared server does not fill up."""
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
