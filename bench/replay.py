"""How long a 100-step capture takes to replay, and what capturing costs a run.

DESIGN §10: "replay of a 100-step capture < 100 ms".

A 100-step run (99 turns that stream four text chunks and call one trivial read-only tool,
then a final answer) is captured once with `memory_capture()`. Then, each a median over
repetitions after a warm-up (`time.perf_counter_ns`, garbage collector on, collected once
before each series):

- replay: `Capture.from_json` of the stored bytes, then `Agent.run_in` of the same agent on
  `ReplayModel(capture)` under the capture's run id, draining every event — what
  `tiller replay` does, and the figure the budget is about;
- the same 100-step run on `ScriptedModel`, without and with a capture sink, so the
  replay's cost and the capture's overhead read against the plain run;
- `Capture.to_json` / `from_json` alone, and the capture's size.

Run: `python bench/replay.py` (`--quick` for fewer repetitions). Prints markdown for
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import tiller
from tiller.capture import Capture, memory_capture
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel, Turn, TurnCall
from tiller.model.replay import ReplayModel
from tiller.policy import AllowAll
from tiller.tools import tool

STEPS = 100
RUN_ID = "bench-replay"


@tool(read_only=True)
def lookup(n: int) -> str:
    """Look a number up."""
    return f"entry {n}: ok"


def script(steps: int) -> list[Turn]:
    turns = [
        Turn(
            chunks=("Looking ", "up ", f"item {n:04d}", "."),
            tool_calls=(TurnCall("lookup", {"n": n}),),
        )
        for n in range(1, steps)
    ]
    turns.append(Turn(chunks=("All ", "done.")))
    return turns


async def run_once(model: Any, ctx: RunContext, options: RunOptions) -> int:
    """One run to the end; returns the number of events (so nothing is optimized away)."""
    events: list[Event] = []
    result = await Agent(model, [lookup]).run_in(
        ctx, "Look everything up.", options, on_event=events.append, run_id=RUN_ID
    )
    if result.steps != STEPS:
        raise SystemExit(f"the run took {result.steps} steps, not {STEPS}: {result.error}")
    return len(events)


async def median_ms(fn: Callable[[], Awaitable[object]], repetitions: int) -> float:
    await fn()  # warm-up
    gc.collect()
    samples = []
    for _ in range(repetitions):
        started = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - started) / 1e6)
    return statistics.median(samples)


async def report(repetitions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tiller-bench-") as root:
        ctx = RunContext.sandboxed(Path(root), AllowAll())
        turns = script(STEPS)
        plain = RunOptions(max_steps=STEPS + 1)
        captures = memory_capture()
        events = await run_once(ScriptedModel(turns), ctx, plain.with_capture_sink(captures))
        stored = captures[RUN_ID].to_json()

        async def replay() -> None:
            await run_once(ReplayModel(Capture.from_json(stored)), ctx, plain)

        async def scripted() -> None:
            await run_once(ScriptedModel(turns), ctx, plain)

        async def scripted_captured() -> None:
            await run_once(ScriptedModel(turns), ctx, plain.with_capture_sink(memory_capture()))

        async def codec() -> None:
            Capture.from_json(Capture.from_json(stored).to_json())

        replay_ms = await median_ms(replay, repetitions)
        scripted_ms = await median_ms(scripted, repetitions)
        captured_ms = await median_ms(scripted_captured, repetitions)
        codec_ms = await median_ms(codec, repetitions * 5)

    print(f"## Replay ({platform.python_implementation()} {platform.python_version()}, ", end="")
    print(f"tiller {tiller.__version__}, {platform.machine()}, median of {repetitions})\n")
    print(f"A {STEPS}-step run: {events} events; its capture is {len(stored):,} bytes of JSON.\n")
    print("| what | median ms | budget |")
    print("|---|---:|---|")
    print(f"| replay of the {STEPS}-step capture (load + run) | {replay_ms:.1f} | < 100 ms |")
    print(f"| the same run on ScriptedModel, not captured | {scripted_ms:.1f} | |")
    print(f"| the same run on ScriptedModel, captured in memory | {captured_ms:.1f} | |")
    print(f"| `Capture.from_json` + `to_json` alone | {codec_ms:.2f} | |")
    verdict = "within" if replay_ms < 100 else "OVER"
    print(f"\nReplay is {verdict} the budget; capture adds {captured_ms - scripted_ms:+.1f} ms.")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    asyncio.run(report(5 if args.quick else 30))


if __name__ == "__main__":
    main()
