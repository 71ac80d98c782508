"""What the agent loop costs per step, and how 1,000 runs side by side behave.

DESIGN §10: "Loop overhead per step (instant model, trivial tool): below 100 µs, and flat
from 20 to 400 steps", and "1,000 concurrent 5-step runs with a 10 ms model: under 1 s
wall and 60 MB".

(1) Per-step cost: `Agent.run_in` with a `RunContext` over a temporary directory and
`AllowAll()`, one trivial tool (`@tool async def noop(x: int) -> int`), and an *instant*
model written here (per step: `ToolCallStart`, one `ToolCallArgsDelta`, `ToolCallEnd`,
`UsageReport`, `Finish("tool_calls")`, then one final text turn; the events are built
once, so the model's own cost is a few generator steps). A run of N steps is N model
turns: N-1 tool turns and the final answer. Beside it: the same run with `ScriptedModel`,
and a bare hand-written asyncio loop doing the same work (a list of dict messages, the same
instant model, the tool function awaited directly, results appended), so the framework's
overhead is the difference. "marginal" is (wall(400) - wall(20)) / 380: the cost of one
more step once the run is going, free of the per-run setup. The process CPU time of the
tiller runs is shown beside the wall time: on a shared machine it is the steadier figure.

(2) 1,000 concurrent 5-step runs with a model that awaits 10 ms per step, tiller beside
the bare loop; each in a fresh subprocess: wall time (median), tracemalloc peak of one
batch, and the growth of the process's peak RSS (`ru_maxrss`) over the first batch.

(3) The per-step work that scans the history, timed alone at the history of a 20-step
and of a 400-step run (`check_transcript`, `history_window`, ...).

Run: `python bench/loop.py` (`--quick` for fewer repetitions, `--profile` to add a
cProfile of one 400-step run, sorted by own time). Prints markdown for BENCHMARKS.md. Each
figure is a median over repetitions after a warm-up, measured with `time.perf_counter_ns`;
the garbage collector stays on (it is part of the cost) and is run once before each series
(not before each run: a full collection evicts the caches and adds ~30 µs to the next run).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

import tiller
from tiller.conversation import Usage, check_transcript
from tiller.loop import Agent, RunContext, RunOptions, history_window
from tiller.model import (
    Finish,
    ModelRequest,
    ScriptedModel,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from tiller.phase import Phase
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.tools import Jail, tool

TARGET_STEP_US = 100.0
TARGET_CONCURRENT_S = 1.0
TARGET_CONCURRENT_MB = 60.0
MODEL_DELAY_S = 0.010


async def noop(x: int) -> int:
    """Return `x` unchanged."""
    return x


NOOP = tool(noop)
_USAGE = Usage(input_tokens=10, output_tokens=5, requests=1)


class InstantModel:
    """A `Model` with prebuilt turns: `steps - 1` tool turns calling `noop`, then "done".

    Stateless across runs (the step is read off the request's length: the prompt, then an
    assistant and a user message per step), so one instance serves any number of
    concurrent runs. `delay` awaits `asyncio.sleep(delay)` before each step.
    """

    provider = "bench"
    context_window: int | None = None

    def __init__(self, steps: int, *, delay: float = 0.0, name: str = "instant") -> None:
        self.name = name
        self.delay = delay
        tool_turns: list[tuple[StreamEvent, ...]] = [
            (
                ToolCallStart(0, f"call-{turn}", "noop"),
                ToolCallArgsDelta(0, '{"x": 1}'),
                ToolCallEnd(0),
                UsageReport(_USAGE),
                Finish("tool_calls"),
            )
            for turn in range(steps - 1)
        ]
        self.turns = [*tool_turns, (TextDelta("done"), UsageReport(_USAGE), Finish("stop"))]

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.delay:
            await asyncio.sleep(self.delay)
        for event in self.turns[len(request.messages) // 2]:
            yield event

    async def aclose(self) -> None:
        pass


def scripted_turns(steps: int) -> tuple[Any, ...]:
    """The same run as a `ScriptedModel` script, parsed once (a model consumes its steps)."""
    call = {"tool_calls": [{"name": "noop", "arguments": {"x": 1}}]}
    return ScriptedModel([*([call] * (steps - 1)), "done"]).turns


# ── the two loops ────────────────────────────────────────────────────────────────────


async def bare_run(model: InstantModel) -> int:
    """The same work by hand: stream, collect the call, run the tool, append. Returns turns."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    tools: dict[str, Callable[..., Awaitable[Any]]] = {"noop": noop}
    turns = input_tokens = output_tokens = 0
    while True:
        request = ModelRequest(system=None, messages=messages)  # type: ignore[arg-type]
        text: list[str] = []
        calls: dict[int, list[Any]] = {}
        async for event in model.stream(request):
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, ToolCallStart):
                calls[event.index] = [event.id, event.name, []]
            elif isinstance(event, ToolCallArgsDelta):
                calls[event.index][2].append(event.delta)
            elif isinstance(event, UsageReport):
                input_tokens += event.usage.input_tokens
                output_tokens += event.usage.output_tokens
        turns += 1
        tool_calls = [
            {"id": call_id, "name": name, "arguments": "".join(parts)}
            for call_id, name, parts in calls.values()
        ]
        messages.append({"role": "assistant", "content": "".join(text), "tool_calls": tool_calls})
        if not tool_calls:
            return turns
        results = []
        for call in tool_calls:
            output = await tools[call["name"]](**orjson.loads(call["arguments"]))
            results.append({"call_id": call["id"], "content": str(output)})
        messages.append({"role": "user", "tool_results": results})


class ScriptedRunner:
    """The same run with `ScriptedModel`, a fresh one (same parsed script) per run."""

    def __init__(self, jail: Jail, steps: int) -> None:
        self.turns = scripted_turns(steps)
        self.runner = TillerRunner(Agent(ScriptedModel(self.turns), [NOOP]), jail, steps)

    async def run(self) -> int:
        self.runner.agent.model = ScriptedModel(self.turns)
        return await self.runner.run()


class TillerRunner:
    """`Agent.run_in` under a fresh `RunContext` (shared jail, AllowAll) per run."""

    def __init__(self, agent: Agent, jail: Jail, steps: int) -> None:
        self.agent = agent
        self.jail = jail
        self.steps = steps
        self.options = RunOptions(max_steps=steps + 1)

    async def run(self) -> int:
        context = RunContext(jail=self.jail, approver=AllowAll())
        result = await self.agent.run_in(context, "go", self.options)
        if result.stop_cause is not StopCause.COMPLETED or result.steps != self.steps:
            raise RuntimeError(f"bench run ended badly: {result.stop_cause} {result.error}")
        return result.steps


# ── (1) per-step cost ────────────────────────────────────────────────────────────────


async def time_runs(
    make: Callable[[], Awaitable[int]], steps: int, warmup: int, repetitions: int
) -> tuple[list[int], list[int]]:
    """Wall ns and process CPU ns per run, for `repetitions` runs after `warmup` runs.

    The CPU time is the figure to trust on a busy machine: it does not count the time the
    process waited for a core (an instant model never waits for anything else).
    """
    for _ in range(warmup):
        assert await make() == steps
    gc.collect()
    walls: list[int] = []
    cpus: list[int] = []
    for _ in range(repetitions):
        cpu = time.process_time_ns()
        start = time.perf_counter_ns()
        turns = await make()
        walls.append(time.perf_counter_ns() - start)
        cpus.append(time.process_time_ns() - cpu)
        assert turns == steps
    return walls, cpus


async def per_step(jail: Jail, quick: bool) -> dict[str, dict[int, float]]:
    """Median µs per run, by implementation (wall; `*_cpu`: CPU time) and step count."""
    plan = {1: (20, 200), 20: (20, 200), 400: (3, 25)}
    if quick:
        plan = {1: (5, 50), 20: (5, 40), 400: (1, 5)}
    out: dict[str, dict[int, float]] = {
        key: {} for key in ("bare", "tiller", "scripted", "tiller_cpu")
    }
    for steps, (warmup, repetitions) in plan.items():
        model = InstantModel(steps)
        runner = TillerRunner(Agent(model, [NOOP]), jail, steps)
        makers: tuple[tuple[str, Callable[[], Awaitable[int]]], ...] = (
            ("bare", functools.partial(bare_run, model)),
            ("tiller", runner.run),
            ("scripted", ScriptedRunner(jail, steps).run),
        )
        for label, make in makers:
            walls, cpus = await time_runs(make, steps, warmup, repetitions)
            out[label][steps] = statistics.median(walls) / 1e3
            if f"{label}_cpu" in out:
                out[f"{label}_cpu"][steps] = statistics.median(cpus) / 1e3
    return out


# ── (2) 1,000 concurrent runs, in a fresh process each ───────────────────────────────


def _max_rss_bytes() -> int:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


async def concurrent_child(impl: str, runs: int, steps: int, repetitions: int) -> dict[str, Any]:
    model = InstantModel(steps, delay=MODEL_DELAY_S, name="sleepy")
    if impl == "tiller":
        workspace = Path(tempfile.mkdtemp(prefix="tiller-bench-"))
        runner = TillerRunner(Agent(model, [NOOP]), Jail(workspace), steps)
        one: Callable[[], Awaitable[int]] = runner.run
    else:

        def one() -> Awaitable[int]:
            return bare_run(model)

    async def batch(count: int) -> None:
        turns = await asyncio.gather(*(one() for _ in range(count)))
        assert all(t == steps for t in turns)

    await batch(min(runs, 20))  # warm-up: imports, caches, first-call costs
    gc.collect()
    rss_before = _max_rss_bytes()
    rss_after = rss_before
    walls: list[int] = []
    cpus: list[int] = []
    for index in range(repetitions):
        gc.collect()
        cpu = time.process_time_ns()
        start = time.perf_counter_ns()
        await batch(runs)
        walls.append(time.perf_counter_ns() - start)
        cpus.append(time.process_time_ns() - cpu)
        if index == 0:
            rss_after = _max_rss_bytes()
    gc.collect()
    tracemalloc.start()
    await batch(runs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "wall_s": statistics.median(walls) / 1e9,
        "walls_s": [w / 1e9 for w in walls],
        "cpu_s": statistics.median(cpus) / 1e9,
        "tracemalloc_peak_mb": peak / 2**20,
        "rss_delta_mb": (rss_after - rss_before) / 2**20,
        "rss_peak_mb": _max_rss_bytes() / 2**20,
    }


def concurrent(impl: str, runs: int, steps: int, repetitions: int) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        impl,
        "--runs",
        str(runs),
        "--steps",
        str(steps),
        "--repetitions",
        str(repetitions),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {impl} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ── (3) the per-step scans of the history ────────────────────────────────────────────


def _time_call(function: Callable[[], object], budget_s: float = 0.05) -> float:
    """Median µs of one call, over 7 batches sized to take about `budget_s` each."""
    function()
    count = 1
    while True:
        start = time.perf_counter_ns()
        for _ in range(count):
            function()
        elapsed = time.perf_counter_ns() - start
        if elapsed > budget_s * 1e9 / 7 or count > 1_000_000:
            break
        count *= 2
    samples = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(count):
            function()
        samples.append((time.perf_counter_ns() - start) / count / 1e3)
    return statistics.median(samples)


async def history_suspects(jail: Jail) -> list[tuple[str, float, float]]:
    """µs per call of each per-step function at a 20-step and a 400-step history."""
    steps = 400
    agent = Agent(InstantModel(steps), [NOOP])
    context = RunContext(jail=jail, approver=AllowAll())
    result = await agent.run_in(context, "go", RunOptions(max_steps=steps + 1))
    messages = list(result.state.messages)
    short, long = messages[: 2 * 20 - 1], messages[: 2 * steps - 1]
    registry = agent.registry
    rows: list[tuple[str, Callable[[Sequence[Any]], object]]] = [
        ("`check_transcript(messages)`", check_transcript),
        ("`history_window(messages, None)`", lambda m: history_window(m, None)),
        ("`history_window(messages, 1_000_000)`", lambda m: history_window(m, 1_000_000)),
        ("`registry.specs_for(EXECUTE)`", lambda m: registry.specs_for(Phase.EXECUTE)),
        ("`agent.system_prompt_for_run()`", lambda m: agent.system_prompt_for_run()),
        (
            "`ModelRequest(...)` build",
            lambda m: ModelRequest(system=None, messages=list(m), tools=()),
        ),
    ]
    return [
        (label, _time_call(functools.partial(f, short)), _time_call(functools.partial(f, long)))
        for label, f in rows
    ]


# ── cProfile ─────────────────────────────────────────────────────────────────────────


async def profile_run(jail: Jail, steps: int = 400, top: int = 25) -> None:
    runner = TillerRunner(Agent(InstantModel(steps), [NOOP]), jail, steps)
    await runner.run()
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    await runner.run()
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"\n### cProfile of one {steps}-step run (instant model), top {top} by own time\n")
    print("| function | calls/step | own µs/step | cumulative µs/step |")
    print("|---|---:|---:|---:|")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    for (file, line, name), (_, calls, own, cumulative, _) in rows[:top]:
        where = f"{file.rsplit('/', 1)[-1]}:{line}({name})" if line else name
        print(
            f"| `{where}` | {calls / steps:.2f} | {own / steps * 1e6:.2f} "
            f"| {cumulative / steps * 1e6:.2f} |"
        )
    print("\n(cProfile inflates every Python call several times; read the shares.)")


# ── report ───────────────────────────────────────────────────────────────────────────


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"tiller {tiller.__version__} · Python {platform.python_version()} "
        f"({platform.python_implementation()}) · {platform.platform()} · {cpu} · "
        f"{os.cpu_count()} CPUs · {_load()}"
    )


def _load() -> str:
    """The 1-minute load average: numbers taken on a busy machine are not comparable."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return "load unknown"
    busy = load > 0.5 * (os.cpu_count() or 1)
    return f"load {load:.2f}" + (" (BUSY: the figures are noisy)" if busy else "")


def report(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    workspace = Path(tempfile.mkdtemp(prefix="tiller-bench-"))
    jail = Jail(workspace)
    print(machine())

    wall = asyncio.run(per_step(jail, args.quick))
    print("\n### (1) per-step cost (µs per step = median run wall / steps)\n")
    print(
        "| steps | bare asyncio loop | tiller, instant model | tiller - bare "
        "| tiller, CPU time | tiller, ScriptedModel |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    keys = ("bare", "tiller", "tiller_cpu", "scripted")
    for steps in (20, 400):
        bare, ours, cpu, scripted = (wall[k][steps] / steps for k in keys)
        print(
            f"| {steps} | {bare:.1f} | {ours:.1f} | {ours - bare:.1f} | {cpu:.1f} "
            f"| {scripted:.1f} |"
        )
    marginal = {k: (wall[k][400] - wall[k][20]) / 380 for k in keys}
    print(
        f"| marginal, 20→400 | {marginal['bare']:.1f} | {marginal['tiller']:.1f} "
        f"| {marginal['tiller'] - marginal['bare']:.1f} | {marginal['tiller_cpu']:.1f} "
        f"| {marginal['scripted']:.1f} |"
    )
    ratio = {k: (wall[k][400] / 400) / (wall[k][20] / 20) for k in keys}
    print(
        f"| ratio 400 / 20 | {ratio['bare']:.2f}x | {ratio['tiller']:.2f}x | "
        f"| {ratio['tiller_cpu']:.2f}x | {ratio['scripted']:.2f}x |"
    )
    print(
        f"| one 1-step run (µs per run) | {wall['bare'][1]:.1f} | {wall['tiller'][1]:.1f} "
        f"| {wall['tiller'][1] - wall['bare'][1]:.1f} | {wall['tiller_cpu'][1]:.1f} "
        f"| {wall['scripted'][1]:.1f} |"
    )
    per_step_20 = wall["tiller"][20] / 20
    per_step_400 = wall["tiller"][400] / 400
    flat = ratio["tiller"] <= 1.25
    print(
        f"\nBudget < {TARGET_STEP_US:.0f} µs/step: 20 steps {per_step_20:.1f} µs "
        f"({'meets' if per_step_20 < TARGET_STEP_US else 'MISSES'}), 400 steps "
        f"{per_step_400:.1f} µs ({'meets' if per_step_400 < TARGET_STEP_US else 'MISSES'}); "
        f"flat from 20 to 400 (ratio ≤ 1.25): {'yes' if flat else 'NO'} "
        f"({ratio['tiller']:.2f}x). By CPU time: {wall['tiller_cpu'][20] / 20:.1f} and "
        f"{wall['tiller_cpu'][400] / 400:.1f} µs/step, {ratio['tiller_cpu']:.2f}x."
    )

    runs, steps = 1_000, 5
    repetitions = 1 if args.quick else 3
    print(
        f"\n### (2) {runs:,} concurrent {steps}-step runs, model awaits "
        f"{MODEL_DELAY_S * 1e3:.0f} ms per step (fresh process each; median of {repetitions})\n"
    )
    print(
        "| loop | wall | CPU time | (wall - 50 ms) / step | tracemalloc peak "
        "| peak RSS growth | process peak RSS |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    results: dict[str, dict[str, Any]] = {}
    for impl in ("bare", "tiller"):
        got = results[impl] = concurrent(impl, runs, steps, repetitions)
        floor = steps * MODEL_DELAY_S
        print(
            f"| {'bare asyncio loop' if impl == 'bare' else 'tiller'} | {got['wall_s']:.3f} s "
            f"| {got['cpu_s']:.3f} s "
            f"| {(got['wall_s'] - floor) / (runs * steps) * 1e6:.0f} µs "
            f"| {got['tracemalloc_peak_mb']:.1f} MB | {got['rss_delta_mb']:.1f} MB "
            f"| {got['rss_peak_mb']:.0f} MB |"
        )
    batch = results["tiller"]
    memory = max(batch["tracemalloc_peak_mb"], batch["rss_delta_mb"])
    print(
        f"\nBudget < {TARGET_CONCURRENT_S:.0f} s and < {TARGET_CONCURRENT_MB:.0f} MB: "
        f"wall {batch['wall_s']:.3f} s "
        f"({'meets' if batch['wall_s'] < TARGET_CONCURRENT_S else 'MISSES'}), memory "
        f"{memory:.1f} MB ({'meets' if memory < TARGET_CONCURRENT_MB else 'MISSES'}; the "
        "larger of the tracemalloc peak and the RSS growth)."
    )

    suspects = asyncio.run(history_suspects(jail))
    print("\n### (3) per-step work over the history (µs per call; one call per step)\n")
    print("| function | 20-step history (39 msgs) | 400-step history (799 msgs) | growth |")
    print("|---|---:|---:|---:|")
    for label, short, long in suspects:
        print(f"| {label} | {short:.2f} | {long:.2f} | {long / short:.1f}x |")
    print(
        "\nThe loop checks the transcript incrementally (`TranscriptChecker`: only new "
        "messages), so the whole-history `check_transcript` above is what it avoids; "
        "`history_window` runs over the history only with `RunOptions.max_history_tokens` "
        "set (without it, a list copy)."
    )

    if args.profile:
        asyncio.run(profile_run(jail))
    print(f"\n(total bench time {time.perf_counter() - started:.1f} s; at the end, {_load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 20 s)")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of 400 steps")
    parser.add_argument("--child", choices=("bare", "tiller"), help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=1_000, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--repetitions", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = asyncio.run(concurrent_child(args.child, args.runs, args.steps, args.repetitions))
        print(json.dumps(out))
        return
    report(args)


if __name__ == "__main__":
    main()
