"""`tiller worker`: claim runs from a fleet's queue and run them, until SIGTERM.

One line per job as it starts and ends (`run-1  started`, `run-1  finished`). SIGTERM or
SIGINT drains: no new claims, every run stops at its next step boundary (checkpointed,
its job back on the queue for another worker), and the command exits 0 once all are
handed back. A second signal stops the runs without waiting for their steps to end.
SIGUSR1 writes where each of the worker's tasks waits (a run, its job lease, its event
log...) to standard error, frame by frame, and the worker goes on: for an operator asking
why a run does not move.
`--max-runs` and `--model-limit MODEL=CONCURRENT[/RPM]` are the fleet's shared limits
(`tiller.fleet.FleetLimits`): give every worker the same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING, Any

import typer

from ._options import agent_help, store_option
from ._otel import OTEL_HELP, otel_or_exit
from ._safe import echo

if TYPE_CHECKING:
    from ..fleet import ModelLimit
    from ..telemetry import Telemetry

__all__ = ["worker_command"]


def worker_command(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    store: str = store_option("The store the fleet shares (sqlite:///PATH on one host)"),
    queue: str = typer.Option("tiller-runs", "--queue", help="The run queue to claim from."),
    concurrency: int = typer.Option(4, "--concurrency", "-c", min=1, help="Runs at once."),
    agent: str | None = typer.Option(
        None, "--agent", help=agent_help("Run every job with it; default: the job's.")
    ),
    name: str | None = typer.Option(None, "--name", help="This worker's name (host:pid:…)."),
    namespace: str = typer.Option("", "--namespace", help="The store namespace."),
    lease: float | None = typer.Option(
        None,
        "--lease",
        min=0.1,
        help="Seconds a job and its run stay claimed without a heartbeat: a killed "
        "worker's runs are taken over that long after. Sets it for the queue, for every "
        "worker; default: keep the queue's (30 for a new queue).",
    ),
    max_deliver: int | None = typer.Option(
        None,
        "--max-deliver",
        min=1,
        help="Deliveries a job gets before it goes to the dead letters (a worker's death "
        "spends one). Sets it for the queue; default: keep the queue's (5 for a new one).",
    ),
    event_log_batch: int = typer.Option(
        32,
        "--event-log-batch",
        min=1,
        help="Events a run buffers before writing them to its event log (fewer: watchers "
        "see them sooner, at a store write each).",
    ),
    max_runs: int | None = typer.Option(
        None,
        "--max-runs",
        min=1,
        help="Runs at once across the whole fleet (every worker gives the same number; "
        "the count is kept in the store).",
    ),
    model_limit: list[str] | None = typer.Option(
        None,
        "--model-limit",
        help="MODEL=CONCURRENT[/RPM]: that model string's calls at once (and requests a "
        "minute) across the fleet; repeat for more models.",
    ),
    otel: bool = typer.Option(False, "--otel", help=OTEL_HELP),
) -> None:
    """Claim runs from the fleet's queue and run each as a durable run."""
    from ..errors import TillerError
    from ..fleet import parse_model_limit

    try:
        per_model = dict(parse_model_limit(text) for text in model_limit or [])
    except TillerError as exc:
        echo(f"tiller: --model-limit: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        with otel_or_exit(otel, "tiller") as telemetry:
            _run_worker(
                store,
                namespace,
                telemetry,
                queue=queue,
                concurrency=concurrency,
                agent=agent,
                name=name,
                lease=lease,
                max_deliver=max_deliver,
                event_log_batch=event_log_batch,
                max_runs=max_runs,
                per_model=per_model,
            )
    except TillerError as exc:
        echo(f"tiller: {exc}", err=True)
        raise typer.Exit(2) from None


def _run_worker(store: str, namespace: str, telemetry: Telemetry | None, **options: Any) -> None:
    """The worker until it stops (`_work`, on an event loop of its own)."""
    asyncio.run(_work(store, namespace, telemetry=telemetry, **options))


async def _work(  # noqa: PLR0913 — the command's options, passed on
    store: str,
    namespace: str,
    *,
    queue: str,
    concurrency: int,
    agent: str | None,
    name: str | None,
    lease: float | None,
    max_deliver: int | None,
    event_log_batch: int,
    max_runs: int | None,
    per_model: dict[str, ModelLimit],
    telemetry: Telemetry | None = None,
) -> None:
    from ..fleet import FleetLimits, Worker
    from ..store import open_bus

    def told(run_id: str, what: str) -> None:
        echo(f"{run_id}  {what}")

    async with await open_bus(store, namespace=namespace) as bus:
        limits = None
        if max_runs is not None or per_model:
            # Fleet-wide slots are held for the queue's lease (the one being set, or the
            # queue's own), as the runs are.
            slot_lease = lease if lease is not None else (await bus.queue(queue)).lease
            limits = FleetLimits(bus, max_runs=max_runs, per_model=per_model, lease=slot_lease)
        worker = Worker(
            bus,
            queue=queue,
            concurrency=concurrency,
            agent=agent,
            name=name,
            lease=lease,
            max_deliver=max_deliver,
            event_log_batch=event_log_batch,
            limits=limits,
            on_job=told,
            telemetry=telemetry,
        )
        if limits is not None:
            limits.holder = worker.name
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                echo("draining: the runs stop at their next step", err=True)
                worker.drain()
            else:
                worker.stop()

        event_loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
        for each in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                event_loop.add_signal_handler(each, on_signal)
        echo(f"worker {worker.name} on {queue} ({concurrency} at once)", err=True)
        try:
            await worker.run()
        finally:
            if limits is not None:
                await limits.aclose()
        echo("drained", err=True)


def _dump_tasks() -> None:
    """SIGUSR1: where each of the worker's tasks waits, on standard error (for an operator
    asking why a run does not move)."""
    import io
    import sys

    out = io.StringIO()
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        out.write(f"--- task {task.get_name()}\n")
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                out.write(
                    f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}\n"
                )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()
