"""How fast events go through the pipeline, and what a state publish costs in a real run.

DESIGN §10: "Event pipeline: ≥ 200,000 events/s through sink + verifier + SSE encoding on
one core", and "State publishing: one serialization plus O(change)".

(a) Events per second, over a realistic mixed stream (steps, reasoning, messages with many
content deltas, tool calls with streamed arguments and results, state deltas, a subagent):

- `sink + verifier`: `EventSink.emit` of prebuilt events, delivered to one subscriber;
- `+ SSE encoding`: the same, and every delivered event encoded with `encode_sse`;
- `driver`: `run_agent` on an agent that emits the same stream through the `AgUiContext`
  emitters (handles, `patch_state`), read by an `async for` that encodes every event; the
  agent yields to the loop once per step, as a model stream would.

(b) One publish through the run context (`ctx.publish_state()` after a one-leaf change,
and `ctx.patch_state()` of that change) in a ~1 KB and a ~1 MB state, next to one
`orjson.dumps` of the state: the publish should cost about one serialization, whatever
the size of the state. (`bench/state.py` measures the `StateManager` alone.)

Run: `python bench/events.py` (`--quick` for fewer repetitions, `--profile` to add a
cProfile of the `+ SSE encoding` loop). Prints markdown; results go to BENCHMARKS.md.
Each figure is the median of several repetitions after a warm-up, measured with
`time.perf_counter_ns`; nothing is pinned.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

import tiller
from tiller.events import (
    AgUiContext,
    Event,
    EventSink,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    encode_sse,
    run_agent,
)

TARGET_EVENTS_PER_S = 200_000
THREAD, RUN = "bench-thread", "bench-run"
INPUT = {"threadId": THREAD, "runId": RUN, "messages": [], "state": {"turn": 0}}

# The shape of one step of an agent, as a model streams it.
REASONING_DELTAS = 20
TEXT_DELTAS = 100
TOOL_CALLS = 3
ARG_FRAGMENTS = 10
SUBAGENT_EVERY = 5  # every fifth turn runs inside a subagent

_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "agent")


def _text(i: int) -> str:
    return _WORDS[i % len(_WORDS)] + " "


def _args(call: int) -> list[str]:
    """A JSON argument object streamed in `ARG_FRAGMENTS` pieces."""
    doc = orjson.dumps(
        {"query": f"weather in city {call}", "units": "metric", "days": [1, 2, 3], "n": call}
    ).decode()
    size = -(-len(doc) // ARG_FRAGMENTS)
    return [doc[i : i + size] for i in range(0, len(doc), size)]


_RESULT = orjson.dumps({"temperature": 21.5, "sky": "clear", "wind": [3, 4, 5]}).decode()


# ── (a) the prebuilt stream ──────────────────────────────────────────────────────


def build_stream(turns: int) -> list[Event]:
    """RUN_STARTED, `turns` turns, RUN_FINISHED: what the driver path emits, prebuilt."""
    events: list[Event] = [RunStartedEvent(THREAD, RUN, protocol_version="1.0")]
    msg = call = sub = 0
    for turn in range(turns):
        owner = None
        if turn % SUBAGENT_EVERY == SUBAGENT_EVERY - 1:
            sub += 1
            owner = f"{RUN}-sub-{sub}"
            events.append(SubagentStartedEvent(owner, "researcher"))
        step = f"turn-{turn}"
        events.append(StepStartedEvent(step, subagent_run_id=owner))
        msg += 1
        rid = f"{RUN}-msg-{msg}"
        events.append(ReasoningStartEvent(rid, subagent_run_id=owner))
        events.append(ReasoningMessageStartEvent(rid, subagent_run_id=owner))
        events += [
            ReasoningMessageContentEvent(rid, _text(i), subagent_run_id=owner)
            for i in range(REASONING_DELTAS)
        ]
        events.append(ReasoningMessageEndEvent(rid, subagent_run_id=owner))
        events.append(ReasoningEndEvent(rid, subagent_run_id=owner))
        msg += 1
        mid = f"{RUN}-msg-{msg}"
        events.append(TextMessageStartEvent(mid, subagent_run_id=owner))
        events += [
            TextMessageContentEvent(mid, _text(i), subagent_run_id=owner)
            for i in range(TEXT_DELTAS)
        ]
        events.append(TextMessageEndEvent(mid, subagent_run_id=owner))
        for _ in range(TOOL_CALLS):
            call += 1
            msg += 1
            cid = f"{RUN}-call-{call}"
            events.append(ToolCallStartEvent(cid, "weather", mid, subagent_run_id=owner))
            events += [ToolCallArgsEvent(cid, a, subagent_run_id=owner) for a in _args(call)]
            events.append(ToolCallEndEvent(cid, subagent_run_id=owner))
            events.append(
                ToolCallResultEvent(f"{RUN}-msg-{msg}", cid, _RESULT, subagent_run_id=owner)
            )
        events.append(StateDeltaEvent([{"op": "replace", "path": "/turn", "value": turn + 1}]))
        events.append(StepFinishedEvent(step, subagent_run_id=owner))
        if owner is not None:
            events.append(SubagentFinishedEvent(owner))
    events.append(RunFinishedEvent(THREAD, RUN, outcome={"type": "success"}))
    return events


def pipeline_once(events: list[Event], *, encode: bool) -> int:
    """One run's events through a fresh sink + verifier to one subscriber; ns taken."""
    start = time.perf_counter_ns()
    sink = EventSink()
    receiver = sink.subscribe(maxsize=None)
    emit = sink.emit
    for event in events:
        emit(event)
    delivered = receiver.drain()
    if encode:
        for event in delivered:
            encode_sse(event)
    elapsed = time.perf_counter_ns() - start
    assert len(delivered) == len(events)
    return elapsed


# ── (a) the driver path ──────────────────────────────────────────────────────────


async def agent(ctx: AgUiContext[Any], turns: int) -> None:
    """The same turns as `build_stream`, through the emitters."""
    sub_handle = None
    for turn in range(turns):
        if turn % SUBAGENT_EVERY == SUBAGENT_EVERY - 1:
            sub_handle = ctx.subagent("researcher")
        with ctx.step(f"turn-{turn}"):
            with ctx.reasoning() as block:
                for i in range(REASONING_DELTAS):
                    block.delta(_text(i))
            with ctx.assistant_message() as message:
                for i in range(TEXT_DELTAS):
                    message.delta(_text(i))
            for _ in range(TOOL_CALLS):
                with ctx.tool_call("weather", parent_message_id=message.id) as call:
                    for fragment in _args(turn):
                        call.args(fragment)
                    call.result(_RESULT)
            ctx.patch_state([{"op": "replace", "path": "/turn", "value": turn + 1}])
        if sub_handle is not None:
            sub_handle.finish()
            sub_handle = None
        await asyncio.sleep(0)  # a model stream yields between chunks


async def driver_once(turns: int) -> tuple[int, int]:
    """One whole run through `run_agent`, every event SSE-encoded; (events, ns)."""
    count = 0
    start = time.perf_counter_ns()
    async for event in run_agent(lambda ctx: agent(ctx, turns), INPUT):
        encode_sse(event)
        count += 1
    return count, time.perf_counter_ns() - start


async def driver_runs(turns: int, repetitions: int) -> tuple[int, list[int]]:
    await driver_once(turns)  # warm-up
    samples = []
    count = 0
    for _ in range(repetitions):
        count, elapsed = await driver_once(turns)
        samples.append(elapsed)
    return count, samples


def events_per_second(turns: int, repetitions: int) -> list[tuple[str, int, float]]:
    events = build_stream(turns)
    rows = []
    for label, encode in (("sink + verifier", False), ("sink + verifier + SSE encoding", True)):
        pipeline_once(events, encode=encode)  # warm-up
        samples = [pipeline_once(events, encode=encode) for _ in range(repetitions)]
        rows.append((label, len(events), len(events) / (statistics.median(samples) / 1e9)))
    count, samples = asyncio.run(driver_runs(turns, repetitions))
    rows.append(
        (
            "driver: run_agent + emitters + SSE encoding",
            count,
            count / (statistics.median(samples) / 1e9),
        )
    )
    return rows


# ── (b) state publishing through the context ─────────────────────────────────────


def make_state(items: int) -> dict[str, Any]:
    """An app-like shared state: a document outline and a task board."""
    return {
        "document": {"title": "quarterly report", "sections": [f"section {i}" for i in range(8)]},
        "tasks": [
            {
                "id": f"task-{i}",
                "title": f"task {i}: review the figures and update the chart",
                "status": ["todo", "doing", "done"][i % 3],
                "labels": ["finance", "q3", "review"][: 1 + i % 3],
                "meta": {"estimate": i % 8, "owner": f"user-{i % 17}", "flag": False},
            }
            for i in range(items)
        ],
        "settings": {"theme": "light", "autosave": True},
    }


def median_us(fn: Callable[[], object], iterations: int) -> float:
    for _ in range(min(iterations, 20)):
        fn()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def state_costs(items: int, iterations: int) -> dict[str, Any]:
    state = make_state(items)
    ctx, receiver = AgUiContext.new({**INPUT, "state": state})
    ctx.publish_state()  # the first publish is the snapshot
    receiver.drain()
    live = ctx.state_mut()
    leaf = live["tasks"][items // 2]["meta"]
    path = f"/tasks/{items // 2}/meta/flag"
    kinds: set[str] = set()

    def publish_one_leaf() -> None:
        leaf["flag"] = not leaf["flag"]
        ctx.publish_state()
        for event in receiver.drain():
            kinds.add(event.type)

    def patch_one_leaf() -> None:
        ctx.patch_state([{"op": "replace", "path": path, "value": not leaf["flag"]}])
        receiver.drain()

    return {
        "size": len(orjson.dumps(state)),
        "dumps": median_us(lambda: orjson.dumps(live), iterations),
        "publish": median_us(publish_one_leaf, iterations),
        "patch": median_us(patch_one_leaf, iterations),
        "kinds": kinds,
    }


# ── report ───────────────────────────────────────────────────────────────────────


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def profile_pipeline(turns: int) -> None:
    events = build_stream(turns)
    pipeline_once(events, encode=True)
    profiler = cProfile.Profile()
    repetitions = 5
    profiler.enable()
    for _ in range(repetitions):
        pipeline_once(events, encode=True)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total_events = len(events) * repetitions
    print(f"\n### cProfile of `sink + verifier + SSE encoding` ({total_events} events)\n")
    print("| function | calls/event | own µs/event | cumulative µs/event |")
    print("|---|---:|---:|---:|")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    for (file, line, name), (_, calls, own, cumulative, _) in rows[:18]:
        where = f"{file.rsplit('/', 1)[-1]}:{line}({name})" if line else name
        print(
            f"| `{where}` | {calls / total_events:.2f} | {own / total_events * 1e6:.3f} "
            f"| {cumulative / total_events * 1e6:.3f} |"
        )
    print("\n(cProfile inflates every Python call; read the shares, not the totals.)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--profile", action="store_true", help="add a cProfile breakdown")
    args = parser.parse_args()
    turns, repetitions, iterations = (20, 5, 200) if args.quick else (60, 15, 2_000)

    print(
        f"tiller {tiller.__version__} · "
        f"Python {platform.python_version()} · {platform.machine()} · {sys.platform}"
    )
    print("\n### (a) events per second (median of", repetitions, "runs)\n")
    print("| path | events per run | events/s | µs/event |")
    print("|---|---:|---:|---:|")
    rows = events_per_second(turns, repetitions)
    for label, count, rate in rows:
        print(f"| {label} | {count:,} | {rate:,.0f} | {1e6 / rate:.2f} |")
    encoded_rate = rows[1][2]
    verdict = "meets" if encoded_rate >= TARGET_EVENTS_PER_S else "MISSES"
    print(
        f"\nsink + verifier + SSE encoding {verdict} the budget of "
        f"{TARGET_EVENTS_PER_S:,} events/s ({encoded_rate / TARGET_EVENTS_PER_S:.2f}x)."
    )

    print(f"\n### (b) one state publish through the run context (median µs of {iterations})\n")
    print(
        "| state | orjson.dumps | ctx.publish_state() one leaf | publish / dumps "
        "| ctx.patch_state() one leaf | sent |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for items in (4, 5_000):
        cost = state_costs(items, iterations)
        print(
            f"| ~{_size(cost['size'])} | {cost['dumps']:.1f} | {cost['publish']:.1f} "
            f"| {cost['publish'] / cost['dumps']:.2f}x | {cost['patch']:.1f} "
            f"| {', '.join(sorted(cost['kinds']))} |"
        )
    if args.profile:
        profile_pipeline(turns)


if __name__ == "__main__":
    main()
