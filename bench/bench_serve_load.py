"""Load on `tiller serve`: 200 AG-UI runs streamed at once from one server.

No budget in DESIGN §10 names the server; this measures what a busy page of users costs
it. The server is `create_app` under uvicorn (its defaults: asyncio loop, h11) in a
subprocess of its own, with a SQLite store in a temporary directory and the offline console
agent, `make_agent(step_delay=..., first_delay=...)`: every step that the script gives
a delay waits that long (20 ms by default), as a fast model would. The load is one
`httpx.AsyncClient` in this process opening N streaming `POST /agui` at once (each its own
thread and connection), reading every SSE stream to its end.

Two workloads:

- `echo`: "hello", one step (the echo path waits `first_delay`), ~14 events;
- `slow 3`: three steps, each a step that waits `step_delay` and calls `list_dir`,
  then the final answer, ~40 events (`--slow` to add it).

Per run: time to first event (request sent to the first `data:` frame read: the server's
admission latency, since `RUN_STARTED` goes out before the model is called) and total time
(to the end of the stream). A run fails unless the answer is 200 `text/event-stream` and
the last event is `RUN_FINISHED`; failures are counted and printed, and the script exits 1
if there are any. Percentiles are nearest-rank over every run of every round. Wall time is
from the first request to the last stream's end, median of the rounds. Server CPU is the
server process's user + system time over the round (`/proc`), its memory the peak RSS
(`VmHWM`) at the end; client CPU is this process's (the load generator shares the 2 cores).

Run: `.venv/bin/python bench/bench_serve_load.py` (`--runs N`, `--rounds N`, `--slow` to
add the multi-step workload, `--quick` for one round). Prints markdown for BENCHMARKS.md.
Never a test: nothing here is asserted on time.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SSE = {"Accept": "text/event-stream", "Content-Type": "application/json", **AUTH}
TERMINAL = b'"type":"RUN_FINISHED"'


# ── the server (this script, run with --serve, in a subprocess) ─────────────────────────


def serve(port: int, root: Path, step_delay: float, first_delay: float) -> None:
    import uvicorn

    from tiller.examples.console_agent import make_agent
    from tiller.serve import create_app

    app = create_app(
        make_agent(step_delay=step_delay, first_delay=first_delay),
        store=f"sqlite:///{root / 'serve.db'}",
        token=TOKEN,
        workspace=root / "workspace",
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


class Server:
    """The server subprocess: started, waited for, measured, stopped."""

    def __init__(self, root: Path, step_delay: float, first_delay: float) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, __file__, "--serve", str(self.port), "--root", str(root)]
        command += ["--step-delay", str(step_delay), "--first-delay", str(first_delay)]
        self.process = subprocess.Popen(command)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/runs", headers=AUTH, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in 30 s")
            time.sleep(0.05)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return math.nan

    def stop(self) -> None:
        self.process.terminate()  # uvicorn shuts down gracefully on SIGTERM
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ── the load ────────────────────────────────────────────────────────────────────────────


@dataclass
class RunResult:
    first_event: float  # seconds from the request to the first `data:` frame (nan: none)
    total: float  # seconds from the request to the end of the stream
    events: int
    error: str | None


async def one_run(client: httpx.AsyncClient, url: str, thread: str, text: str) -> RunResult:
    body = orjson.dumps(
        {
            "threadId": thread,
            "runId": f"{thread}-r1",
            "state": {},
            "messages": [{"id": f"{thread}-u1", "role": "user", "content": text}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
    )
    start = time.perf_counter()
    first = math.nan
    chunks: list[bytes] = []
    try:
        async with client.stream("POST", f"{url}/agui", content=body, headers=SSE) as response:
            async for chunk in response.aiter_bytes():
                if math.isnan(first) and b"data: " in chunk:
                    first = time.perf_counter() - start
                chunks.append(chunk)
            total = time.perf_counter() - start
            status, kind = response.status_code, response.headers.get("content-type", "")
    except httpx.HTTPError as exc:
        return RunResult(math.nan, time.perf_counter() - start, 0, f"{type(exc).__name__}: {exc}")
    frames = [f for f in b"".join(chunks).split(b"\n\n") if f.startswith(b"data: ")]
    error = None
    if status != 200 or not kind.startswith("text/event-stream"):
        error = f"status {status} {kind}"
    elif not frames or TERMINAL not in frames[-1]:
        error = f"the stream ended with {frames[-1][:120]!r}" if frames else "no events"
    return RunResult(first, total, len(frames), error)


async def load_round(url: str, runs: int, text: str, tag: str) -> tuple[list[RunResult], float]:
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    timeout = httpx.Timeout(120.0, connect=60.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_run(client, url, f"{tag}-{n}", text) for n in range(runs))
        )
        wall = time.perf_counter() - start
    return list(results), wall


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Row:
    workload: str
    runs: int
    rounds: int
    events: float
    ttfe: tuple[float, float, float]  # p50, p99, max (ms)
    total: tuple[float, float, float]
    wall: float  # s, median of rounds
    cpu: float  # server CPU s per round, median
    client_cpu: float  # this process's CPU s per round (the load generator), median
    rss: float  # MB
    errors: int
    first_errors: list[str]


def measure(
    workload: str, text: str, *, runs: int, rounds: int, step_delay: float, first_delay: float
) -> Row:
    with tempfile.TemporaryDirectory(prefix="tiller-bench-serve-") as tmp:
        server = Server(Path(tmp), step_delay, first_delay)
        try:
            server.wait_ready()
            # Warm-up: imports, the store's tables, the first connections.
            asyncio.run(load_round(server.url, 20, text, "warm"))
            results: list[RunResult] = []
            walls, cpus, client_cpus = [], [], []
            for n in range(rounds):
                cpu, client_cpu = server.cpu_seconds(), time.process_time()
                got, wall = asyncio.run(load_round(server.url, runs, text, f"round{n}"))
                cpus.append(server.cpu_seconds() - cpu)
                client_cpus.append(time.process_time() - client_cpu)
                results += got
                walls.append(wall)
            rss = server.peak_rss_mb()
        finally:
            server.stop()
    ok = [r for r in results if r.error is None]
    errors = [r.error for r in results if r.error is not None]
    ttfe = [r.first_event * 1000 for r in ok]
    total = [r.total * 1000 for r in ok]

    def spread(values: list[float]) -> tuple[float, float, float]:
        if not values:
            return (math.nan, math.nan, math.nan)
        return (nearest_rank(values, 0.5), nearest_rank(values, 0.99), max(values))

    return Row(
        workload=workload,
        runs=runs,
        rounds=rounds,
        events=statistics.mean(r.events for r in ok) if ok else math.nan,
        ttfe=spread(ttfe),
        total=spread(total),
        wall=statistics.median(walls),
        cpu=statistics.median(cpus),
        client_cpu=statistics.median(client_cpus),
        rss=rss,
        errors=len(errors),
        first_errors=errors[:5],
    )


def report(args: argparse.Namespace) -> int:
    workloads = [("echo", "hello from the benchmark")]
    if args.slow:
        workloads.append(("slow 3", "slow 3"))
    rows = [
        measure(
            name,
            text,
            runs=args.runs,
            rounds=args.rounds,
            step_delay=args.step_delay,
            first_delay=args.first_delay,
        )
        for name, text in workloads
    ]
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"## Serving under load ({python}, {os.cpu_count()} cores, ", end="")
    print(f"{args.runs} concurrent runs, {args.rounds} rounds)\n")
    print(
        f"Model turns wait {args.first_delay * 1000:.0f} ms (first) / "
        f"{args.step_delay * 1000:.0f} ms (steps); SQLite store; uvicorn subprocess.\n"
    )
    print(
        "| workload | events/run | first event p50 / p99 / max | total p50 / p99 / max "
        "| wall | server CPU | client CPU | server peak RSS | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        ttfe = " / ".join(f"{v:.0f}" for v in row.ttfe)
        total = " / ".join(f"{v:.0f}" for v in row.total)
        print(
            f"| {row.workload} | {row.events:.0f} | {ttfe} ms | {total} ms | {row.wall:.2f} s "
            f"| {row.cpu:.2f} s | {row.client_cpu:.2f} s | {row.rss:.0f} MB | {row.errors} |"
        )
    failed = [e for row in rows for e in row.first_errors]
    for error in failed:
        print(f"\nerror: {error}")
    return 1 if any(row.errors for row in rows) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="concurrent runs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--slow", action="store_true", help="add the `slow 3` workload")
    parser.add_argument("--step-delay", type=float, default=0.02)
    parser.add_argument("--first-delay", type=float, default=0.02)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server subprocess
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.root, args.step_delay, args.first_delay)
        return
    if args.quick:
        args.rounds = 1
    sys.exit(report(args))


if __name__ == "__main__":
    main()
