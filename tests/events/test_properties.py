"""Property tests for the event pipeline (DESIGN.md §4 laws 1, 2, 8, 10; §9).

Random programs of emitter calls, with exceptions and cancellation at random points, run
through the real driver (`run_agent`). For every program:

- the stream passes `assert_valid_stream` (ag-ui-validate with zero warnings, and every
  event fits the ag-ui-protocol models), starts with RUN_STARTED and has exactly one
  terminal event, last;
- if the token fired before the end and the run finished, the outcome is `cancelled`;
  RUN_ERROR{CANCELLED} only comes with a tool call whose streamed args are not JSON;
- every id the runtime allocated is `{runId}-msg-N` / `-call-N` / `-sub-N` (law 10);
- the client's state (last snapshot plus deltas) is the state last published;
- without worker threads, the same program gives the same stream twice (law 10).

Separately, for random raw event sequences, whatever the `Verifier` accepts up to a
terminal event, ag-ui-validate accepts with zero errors and zero warnings.

The src bugs these properties found each have a minimal reproduction below, marked
`xfail(strict=True)`: when one is fixed its test fails as XPASS, so drop the marker (and
the matching exemption in `check_played`, which the strict
`test_random_programs_keep_the_cancellation_rules` does without).

A program is a tree of small frozen records (`Say`, `Open`, `Send`, `Close`, `With`,
`Concurrent`, `Thread`, ...), so a failing example prints as a readable script. The
interpreter (`Runner`) plays it against an `AgUiContext` the way a real agent would: it
opens handles explicitly and as `with` blocks, streams into any handle it ever opened
(closed ones too), raises at random points, catches what the API refuses by design where
a real agent would (`guard`), fans out into tasks, and emits from worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson
import pytest
from ag_ui_validate.pytest_plugin import validate_agui
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st

from tiller import CancellationToken, Cancelled, ProtocolViolation, TillerError
from tiller.events import (
    AgUiContext,
    CustomEvent,
    Event,
    EventSink,
    Interrupt,
    MessageHandle,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningHandle,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepHandle,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentHandle,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallHandle,
    ToolCallResultEvent,
    ToolCallStartEvent,
    Verifier,
    run_agent,
)
from tiller.testing import assert_valid_stream, wire_events

RUN_ID = "r1"
THREAD_ID = "t1"
TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})

#: Hang guard only: a healthy example takes milliseconds.
HANG_GUARD_S = 10

PROGRAM_SETTINGS = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RAW_SETTINGS = settings(
    max_examples=500,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class Boom(Exception):
    """What a program raises on purpose (a model stream dying, a tool crashing)."""


# ── programs ─────────────────────────────────────────────────────────────────────
#
# Every op carries `guard`: whether the program catches what the API refuses by design
# (`TillerError`: `HandleClosed`, `ProtocolViolation`, `Cancelled`, ...) around it, as a
# real agent might, or lets it propagate to the driver.

KINDS = ("message", "reasoning", "tool_call", "step", "subagent")
#: Text and argument fragments: valid JSON, pieces of JSON, and things JSON never becomes.
FRAGMENTS = ("", "hi", "é", '{"a": ', "1", "}", "{}", '"x"', "[1, 2]", "{", "nul", " ")
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["", "v", "ü"]),
    st.lists(st.integers(0, 2), max_size=3),
    st.dictionaries(st.sampled_from(["k", "l"]), st.integers(0, 2), max_size=2),
)
STATE_KEYS = ("a", "b", "items")
#: The run's input; its state is large enough that a small change goes out as a delta.
RUN_INPUT = {
    "threadId": THREAD_ID,
    "runId": RUN_ID,
    "messages": [],
    "state": {"notes": "a state worth diffing " * 8, "items": []},
}


@dataclass(frozen=True)
class Say:
    text: str
    guard: bool


@dataclass(frozen=True)
class Think:
    text: str
    guard: bool


@dataclass(frozen=True)
class Open:
    """Open a handle explicitly. `own_id`: the program picks the id (0 or 1, so two opens
    can collide); `parent`: a recent handle to name as parent message / tool call."""

    kind: str
    name: str
    own_id: int | None
    parent: int | None
    guard: bool


@dataclass(frozen=True)
class Send:
    """Stream into the `slot`-th most recent handle (closed ones included): a text or
    reasoning delta, or a tool-call argument fragment; `alt` picks the other verb
    (`encrypted_value`, `args_json`)."""

    slot: int
    text: str
    alt: bool
    guard: bool


@dataclass(frozen=True)
class Close:
    """Close the `slot`-th most recent handle with its `verb`-th closing verb (double
    closes included)."""

    slot: int
    verb: int
    guard: bool


@dataclass(frozen=True)
class Stream:
    """What a model stream does: open a message, reasoning block or tool call, stream
    `pieces` into it (yielding to the loop between them if `awaits`), then close it with
    its `verb`-th closing verb, or leave it open (`verb` None)."""

    open: Open
    pieces: tuple[str, ...]
    awaits: bool
    verb: int | None
    guard: bool


@dataclass(frozen=True)
class With:
    """A handle as a `with` block around a nested program that may raise `Boom` after
    `raise_at` of its ops; `catch` catches what escapes the block."""

    open: Open
    body: tuple[Any, ...]
    raise_at: int | None
    catch: bool
    use_async: bool


@dataclass(frozen=True)
class State:
    action: str  # set | delete | append | patch | replace | update
    key: str
    value: Any
    guard: bool


@dataclass(frozen=True)
class Custom:
    name: str
    value: Any
    raw: bool
    guard: bool


@dataclass(frozen=True)
class Invalid:
    """A raw event or call the verifier refuses (`ProtocolViolation`)."""

    which: str
    guard: bool


@dataclass(frozen=True)
class Cancel:
    pass


@dataclass(frozen=True)
class Sleep:
    pass


@dataclass(frozen=True)
class Concurrent:
    """Run sub-programs in tasks: `gather` (all finish, then the first error is re-raised)
    or a `TaskGroup`."""

    bodies: tuple[tuple[Any, ...], ...]
    mode: str
    guard: bool


@dataclass(frozen=True)
class Thread:
    """Run a sub-program in a worker thread (`asyncio.to_thread`); ops that need the event
    loop (state, sleeps, tasks, threads) are skipped there."""

    body: tuple[Any, ...]
    guard: bool


@dataclass(frozen=True)
class Program:
    ops: tuple[Any, ...]
    form: str  # "function" | "object"
    outcome: str  # none | success | interrupt | cancelled
    consumer_cancel_at: int | None  # the reader cancels the run after this many events

    @property
    def uses_threads(self) -> bool:
        return _any_op(self.ops, Thread)


def _any_op(ops: tuple[Any, ...], kind: type) -> bool:
    for op in ops:
        if isinstance(op, kind):
            return True
        if isinstance(op, With) and _any_op(op.body, kind):
            return True
        if isinstance(op, Concurrent) and any(_any_op(b, kind) for b in op.bodies):
            return True
        if isinstance(op, Thread) and _any_op(op.body, kind):
            return True
    return False


def made(cls: type, *parts: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`st.builds(cls, *parts)`, but printed as the plain dataclass repr: hypothesis's
    pretty-printer of nested `builds` calls takes seconds on one large failing program."""
    return st.tuples(*parts).map(lambda args: cls(*args))


guards = st.booleans()
texts = st.sampled_from(FRAGMENTS)
slots = st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4])  # mostly the handle just opened


def open_ops(kinds: tuple[str, ...] = KINDS) -> st.SearchStrategy[Open]:
    return made(
        Open,
        st.sampled_from(kinds),
        st.sampled_from(["plan", "act", "search"]),
        st.none() | st.none() | st.integers(0, 1),  # own_id
        st.none() | slots,  # parent
        guards,
    )


def _split(doc: str, cuts: list[int], ending: str) -> tuple[str, ...]:
    """`doc` in pieces at `cuts`; "truncated" drops the last piece, "junk" adds one."""
    points = sorted({0, len(doc), *(c % len(doc) for c in cuts)})
    pieces = [doc[i:j] for i, j in itertools.pairwise(points)]
    if ending == "truncated" and len(pieces) > 1:
        pieces.pop()
    elif ending == "junk":
        pieces.append("}")
    return tuple(pieces)


#: Tool-call arguments as a model streams them: mostly a JSON document in pieces,
#: sometimes cut short or followed by junk (never JSON, so TOOL_CALL_END is refused).
args_streams = st.tuples(
    st.sampled_from(['{"q": "oslo", "n": [1, 2]}', "{}", '{"a": {"b": null}}', "[]"]),
    st.lists(st.integers(0, 30), max_size=4),
    st.sampled_from(["whole", "whole", "whole", "truncated", "junk"]),
).map(lambda t: _split(*t))


def stream_ops() -> st.SearchStrategy[Stream]:
    verbs = st.none() | st.integers(0, 4) | st.integers(0, 4)
    return st.one_of(
        made(
            Stream,
            open_ops(("message", "reasoning")),
            st.lists(texts, min_size=1, max_size=6).map(tuple),
            st.booleans(),
            verbs,
            guards,
        ),
        made(
            Stream,
            open_ops(("tool_call",)),
            args_streams,
            st.booleans(),
            verbs,
            guards,
        ),
    )


def leaf_ops() -> st.SearchStrategy[Any]:
    return st.one_of(
        stream_ops(),
        stream_ops(),
        made(Say, texts, guards),
        made(Think, texts, guards),
        open_ops(),
        open_ops(),
        made(Send, slots, texts, st.booleans(), guards),
        made(Send, slots, texts, st.booleans(), guards),
        made(Send, slots, texts, st.booleans(), guards),
        made(Close, slots, st.integers(0, 4), guards),
        made(Close, slots, st.integers(0, 4), guards),
        made(
            State,
            st.sampled_from(["set", "delete", "append", "patch", "replace", "update"]),
            st.sampled_from(STATE_KEYS),
            JSON_VALUES,
            guards,
        ),
        made(
            State,
            st.sampled_from(["set", "append", "patch", "update"]),
            st.sampled_from(STATE_KEYS),
            JSON_VALUES,
            guards,
        ),
        made(
            Custom,
            st.sampled_from(["tiller.test.note", "app:x"]),
            JSON_VALUES,
            st.booleans(),
            guards,
        ),
        made(
            Invalid,
            st.sampled_from(
                [
                    "content",
                    "end_call",
                    "finish_step",
                    "finish_subagent",
                    "unknown_result",
                    "reasoning",
                ]
            ),
            guards,
        ),
        st.sampled_from([Sleep(), Sleep(), Cancel()]),
        st.sampled_from([Sleep(), Sleep(), Cancel()]),
    )


def op_trees(*, threads: bool) -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        bodies = st.lists(children, max_size=5).map(tuple)
        return st.one_of(
            made(
                With,
                open_ops(),
                bodies,
                st.none() | st.none() | st.integers(0, 5),
                st.booleans(),
                st.booleans(),
            ),
            made(
                With,
                open_ops(),
                bodies,
                st.none() | st.integers(0, 5),
                st.booleans(),
                st.booleans(),
            ),
            made(
                Concurrent,
                st.lists(bodies, min_size=2, max_size=3).map(tuple),
                st.sampled_from(["gather", "taskgroup"]),
                guards,
            ),
            *([made(Thread, bodies, guards)] if threads else []),
        )

    return st.recursive(leaf_ops(), extend, max_leaves=24)


def programs() -> st.SearchStrategy[Program]:
    """Programs; one in three may use worker threads (which are not deterministic)."""

    def of(threads: bool) -> st.SearchStrategy[Program]:
        return made(
            Program,
            st.lists(op_trees(threads=threads), max_size=10).map(tuple),
            st.sampled_from(["function", "object"]),
            st.sampled_from(["none", "none", "success", "interrupt", "cancelled"]),
            st.none() | st.none() | st.integers(1, 12),
        )

    return st.one_of(of(threads=False), of(threads=False), of(threads=True))


# ── the interpreter ──────────────────────────────────────────────────────────────

_CAUGHT = (TillerError, Boom, ExceptionGroup)


@dataclass
class Runner:
    ctx: AgUiContext[Any]
    handles: list[Any] = field(default_factory=list)
    expected_state: Any = None
    published: bool = False
    returned_after_cancel: bool = False
    used_threads: bool = False
    linked_parent: bool = False  # a tool call's parent message has another owner (BUG-5)
    group_failed: bool = False  # a TaskGroup child failed (BUG-7)

    # -- helpers --

    def recent(self, slot: int) -> Any:
        if not self.handles:
            return None
        return self.handles[-1 - slot % len(self.handles)]

    def open(self, op: Open) -> Any:
        ctx = self.ctx
        own = None if op.own_id is None else f"own-{op.kind}-{op.own_id}"
        parent = None if op.parent is None else self.recent(op.parent)
        handle: Any
        if op.kind == "message":
            handle = ctx.assistant_message() if own is None else ctx.message_with_id(own)
        elif op.kind == "reasoning":
            handle = ctx.reasoning() if own is None else ctx.reasoning_with_id(own)
        elif op.kind == "tool_call":
            parent_id = parent.id if isinstance(parent, MessageHandle) else None
            if isinstance(parent, MessageHandle) and parent.owner != ctx.subagent_run_id():
                self.linked_parent = True
            if own is None:
                handle = ctx.tool_call(op.name, parent_message_id=parent_id)
            else:
                handle = ctx.tool_call_with_id(own, op.name, parent_message_id=parent_id)
        elif op.kind == "step":
            handle = ctx.step(op.name)
        else:
            parent_call = parent.id if isinstance(parent, ToolCallHandle) else None
            if own is None:
                handle = ctx.subagent(op.name, parent_tool_call_id=parent_call)
            else:
                handle = ctx.subagent_with(
                    SubagentStartedEvent(own, op.name, parent_tool_call_id=parent_call)
                )
        self.handles.append(handle)
        return handle

    def send(self, op: Send, handle: Any = None) -> None:
        handle = handle if handle is not None else self.recent(op.slot)
        if isinstance(handle, MessageHandle):
            handle.delta(op.text)
        elif isinstance(handle, ReasoningHandle):
            if op.alt:
                handle.encrypted_value(op.text or "opaque")
            else:
                handle.delta(op.text)
        elif isinstance(handle, ToolCallHandle):
            if op.alt:
                handle.args_json({"q": op.text})
            else:
                handle.args(op.text)

    def close(self, op: Close, handle: Any = None) -> None:
        handle = handle if handle is not None else self.recent(op.slot)
        if isinstance(handle, MessageHandle | ReasoningHandle):
            handle.end()
        elif isinstance(handle, ToolCallHandle):
            [handle.end, lambda: handle.result({"ok": True}), lambda: handle.result("done")][
                op.verb % 3
            ]()
        elif isinstance(handle, StepHandle):
            (handle.end if op.verb % 2 else handle.finish)()
        elif isinstance(handle, SubagentHandle):
            verbs = [
                handle.finish,
                lambda: handle.finish_with({"n": op.verb}),
                handle.fail,
                lambda: handle.fail_with_code("no", "TIMEOUT"),
                lambda: handle.suspend(["i1"]),
            ]
            verbs[op.verb % len(verbs)]()

    def state(self, op: State) -> None:
        ctx = self.ctx
        value = copy.deepcopy(op.value)  # the program's own value stays as it was drawn
        if op.action == "set":
            ctx.state_mut()[op.key] = value
            ctx.publish_state()
        elif op.action == "delete":
            ctx.state_mut().pop(op.key, None)
            ctx.publish_state()
        elif op.action == "append":
            state = ctx.state_mut()
            if not isinstance(state.get("items"), list):
                state["items"] = []
            state["items"].append(value)
            ctx.publish_state()
        elif op.action == "patch":
            ctx.patch_state([{"op": "add", "path": f"/{op.key}", "value": value}])
        elif op.action == "replace":
            ctx.set_state({op.key: value})
        else:
            ctx.update_state(lambda s: {**s, op.key: value})
        self.expected_state = copy.deepcopy(ctx.state)
        self.published = True

    def invalid(self, op: Invalid) -> None:
        ctx = self.ctx
        if op.which == "content":
            ctx.emit(TextMessageContentEvent("ghost", "boo"))
        elif op.which == "end_call":
            ctx.emit(ToolCallEndEvent("ghost"))
        elif op.which == "finish_step":
            ctx.emit(StepFinishedEvent("never-started"))
        elif op.which == "finish_subagent":
            ctx.emit(SubagentFinishedEvent("ghost"))
        elif op.which == "unknown_result":
            ctx.tool_result("ghost", "late")
        else:
            ctx.emit(ReasoningMessageContentEvent("ghost", "hmm"))

    def sync_op(self, op: Any) -> bool:
        """Run an op that needs no event loop; False if it needs one."""
        if isinstance(op, Say):
            self.ctx.say(op.text)
        elif isinstance(op, Think):
            self.ctx.think(op.text)
        elif isinstance(op, Open):
            self.open(op)
        elif isinstance(op, Send):
            self.send(op)
        elif isinstance(op, Close):
            self.close(op)
        elif isinstance(op, Custom):
            event = (
                RawEvent({"note": op.value}, source="test")
                if op.raw
                else CustomEvent(op.name, op.value)
            )
            self.ctx.emit(event)
        elif isinstance(op, Invalid):
            self.invalid(op)
        elif isinstance(op, Cancel):
            self.ctx.cancel_token.cancel("the program cancelled")
        elif isinstance(op, Stream) and not op.awaits:
            self.stream_into(self.open(op.open), op)
        else:
            return False
        return True

    def stream_into(self, handle: Any, op: Stream) -> None:
        for index in range(len(op.pieces)):
            self.stream_piece(handle, op, index)

    def stream_piece(self, handle: Any, op: Stream, index: int) -> None:
        self.send(Send(0, op.pieces[index], alt=False, guard=False), handle)
        if index + 1 == len(op.pieces) and op.verb is not None:
            self.close(Close(0, op.verb, guard=False), handle)

    # -- on the event loop --

    async def run(self, ops: tuple[Any, ...]) -> None:
        for op in ops:
            if getattr(op, "guard", False):
                with contextlib.suppress(*_CAUGHT):
                    await self.step(op)
            else:
                await self.step(op)

    async def step(self, op: Any) -> None:
        if self.sync_op(op):
            return
        if isinstance(op, State):
            self.state(op)
        elif isinstance(op, Stream):  # one that awaits between pieces
            handle = self.open(op.open)
            for index in range(len(op.pieces)):
                await asyncio.sleep(0)
                self.stream_piece(handle, op, index)
        elif isinstance(op, Sleep):
            await asyncio.sleep(0)
        elif isinstance(op, With):
            await self.with_block(op)
        elif isinstance(op, Concurrent):
            await self.concurrent(op)
        elif isinstance(op, Thread):
            await self.thread(op)
        else:  # pragma: no cover - every op is handled above
            raise AssertionError(op)

    async def body(self, op: With) -> None:
        for index, inner in enumerate(op.body):
            if index == op.raise_at:
                raise Boom(f"raised after {index} ops")
            await self.run((inner,))
        if op.raise_at is not None and op.raise_at >= len(op.body):
            raise Boom("raised at the end of the block")

    async def with_block(self, op: With) -> None:
        try:
            handle = self.open(op.open)
            if op.use_async:
                async with handle:
                    await self.body(op)
            else:
                with handle:
                    await self.body(op)
        except _CAUGHT:
            if not op.catch:
                raise

    async def concurrent(self, op: Concurrent) -> None:
        if op.mode == "gather":
            results = await asyncio.gather(
                *(self.run(b) for b in op.bodies), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        else:
            try:
                async with asyncio.TaskGroup() as group:
                    for body in op.bodies:
                        group.create_task(self.run(body))
            except BaseExceptionGroup:
                self.group_failed = True
                raise

    async def thread(self, op: Thread) -> None:
        self.used_threads = True
        await asyncio.to_thread(self.run_sync, op.body)

    # -- in a worker thread --

    def run_sync(self, ops: tuple[Any, ...]) -> None:
        for op in ops:
            try:
                self.step_sync(op)
            except _CAUGHT:
                if not getattr(op, "guard", False):
                    raise

    def step_sync(self, op: Any) -> None:
        if self.sync_op(op) or not isinstance(op, With):
            return
        try:
            handle = self.open(op.open)
            with handle:
                for index, inner in enumerate(op.body):
                    if index == op.raise_at:
                        raise Boom(f"raised after {index} ops")
                    self.run_sync((inner,))
                if op.raise_at is not None and op.raise_at >= len(op.body):
                    raise Boom("raised at the end of the block")
        except _CAUGHT:
            if not op.catch:
                raise


@dataclass
class Played:
    """What one run of a program produced."""

    events: list[Event]
    runner: Runner
    cancelled_before_end: bool


def _outcome(kind: str) -> RunOutcome | None:
    if kind == "success":
        return RunOutcome.success()
    if kind == "interrupt":
        return RunOutcome.interrupt(Interrupt("i1", "question", message="go on?"))
    if kind == "cancelled":
        return RunOutcome.cancelled()
    return None


def quiet_dead_run_tasks() -> None:
    """Log nothing when a run's task dies with an exception nobody retrieves (BUG-1, BUG-3).

    The default handler formats the traceback from `Task.__del__`; when a GC runs that
    inside pytest's own `ast.parse` of a failing test's source, the nested `ast.parse` (for
    traceback carets) upsets CPython 3.11.7's AST recursion counter: "SystemError: AST
    constructor recursion depth mismatch", a pytest INTERNALERROR."""
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)


async def play(program: Program) -> Played:
    quiet_dead_run_tasks()
    runners: list[Runner] = []

    async def body(ctx: AgUiContext[Any]) -> RunOutcome | None:
        runner = Runner(ctx)
        runners.append(runner)
        await runner.run(program.ops)
        runner.returned_after_cancel = ctx.is_cancelled
        return _outcome(program.outcome)

    agent: Any = body
    if program.form == "object":

        class Agent:
            async def run(self, ctx: AgUiContext[Any]) -> RunOutcome | None:
                return await body(ctx)

        agent = Agent()

    events: list[Event] = []
    # A copy each time: the run's live state *is* the input's state dict (BUG-6).
    stream = run_agent(agent, copy.deepcopy(RUN_INPUT))
    # Whether the token fired before the terminal event went out, seen from the firing
    # thread at the moment it fires (a late cancel by the reader or a thread does not count).
    fired_after_end: list[bool] = []
    stream.cancel.add_callback(
        lambda: fired_after_end.append(stream.context is None or stream.context.sink.terminated)
    )
    async with asyncio.timeout(HANG_GUARD_S), stream:
        async for event in stream:
            events.append(event)
            if len(events) == program.consumer_cancel_at:
                stream.cancel.cancel("the reader cancelled")
    assert stream.context is not None
    runner = runners[0] if runners else Runner(stream.context)  # cancelled before it ran
    return Played(events, runner, fired_after_end == [False])


# ── checks on a played stream ────────────────────────────────────────────────────


def _parses(text: str) -> bool:
    if not text:
        return True
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def unparseable_open_calls(wire: list[dict[str, Any]]) -> list[str]:
    """Tool calls still open at the end of `wire` whose streamed args are not JSON."""
    open_calls: dict[str, str] = {}
    for event in wire:
        kind = event["type"]
        if kind == "TOOL_CALL_START":
            open_calls[event["toolCallId"]] = ""
        elif kind == "TOOL_CALL_ARGS":
            open_calls[event["toolCallId"]] += event["delta"]
        elif kind == "TOOL_CALL_END":
            del open_calls[event["toolCallId"]]
    return [call for call, args in open_calls.items() if not _parses(args)]


_ID_PATTERNS = {
    "messageId": re.compile(rf"{RUN_ID}-msg-\d+"),
    "parentMessageId": re.compile(rf"{RUN_ID}-msg-\d+"),
    "toolCallId": re.compile(rf"{RUN_ID}-call-\d+"),
    "parentToolCallId": re.compile(rf"{RUN_ID}-call-\d+"),
    "subagentRunId": re.compile(rf"{RUN_ID}-sub-\d+"),
    "parentSubagentRunId": re.compile(rf"{RUN_ID}-sub-\d+"),
}


def check_ids(wire: list[dict[str, Any]]) -> None:
    """Law 10: every id the runtime allocated is `{runId}-msg-N` / `-call-N` / `-sub-N`."""
    for event in wire:
        for key, pattern in _ID_PATTERNS.items():
            value = event.get(key)
            if value is None or value.startswith("own-"):
                continue  # the program chose this id
            assert pattern.fullmatch(value), f"{key}={value!r} in {event}"
        if event["type"] == "REASONING_ENCRYPTED_VALUE" and not event["entityId"].startswith(
            "own-"
        ):
            assert re.fullmatch(rf"{RUN_ID}-(msg|call)-\d+", event["entityId"]), event


def streamed_state(wire: list[dict[str, Any]]) -> Any:
    """The state a client ends up with: the last snapshot with the later deltas applied,
    from the state it sent with the run."""
    state: Any = copy.deepcopy(RUN_INPUT["state"])
    for event in wire:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    return state


def check_played(played: Played, *, known_bugs: bool) -> list[dict[str, Any]]:
    """Every property of one played program. With `known_bugs`, the cancellation rules are
    not checked where a known src bug breaks them (each has its reproduction below)."""
    wire = assert_valid_stream(played.events)
    assert wire[0]["type"] == "RUN_STARTED"
    terminals = [i for i, event in enumerate(wire) if event["type"] in TERMINAL]
    assert terminals == [len(wire) - 1], "exactly one terminal event, and it is the last"
    last = wire[-1]
    runner = played.runner
    swallowed = known_bugs and runner.returned_after_cancel  # BUG-2, BUG-3
    # BUG-4, BUG-5, BUG-7
    raced = known_bugs and (runner.used_threads or runner.linked_parent or runner.group_failed)
    if played.cancelled_before_end and last["type"] == "RUN_FINISHED" and not swallowed:
        assert last["outcome"] == {"type": "cancelled"}, last
    if last["type"] == "RUN_ERROR" and last.get("code") == "CANCELLED" and not (swallowed or raced):
        assert unparseable_open_calls(wire), (
            "RUN_ERROR{CANCELLED} without a call whose args are not JSON"
        )
    check_ids(wire)
    if runner.published:
        expected = runner.expected_state
        if last["type"] == "RUN_FINISHED" and last["outcome"]["type"] == "interrupt":
            expected = runner.ctx.state  # the driver's interrupt snapshot is the live state
        assert streamed_state(wire) == expected, "the client's state is the published state"
    return wire


# ── the driver properties ────────────────────────────────────────────────────────


@PROGRAM_SETTINGS
@given(programs())
def test_random_programs_give_valid_deterministic_streams(program: Program) -> None:
    played = asyncio.run(play(program))  # which waits for worker threads, serving their emits
    wire = check_played(played, known_bugs=True)
    if not program.uses_threads:
        again = wire_events(asyncio.run(play(program)).events)
        assert again == wire, "the same program must give the same stream (law 10)"


@settings(
    PROGRAM_SETTINGS, phases=[Phase.generate], report_multiple_bugs=False, verbosity=Verbosity.quiet
)
@given(programs())
def test_random_programs_keep_the_cancellation_rules(program: Program) -> None:
    check_played(asyncio.run(play(program)), known_bugs=False)


# ── reproductions of the src bugs the properties found ───────────────────────────


async def collect(agent: Any, *, guard_s: float = HANG_GUARD_S) -> list[dict[str, Any]]:
    quiet_dead_run_tasks()
    stream = run_agent(agent, {"threadId": THREAD_ID, "runId": RUN_ID, "messages": []})
    async with asyncio.timeout(guard_s), stream:
        return wire_events([event async for event in stream])


async def test_an_open_chunked_call_with_broken_args_still_ends_the_stream() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.emit(ToolCallChunkEvent("c1", "search", delta='{"q": '))

    # A healthy run ends in milliseconds; this one would wait forever.
    wire = await collect(agent, guard_s=1)
    assert [e["type"] for e in wire if e["type"] in TERMINAL] == ["RUN_ERROR"]
    # Broke on main: the RUN_ERROR closed the chunk with `{"q": ` (AGUI204). The
    # arguments are completed first, so the ending is valid.
    assert_valid_stream(wire)
    assert [e.get("delta") for e in wire if e["type"] == "TOOL_CALL_CHUNK"] == ['{"q": ', "null}"]


async def test_a_cancel_during_half_written_chunked_args_ends_validly() -> None:
    """Law 2 with a chunked call: the cancelled run cannot finish (the arguments never
    became JSON), so it ends RUN_ERROR{CANCELLED}, after the chunk completing them."""

    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.emit(ToolCallChunkEvent("c1", "search", delta='{"q": "half'))
        ctx.cancel_token.cancel()
        ctx.say("more")  # raises Cancelled

    wire = await collect(agent)
    assert_valid_stream(wire)
    assert wire[-1]["type"] == "RUN_ERROR" and wire[-1]["code"] == "CANCELLED"


async def test_an_agent_that_swallows_the_cancel_still_finishes_as_cancelled() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.say("working")
        ctx.cancel_token.cancel()
        try:
            ctx.say("more")
        except Cancelled:
            return  # a real agent stops here

    wire = await collect(agent)
    assert wire[-1] == {
        "type": "RUN_FINISHED",
        "threadId": THREAD_ID,
        "runId": RUN_ID,
        "outcome": {"type": "cancelled"},
    }


async def test_an_interrupt_returned_after_a_cancel_finishes_as_cancelled() -> None:
    async def agent(ctx: AgUiContext[Any]) -> RunOutcome:
        ctx.cancel_token.cancel()
        return RunOutcome.interrupt(Interrupt("i1", "question"))

    wire = await collect(agent)
    assert wire[-1]["type"] == "RUN_FINISHED" and wire[-1]["outcome"] == {"type": "cancelled"}


async def test_a_handle_a_worker_thread_closes_during_a_cancel_is_not_unclosable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The race, made deterministic: the run is cancelled as the worker thread's
    # TEXT_MESSAGE_END goes through the sink (on the loop), and the thread is descheduled
    # before the handle records that it is closed, until the driver has ended the stream.
    batch = CancellationToken()

    class CancelOnMessageEnd:
        def transform(self, event: Event) -> list[Event]:
            if event.type == "TEXT_MESSAGE_END":
                batch.cancel("an operator stopped the run")
            return [event]

    mark_closed = MessageHandle._mark_closed

    def descheduled_mark_closed(self: MessageHandle) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while not self.ctx.sink.terminated and time.monotonic() < deadline:
            time.sleep(0.001)
        mark_closed(self)

    monkeypatch.setattr(MessageHandle, "_mark_closed", descheduled_mark_closed)

    async def agent(ctx: AgUiContext[Any]) -> None:
        def tool() -> None:
            with ctx.assistant_message() as message:
                message.delta("partial")

        await asyncio.to_thread(tool)
        await asyncio.sleep(HANG_GUARD_S)  # not reached: the cancel interrupts the await

    quiet_dead_run_tasks()
    stream = run_agent(agent, RUN_INPUT, cancel=batch, transformers=[CancelOnMessageEnd()])
    async with asyncio.timeout(HANG_GUARD_S), stream:
        wire = wire_events([event async for event in stream])
    assert wire[-1]["type"] == "RUN_FINISHED" and wire[-1]["outcome"] == {"type": "cancelled"}


def test_a_call_whose_parent_message_a_subagent_sent_can_be_streamed() -> None:
    ctx, rx = AgUiContext.new({"threadId": THREAD_ID, "runId": RUN_ID, "messages": []})
    with ctx.subagent("helper"):
        parent = ctx.say("I will search")
    with ctx.tool_call("search", parent_message_id=parent) as call:
        call.args('{"q": "x"}')
    assert_valid_stream(
        [RunStartedEvent(THREAD_ID, RUN_ID), *rx.drain(), RunFinishedEvent(THREAD_ID, RUN_ID)]
    )


async def _taskgroup_leaks_a_cancel() -> bool:
    """Whether this Python's TaskGroup leaves its parent's `cancelling()` raised after a
    child failed while the parent waited in `__aexit__` (CPython 3.11 does)."""

    async def crash() -> None:
        raise ValueError

    with contextlib.suppress(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(crash())
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling() > 0


TASKGROUP_LEAKS_A_CANCEL = asyncio.run(_taskgroup_leaks_a_cancel())


async def test_a_cancel_after_a_failed_task_group_finishes_as_cancelled() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        async def tool() -> None:
            raise ValueError("the tool failed")

        with contextlib.suppress(ExceptionGroup):
            async with asyncio.TaskGroup() as group:
                group.create_task(tool())
        ctx.cancel_token.cancel()
        await asyncio.sleep(HANG_GUARD_S)

    wire = await collect(agent)
    assert wire[-1]["type"] == "RUN_FINISHED" and wire[-1]["outcome"] == {"type": "cancelled"}


async def test_running_the_same_input_twice_gives_the_same_stream() -> None:
    async def agent(ctx: AgUiContext[Any]) -> None:
        ctx.state_mut()["items"].append("x")
        ctx.publish_state()

    run_input = {"threadId": THREAD_ID, "runId": RUN_ID, "messages": [], "state": {"items": []}}
    first = [e async for e in run_agent(agent, run_input)]
    second = [e async for e in run_agent(agent, run_input)]
    assert run_input["state"] == {"items": []}, "the caller's input is left alone"
    assert wire_events(first) == wire_events(second)


# ── the verifier against the validator ───────────────────────────────────────────

MIDS = ("m1", "m2")
CIDS = ("c1", "c2")
SIDS = ("a1", "a2")
#: Mostly untagged, so continuations often agree with their opener and streams get long.
owners = st.sampled_from((None, None, None, None, "a1", "a2"))
mids = st.sampled_from(MIDS)
cids = st.sampled_from(CIDS)
sids = st.sampled_from(SIDS)
deltas = st.sampled_from(("", "x", "é"))
arg_pieces = st.sampled_from(("", "{", "}", '{"a": ', "1}", "{}", '"x"', "[1]", " ", "nul"))
OUTCOMES: dict[str, Any] = {
    "none": None,
    "success": {"type": "success"},
    "cancelled": {"type": "cancelled"},
    "interrupt": {"type": "interrupt", "interrupts": [{"id": "i1", "reason": "question"}]},
    "interrupt-empty": {"type": "interrupt", "interrupts": []},
    "approval": {
        "type": "interrupt",
        "interrupts": [{"id": "approve-c1", "reason": "tool_call", "toolCallId": "c1"}],
    },
    "approval-without-call": {
        "type": "interrupt",
        "interrupts": [{"id": "approve-c1", "reason": "tool_call"}],
    },
}
#: Paths that hit, miss, and break RFC 6901 (no leading slash, a leading zero).
STATE_PATHS = (
    *("", "/a", "/b", "/items", "/items/0", "/items/-", "/a/k"),
    *("/missing/deep", "a", "/items/01"),
)
STATE_DOCS = st.one_of(
    st.fixed_dictionaries(
        {"a": JSON_VALUES, "items": st.lists(st.integers(0, 2), max_size=3)},
        optional={"b": JSON_VALUES},
    ),
    JSON_VALUES,
)


@st.composite
def patch_ops(draw: st.DrawFn) -> dict[str, Any]:
    """One operation: mostly RFC 6902, sometimes not (unknown op, missing members)."""
    op: dict[str, Any] = {
        "op": draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "nope"]))
    }
    if draw(st.integers(0, 9)):
        op["path"] = draw(st.sampled_from(STATE_PATHS))
    if draw(st.integers(0, 3)):
        op["value"] = draw(JSON_VALUES)
    if draw(st.booleans()):
        op["from"] = draw(st.sampled_from(STATE_PATHS))
    return op


STATE_EVENTS = st.one_of(
    st.builds(StateSnapshotEvent, STATE_DOCS, subagent_run_id=owners),
    st.builds(StateDeltaEvent, st.lists(patch_ops(), min_size=1, max_size=3)),
    st.builds(StateDeltaEvent, st.lists(patch_ops(), min_size=1, max_size=3)),
)
SNAPSHOT_MESSAGES = [
    {
        "id": "h1",
        "role": "assistant",
        "toolCalls": [
            {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        ],
    }
]


def raw_events() -> st.SearchStrategy[Event]:
    """Non-terminal events over a small alphabet of ids, so starts, continuations, ends and
    reuses collide often; streams, explicit and chunked, weighted towards text and calls."""
    text = st.one_of(
        st.builds(
            TextMessageStartEvent,
            mids,
            st.sampled_from(["assistant", "user", "system", "tool", "reasoning"]),
            subagent_run_id=owners,
        ),
        st.builds(TextMessageContentEvent, mids, deltas, subagent_run_id=owners),
        st.builds(TextMessageEndEvent, mids, subagent_run_id=owners),
        st.builds(
            TextMessageChunkEvent,
            message_id=st.none() | mids,
            role=st.none() | st.sampled_from(["assistant", "tool"]),
            delta=st.none() | deltas,
            subagent_run_id=owners,
        ),
    )
    calls = st.one_of(
        st.builds(
            ToolCallStartEvent, cids, st.just("tool"), st.none() | mids, subagent_run_id=owners
        ),
        st.builds(ToolCallArgsEvent, cids, arg_pieces, subagent_run_id=owners),
        st.builds(ToolCallEndEvent, cids, subagent_run_id=owners),
        st.builds(
            ToolCallChunkEvent,
            tool_call_id=st.none() | cids,
            tool_call_name=st.none() | st.just("tool"),
            parent_message_id=st.none() | mids,
            delta=st.none() | arg_pieces,
            subagent_run_id=owners,
        ),
        st.builds(ToolCallResultEvent, st.just("res"), cids, st.just("ok"), subagent_run_id=owners),
        st.builds(
            ToolCallResultEvent,
            st.just("res"),
            cids,
            st.just("ok"),
            st.sampled_from([None, "tool", "assistant"]),
        ),
    )
    reasoning = st.one_of(
        st.builds(ReasoningStartEvent, mids, subagent_run_id=owners),
        st.builds(ReasoningMessageStartEvent, mids, subagent_run_id=owners),
        st.builds(ReasoningMessageStartEvent, mids, st.sampled_from(["reasoning", "assistant"])),
        st.builds(ReasoningMessageContentEvent, mids, deltas, subagent_run_id=owners),
        st.builds(ReasoningMessageEndEvent, mids, subagent_run_id=owners),
        st.builds(ReasoningEndEvent, mids, subagent_run_id=owners),
        st.builds(
            ReasoningMessageChunkEvent,
            message_id=st.none() | mids,
            delta=st.none() | deltas,
            subagent_run_id=owners,
        ),
        st.builds(
            ReasoningEncryptedValueEvent,
            st.sampled_from(["message", "tool-call", "thought"]),
            mids | cids,
            st.just("opaque"),
            subagent_run_id=owners,
        ),
    )
    structure = st.one_of(
        st.builds(StepStartedEvent, st.sampled_from(["s1", "s2"]), subagent_run_id=owners),
        st.builds(StepFinishedEvent, st.sampled_from(["s1", "s2"]), subagent_run_id=owners),
        st.builds(
            SubagentStartedEvent, sids, st.just("helper"), parent_subagent_run_id=st.none() | sids
        ),
        st.builds(
            SubagentFinishedEvent,
            sids,
            outcome=st.none() | st.just({"type": "suspended", "interruptIds": ["i1"]}),
        ),
        st.builds(SubagentErrorEvent, sids, st.just("failed")),
        st.just(RunStartedEvent(THREAD_ID, RUN_ID)),  # a second one: always refused
    )
    other = st.one_of(
        st.builds(MessagesSnapshotEvent, st.just(SNAPSHOT_MESSAGES)),
        STATE_EVENTS,
        STATE_EVENTS,
        st.builds(CustomEvent, st.just("tiller.test"), JSON_VALUES, subagent_run_id=owners),
        st.builds(RawEvent, st.just({"x": 1}), subagent_run_id=owners),
    )
    return st.one_of(text, text, calls, calls, calls, reasoning, structure, structure, other)


RAW_EVENTS = raw_events()


def endings(*, mismatched_ids: bool = False) -> st.SearchStrategy[Event]:
    """The terminal event a raw stream tries first (RUN_ERROR is the fallback)."""
    finished = st.builds(
        RunFinishedEvent,
        st.just(THREAD_ID),
        st.just(RUN_ID),
        outcome=st.sampled_from(list(OUTCOMES.values())),
    )
    if mismatched_ids:
        finished = finished | st.builds(
            RunFinishedEvent, st.just(THREAD_ID), st.just("another-run")
        )
    return finished | st.builds(
        RunErrorEvent, st.just("it broke"), st.none() | st.just("AGENT_ERROR")
    )


_OPENS = {
    "TEXT_MESSAGE_START": "text",
    "TOOL_CALL_START": "call",
    "REASONING_START": "reasoning",
    "REASONING_MESSAGE_START": "reasoning-message",
    "STEP_STARTED": "step",
    "SUBAGENT_STARTED": "subagent",
}
_CLOSES = {
    "TEXT_MESSAGE_END": "text",
    "TOOL_CALL_END": "call",
    "REASONING_END": "reasoning",
    "REASONING_MESSAGE_END": "reasoning-message",
    "STEP_FINISHED": "step",
    "SUBAGENT_FINISHED": "subagent",
    "SUBAGENT_ERROR": "subagent",
}


_CLOSER: dict[str, Any] = {
    "text": lambda i, o: TextMessageEndEvent(i, subagent_run_id=o),
    "call": lambda i, o: ToolCallEndEvent(i, subagent_run_id=o),
    "reasoning": lambda i, o: ReasoningEndEvent(i, subagent_run_id=o),
    "reasoning-message": lambda i, o: ReasoningMessageEndEvent(i, subagent_run_id=o),
    "step": lambda i, o: StepFinishedEvent(i, subagent_run_id=o),
    "subagent": lambda i, o: SubagentFinishedEvent(i),
}


def _key(event: Any) -> str:
    for attr in ("message_id", "tool_call_id", "step_name"):
        if hasattr(event, attr):
            return str(getattr(event, attr))
    return str(event.subagent_run_id)


@functools.cache
def follow_up(kind: str, ident: str, owner: str | None) -> st.SearchStrategy[Event]:
    """Events that continue or close the open `kind` `ident` (opened by `owner`)."""
    tag = st.just(owner) | st.just(owner) | st.just(owner) | owners
    if kind == "text":
        return st.one_of(
            st.builds(TextMessageContentEvent, st.just(ident), deltas, subagent_run_id=tag),
            st.builds(TextMessageEndEvent, st.just(ident), subagent_run_id=tag),
            st.builds(
                TextMessageChunkEvent, message_id=st.just(ident), delta=deltas, subagent_run_id=tag
            ),
            st.builds(
                ToolCallStartEvent, cids, st.just("tool"), st.just(ident), subagent_run_id=tag
            ),
        )
    if kind == "call":
        return st.one_of(
            st.builds(ToolCallArgsEvent, st.just(ident), arg_pieces, subagent_run_id=tag),
            st.builds(ToolCallArgsEvent, st.just(ident), arg_pieces, subagent_run_id=tag),
            st.builds(ToolCallEndEvent, st.just(ident), subagent_run_id=tag),
            st.builds(
                ToolCallChunkEvent,
                tool_call_id=st.just(ident),
                delta=arg_pieces,
                subagent_run_id=tag,
            ),
            st.builds(
                ToolCallResultEvent,
                st.just("res"),
                st.just(ident),
                st.just("ok"),
                subagent_run_id=tag,
            ),
        )
    if kind == "reasoning":
        return st.one_of(
            st.builds(ReasoningMessageStartEvent, st.just(ident), subagent_run_id=tag),
            st.builds(ReasoningEndEvent, st.just(ident), subagent_run_id=tag),
        )
    if kind == "reasoning-message":
        return st.one_of(
            st.builds(ReasoningMessageContentEvent, st.just(ident), deltas, subagent_run_id=tag),
            st.builds(ReasoningMessageEndEvent, st.just(ident), subagent_run_id=tag),
            st.builds(
                ReasoningMessageChunkEvent,
                message_id=st.just(ident),
                delta=deltas,
                subagent_run_id=tag,
            ),
        )
    if kind == "step":
        return st.builds(StepFinishedEvent, st.just(ident), subagent_run_id=tag)
    return st.one_of(
        st.builds(SubagentFinishedEvent, st.just(ident)),
        st.builds(SubagentFinishedEvent, st.just(ident), outcome=st.just({"type": "suspended"})),
        st.builds(SubagentErrorEvent, st.just(ident), st.just("failed")),
        st.builds(
            SubagentStartedEvent, sids, st.just("child"), parent_subagent_run_id=st.just(ident)
        ),
        st.builds(TextMessageStartEvent, mids, subagent_run_id=st.just(ident)),
        st.builds(ToolCallStartEvent, cids, st.just("tool"), subagent_run_id=st.just(ident)),
    )


def verified_stream(data: st.DataObject, ending: Event) -> list[Event]:
    """Draw events, emitting each into a real sink (whose verifier refuses some) and
    keeping what comes out; half the draws continue or close something the stream has
    open. Then `ending`, and if that is refused the driver's last resort, `RUN_ERROR`
    through `emit_terminal`. Returns what the sink's subscriber received."""
    sink = EventSink()
    received = sink.subscribe(maxsize=None)
    verifier = sink.verifier
    assert verifier is not None
    sink.emit_forced(RunStartedEvent(THREAD_ID, RUN_ID))
    accepted: list[Event] = received.drain()
    open_items: dict[tuple[str, str], str | None] = {}
    for _ in range(data.draw(st.integers(0, 40), label="length")):
        if open_items and data.draw(st.booleans()):
            items = sorted(open_items, key=str)
            kind, ident = items[data.draw(st.integers(0, len(items) - 1))]
            event = data.draw(follow_up(kind, ident, open_items[(kind, ident)]))
        else:
            event = data.draw(RAW_EVENTS)
        try:
            sink.emit_forced(event)
        except ProtocolViolation:
            assert not received.drain(), "a refused event reached the subscriber"
            continue
        assert received.drain() == [event]
        accepted.append(event)
        if event.type in _OPENS:
            open_items[(_OPENS[event.type], _key(event))] = getattr(event, "subagent_run_id", None)
        elif event.type in _CLOSES:
            open_items.pop((_CLOSES[event.type], _key(event)), None)
    if data.draw(st.booleans(), label="close what is open"):
        for (kind, ident), owner in reversed(list(open_items.items())):
            with contextlib.suppress(ProtocolViolation):
                sink.emit_forced(_CLOSER[kind](ident, owner))
            accepted += received.drain()
    with contextlib.suppress(ProtocolViolation):
        sink.emit_forced(ending)
    sink.emit_terminal(RunErrorEvent("the end"))  # does nothing after a terminal event
    accepted += received.drain()
    assert sink.terminated
    return accepted


def findings(events: list[Event], severities: tuple[str, ...]) -> list[str]:
    report = validate_agui(wire_events(events))
    assert not report.internal_errors, report.internal_errors
    return [
        f"{d.rule} ({d.severity}) at {d.event_index}: {d.message}"
        for d in report.diagnostics
        if d.severity in severities
    ]


@RAW_SETTINGS
@given(st.data(), endings())
def test_what_the_verifier_accepts_the_validator_accepts(
    data: st.DataObject, ending: Event
) -> None:
    accepted = verified_stream(data, ending)
    problems = findings(accepted, ("error", "warning"))
    assert not problems, "\n".join([*problems, *(repr(e) for e in accepted)])


# ── where the verifier lets through what the validator flags ────────────────────


def through_verifier(events: list[Event]) -> list[Event]:
    """The events a fresh verifier accepts, in order (refused ones dropped)."""
    verifier = Verifier()
    accepted = []
    for event in events:
        with contextlib.suppress(ProtocolViolation):
            verifier.check(event)
            accepted.append(event)
    return accepted


@pytest.mark.parametrize(
    "delta",
    [
        [{"op": "replace", "path": "/missing/deeper", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
    ],
    ids=["does-not-apply", "not-rfc6902"],
)
def test_a_state_delta_the_verifier_accepts_is_valid(delta: list[dict[str, Any]]) -> None:
    """Was GAP-1: the verifier did not look at state events, so a raw STATE_DELTA that
    does not apply to the last snapshot (AGUI302) or is not RFC 6902 at all (AGUI303)
    went out. Now the verifier keeps the client's state and refuses both."""
    stream = [
        RunStartedEvent(THREAD_ID, RUN_ID),
        StateSnapshotEvent({"a": 1}),
        StateDeltaEvent(delta),
        RunFinishedEvent(THREAD_ID, RUN_ID),
    ]
    assert_valid_stream(through_verifier(stream))


def test_a_run_finished_naming_another_run_is_refused() -> None:
    """Was GAP-2 (ag-ui-validate AGUI008): the verifier now refuses it itself."""
    verifier = Verifier()
    verifier.check(RunStartedEvent(THREAD_ID, RUN_ID))
    with pytest.raises(ProtocolViolation, match="RunIdMismatch"):
        verifier.check(RunFinishedEvent(THREAD_ID, "another-run"))
    verifier.check(RunFinishedEvent(THREAD_ID, RUN_ID))


def test_a_refused_event_leaves_an_open_chunk_stream_open() -> None:
    verifier = Verifier()
    verifier.check(RunStartedEvent(THREAD_ID, RUN_ID))
    verifier.check(TextMessageChunkEvent(message_id="m1", delta="a"))
    with pytest.raises(ProtocolViolation, match="NotOpen"):
        verifier.check(TextMessageEndEvent("never-opened"))
    verifier.check(TextMessageChunkEvent(delta="b"))  # continues m1, as if nothing happened


def test_a_handle_opened_by_a_worker_thread_during_a_cancel_is_closed() -> None:
    """Found by wider random runs: a worker thread's message started just as the reader
    cancelled the run; the handle was registered only after its start went out, so the
    driver missed it and ended RUN_ERROR{CANCELLED} with nothing unparseable (about three
    runs in four). Handles now register before their start event."""
    empty = Stream(Open("message", "act", None, None, False), ("",), False, None, False)
    program = Program((empty, Thread((empty,), False), empty), "function", "none", 3)
    for _ in range(20):
        check_played(asyncio.run(play(program)), known_bugs=False)
