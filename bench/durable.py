"""What durable mode costs: checkpoint write and resume latency, and the per-step overhead.

DESIGN §10: "Checkpoint write and resume < 5 ms on SQLite".

(1) Checkpoint latency, on SQLite (a file in a temporary directory, WAL) and on NATS
JetStream (127.0.0.1:4222, in a namespace of its own, deleted afterwards). The checkpoint is
a realistic 20-step `RunState`: the state a 20-step scripted run ends with (19 turns that
stream a sentence and call a tool with a few arguments, the tool's result, a final answer).
Timed, each a median over repetitions after a warm-up:

- write: `CheckpointStore.save(state, "running")` — what the loop does at every step
  boundary (the record, plus the thread index);
- load: `CheckpointStore.load(run_id)` (read and validate the `RunState`);
- claim: `CheckpointStore.claim(checkpoint)` (the compare-and-set that makes one resumer win);
- resume = load + claim, what `resume(...)` does before the run continues.

(2) Per-step cost of durable mode: a 50-step run of `bench/loop.py`'s instant model and
trivial tool on SQLite, with and without `checkpoint_bucket` (with it, each step writes its
checkpoint, the call's started and completed records, and the event log's batches). The
difference over 50 steps is the durable cost per step. The same on NATS, for scale.

(3) The store writes of one durable step alone, through the durability port
(`StoreDurability`, the lease taken): a checkpoint, a call started, the call completed, a
checkpoint — what the loop writes per step, without the loop, so the figure is the store's
round trips and little else (the realistic state; SQLite and NATS as above).

(4) Flat or growing: the durable step cost at 20 and at 400 steps (issue 19: flat, and at
most 3x a non-durable step plus one store commit). A run of N instant-model steps on
SQLite, durable and not; the figure is CPU time per step (`time.process_time_ns`, every
thread of the process: SQLite works on its own), wall time beside it. "One store commit" is
the CPU time of one small `put` on the same store.

Replay time of a 100-step capture is measured by `bench/replay.py`.

Run: `python bench/durable.py` (`--quick` for fewer repetitions; `--no-nats` to skip NATS).
Prints markdown for BENCHMARKS.md; figures with `time.perf_counter_ns`, garbage collector on
and collected once before each series.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from loop import NOOP, InstantModel  # bench/loop.py, beside this script

import tiller
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel, Turn, TurnCall
from tiller.policy import AllowAll
from tiller.state import RunState
from tiller.store import Bus, StoreDurability, open_bus
from tiller.store._checkpoints import CheckpointStore
from tiller.tools import tool

NATS_URL = "nats://127.0.0.1:4222"
BUCKET = "tiller-run-checkpoints"
TARGET_MS = 5.0
DURABLE_STEPS = 50


@tool(read_only=True)
def search(query: str, limit: int) -> str:
    """Search the notes."""
    return f"{limit} notes match {query!r}: " + "; ".join(f"note {n}" for n in range(limit))


async def realistic_state(root: Path, steps: int = 20) -> RunState:
    """The `RunState` a `steps`-step run ends with: every step streams a sentence and calls
    a tool, whose result goes back; then a final answer."""
    turns = [
        Turn(
            text=f"Step {n}: I will search the notes for topic {n} and compare the results.",
            tool_calls=(TurnCall("search", {"query": f"topic {n}", "limit": 5}),),
        )
        for n in range(1, steps)
    ]
    turns.append(Turn(text="Here is the summary of everything I found. " * 5))
    ctx = RunContext.sandboxed(root, AllowAll())
    result = await Agent(ScriptedModel(turns), [search]).run_in(
        ctx, "Research every topic and summarize.", RunOptions(max_steps=steps + 1)
    )
    if result.steps != steps:
        raise SystemExit(f"the run took {result.steps} steps, not {steps}: {result.error}")
    return result.state


async def median_ms(
    fn: Callable[[], Awaitable[object]],
    repetitions: int,
    before: Callable[[], Awaitable[object]] | None = None,
) -> float:
    """Median wall time of `fn` in ms; `before` runs untimed before each repetition."""
    if before is not None:
        await before()
    await fn()  # warm-up
    gc.collect()
    samples = []
    for _ in range(repetitions):
        if before is not None:
            await before()
        started = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - started) / 1e6)
    return statistics.median(samples)


async def checkpoint_latency(bus: Bus, state: RunState, repetitions: int) -> dict[str, float]:
    store = CheckpointStore(bus, BUCKET)
    run_id = state.run_id
    loaded: list[Any] = []

    async def write() -> None:
        await store.save(state, "running")

    async def suspend() -> None:
        await store.save(state, "suspended")

    async def load() -> None:
        loaded[:] = [await store.load(run_id)]

    async def suspend_and_load() -> None:
        await suspend()
        await load()

    async def claim() -> None:
        await store.claim(loaded[0])

    async def load_and_claim() -> None:
        await store.claim(await store.load(run_id))

    return {
        "write": await median_ms(write, repetitions),
        "load": await median_ms(load, repetitions, before=suspend),
        "claim": await median_ms(claim, repetitions, before=suspend_and_load),
        "resume": await median_ms(load_and_claim, repetitions, before=suspend),
    }


class _CountingBus:
    """A store that counts KV writes per bucket, and reads (for the "per step" figures;
    untimed). Every KV call is one store round trip: a fenced write that first reads the
    run's epoch shows as a read and a write."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.url = bus.url
        self.writes: dict[str, int] = {}
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> Any:
        kv = await self._bus.kv(bucket)
        writes = self.writes
        outer = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                attribute = getattr(kv, name)
                if name in ("put", "create", "update"):
                    writes[bucket] = writes.get(bucket, 0) + 1
                elif name in ("get", "keys"):
                    outer.reads += 1
                return attribute

        return Counting()


async def writes_per_step(bus: Bus, root: Path) -> tuple[dict[str, float], float]:
    """KV writes per step of one durable `DURABLE_STEPS`-step run, by bucket; and reads."""
    counting = _CountingBus(bus)
    ctx = RunContext.sandboxed(root, AllowAll()).with_store(counting)  # type: ignore[arg-type]
    options = RunOptions(max_steps=DURABLE_STEPS + 1, checkpoint_bucket=BUCKET)
    await Agent(InstantModel(DURABLE_STEPS), [NOOP]).run_in(ctx, "go", options, run_id="count")
    writes = {bucket: n / DURABLE_STEPS for bucket, n in counting.writes.items()}
    return writes, counting.reads / DURABLE_STEPS


async def durable_step_cost(bus: Bus, root: Path, repetitions: int) -> tuple[float, float]:
    """(plain, durable) µs per step of a `DURABLE_STEPS`-step instant-model run."""
    model = InstantModel(DURABLE_STEPS)
    agent = Agent(model, [NOOP])
    ctx = RunContext.sandboxed(root, AllowAll()).with_store(bus)
    plain = RunOptions(max_steps=DURABLE_STEPS + 1)
    durable = plain.with_checkpoint_bucket(BUCKET)
    counter = iter(range(10**9))

    async def run(options: RunOptions) -> None:
        result = await agent.run_in(ctx, "go", options, run_id=f"step-{next(counter)}")
        if result.steps != DURABLE_STEPS:
            raise SystemExit(f"the run took {result.steps} steps: {result.error}")

    plain_ms = await median_ms(lambda: run(plain), repetitions)
    durable_ms = await median_ms(lambda: run(durable), repetitions)
    return plain_ms * 1e3 / DURABLE_STEPS, durable_ms * 1e3 / DURABLE_STEPS


async def fenced_step_us(bus: Bus, state: RunState, repetitions: int) -> float:
    """Median µs of one durable step's store writes through the durability port."""
    durability = StoreDurability(bus, BUCKET)
    run_id = f"fenced-{uuid.uuid4().hex[:8]}"
    state = state.model_copy(update={"run_id": run_id, "thread_id": run_id})
    await durability.take_lease(run_id, "bench", 600.0)
    await durability.save(state, "running")
    calls = iter(range(10**9))

    async def step() -> None:
        call_id = f"{run_id}-call-{next(calls)}"
        await durability.save(state, "running")
        await durability.call_started(run_id, call_id)
        await durability.call_completed(run_id, call_id, "done", is_error=False)
        await durability.save(state, "running")

    return await median_ms(step, repetitions) * 1e3


SCALING_STEPS = (20, 400)


async def _cpu_and_wall(
    fn: Callable[[], Awaitable[object]], repetitions: int
) -> tuple[float, float]:
    """Median (CPU ns, wall ns) of `fn`, after a warm-up."""
    await fn()
    gc.collect()
    cpu, wall = [], []
    for _ in range(repetitions):
        started_cpu, started_wall = time.process_time_ns(), time.perf_counter_ns()
        await fn()
        cpu.append(time.process_time_ns() - started_cpu)
        wall.append(time.perf_counter_ns() - started_wall)
    return statistics.median(cpu), statistics.median(wall)


async def step_scaling(bus: Bus, root: Path, repetitions: int) -> dict[str, Any]:
    """Per step of an N-step instant-model run, N in `SCALING_STEPS`, durable and not
    (CPU and wall µs); and one small store commit (CPU and wall µs)."""
    ctx = RunContext.sandboxed(root, AllowAll()).with_store(bus)
    counter = iter(range(10**9))
    figures: dict[str, Any] = {}
    for steps in SCALING_STEPS:
        agent = Agent(InstantModel(steps), [NOOP])
        plain = RunOptions(max_steps=steps + 1)
        durable = plain.with_checkpoint_bucket(BUCKET)

        async def run(options: RunOptions, steps: int = steps, agent: Agent = agent) -> None:
            result = await agent.run_in(ctx, "go", options, run_id=f"scale-{next(counter)}")
            if result.steps != steps:
                raise SystemExit(f"the run took {result.steps} steps: {result.error}")

        reps = max(3, repetitions * 20 // steps)
        for name, options in (("plain", plain), ("durable", durable)):
            cpu, wall = await _cpu_and_wall(lambda options=options: run(options), reps)
            figures[f"{name} {steps}"] = (cpu / 1e3 / steps, wall / 1e3 / steps)
    kv = await bus.kv(BUCKET)
    commits = iter(range(10**9))

    async def commit() -> None:
        await kv.put(f"bench-commit/{next(commits)}", b'{"status": "started"}')

    cpu, wall = await _cpu_and_wall(commit, repetitions * 10)
    figures["commit"] = (cpu / 1e3, wall / 1e3)
    return figures


def print_scaling(figures: dict[str, Any]) -> None:
    commit_cpu, commit_wall = figures["commit"]
    print("\nDurable step cost, flat or growing (SQLite, µs per step, CPU / wall):\n")
    print("| steps | not durable | durable | ratio (CPU) | target: 3x + one commit (CPU) |")
    print("|---:|---:|---:|---:|---:|")
    for steps in SCALING_STEPS:
        plain_cpu, plain_wall = figures[f"plain {steps}"]
        cpu, wall = figures[f"durable {steps}"]
        target = 3 * plain_cpu + commit_cpu
        verdict = "met" if cpu <= target else "missed"
        print(
            f"| {steps} | {plain_cpu:.0f} / {plain_wall:.0f} | {cpu:.0f} / {wall:.0f} | "
            f"{cpu / plain_cpu:.1f}x | {target:.0f}: {verdict} |"
        )
    low, high = (figures[f"durable {n}"][0] for n in SCALING_STEPS)
    print(
        f"\nDurable step at {SCALING_STEPS[1]} / at {SCALING_STEPS[0]} steps (CPU): "
        f"{high / low:.2f}; one store commit: {commit_cpu:.0f} µs CPU, {commit_wall:.0f} µs wall."
    )


async def report(repetitions: int, nats: bool) -> None:
    rows: dict[str, dict[str, float]] = {}
    steps: dict[str, tuple[float, float]] = {}
    fenced: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tiller-bench-") as root_name:
        root = Path(root_name)
        state = await realistic_state(root / "ws")
        size = len(state.to_json())
        async with await open_bus(f"sqlite:///{root / 'store.db'}") as bus:
            rows["SQLite"] = await checkpoint_latency(bus, state, repetitions)
            steps["SQLite"] = await durable_step_cost(bus, root / "ws", max(5, repetitions // 4))
            fenced["SQLite"] = await fenced_step_us(bus, state, repetitions * 10)
            writes, reads = await writes_per_step(bus, root / "ws")
            scaling = await step_scaling(bus, root / "ws", max(3, repetitions // 5))
        if nats:
            namespace = f"bench{uuid.uuid4().hex[:10]}"
            bus = await open_bus(NATS_URL, namespace=namespace)
            try:
                rows["NATS"] = await checkpoint_latency(bus, state, repetitions)
                steps["NATS"] = await durable_step_cost(bus, root / "ws", max(5, repetitions // 4))
                fenced["NATS"] = await fenced_step_us(bus, state, repetitions * 10)
            finally:
                await bus.delete_namespace()  # type: ignore[attr-defined]
                await bus.aclose()

    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"## Durable runs ({python}, ", end="")
    print(f"tiller {tiller.__version__}, {platform.machine()}, median of {repetitions})\n")
    print(f"Checkpoint: the `RunState` of a 20-step run, {size:,} bytes of JSON.\n")
    print("| store | write (`save`) | load | claim | resume (load + claim) |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        cells = " | ".join(f"{row[k]:.2f} ms" for k in ("write", "load", "claim", "resume"))
        print(f"| {name} | {cells} |")
    print(f"\nPer step of a {DURABLE_STEPS}-step instant-model run (µs/step):\n")
    print("| store | not durable | durable (`checkpoint_bucket`) | durable cost per step |")
    print("|---|---:|---:|---:|")
    for name, (plain, durable) in steps.items():
        print(f"| {name} | {plain:.0f} | {durable:.0f} | {durable - plain:.0f} |")
    shown = ", ".join(f"{n:.2f} to `{bucket}`" for bucket, n in writes.items())
    print(f"\nKV writes per durable step: {sum(writes.values()):.2f} ({shown}); ", end="")
    print(f"KV reads: {reads:.2f}.")
    shown = ", ".join(f"{name} {us:.0f} µs" for name, us in fenced.items())
    print(f"\nStore writes of one durable step, through the durability port: {shown}.")
    print_scaling(scaling)
    sqlite = rows["SQLite"]
    verdict = "within" if max(sqlite["write"], sqlite["resume"]) < TARGET_MS else "OVER"
    print(
        f"\nSQLite checkpoint write {sqlite['write']:.2f} ms and resume {sqlite['resume']:.2f} ms: "
        f"{verdict} the {TARGET_MS:.0f} ms budget."
    )


async def scaling_only(repetitions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tiller-bench-") as root_name:
        root = Path(root_name)
        async with await open_bus(f"sqlite:///{root / 'store.db'}") as bus:
            figures = await step_scaling(bus, root / "ws", max(3, repetitions // 5))
    print_scaling(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-nats", action="store_true", help="skip the NATS rows")
    parser.add_argument(
        "--scaling", action="store_true", help="only the 20 vs 400 step figure (SQLite)"
    )
    args = parser.parse_args()
    if args.scaling:
        asyncio.run(scaling_only(10 if args.quick else 50))
        return
    asyncio.run(report(10 if args.quick else 50, nats=not args.no_nats))


if __name__ == "__main__":
    main()
