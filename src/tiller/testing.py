"""Helpers for testing agents and streams offline. Public API, like `trio.testing`.

- `assert_valid_stream(events)` (alias `assert_valid_events`) checks a stream two ways:
  every event, encoded, validates against the `ag-ui-protocol` 1.0 models with no unknown
  fields, and the whole stream passes `ag-ui-validate` with zero warnings. Both checkers
  come with tiller's `dev` extra.
- `run_scripted(agent, turns, prompt)` runs an agent on a `ScriptedModel` and returns its
  result and every event; `run_capture(agent, capture, prompt)` replays a capture (a
  `Capture` or a `.json` / `.jsonl` file) through `ReplayModel`, raising `Divergence` if the
  agent no longer does what was recorded. Both check the stream by default.
- `Sequencer` forces an order on what concurrent tasks do, so a race is a test, not luck.

The pytest plugin (`tiller.pytest_plugin`, registered as the `tiller` pytest11 entry point)
wraps these as fixtures and adds record mode (`--tiller-record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

from .capture import Capture
from .errors import UsageError
from .events import Event, encode_json
from .loop import Agent, RunResult
from .model import Model, ModelRequest, ScriptedModel, StreamEvent
from .model.replay import Divergence, ReplayModel

if TYPE_CHECKING:
    from .model.scripted import TurnFunction, TurnLike

__all__ = [
    "AgentOrFactory",
    "Sequencer",
    "assert_valid_events",
    "assert_valid_stream",
    "load_capture_file",
    "run_capture",
    "run_scripted",
    "wire_events",
]

#: An `Agent` (run with its model swapped for the test's), or `(model) -> Agent`.
AgentOrFactory: TypeAlias = Agent | Callable[[Model], Agent]


def wire_events(events: Iterable[Event | dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the JSON objects a client receives (decoded from the real encoding)."""
    return [e if isinstance(e, dict) else orjson.loads(encode_json(e)) for e in events]


def assert_valid_stream(
    events: Iterable[Event | dict[str, Any]], *, features: list[str] | None = None
) -> list[dict[str, Any]]:
    """Fail with a readable message unless the stream is valid AG-UI 1.0; return it as JSON."""
    try:
        from ag_ui.core import Event as AgUiEvent
        from ag_ui_validate.pytest_plugin import assert_valid_agui
        from pydantic import TypeAdapter, ValidationError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "assert_valid_stream needs the dev extra: pip install 'tiller[dev]'"
        ) from exc
    wire = wire_events(events)
    adapter: TypeAdapter[Any] = TypeAdapter(AgUiEvent)
    for index, obj in enumerate(wire):
        try:
            model = adapter.validate_python(obj)
        except ValidationError as exc:
            raise AssertionError(
                f"event {index} does not fit the AG-UI 1.0 model: {obj}\n{exc}"
            ) from exc
        if model.model_extra:
            raise AssertionError(
                f"event {index} has fields AG-UI does not know: {model.model_extra}"
            )
        if any(value is None for key, value in obj.items() if key not in ("snapshot", "value")):
            raise AssertionError(f"event {index} carries an explicit null: {obj}")
    assert_valid_agui(wire, features=features, max_warnings=0)
    return wire


#: The name the issue and the docs use; the same check.
assert_valid_events = assert_valid_stream


# ── running agents offline ───────────────────────────────────────────────────────────


def agent_with_model(agent_or_factory: AgentOrFactory, model: Model) -> Agent:
    """The agent to run on `model`: a factory is called with it; an `Agent` is copied
    (shallowly: tools and settings are shared, which is safe, as an agent holds nothing
    per run) with its model replaced, so the caller's agent is left as it was."""
    if isinstance(agent_or_factory, Agent):
        agent = copy.copy(agent_or_factory)
        agent.model = model
        return agent
    return agent_or_factory(model)


async def run_scripted(
    agent_or_factory: AgentOrFactory,
    turns: Iterable[TurnLike] | TurnLike | TurnFunction | Model,
    prompt: str = "go",
    *,
    check: bool = True,
    on_event: Callable[[Event], None] | None = None,
    **run_kwargs: Any,
) -> tuple[RunResult, list[Event]]:
    """Run the agent on `ScriptedModel(turns)` (or on `turns` if it is already a model)
    and collect every event it emits.

    `run_kwargs` go to `Agent.run` (`workspace`, `approver`, `context`, `options`,
    `run_id`, ...); without `workspace` or `context` the run gets a temporary directory.
    With `check` (the default) the stream must be valid AG-UI (`assert_valid_stream`),
    since every stream a test produces should be checked (DESIGN §9).
    """
    model = turns if isinstance(turns, Model) else ScriptedModel(turns)
    agent = agent_with_model(agent_or_factory, model)
    return await _run(agent, prompt, check, on_event, run_kwargs)


def load_capture_file(path: str | Path) -> Capture:
    """A capture from a file: JSON Lines if the name ends in `.jsonl`, else JSON."""
    path = Path(path)
    data = path.read_bytes()
    return Capture.from_jsonl(data) if path.suffix == ".jsonl" else Capture.from_json(data)


async def run_capture(
    agent_or_factory: AgentOrFactory,
    capture: Capture | str | Path,
    prompt: str,
    *,
    strict: bool = True,
    check: bool = True,
    on_event: Callable[[Event], None] | None = None,
    **run_kwargs: Any,
) -> tuple[RunResult, list[Event]]:
    """Replay `capture` offline: the agent runs on a `ReplayModel` under the capture's run
    id, so an unchanged agent emits the recorded stream, ids included.

    A divergence (the agent now sends the model something else, or asks for more calls
    than were recorded) ends the run with an error, as in production; here it is raised
    as the `Divergence` itself, naming the step, since that is what a test wants to see.
    `strict=False` only collects mismatched messages (`result` is returned; see
    `ReplayModel.mismatches`). `prompt` must be the recorded run's prompt.
    """
    if not isinstance(capture, Capture):
        capture = load_capture_file(capture)
    model = _WatchedReplay(capture, strict=strict)
    run_kwargs.setdefault("run_id", capture.run_id)
    agent = agent_with_model(agent_or_factory, model)
    result, events = await _run(agent, prompt, False, on_event, run_kwargs)
    if model.divergence is not None:
        raise model.divergence
    if check:
        assert_valid_stream(events)
    return result, events


async def _run(
    agent: Agent,
    prompt: str,
    check: bool,
    on_event: Callable[[Event], None] | None,
    run_kwargs: dict[str, Any],
) -> tuple[RunResult, list[Event]]:
    events: list[Event] = []

    def record(event: Event) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    result = await agent.run(prompt, on_event=record, **run_kwargs)
    if check:
        assert_valid_stream(events)
    return result, events


class _WatchedReplay(ReplayModel):
    """A `ReplayModel` that keeps the divergence it raised, which the loop turns into a
    failed run, so that `run_capture` can raise the divergence itself."""

    divergence: Divergence | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        try:
            async for event in super().stream(request):
                yield event
        except Divergence as exc:
            self.divergence = exc
            raise


# ── ordering concurrent tasks ────────────────────────────────────────────────────────


class Sequencer:
    """Forces an order on sections of concurrent tasks, like `trio.testing.Sequencer`.

    ```python
    seq = Sequencer()

    async def worker_a():
        async with seq(1):
            ...  # runs only after worker_b's `seq(0)` block has finished

    async def worker_b():
        async with seq(0):
            ...
    ```

    `async with seq(n)` waits until the block of position `n - 1` has exited, then runs;
    position 0 runs at once. Each position is used once (`RuntimeError` otherwise). If a
    task is cancelled while waiting for its turn, the sequence is broken: every waiting and
    later `seq(...)` raises `RuntimeError` instead of hanging the test.
    """

    def __init__(self) -> None:
        self._done: dict[int, asyncio.Event] = {}
        self._claimed: set[int] = set()
        self._broken = False

    def _point(self, position: int) -> asyncio.Event:
        return self._done.setdefault(position, asyncio.Event())

    @contextlib.asynccontextmanager
    async def __call__(self, position: int) -> AsyncIterator[None]:
        if position < 0:
            raise UsageError(f"sequence positions start at 0, not {position}")
        if position in self._claimed:
            raise RuntimeError(f"sequence point {position} was already used")
        if self._broken:
            raise RuntimeError("the sequence is broken: a task was cancelled waiting its turn")
        self._claimed.add(position)
        if position > 0:
            try:
                await self._point(position - 1).wait()
            except asyncio.CancelledError:
                self._broken = True
                for event in self._done.values():
                    event.set()
                raise  # the cancel goes on; the others see a broken sequence
            if self._broken:
                raise RuntimeError("the sequence is broken: a task was cancelled waiting its turn")
        try:
            yield
        finally:
            self._point(position).set()
