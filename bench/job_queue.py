"""What a job queue claim costs as the queue gets deep: claim+ack at 1,000 and 100,000 queued.

DESIGN §10: "Queue claim+ack flat from 1,000 to 100,000 queued jobs" (issue 16: flat means
the 100k figure within ~1.5x of the 1k one).

For each backend — memory, SQLite (a file in a temporary directory, WAL) and NATS JetStream
(127.0.0.1:4222, a namespace of its own, deleted afterwards) — and each depth, a fresh
queue (lease 600 s, so nothing is redelivered while it runs) gets `depth` jobs of a
200-byte payload; then one claim and its ack are timed together, `--pairs` times after a
warm-up. After each pair one job is enqueued again, outside the timing, so the depth stays
where it was. The figure is the median µs per claim+ack; the ratio is 100k over 1k, from
the same run.

Run: `python bench/job_queue.py` (`--quick`: fewer pairs; `--no-nats` to skip NATS; `--depths
1000,100000` to choose). Prints markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import tiller
from tiller.store import Bus, JobQueue, open_bus

NATS_URL = "nats://127.0.0.1:4222"
PAYLOAD = b"x" * 200
CHUNK = 1000  # enqueues in flight at once while filling a queue


@asynccontextmanager
async def backend(kind: str, tmp: Path) -> AsyncIterator[Bus]:
    if kind == "memory":
        bus: Bus = await open_bus("memory://")
    elif kind == "sqlite":
        bus = await open_bus(f"sqlite:///{tmp / f'{uuid.uuid4().hex}.db'}")
    else:
        from tiller.store._nats import NatsBus

        bus = await NatsBus.connect(
            NATS_URL, namespace=f"bench{uuid.uuid4().hex[:10]}", request_timeout=60
        )
    try:
        yield bus
    finally:
        if kind == "nats":
            from tiller.store._nats import NatsBus

            assert isinstance(bus, NatsBus)
            await bus.delete_namespace()
        await bus.aclose()


async def fill(queue: JobQueue, depth: int) -> None:
    for start in range(0, depth, CHUNK):
        count = min(CHUNK, depth - start)
        await asyncio.gather(*(queue.enqueue(PAYLOAD) for _ in range(count)))


async def claim_ack_us(kind: str, depth: int, pairs: int, tmp: Path) -> tuple[float, float]:
    """(median µs per claim+ack, seconds the fill took)."""
    async with backend(kind, tmp) as bus:
        queue = await bus.queue("bench", lease=600)
        started = time.perf_counter()
        await fill(queue, depth)
        filled = time.perf_counter() - started
        samples: list[float] = []
        gc.collect()
        for n in range(pairs + pairs // 10):
            t0 = time.perf_counter_ns()
            job = await queue.claim("bench-worker")
            assert job is not None, "the queue ran dry"
            await queue.ack(job)
            t1 = time.perf_counter_ns()
            if n >= pairs // 10:  # the first tenth warms up
                samples.append((t1 - t0) / 1000)
            await queue.enqueue(PAYLOAD)
        return statistics.median(samples), filled


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs")
    parser.add_argument("--no-nats", action="store_true", help="skip NATS")
    parser.add_argument("--depths", default="1000,100000")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    pairs = 100 if args.quick else 500
    kinds = ["memory", "sqlite"] + ([] if args.no_nats else ["nats"])
    load = os.getloadavg()
    print(
        f"queue claim+ack, tiller {tiller.__version__} at {commit()}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"{pairs} pairs per figure (median)\n"
    )
    header = " | ".join(f"{d:,} queued" for d in depths)
    print(f"| backend | {header} | {depths[-1] // 1000}k / {depths[0] // 1000}k | fill |")
    print("|---|" + "---:|" * len(depths) + "---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            figures, fills = [], []
            for depth in depths:
                us, filled = await claim_ack_us(kind, depth, pairs, Path(tmp))
                figures.append(us)
                fills.append(filled)
            cells = " | ".join(f"{us:,.0f} µs" for us in figures)
            fill_note = ", ".join(
                f"{d // 1000}k in {s:.1f} s" for d, s in zip(depths, fills, strict=True)
            )
            print(f"| {kind} | {cells} | {figures[-1] / figures[0]:.2f}x | {fill_note} |")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
