"""MCP servers as tool sources, against a real MCP server over stdio
(`mcp_server_fixture.py`, written with the official SDK), run through a `Registry` the way
the loop runs tools.

Every server started here carries a unique `--tag=...` argument, so a test can look
through /proc for any process still running it: "no orphan" is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiller import CancellationToken, Cancelled, UsageError
from tiller.conversation import ToolCall
from tiller.events import CustomEvent, Event
from tiller.phase import Phase
from tiller.policy import PolicyEngine
from tiller.tools import (
    Capability,
    ExecContext,
    Execution,
    Outcome,
    Registry,
    RiskClass,
    SafetyMode,
    Tool,
)
from tiller.tools.mcp import (
    McpClient,
    McpClientState,
    McpServerConfig,
    McpServers,
    McpStartError,
    McpTool,
    SkippedTool,
    mcp_tool_name,
    open_mcp_tools,
)

FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
# The fixture's 1x1 PNG, as it sends it.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)
#: A hang guard, not a timing assertion: a server starts in about a second.
HANG_GUARD = 60


def tagged_processes(tag: str, *, servers_only: bool = False) -> list[int]:
    """The pids of live processes whose command line holds `tag` as an argument; with
    `servers_only`, not the line-limit relays each server runs behind."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        relay = any(arg.endswith(b"_line_limit.py") for arg in argv)
        if tag.encode() in argv and not (servers_only and relay):
            found.append(int(entry.name))
    return found


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


MakeConfig = Callable[..., McpServerConfig]


@pytest.fixture
def tag() -> str:
    return f"--tag={uuid.uuid4().hex}"


@pytest.fixture
def make_config(tag: str) -> MakeConfig:
    def make(name: str = "fx", *extra: str, **options: Any) -> McpServerConfig:
        return McpServerConfig(name, sys.executable, (str(FIXTURE), tag, *extra), **options)

    return make


@pytest.fixture
async def client(make_config: MakeConfig, tag: str) -> AsyncIterator[McpClient]:
    async with asyncio.timeout(HANG_GUARD):
        mcp = McpClient(make_config("fx"))
        await mcp.open()
    try:
        yield mcp
    finally:
        async with asyncio.timeout(HANG_GUARD):
            await mcp.aclose()
    assert tagged_processes(tag) == []


class Runner:
    """Calls tools through a `Registry`, as the loop does, recording the events."""

    def __init__(self, tools: list[McpTool] | tuple[McpTool, ...], workdir: Path) -> None:
        self.registry = Registry(tools)
        self.workdir = workdir
        self.events: list[Event] = []
        self.calls = 0

    def context(self, token: CancellationToken | None = None) -> ExecContext:
        self.calls += 1
        return ExecContext.for_test(
            self.workdir, call_id=f"call-{self.calls}", token=token, emit=self.events.append
        )

    async def run(
        self, name: str, token: CancellationToken | None = None, **args: Any
    ) -> Execution:
        call = ToolCall(
            id=f"call-{self.calls + 1}", name=name, arguments=orjson.dumps(args).decode()
        )
        return await self.registry.execute(call, self.context(token))

    def progress(self, kind: str) -> list[dict[str, Any]]:
        return [
            e.value
            for e in self.events
            if isinstance(e, CustomEvent)
            and e.name == "tiller.progress"
            and e.value["kind"] == kind
        ]


async def server_pid(runner: Runner, name: str = "fx__pid") -> int:
    execution = await runner.run(name)
    assert execution.outcome is Outcome.OK
    pid = execution.data["result"]
    assert isinstance(pid, int)
    return pid


def says(path: Path, text: str) -> bool:
    return path.exists() and path.read_text() == text


async def wait_for_text(path: Path, text: str) -> None:
    """Poll a marker file the fixture writes (under the test's hang guard)."""
    while not says(path, text):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


# ── a real server ───────────────────────────────────────────────────────────────────


async def test_tools_are_listed_named_and_never_trusted_to_be_read_only(
    make_config: MakeConfig, tag: str
) -> None:
    async with asyncio.timeout(HANG_GUARD), McpClient(make_config("fx", "--dotted-names")) as mcp:
        assert mcp.state is McpClientState.OPENED
        assert mcp.server_name == "fixture"
        names = [t.name for t in mcp.tools]
        assert names == sorted(
            [
                "fx__echo",
                "fx__fail",
                "fx__lookup",
                "fx__picture",
                "fx__pid",
                "fx__protocol_error",
                "fx__received",
                "fx__slow",
                "fx__stats",
                "fx__a_b",
                mcp_tool_name("fx", "a.b"),
                mcp_tool_name("fx", "x" * 100),
            ]
        )
        assert mcp.skipped == ()
        by_name = {t.name: t for t in mcp.tools}
        lookup = by_name["fx__lookup"]
        assert lookup.read_only_hint is True
        assert "read-only; tiller does not rely on that" in lookup.description
        for each in mcp.tools:
            assert isinstance(each, Tool)
            assert each.read_only is False
            assert each.risk is RiskClass.EXTERNAL_ACCESS
            assert each.risk_of({}) is RiskClass.EXTERNAL_ACCESS
            assert each.capabilities == Capability.UNTRUSTED_INPUT | Capability.EXTERNAL_SEND
            assert each.denial_remedy is not None
            assert each.spec().name == each.name
            assert each.input_schema["type"] == "object"
        assert by_name["fx__echo"].input_schema["required"] == ["text"]
        assert by_name[mcp_tool_name("fx", "a.b")].remote_name == "a.b"
        # The hint buys nothing: in Plan, where only read-only tools show, none does.
        registry = Registry(mcp.tools)
        assert registry.specs_for(Phase.PLAN) == []
        assert registry.lookup("fx__lookup", Phase.PLAN).refusal == "phase"
        # Renamed tools still reach the server under their own name.
        runner = Runner(mcp.tools, Path.cwd())
        dotted = await runner.run(mcp_tool_name("fx", "a.b"))
        assert (dotted.outcome, dotted.result.content) == (Outcome.OK, "dotted")
        longest = await runner.run(mcp_tool_name("fx", "x" * 100))
        assert longest.result.content == "long"
    assert tagged_processes(tag) == []


async def test_a_hostile_servers_read_only_claim_buys_nothing_unless_the_user_trusts_it(
    make_config: MakeConfig, tag: str
) -> None:
    """The engine took every `server__tool` for external access by its `__`, and the
    tool's own `read_only` was ignored; now the tool declares it, from the server's
    annotations only when the server's config says `trust_annotations = true`. By
    default `lookup`'s `readOnlyHint` leaves it asked about in every mode."""
    engine = PolicyEngine()
    async with asyncio.timeout(HANG_GUARD), McpClient(make_config("fx")) as mcp:
        lookup = next(t for t in mcp.tools if t.name == "fx__lookup")
        assert lookup.read_only is False
        assert engine.decide(lookup.name, {"key": "k"}, lookup, SafetyMode.FULL_ACCESS).kind == (
            "ask"
        )
    trusted = make_config("fx", trust_annotations=True)
    async with asyncio.timeout(HANG_GUARD), McpClient(trusted) as mcp:
        by_name = {t.name: t for t in mcp.tools}
        lookup, echo = by_name["fx__lookup"], by_name["fx__echo"]
        assert (lookup.read_only, lookup.risk) == (True, RiskClass.READ_ONLY)
        assert "tiller does not rely on that" not in lookup.description
        # Trusted or not, its output comes from outside and its arguments leave.
        assert lookup.capabilities == Capability.UNTRUSTED_INPUT | Capability.EXTERNAL_SEND
        decision = engine.decide(lookup.name, {"key": "k"}, lookup, SafetyMode.ASK)
        assert (decision.kind, decision.risk) == ("allow", RiskClass.READ_ONLY)
        # A tool without hints stays external access: trust adds no claim it never made.
        assert echo.risk is RiskClass.EXTERNAL_ACCESS
        assert engine.decide(echo.name, {"text": "x"}, echo, SafetyMode.FULL_ACCESS).kind == "ask"
        plan = [spec.name for spec in Registry(mcp.tools).specs_for(Phase.PLAN)]
        assert plan == ["fx__lookup"]
        runner = Runner(mcp.tools, Path.cwd())
        answered = await runner.run("fx__lookup", key="k")
        assert (answered.outcome, answered.result.content) == (Outcome.OK, "value of k")
    assert tagged_processes(tag) == []


async def test_a_call_round_trip_and_an_error_result(client: McpClient, tmp_path: Path) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD):
        echo = await runner.run("fx__echo", text="hi", times=3)
        failed = await runner.run("fx__fail", reason="no disk")
    assert echo.outcome is Outcome.OK
    assert echo.result.content == "hi hi hi"
    assert echo.data == {"result": "hi hi hi"}
    assert failed.outcome is Outcome.ERROR
    assert failed.result.is_error
    assert "failed on purpose: no disk" in failed.result.content


async def test_a_parallel_batch_shares_one_session(client: McpClient, tmp_path: Path) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD), asyncio.TaskGroup() as batch:
        calls = [batch.create_task(runner.run("fx__echo", text=f"call {n}")) for n in range(8)]
    assert [c.result().result.content for c in calls] == [f"call {n}" for n in range(8)]


async def test_a_protocol_error_is_a_tool_error(client: McpClient, tmp_path: Path) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD):
        refused = await runner.run("fx__protocol_error")
        after = await runner.run("fx__echo", text="ok")
    assert refused.outcome is Outcome.ERROR
    assert refused.result.content == (
        "the MCP server 'fx' refused fx__protocol_error: refused by the fixture's middleware "
        "(error -32602)"
    )
    assert after.result.content == "ok"


async def test_a_tool_with_a_broken_schema_is_skipped_not_offered(
    make_config: MakeConfig,
) -> None:
    async with asyncio.timeout(HANG_GUARD), McpClient(make_config("fx", "--bad-schema")) as mcp:
        assert "fx__bad_schema" not in [t.name for t in mcp.tools]
        assert "fx__echo" in [t.name for t in mcp.tools]
    assert mcp.skipped == (
        SkippedTool(
            "bad_schema",
            "its input schema is not valid JSON Schema: 'no-such-type' is not valid under any "
            "of the given schemas",
        ),
    )


async def test_structured_content_is_shown_as_json_only_without_text(
    client: McpClient, tmp_path: Path
) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD):
        bare = await runner.run("fx__stats", text="a b c")
        with_text = await runner.run("fx__stats", text="a b c", with_text=True)
    data = {"count": 3, "words": ["a", "b", "c"]}
    assert bare.outcome is Outcome.OK
    assert orjson.loads(bare.result.content) == data
    assert bare.data == data
    assert with_text.result.content == "3 words"
    assert with_text.data == data


async def test_images_and_binary_resources_are_described_not_dumped(
    client: McpClient, tmp_path: Path
) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD):
        picture = await runner.run("fx__picture")
    assert picture.outcome is Outcome.OK
    assert picture.result.content == (
        "a 1x1 pixel\n"
        f"[an image/png image of {len(PNG)} bytes from fx__picture; it is shown to the user, "
        "not to you]\n"
        "[binary resource <file:///pixel.bin> (application/octet-stream), 4 bytes; not shown]"
    )
    assert base64.b64encode(PNG).decode() not in picture.result.content
    artifacts = runner.progress("artifact")
    assert [(a["mime"], base64.b64decode(a["data"])) for a in artifacts] == [("image/png", PNG)]


async def test_invalid_arguments_are_refused_before_sending(
    client: McpClient, tmp_path: Path
) -> None:
    runner = Runner(client.tools, tmp_path)
    async with asyncio.timeout(HANG_GUARD):
        wrong_type = await runner.run("fx__echo", text=3)
        missing = await runner.run("fx__echo", times=2)
        received = await runner.run("fx__received")
    assert wrong_type.outcome is Outcome.INVALID_ARGUMENTS
    assert wrong_type.result.content == (
        "invalid arguments for tool 'fx__echo': text: 3 is not of type 'string'"
    )
    assert missing.outcome is Outcome.INVALID_ARGUMENTS
    assert "(the arguments): 'text' is a required property" in missing.result.content
    assert received.data == {"result": ["received"]}


async def test_cancelling_a_call_stops_it_on_the_server_and_keeps_the_session(
    client: McpClient, tmp_path: Path
) -> None:
    runner = Runner(client.tools, tmp_path)
    marker = tmp_path / "marker"
    token = CancellationToken()
    async with asyncio.timeout(HANG_GUARD):
        call = asyncio.create_task(runner.run("fx__slow", token, marker=str(marker)))
        await wait_for_text(marker, "started")
        while not runner.progress("status"):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        token.cancel()
        with pytest.raises(Cancelled):
            await call
        # The server was told (notifications/cancelled) and stopped the handler.
        await wait_for_text(marker, "cancelled")
        after = await runner.run("fx__echo", text="still here")
    assert runner.progress("status")[0] == {
        "toolCallId": "call-1",
        "kind": "status",
        "message": "warming up",
        "fraction": 0.25,
    }
    assert after.result.content == "still here"
    assert client.alive


async def test_a_call_past_the_timeout_is_cancelled_and_reported(
    make_config: MakeConfig, tmp_path: Path, tag: str
) -> None:
    marker = tmp_path / "marker"
    async with asyncio.timeout(HANG_GUARD), McpClient(make_config("fx", timeout=0.2)) as mcp:
        runner = Runner(mcp.tools, tmp_path)
        slow = await runner.run("fx__slow", marker=str(marker))
        await wait_for_text(marker, "cancelled")
        after = await runner.run("fx__echo", text="next")
    assert slow.outcome is Outcome.ERROR
    assert slow.result.content.startswith(
        "the MCP server 'fx' did not answer fx__slow within 0.2 s, so tiller cancelled the call"
    )
    assert after.result.content == "next"
    assert tagged_processes(tag) == []


async def test_a_server_killed_mid_call_gives_a_clear_tool_error(
    client: McpClient, tmp_path: Path
) -> None:
    runner = Runner(client.tools, tmp_path)
    marker = tmp_path / "marker"
    async with asyncio.timeout(HANG_GUARD):
        pid = await server_pid(runner)
        call = asyncio.create_task(runner.run("fx__slow", marker=str(marker)))
        await wait_for_text(marker, "started")
        os.kill(pid, signal.SIGKILL)
        during = await call
        later = await runner.run("fx__echo", text="anyone?")
    assert during.outcome is Outcome.ERROR
    assert during.result.content.startswith(
        "the MCP server 'fx' is not running any more (it exited or closed its connection), "
        "so fx__slow did not run or did not finish."
    )
    assert later.outcome is Outcome.ERROR
    assert "so fx__echo did not run" in later.result.content
    assert not client.alive


async def test_closing_stops_the_server_and_later_calls_fail_clearly(
    make_config: MakeConfig, tmp_path: Path, tag: str
) -> None:
    marker = tmp_path / "marker"
    async with asyncio.timeout(HANG_GUARD):
        mcp = McpClient(make_config("fx"))
        await mcp.open()
        runner = Runner(mcp.tools, tmp_path)
        pid = await server_pid(runner)
        assert tagged_processes(tag, servers_only=True) == [pid]
        assert len(tagged_processes(tag)) == 2  # and its line-limit relay
        in_flight = asyncio.create_task(runner.run("fx__slow", marker=str(marker)))
        await wait_for_text(marker, "started")
        await mcp.aclose()
        interrupted = await in_flight
        after = await runner.run("fx__echo", text="hello?")
        await mcp.aclose()  # idempotent
    assert mcp.state is McpClientState.CLOSED
    assert not process_exists(pid)
    assert tagged_processes(tag) == []
    assert interrupted.outcome is Outcome.ERROR
    assert interrupted.result.content == (
        "the MCP server 'fx' was shut down (tiller is closing its MCP servers) before "
        "fx__slow finished"
    )
    assert after.outcome is Outcome.ERROR
    assert after.result.content.startswith("the MCP server 'fx' is closed")


async def test_a_cancelled_closer_still_leaves_no_process(
    make_config: MakeConfig, tag: str
) -> None:
    async with asyncio.timeout(HANG_GUARD):
        mcp = McpClient(make_config("fx"))
        await mcp.open()
        closing = asyncio.create_task(mcp.aclose())
        await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
    assert mcp.state is McpClientState.CLOSED
    assert tagged_processes(tag) == []


async def test_a_cancelled_opener_leaves_no_process(make_config: MakeConfig, tag: str) -> None:
    mcp = McpClient(make_config("fx"))
    async with asyncio.timeout(HANG_GUARD):
        opening = asyncio.create_task(mcp.open())
        while not tagged_processes(tag):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
    assert mcp.state is McpClientState.CLOSED
    # Cancelled while the relay was still starting, the server it spawned learns of it
    # from its stdin's end of file, a moment after the relay is gone (seen under load):
    # it must be gone soon, not necessarily at once. A server that stayed would fail.
    deadline = asyncio.get_running_loop().time() + 10
    while tagged_processes(tag) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert tagged_processes(tag) == []


async def test_a_client_opens_once(client: McpClient) -> None:
    with pytest.raises(UsageError, match="already opened"):
        await client.open()


async def test_a_server_that_fails_to_start_reports_its_stderr(
    make_config: MakeConfig, tag: str
) -> None:
    mcp = McpClient(make_config("broken", "--fail-on-start"))
    async with asyncio.timeout(HANG_GUARD):
        with pytest.raises(McpStartError) as raised:
            await mcp.open()
    error = raised.value
    assert error.server == "broken"
    assert error.problem == "it exited (or closed its stdout) before completing the MCP handshake"
    assert error.stderr == "fixture: refusing to start (--fail-on-start)"
    assert str(error).endswith(
        "its last stderr lines:\nfixture: refusing to start (--fail-on-start)"
    )
    assert mcp.state is McpClientState.CLOSED
    assert tagged_processes(tag) == []


async def test_a_missing_command_or_directory_is_refused_before_spawning(
    tmp_path: Path,
) -> None:
    with pytest.raises(McpStartError, match="the command 'no-such-mcp-server' was not found"):
        await McpClient(McpServerConfig("x", "no-such-mcp-server")).open()
    with pytest.raises(McpStartError, match=r"working directory .* does not exist"):
        await McpClient(McpServerConfig("x", sys.executable, cwd=tmp_path / "nope")).open()


async def test_a_server_that_never_answers_times_out_at_startup(tmp_path: Path) -> None:
    # Reads everything, answers nothing, and exits when its stdin closes.
    mute = ("-c", "import sys; sys.stdin.read()")
    config = McpServerConfig("mute", sys.executable, mute, startup_timeout=0.3)
    async with asyncio.timeout(HANG_GUARD):
        with pytest.raises(McpStartError, match=r"did not finish starting .* within 0\.3 s"):
            await McpClient(config).open()


async def test_two_servers_with_the_same_tools_get_distinct_names(
    make_config: MakeConfig, tmp_path: Path, tag: str
) -> None:
    async with asyncio.timeout(HANG_GUARD):
        async with open_mcp_tools([make_config("one"), make_config("two")]) as tools:
            runner = Runner(tools, tmp_path)  # a Registry refuses duplicate names
            assert "one__echo" in runner.registry and "two__echo" in runner.registry
            assert len(tools) == 18
            first = await server_pid(runner, "one__pid")
            second = await server_pid(runner, "two__pid")
            assert first != second
            assert sorted(tagged_processes(tag, servers_only=True)) == sorted([first, second])
            echoed = await runner.run("two__echo", text="from two")
            assert echoed.result.content == "from two"
    assert tagged_processes(tag) == []


async def test_if_one_server_fails_none_is_left_running(make_config: MakeConfig, tag: str) -> None:
    configs = McpServers((make_config("good"), make_config("bad", "--fail-on-start")))
    async with asyncio.timeout(HANG_GUARD):
        with pytest.raises(McpStartError) as raised:
            async with open_mcp_tools(configs):
                pytest.fail("the block must not run")
    assert raised.value.server == "bad"
    assert tagged_processes(tag) == []


async def test_a_line_without_end_stops_the_server_not_tillers_memory(tmp_path: Path) -> None:
    """The SDK buffers a stdout line whole: a server writing more than the message limit
    without a newline is stopped by the line-limit relay, and the error says why."""
    from tiller.tools.mcp._client import MAX_MESSAGE_BYTES

    flood = (
        "-c",
        "import os, sys, time\n"
        f"left = {MAX_MESSAGE_BYTES} + (1 << 20)\n"
        "while left > 0:\n"
        "    left -= os.write(1, b'x' * min(left, 1 << 20))\n"
        "time.sleep(60)\n",
    )
    config = McpServerConfig("flood", sys.executable, flood, startup_timeout=30)
    async with asyncio.timeout(HANG_GUARD):
        with pytest.raises(McpStartError) as raised:
            await McpClient(config).open()
    assert f"a line longer than {MAX_MESSAGE_BYTES} bytes" in str(raised.value)


def test_the_relay_counts_each_line_from_its_own_start(tmp_path: Path) -> None:
    """A 95-byte line, then a 12-byte one split across two writes, under a 100-byte limit:
    the relay once kept the ended line's length and stopped a server that behaved."""
    import subprocess

    from tiller.tools.mcp._client import _LINE_LIMIT

    server = (
        "import os, time\n"
        "os.write(1, b'a' * 95 + b'\\n' + b'b' * 6)\n"
        "time.sleep(0.2)\n"
        "os.write(1, b'b' * 6 + b'\\n')\n"
    )
    relayed = subprocess.run(
        [sys.executable, "-I", _LINE_LIMIT, "100", "--", sys.executable, "-c", server],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert relayed.returncode == 0, relayed.stderr
    assert relayed.stdout == b"a" * 95 + b"\n" + b"b" * 12 + b"\n"
    # (Split across writes, as a long line always is: lines within one 64 KiB chunk are
    # shorter than the real limit.)
    too_long = (
        "import os, time\n"
        "os.write(1, b'c' * 50 + b'\\n' + b'd' * 60)\n"
        "time.sleep(0.2)\n"
        "os.write(1, b'd' * 41 + b'\\n')\n"
    )
    stopped = subprocess.run(
        [sys.executable, "-I", _LINE_LIMIT, "100", "--", sys.executable, "-c", too_long],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert stopped.returncode == 1
    assert b"a line longer than 100 bytes" in stopped.stderr
