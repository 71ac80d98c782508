"""tiller's pytest plugin: fixtures for testing agents offline, and record mode.

Registered as the `tiller` pytest11 entry point, so installing tiller makes it available;
without the entry point, enable it with `-p tiller.pytest_plugin` (or `pytest_plugins`).
Loading it costs nothing until a fixture is used: tiller is imported inside the fixtures.

Fixtures (they need pytest-asyncio, which tiller's `dev` extra has; an async test that
asks for one of them is made an asyncio test, so no `asyncio_mode = "auto"` and no
`@pytest.mark.asyncio` is needed, in pytest-asyncio's default strict mode too):

- `tiller_store`: a fresh SQLite `Bus` in the test's `tmp_path` (closed afterwards), an
  async fixture.
- `scripted`: `await scripted(agent, turns, prompt, **run_kwargs) -> (result, events)`,
  `tiller.testing.run_scripted` with the run jailed to a directory of `tmp_path`.
- `tiller_model`: record once, replay offline ever after. `await tiller_model.run(agent,
  prompt, **run_kwargs) -> (result, events)`:
  - with `--tiller-record`, the agent runs on the live model named by the test's
    `@pytest.mark.tiller_model("anthropic:claude-sonnet-4-5")` (or the `tiller_model` ini
    value), captured, and the capture is written beside the test module:
    `captures/<module>.<test>.json` (a second run in the same test: `...<test>.2.json`);
  - without it, the run replays that file through `ReplayModel` (strict), with no network,
    and fails with a message saying how to record it if the file is missing. A changed
    agent raises `Divergence` naming the step: other results from its tools, or another
    system prompt, tool set or output schema (`run(..., allow_prompt_edits=True)` lets
    the prompt alone differ).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

if TYPE_CHECKING:
    from .events import Event
    from .loop import RunResult
    from .model import Model
    from .store import Bus
    from .testing import AgentOrFactory

__all__ = ["ModelRecorder"]

_RECORD_OPTION = "--tiller-record"
_MARKER = "tiller_model"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tiller")
    group.addoption(
        _RECORD_OPTION,
        action="store_true",
        default=False,
        help="run `tiller_model` tests against their live model and (re)write their "
        "capture files; without it they replay the captures offline",
    )
    parser.addini(
        "tiller_model",
        "the live model `tiller_model` tests record with when they have no marker",
        default="",
    )
    parser.addini(
        "tiller_captures",
        "where `tiller_model` capture files live, relative to each test module's directory",
        default="captures",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(model): the live model (a model string such as "
        "'anthropic:claude-sonnet-4-5', or a Model) this test records with --tiller-record",
    )


#: The fixtures an async test uses with this plugin; such a test is made an asyncio test.
_ASYNC_FIXTURES = frozenset({"tiller_store", "scripted", "tiller_model"})


@pytest.hookimpl(hookwrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """Mark an async test that asks for a tiller fixture `asyncio`, before pytest-asyncio
    looks at it: in its strict mode (the default) an unmarked coroutine test would not be
    run at all, and the README's examples would need `asyncio_mode = "auto"`."""
    if (
        inspect.iscoroutinefunction(obj)
        and _ASYNC_FIXTURES & _parameters(obj)
        and not any(mark.name == "asyncio" for mark in getattr(obj, "pytestmark", ()))
    ):
        pytest.mark.asyncio(obj)
    yield


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a callable with no signature
        return set()


# ── tiller_store ─────────────────────────────────────────────────────────────────────

_F = TypeVar("_F", bound=Callable[..., Any])

_fixture: Callable[[Any], Any]
try:
    from pytest_asyncio import fixture as _fixture
except ImportError:  # pragma: no cover - without it pytest refuses async fixtures, saying so
    _fixture = pytest.fixture


def _async_fixture(function: _F) -> _F:
    """pytest-asyncio's fixture decorator (so the fixture works in its strict mode too)."""
    return cast(_F, _fixture(function))


@_async_fixture
async def tiller_store(tmp_path: Path) -> AsyncIterator[Bus]:
    """A fresh SQLite store in the test's `tmp_path`, closed after the test."""
    from .store import open_bus

    bus = await open_bus(f"sqlite:///{tmp_path / 'tiller.db'}")
    try:
        yield bus
    finally:
        await bus.aclose()


# ── scripted ─────────────────────────────────────────────────────────────────────────

ScriptedRunner = Callable[..., Awaitable[tuple["RunResult", list["Event"]]]]


@pytest.fixture
def scripted(tmp_path: Path) -> ScriptedRunner:
    """`await scripted(agent_or_factory, turns, prompt="go", **run_kwargs)`: the agent on a
    `ScriptedModel`, jailed to `tmp_path / "ws"` unless a `workspace` or `context` is given;
    returns the result and every event (the stream already checked)."""
    from .testing import run_scripted

    async def run(
        agent_or_factory: AgentOrFactory, turns: Any, prompt: str = "go", **run_kwargs: Any
    ) -> tuple[RunResult, list[Event]]:
        if "context" not in run_kwargs:
            run_kwargs.setdefault("workspace", tmp_path / "ws")
        return await run_scripted(agent_or_factory, turns, prompt, **run_kwargs)

    return run


# ── tiller_model: record once, replay offline ────────────────────────────────────────


class ModelRecorder:
    """What the `tiller_model` fixture gives a test: `await recorder.run(agent, prompt)`.

    `recording` says which mode this session is in; `paths` are the capture files this
    test used so far.
    """

    def __init__(
        self,
        *,
        recording: bool,
        stem: Path,
        live: str | Model | Callable[[], Model] | None,
        workspace: Path,
    ) -> None:
        self.recording = recording
        self.paths: list[Path] = []
        self._stem = stem
        self._live = live
        self._workspace = workspace

    def path(self, index: int = 1) -> Path:
        """The capture file of this test's `index`-th run."""
        suffix = ".json" if index == 1 else f".{index}.json"
        return self._stem.with_name(self._stem.name + suffix)

    async def run(
        self,
        agent_or_factory: AgentOrFactory,
        prompt: str,
        *,
        allow_prompt_edits: bool = False,
        **run_kwargs: Any,
    ) -> tuple[RunResult, list[Event]]:
        """Record this run from the live model (`--tiller-record`), or replay its capture
        (`allow_prompt_edits`: a changed system prompt is no divergence)."""
        from .testing import run_capture

        path = self.path(len(self.paths) + 1)
        self.paths.append(path)
        if "context" not in run_kwargs:
            run_kwargs.setdefault("workspace", self._workspace)
        if self.recording:
            return await self._record(agent_or_factory, prompt, path, run_kwargs)
        if not path.exists():
            pytest.fail(
                f"no capture to replay at {path}: run this test once with "
                f"{_RECORD_OPTION} (it calls the live model) to record it",
                pytrace=False,
            )
        return await run_capture(
            agent_or_factory, path, prompt, allow_prompt_edits=allow_prompt_edits, **run_kwargs
        )

    async def _record(
        self,
        agent_or_factory: AgentOrFactory,
        prompt: str,
        path: Path,
        run_kwargs: dict[str, Any],
    ) -> tuple[RunResult, list[Event]]:
        from .capture import memory_capture
        from .loop import RunOptions
        from .model import resolve_model
        from .testing import run_scripted

        if self._live is None:
            pytest.fail(
                f"{_RECORD_OPTION}: say which live model to record with: "
                f'@pytest.mark.{_MARKER}("provider:model") or the `tiller_model` ini option',
                pytrace=False,
            )
        live = self._live() if callable(self._live) else self._live
        model = resolve_model(live)
        captures = memory_capture()
        options = run_kwargs.pop("options", None) or RunOptions()
        try:
            result, events = await run_scripted(
                agent_or_factory,
                model,
                prompt,
                options=options.with_capture_sink(captures),
                **run_kwargs,
            )
        finally:
            if model is not live:  # built here from a string: ours to close
                await model.aclose()
        capture = captures[result.state.run_id]
        await asyncio.to_thread(_write, path, capture.to_json())
        return result, events


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def tiller_model(request: pytest.FixtureRequest, tmp_path: Path) -> ModelRecorder:
    """Record a live run once (`--tiller-record`), replay it offline afterwards."""
    marker = request.node.get_closest_marker(_MARKER)
    live: Any = marker.args[0] if marker is not None and marker.args else None
    if live is None:
        live = request.config.getini("tiller_model") or None
    module = request.node.path
    directory = module.parent / request.config.getini("tiller_captures")
    name = _UNSAFE.sub("_", f"{module.stem}.{request.node.name}").strip("_")
    return ModelRecorder(
        recording=bool(request.config.getoption(_RECORD_OPTION)),
        stem=directory / name,
        live=live,
        workspace=tmp_path / "ws",
    )
