"""`Registry`: names, visibility by phase and restriction, and executing one call."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tiller import CancellationToken, Cancelled
from tiller.conversation import ToolCall, ToolResult
from tiller.phase import Phase
from tiller.tools import (
    BaseTool,
    Capability,
    DuplicateTool,
    ExecContext,
    Execution,
    Lookup,
    Outcome,
    Registry,
    ToolDefinitionError,
    ToolError,
    ToolOutput,
    tool,
)


@tool(read_only=True)
def look(path: str) -> str:
    """Look at something."""
    return f"saw {path}"


@tool
def change(path: str, text: str = "") -> str:
    """Change something."""
    return f"changed {path}"


@tool
def fail_on_purpose(why: str) -> str:
    """Fail with a message."""
    raise ToolError(f"cannot: {why}")


@tool
async def crash() -> str:
    """Crash."""
    raise TypeError("unsupported operand")


@tool
def report_error() -> ToolOutput:
    """Return an error output."""
    return ToolOutput("it went wrong", is_error=True, data={"code": 7})


@tool
def outside(ctx: ExecContext) -> str:
    """Touch a path outside the jail."""
    return str(ctx.jail.resolve("/etc/passwd"))


@pytest.fixture
def registry() -> Registry:
    return Registry([look, change, fail_on_purpose, crash, report_error, outside])


@pytest.fixture
def ctx(tmp_path: Path) -> ExecContext:
    return ExecContext.for_test(tmp_path)


def call(name: str, arguments: str = "{}", id: str = "c-1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


# ── names and visibility ─────────────────────────────────────────────────────────


def test_duplicate_names_are_refused() -> None:
    registry = Registry([look])
    with pytest.raises(DuplicateTool, match="'look' is already registered"):
        registry.add(look)
    assert registry.names() == ["look"]


def test_a_tool_that_declares_too_little_is_refused_at_registration() -> None:
    """What a tool may do is read from its declared members (law 12): an object written
    to the old protocol (no `risk_of`, `runs_on_client`, ...) crashed the loop when it
    read them; now registration says what is missing and how to get the defaults."""

    class OldStyle:
        name = "old"
        description = "a tool"
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012
        read_only = True
        denial_remedy = None

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            return ToolOutput("ran")

    with pytest.raises(ToolDefinitionError) as refused:
        Registry([OldStyle()])  # type: ignore[list-item]
    message = str(refused.value)
    assert message.startswith("'old' is not a tool: it lacks capabilities, plan_scratchpad,")
    assert "risk_of, paths_of, command_of, spec" in message
    assert "subclass BaseTool or use @tool" in message


@pytest.mark.parametrize("capabilities", [0, None, "external_send"])
def test_capabilities_that_are_no_flags_are_refused_at_registration(capabilities: Any) -> None:
    """A hand-written tool declaring `capabilities = 0` (or `None`) was registered; the
    interlock then read it as "sends nothing" and "approve always" crashed on it. Now
    registration refuses it, naming the value."""

    class Sloppy(BaseTool):
        name = "sloppy"
        description = "a tool"
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012

    sloppy = Sloppy()
    sloppy.capabilities = capabilities
    with pytest.raises(ToolDefinitionError) as refused:
        Registry([sloppy])
    assert str(refused.value).startswith(f"'sloppy' declares the capabilities {capabilities!r}")


def test_the_capability_views_read_the_flags() -> None:
    """`sends` and `brings_untrusted` are `EXTERNAL_SEND` and `UNTRUSTED_INPUT`, read
    from `capabilities`, on every base: they cannot disagree with it."""

    @tool(capabilities=Capability.EXTERNAL_SEND)
    def post(text: str) -> str:
        """Post it."""
        return text

    class Fetcher(BaseTool):
        name = "fetcher"
        description = "a tool"
        capabilities = Capability.UNTRUSTED_INPUT

    assert (post.sends, post.brings_untrusted) == (True, False)
    assert (Fetcher().sends, Fetcher().brings_untrusted) == (False, True)


def test_idempotent_is_declared_and_off_unless_declared() -> None:
    """`idempotent` (a crash-interrupted call may run again without a person) is a
    declared member like the others (law 12): off for `@tool` and `BaseTool` unless
    declared, and a hand-written tool without it is refused at registration."""

    @tool(idempotent=True)
    def book(entry: str) -> str:
        """Book it, once per call id."""
        return entry

    class Booker(BaseTool):
        name = "booker"
        description = "a tool"
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012
        idempotent = True

    class Plain(BaseTool):
        name = "plain"
        description = "a tool"
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012

    assert (book.idempotent, Booker().idempotent) == (True, True)
    assert (look.idempotent, change.idempotent, Plain().idempotent) == (False, False, False)

    class Undeclared:
        name = "undeclared"
        description = "a tool"
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012
        read_only = False
        capabilities = Capability.NONE
        plan_scratchpad = False
        runs_on_client = False
        sandboxed = False
        denial_remedy = None

        def risk_of(self, arguments: Any) -> None:
            return None

        def paths_of(self, arguments: Any) -> tuple[str, ...]:
            return ()

        def command_of(self, arguments: Any) -> None:
            return None

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            return ToolOutput("ran")

        def spec(self) -> Any:
            return None

    with pytest.raises(ToolDefinitionError, match="it lacks idempotent;"):
        Registry([Undeclared()])  # type: ignore[list-item]


def test_copy_is_independent(registry: Registry) -> None:
    extended = registry.copy()

    @tool
    def extra() -> str:
        """Extra."""
        return ""

    extended.add(extra)
    assert "extra" in extended and "extra" not in registry
    assert len(extended) == len(registry) + 1


def test_specs_for_execute_shows_all_in_registration_order(registry: Registry) -> None:
    names = [spec.name for spec in registry.specs_for(Phase.EXECUTE)]
    assert names == ["look", "change", "fail_on_purpose", "crash", "report_error", "outside"]


def test_plan_phase_shows_only_read_only_tools(registry: Registry) -> None:
    assert [spec.name for spec in registry.specs_for(Phase.PLAN)] == ["look"]


def test_withheld_tools_are_never_shown(registry: Registry) -> None:
    specs = registry.specs_for(Phase.EXECUTE, withheld={"change", "crash"})
    assert [s.name for s in specs] == ["look", "fail_on_purpose", "report_error", "outside"]
    assert registry.specs_for(Phase.PLAN, withheld={"look"}) == []
    assert registry.visible_names(Phase.PLAN) == ["look"]


def test_lookup_says_why_a_tool_is_unavailable(registry: Registry) -> None:
    assert registry.lookup("look", Phase.PLAN) == Lookup(look, None)
    assert registry.lookup("nope", Phase.EXECUTE) == Lookup(None, "unknown")
    assert registry.lookup("change", Phase.PLAN) == Lookup(None, "phase")
    assert registry.lookup("change", Phase.EXECUTE, {"change"}) == Lookup(None, "withheld")
    # Gate order: the phase refuses before the restriction does.
    assert registry.lookup("change", Phase.PLAN, {"change"}) == Lookup(None, "phase")
    assert registry.lookup("look", Phase.PLAN, {"look"}).refusal == "withheld"
    assert registry.available("change", Phase.EXECUTE) is change
    assert registry.available("change", Phase.PLAN) is None
    assert not registry.lookup("nope", Phase.EXECUTE).ok


# ── execution ────────────────────────────────────────────────────────────────────


async def test_a_successful_call(registry: Registry, ctx: ExecContext) -> None:
    done = await registry.execute(call("look", '{"path": "a.txt"}'), ctx)
    assert done == Execution(
        ToolResult(call_id="c-1", name="look", content="saw a.txt"), Outcome.OK
    )
    assert not done.is_error and not done.malformed_arguments


async def test_empty_arguments_mean_an_empty_object(registry: Registry, ctx: ExecContext) -> None:
    done = await registry.execute(call("change", ""), ctx)
    assert done.outcome is Outcome.INVALID_ARGUMENTS
    assert "path: Field required" in done.result.content


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"path": "a', "the arguments are not valid JSON: "),
        ("[1, 2]", "the arguments must be a JSON object, not an array."),
        ('"a.txt"', "the arguments must be a JSON object, not a string."),
    ],
)
async def test_malformed_json_is_an_error_result_and_counted(
    registry: Registry, ctx: ExecContext, arguments: str, expected: str
) -> None:
    done = await registry.execute(call("look", arguments), ctx)
    assert done.outcome is Outcome.MALFORMED_JSON
    assert done.malformed_arguments and done.is_error
    assert done.result.content.startswith(expected)
    assert "as one JSON object" in done.result.content


async def test_schema_mismatch_is_an_error_result_and_counted(
    registry: Registry, ctx: ExecContext
) -> None:
    done = await registry.execute(call("look", '{"path": 3, "mode": "x"}'), ctx)
    assert done.outcome is Outcome.INVALID_ARGUMENTS and done.malformed_arguments
    assert done.result == ToolResult(
        call_id="c-1",
        name="look",
        content="invalid arguments for tool 'look': path: Input should be a valid string "
        "(got 3); mode: is not a parameter of this tool",
        is_error=True,
    )


async def test_unknown_tool_is_an_error_result(registry: Registry, ctx: ExecContext) -> None:
    done = await registry.execute(call("nope"), ctx)
    assert done.outcome is Outcome.UNKNOWN_TOOL and done.is_error
    assert done.result.content.startswith("unknown tool 'nope'; the tools are: look, change")
    assert not done.malformed_arguments


async def test_tool_error_is_the_message(registry: Registry, ctx: ExecContext) -> None:
    done = await registry.execute(call("fail_on_purpose", '{"why": "locked"}'), ctx)
    assert done.outcome is Outcome.ERROR
    assert done.result.content == "cannot: locked" and done.is_error


async def test_an_unexpected_exception_is_reported_with_its_type(
    registry: Registry, ctx: ExecContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tiller.tools._registry"):
        done = await registry.execute(call("crash"), ctx)
    assert done.outcome is Outcome.CRASHED
    assert done.result.content == "tool crash failed: TypeError: unsupported operand"
    assert caplog.records[0].exc_info is not None


async def test_error_outputs_keep_their_data(registry: Registry, ctx: ExecContext) -> None:
    done = await registry.execute(call("report_error"), ctx)
    assert done.outcome is Outcome.ERROR and done.data == {"code": 7}
    assert done.result.content == "it went wrong"


async def test_a_path_outside_the_jail_is_an_error_result(
    registry: Registry, ctx: ExecContext
) -> None:
    done = await registry.execute(call("outside"), ctx)
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith("path '/etc/passwd' is outside the workspace")


async def test_a_tool_returning_garbage_is_a_crash(ctx: ExecContext) -> None:
    class Sloppy(BaseTool):
        name = "sloppy"
        description = "Returns a str instead of a ToolOutput."
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            return "oops"  # type: ignore[return-value]

    done = await Registry([Sloppy()]).execute(call("sloppy"), ctx)
    assert done.outcome is Outcome.CRASHED
    assert "returned a str, not a ToolOutput" in done.result.content


async def test_cancelling_the_token_interrupts_an_async_tool(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Wait."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    token = CancellationToken()
    ctx = ExecContext.for_test(tmp_path, token=token)
    async with asyncio.timeout(5):  # hang guard
        execution = asyncio.ensure_future(
            Registry([wait_forever]).execute(call("wait_forever"), ctx)
        )
        await started.wait()
        token.cancel("user pressed stop")
        with pytest.raises(Cancelled, match="user pressed stop"):
            await execution


async def test_a_cancelled_token_stops_the_call_before_it_starts(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    def side_effect() -> str:
        """Do something."""
        ran.append("ran")
        return ""

    token = CancellationToken()
    token.cancel()
    ctx = ExecContext.for_test(tmp_path, token=token)
    with pytest.raises(Cancelled):
        await Registry([side_effect]).execute(call("side_effect"), ctx)
    assert ran == []


async def test_outside_cancellation_propagates_unchanged(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Wait."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    ctx = ExecContext.for_test(tmp_path)
    async with asyncio.timeout(5):  # hang guard
        task = asyncio.ensure_future(Registry([wait_forever]).execute(call("wait_forever"), ctx))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# ── a context built only when a tool reads it, arguments parsed once ──────────────────


async def test_a_pending_context_is_built_only_for_a_tool_that_takes_one(
    ctx: ExecContext,
) -> None:
    from tiller.tools import PendingContext

    built: list[ExecContext] = []

    def build() -> ExecContext:
        built.append(ctx)
        return ctx

    @tool
    async def plain(n: int) -> int:
        """No context."""
        return n + 1

    @tool
    def takes(ctx: ExecContext) -> str:
        """Reads its context."""
        return ctx.call_id

    class Own(BaseTool):
        name = "own"
        description = "A tool of its own class: it gets a context, always."
        input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            return ToolOutput(type(ctx).__name__)

    registry = Registry([plain, takes, Own()])
    pending = PendingContext(ctx.token, build)
    done = await registry.execute(ToolCall(id="c1", name="plain", arguments='{"n": 1}'), pending)
    assert done.result.content == "2" and built == [] and pending.built is None
    done = await registry.execute(ToolCall(id="c2", name="takes"), pending)
    assert done.result.content == ctx.call_id and pending.built is ctx
    again = PendingContext(ctx.token, build)
    done = await registry.execute(ToolCall(id="c3", name="own"), again)
    assert done.result.content == "ExecContext" and len(built) == 2


async def test_arguments_parsed_by_the_caller_are_the_ones_run(ctx: ExecContext) -> None:
    """The loop's gate parses a call's arguments once; the registry runs the tool with
    that object instead of parsing the text again (and still parses when given none)."""

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    registry = Registry([echo])
    call = ToolCall(id="c1", name="echo", arguments='{"text": "from the text"}')
    done = await registry.execute(call, ctx, arguments={"text": "as parsed"})
    assert done.result.content == "as parsed"
    assert (await registry.execute(call, ctx)).result.content == "from the text"
    bad = ToolCall(id="c2", name="echo", arguments="[1]")
    assert (await registry.execute(bad, ctx)).outcome is Outcome.MALFORMED_JSON
