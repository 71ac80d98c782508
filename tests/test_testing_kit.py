"""The testing kit: `run_scripted`, `run_capture`, `assert_valid_events`, `Sequencer`, and the
pytest plugin (fixtures, record mode) run in a pytest of its own through `pytester`."""

from __future__ import annotations

import asyncio
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tiller.capture import memory_capture
from tiller.events import RunFinishedEvent, RunStartedEvent, TextMessageContentEvent
from tiller.loop import Agent, RunOptions
from tiller.model import Model
from tiller.model.replay import Divergence
from tiller.testing import (
    Sequencer,
    assert_valid_agui,
    assert_valid_events,
    assert_valid_stream,
    run_capture,
    run_scripted,
    wire_events,
)
from tiller.tools import tool

pytest_plugins = ["pytester"]


@tool(read_only=True)
def lookup(n: int) -> str:
    """Look a number up."""
    return f"entry {n}"


@tool(read_only=True)
def other(n: int) -> str:
    """Look a number up elsewhere."""
    return f"other {n}"


TURNS = [
    {"tool_calls": [{"name": "lookup", "arguments": {"n": 1}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"n": 2}}]},
    "Found both.",
]


# ── run_scripted, run_capture ────────────────────────────────────────────────────────


async def test_run_scripted_runs_an_agent_or_a_factory(tmp_path: Path) -> None:
    agent = Agent(_placeholder(), [lookup])
    result, events = await run_scripted(agent, TURNS, "find", workspace=tmp_path)
    assert result.completed and result.text == "Found both." and result.steps == 3
    assert [t.name for t in result.tool_trace] == ["lookup", "lookup"]
    assert events[0].type == "RUN_STARTED" and events[-1].type == "RUN_FINISHED"
    assert isinstance(agent.model, _Placeholder)  # the caller's agent keeps its model

    def factory(model: Model) -> Agent:
        return Agent(model, [lookup], name="built")

    again, _ = await run_scripted(factory, TURNS, "find", workspace=tmp_path)
    assert again.text == "Found both." and again.state.agent_name == "built"


async def test_a_capture_replays_to_the_same_stream_and_a_changed_agent_diverges(
    tmp_path: Path,
) -> None:
    captures = memory_capture()
    options = RunOptions(capture_sink=captures)
    recorded, events = await run_scripted(
        Agent(_placeholder(), [lookup]), TURNS, "find", options=options, run_id="cap-1"
    )
    path = tmp_path / "cap.json"
    path.write_bytes(captures["cap-1"].to_json())
    (tmp_path / "cap.jsonl").write_bytes(captures["cap-1"].to_jsonl())

    for source in (path, tmp_path / "cap.jsonl", captures["cap-1"]):
        replayed, replay_events = await run_capture(Agent(_placeholder(), [lookup]), source, "find")
        assert wire_events(replay_events) == wire_events(events)  # ids included
        assert replayed.state.messages == recorded.state.messages

    # The agent now has a different tool: the model is shown another tool set at once.
    changed = Agent(_placeholder(), [other])
    with pytest.raises(Divergence) as caught:
        await run_capture(changed, path, "find")
    assert caught.value.step == 1
    assert "the tools differ (added other; removed lookup)" in caught.value.reason

    # A reworded system prompt diverges too, unless prompt edits are allowed.
    reworded = Agent(_placeholder(), [lookup], system_prompt="Look things up.")
    with pytest.raises(Divergence, match="the system prompt differs"):
        await run_capture(reworded, path, "find")
    replayed, _ = await run_capture(reworded, path, "find", allow_prompt_edits=True)
    assert replayed.state.messages == recorded.state.messages


async def test_assert_valid_events_is_the_stream_check() -> None:
    assert assert_valid_events is assert_valid_stream
    with pytest.raises(AssertionError):
        assert_valid_events([RunStartedEvent(thread_id="t", run_id="r")])  # never finished
    with pytest.raises(AssertionError):
        assert_valid_events([TextMessageContentEvent(message_id="m", delta="x")])


# ── Sequencer ────────────────────────────────────────────────────────────────────────


async def test_the_sequencer_forces_an_order_whatever_the_start_order() -> None:
    seq = Sequencer()
    order: list[str] = []

    async def step(position: int, name: str) -> None:
        async with seq(position):
            order.append(f"{name} in")
            await asyncio.sleep(0)  # a yield inside: the next position still waits
            order.append(f"{name} out")

    async with asyncio.TaskGroup() as group:
        group.create_task(step(2, "c"))
        group.create_task(step(1, "b"))
        group.create_task(step(0, "a"))
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]


async def test_a_sequence_point_is_used_once() -> None:
    seq = Sequencer()
    async with seq(0):
        pass
    with pytest.raises(RuntimeError, match="already used"):
        async with seq(0):
            pass


async def test_a_cancelled_waiter_breaks_the_sequence_instead_of_hanging() -> None:
    seq = Sequencer()

    async def wait_for(position: int) -> None:
        async with seq(position):
            pass

    first = asyncio.create_task(wait_for(1))  # waits for 0, which never comes
    second = asyncio.create_task(wait_for(2))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    with pytest.raises(RuntimeError, match="broken"):
        await second
    with pytest.raises(RuntimeError, match="broken"):
        async with seq(3):
            pass


# ── the pytest plugin ────────────────────────────────────────────────────────────────

_ENTRY_POINT = any(ep.value == "tiller.pytest_plugin" for ep in entry_points(group="pytest11"))
#: Load the plugin in the inner pytest unless the installed entry point already does.
PLUGIN = () if _ENTRY_POINT else ("-p", "tiller.pytest_plugin")

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

SCRIPT = """
- tool_calls: [{name: lookup, arguments: {n: 7}}]
- The answer is entry 7.
"""

MODEL_TESTS = """
import pytest
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import tool


@tool(read_only=True)
def lookup(n: int) -> str:
    \"\"\"Look a number up.\"\"\"
    return f"entry {n}"


@pytest.mark.asyncio
@pytest.mark.tiller_model("scripted:script.yaml")
async def test_answers(tiller_model, monkeypatch):
    # The agent's own model does not matter: the fixture runs it on the live model or
    # on the replay.
    result, events = await tiller_model.run(Agent(ScriptedModel([]), [lookup]), "seven?")
    assert result.text == "The answer is entry 7."
    assert [t.name for t in result.tool_trace] == ["lookup"]
    print("MODE", "record" if tiller_model.recording else "replay", tiller_model.paths[0])
"""


def test_the_plugin_offers_the_record_option(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    result = pytester.runpytest(*PLUGIN, "--help")
    result.stdout.fnmatch_lines(["*--tiller-record*"])


def test_tiller_store_and_scripted_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest
        from tiller.loop import Agent
        from tiller.model import ScriptedModel
        from tiller.store import Bus


        @pytest.mark.asyncio
        async def test_store(tiller_store, tmp_path):
            assert isinstance(tiller_store, Bus)
            assert tiller_store.url.startswith("sqlite:///") and str(tmp_path) in tiller_store.url
            kv = await tiller_store.kv("b")
            await kv.put("k", b"v")
            assert (await kv.get("k")).value == b"v"


        @pytest.mark.asyncio
        async def test_scripted(scripted, tmp_path):
            agent = Agent(ScriptedModel([]), [])
            result, events = await scripted(agent, ["hello there"], "hi")
            assert result.text == "hello there"
            assert events[-1].type == "RUN_FINISHED"
            assert (tmp_path / "ws").is_dir()
        """
    )
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_tiller_model_records_once_then_replays_offline(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_answers=MODEL_TESTS)
    script = pytester.path / "script.yaml"
    script.write_text(SCRIPT)
    capture = pytester.path / "captures" / "test_answers.test_answers.json"

    # Without a capture and without record mode: a clear failure, no model call.
    missing = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider")
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*no capture to replay at*--tiller-record*"])
    assert not capture.exists()

    recorded = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--tiller-record", "-s")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*MODE record *test_answers.test_answers.json"])
    assert capture.exists()

    # The live model is gone: the replay must not need it.
    script.unlink()
    replayed = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-s")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*MODE replay *test_answers.test_answers.json"])


def test_a_tiller_model_test_that_changed_fails_with_the_divergence(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_answers=MODEL_TESTS)
    (pytester.path / "script.yaml").write_text(SCRIPT)
    pytester.runpytest(*PLUGIN, "--tiller-record").assert_outcomes(passed=1)
    pytester.makepyfile(test_answers=MODEL_TESTS.replace('f"entry {n}"', 'f"item {n}"'))
    changed = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*Divergence*step 2*"])


def test_record_mode_needs_a_live_model(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest
        from tiller.loop import Agent
        from tiller.model import ScriptedModel


        @pytest.mark.asyncio
        async def test_unnamed(tiller_model):
            await tiller_model.run(Agent(ScriptedModel([]), []), "hi")
        """
    )
    result = pytester.runpytest(*PLUGIN, "--tiller-record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*say which live model to record with*"])


class _Placeholder:
    """A model that must never be called: run_scripted and run_capture replace it."""

    provider = "placeholder"
    name = "placeholder"
    context_window: int | None = None

    async def stream(self, request: object) -> object:
        raise AssertionError("the placeholder model was called")

    async def aclose(self) -> None:
        pass


def _placeholder() -> Model:
    return _Placeholder()  # type: ignore[return-value]


NO_ASYNCIO_MODE_TESTS = """
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.store import Bus


async def test_store(tiller_store):  # no asyncio mark, no asyncio_mode
    assert isinstance(tiller_store, Bus)
    await (await tiller_store.kv("b")).put("k", b"v")


async def test_scripted(scripted):
    result, events = await scripted(Agent(ScriptedModel([]), []), ["hello"], "hi")
    assert result.text == "hello"
"""


def test_the_fixtures_work_without_asyncio_mode_auto(pytester: pytest.Pytester) -> None:
    """pytest-asyncio's default is strict mode, where an unmarked async test is not run:
    a test that asks for a tiller fixture is made an asyncio test by the plugin."""
    pytester.makeini(INI)  # asyncio_mode unset: strict
    pytester.makepyfile(test_plain=NO_ASYNCIO_MODE_TESTS)
    result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_assert_valid_agui_is_in_tiller_testing_and_takes_tiller_events() -> None:
    started = RunStartedEvent(thread_id="t", run_id="r")
    finished = RunFinishedEvent(thread_id="t", run_id="r")
    assert_valid_agui([started, finished], max_warnings=0)
    assert_valid_agui([started.to_wire(), finished.to_wire()], max_warnings=0)
    with pytest.raises(AssertionError):
        assert_valid_agui([started], max_warnings=0)  # never finished


def test_an_anyio_test_using_the_fixtures_runs(pytester: pytest.Pytester) -> None:
    """The plugin marks an async test that uses its fixtures `asyncio` (for pytest-asyncio's
    strict mode); a test marked `anyio` too still runs once and passes (a review feared the
    two plugins would clash: a guard, it passed before any change)."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_anyio_user="""
        import pytest
        from tiller.loop import Agent


        @pytest.fixture
        def anyio_backend():
            return "asyncio"


        @pytest.mark.anyio
        async def test_scripted_under_anyio(scripted):
            result, _ = await scripted(lambda model: Agent(model), ["hi"])
            assert result.text == "hi"
        """
    )
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=1)
