"""What a fleet does on this machine: runs/s of the chaos batch with 1, 2 and 4 workers,
the time from submit to a run's first event, claim+ack at 1k and 100k queued, worker RSS.

The batch is the chaos test's (tests/fleet/test_chaos.py) without the kills: `--runs`
runs (default 200; `--quick` 40) of `tiller.examples.fleet_ledger:agent` (five steps,
a 10 ms scripted model turn each, every step a durable, idempotent ledger call), queued
before the workers start; each worker is a `tiller worker` process (`--concurrency 8`),
and runs/s is the batch's size over the time from the first worker's first claim to the
last result (seen within 0.5 s: results are polled that often, as the bench's reads
compete with the workers for two cores; the processes' start-up, ~2-4 s of imports on
an idle machine, is not counted, it is printed beside). RSS is each worker's VmRSS
(`/proc/<pid>/status`) once the batch is done, the largest of them.

Submit to first event: with two workers idle on the queue, `--latency` runs (default
100; `--quick` 30) are submitted one at a time (each after the one before has ended),
and for each the time from `Fleet.submit` to the first event `RunHandle.events()` yields
(the handle polls the event log every 10 ms, so that is the figure's resolution; these
workers write each event as it comes, `--event-log-batch 1`; the batch's workers keep
the default, 32). Claim+ack is bench/job_queue.py's measure (flat queue
depth, median of pairs) at 1,000 and 100,000 queued, on the backends chosen.

Run: `python bench/fleet.py` (`--quick`; `--no-sqlite` for NATS only; `--no-queue` to skip
claim+ack). Prints markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
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
from pathlib import Path

import tiller
from tiller.fleet import Fleet, ResultStore, RunHandle
from tiller.store import Bus, open_bus

sys.path.insert(0, str(Path(__file__).parent))
from job_queue import claim_ack_us, commit

NATS_URL = "nats://127.0.0.1:4222"
SRC = Path(__file__).resolve().parents[1] / "src"
AGENT = "tiller.examples.fleet_ledger:agent"
LEASE = 10.0


@asynccontextmanager
async def store(kind: str, tmp: Path) -> AsyncIterator[tuple[Bus, str, str]]:
    """(a bus, its url, its namespace) of a fresh store; a NATS namespace is deleted after."""
    if kind == "nats":
        url, namespace = NATS_URL, f"benchfleet{uuid.uuid4().hex[:8]}"
    else:
        url, namespace = f"sqlite:///{tmp / f'{uuid.uuid4().hex}.db'}", ""
    bus = await open_bus(url, namespace=namespace)
    try:
        yield bus, url, namespace
    finally:
        if kind == "nats":
            await bus.delete_namespace()  # type: ignore[attr-defined]
        await bus.aclose()


def spawn(url: str, namespace: str, tmp: Path, event_log_batch: int) -> subprocess.Popen[bytes]:
    """One `tiller worker` process, its output in a file of `tmp`."""
    tag = uuid.uuid4().hex[:6]
    command = [sys.executable, "-m", "tiller", "worker", "--store", url, "--namespace"]
    command += [namespace, "--lease", str(LEASE), "--concurrency", "8", "--agent", AGENT]
    command += ["--event-log-batch", str(event_log_batch)]
    environment = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "TILLER_FLEET_LEDGER": str(tmp / f"ledger-{tag}"),
    }
    with open(tmp / f"worker-{tag}.log", "wb") as out:
        return subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.STDOUT)


@asynccontextmanager
async def workers(
    url: str, namespace: str, count: int, tmp: Path, *, event_log_batch: int = 32
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    processes = [spawn(url, namespace, tmp, event_log_batch) for _ in range(count)]
    try:
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def all_results(bus: Bus, run_ids: list[str]) -> None:
    results = ResultStore(bus)
    pending = list(run_ids)
    while pending:
        found = await asyncio.gather(*(results.get(r) for r in pending[:200]))
        done = {r for r, x in zip(pending[:200], found, strict=True) if x is not None}
        pending = [r for r in pending if r not in done]
        if pending:
            await asyncio.sleep(0.5)  # the bench's reads compete with the workers for CPU


async def first_claim(bus: Bus, queued: int) -> None:
    """Until a worker took a job (its start-up is over): one is in flight, or gone."""
    queue = await bus.queue("tiller-runs", lease=LEASE)
    while True:
        depth = await queue.depth()
        if depth.in_flight > 0 or depth.waiting < queued:
            return
        await asyncio.sleep(0.02)


async def batch(kind: str, count: int, runs: int, tmp: Path) -> tuple[float, float, float]:
    """(runs/s, start-up seconds, max worker RSS MB)."""
    async with store(kind, tmp) as (bus, url, namespace):
        fleet = Fleet(bus, lease=LEASE)
        run_ids = [f"bench-{n}" for n in range(runs)]
        for start in range(0, runs, 50):
            await asyncio.gather(
                *(fleet.submit(AGENT, "go", run_id=r) for r in run_ids[start : start + 50])
            )
        launched = time.perf_counter()
        async with workers(url, namespace, count, tmp) as processes:
            await first_claim(bus, runs)
            began = time.perf_counter()
            await all_results(bus, run_ids)
            ended = time.perf_counter()
            rss = max(rss_mb(p.pid) for p in processes)
    return runs / (ended - began), began - launched, rss


async def latency(kind: str, samples: int, tmp: Path) -> tuple[float, float]:
    """(p50, p99) ms from submit to the run's first event, two idle workers."""
    async with store(kind, tmp) as (bus, url, namespace):
        fleet = Fleet(bus, lease=LEASE)
        async with workers(url, namespace, 2, tmp, event_log_batch=1):
            warm = await fleet.submit(AGENT, "warm up", run_id="warm")
            await warm.result(300)
            figures: list[float] = []
            for n in range(samples):
                t0 = time.perf_counter()
                handle = await fleet.submit(AGENT, "go", run_id=f"latency-{n}")
                async for _ in RunHandle(bus, handle.run_id, poll_interval=0.01).events():
                    figures.append((time.perf_counter() - t0) * 1000)
                    break
                await handle.result(300)  # the workers are idle again before the next
    figures.sort()
    return statistics.median(figures), figures[min(len(figures) - 1, int(len(figures) * 0.99))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller batch, fewer samples")
    parser.add_argument("--no-sqlite", action="store_true", help="NATS only")
    parser.add_argument("--no-queue", action="store_true", help="skip claim+ack")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--latency", type=int, default=None)
    args = parser.parse_args()
    runs = args.runs or (40 if args.quick else 200)
    samples = args.latency or (30 if args.quick else 100)
    kinds = ["nats"] + ([] if args.no_sqlite else ["sqlite"])
    load = os.getloadavg()
    print(
        f"fleet, tiller {tiller.__version__} at {commit()}, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; batch of {runs} five-step runs, "
        f"workers of 8 slots\n"
    )
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        print("| backend | workers | runs/s | vs 1 worker | start-up | max worker RSS |")
        print("|---|---:|---:|---:|---:|---:|")
        for kind in kinds:
            base = 0.0
            for count in (1, 2, 4):
                rate, startup, rss = await batch(kind, count, runs, tmp)
                base = base or rate
                print(
                    f"| {kind} | {count} | {rate:.1f} | {rate / base:.2f}x | "
                    f"{startup:.1f} s | {rss:.0f} MB |"
                )
                sys.stdout.flush()
        print("\n| backend | submit to first event, p50 | p99 | samples |\n|---|---:|---:|---:|")
        for kind in kinds:
            p50, p99 = await latency(kind, samples, tmp)
            print(f"| {kind} | {p50:.0f} ms | {p99:.0f} ms | {samples} |")
            sys.stdout.flush()
        if not args.no_queue:
            pairs = 100 if args.quick else 300
            print("\n| backend | claim+ack, 1,000 queued | 100,000 queued | 100k / 1k |")
            print("|---|---:|---:|---:|")
            for kind in kinds:
                small, _ = await claim_ack_us(kind, 1000, pairs, tmp)
                large, _ = await claim_ack_us(kind, 100_000, pairs, tmp)
                print(f"| {kind} | {small:,.0f} µs | {large:,.0f} µs | {large / small:.2f}x |")
                sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
