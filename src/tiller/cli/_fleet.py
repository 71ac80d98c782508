"""`tiller fleet status` and `tiller fleet cancel BATCH`: a fleet seen and stopped from
any shell that reaches its store.

`status` shows the live workers (their last heartbeat, `tiller.fleet.WorkerRegistry`),
the queue's depth and in-flight count, its lease and delivery limit (the queue's, as
every worker applies them), and its dead letters (`--dead-letters` lists them
with the reason each was given up on); `--json` prints the same as one JSON object.
`cancel` records the batch's cancellation (runs not started yet never start) and asks
each of its runs to stop (`tiller.store.ControlStore`, applied by the worker running it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ._held import EXIT_OK, age, finish, print_table, timestamp
from ._options import store_option
from ._runs import _with_store
from ._safe import echo

if TYPE_CHECKING:
    from ..fleet import FleetStatus
    from ..store import Bus, DeadLetter

__all__ = ["fleet_app"]

fleet_app = typer.Typer(
    name="fleet",
    help="A fleet of workers on one store: its status, and cancelling a batch.",
    no_args_is_help=True,
    add_completion=False,
)


@fleet_app.command("status")
def status_command(
    *,
    store: str = store_option("The store", existing=True),
    namespace: str = typer.Option("", "--namespace", help="The store namespace."),
    queue: str = typer.Option("tiller-runs", "--queue", help="The run queue."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    dead_letters: bool = typer.Option(
        False, "--dead-letters", help="List the dead letters, with their reasons."
    ),
) -> None:
    """Workers (name, host, pid, concurrency, in flight, last beat), queue depth, in
    flight, lease, delivery limit, dead letters."""

    async def work(bus: Bus) -> int:
        from ..fleet import Fleet

        status = await Fleet(bus, queue).status()  # the queue's lease and limit, kept
        letters = []
        if dead_letters:
            letters = await (await bus.queue(queue)).dead_letters()
        if as_json:
            import orjson

            echo(orjson.dumps(_as_json(queue, status, letters, dead_letters)).decode())
        else:
            _print(bus, queue, status, letters, dead_letters)
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


@fleet_app.command("cancel")
def cancel_command(
    *,
    batch: str = typer.Argument(..., help="The batch (tiller submit --batch)."),
    reason: str = typer.Option("its batch was cancelled", "--reason", help="Why (recorded)."),
    store: str = store_option("The store", existing=True),
    namespace: str = typer.Option("", "--namespace", help="The store namespace."),
    queue: str = typer.Option("tiller-runs", "--queue", help="The run queue."),
) -> None:
    """Cancel every run of BATCH: those not started never start, those running stop."""

    async def work(bus: Bus) -> int:
        from ..fleet import Fleet

        fleet = Fleet(bus, queue)
        runs = await fleet.cancel_batch(batch, reason)
        echo(f"cancelled batch {batch}: {len(runs)} run(s) asked to stop")
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


def _as_json(
    queue: str, status: FleetStatus, letters: list[DeadLetter], listed: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "queue": queue,
        "workers": [
            {
                "name": w.name,
                "host": w.host,
                "pid": w.pid,
                "queue": w.queue,
                "concurrency": w.concurrency,
                "in_flight": w.in_flight,
                "lease": w.lease,
                "started_at": w.started_at,
                "expires_at": w.expires_at,
                "beat_at": w.beat_at,
            }
            for w in status.workers
        ],
        "waiting": status.depth.waiting,
        "in_flight": status.in_flight,
        "lease": status.options.lease,
        "max_deliver": status.options.max_deliver,
        "dead_letters": status.dead_letters,
    }
    if listed:
        out["dead_letter_jobs"] = [
            {"id": d.id, "reason": d.reason, "attempt": d.attempt, "at": d.at} for d in letters
        ]
    return out


def _print(
    bus: Bus, queue: str, status: FleetStatus, letters: list[DeadLetter], listed: bool
) -> None:
    now = bus.clock()
    echo(
        f"queue {queue}: {status.depth.waiting} waiting, {status.in_flight} in flight, "
        f"{status.dead_letters} dead letter(s); lease {status.options.lease:g} s, "
        f"{status.options.max_deliver} deliveries"
    )
    if status.workers:
        rows = [
            (
                w.name,
                w.host,
                str(w.pid),
                w.queue,
                str(w.concurrency),
                str(w.in_flight),
                age(now - w.beat_at) + " ago" if w.beat_at else "?",
            )
            for w in status.workers
        ]
        header = ("WORKER", "HOST", "PID", "QUEUE", "CONCURRENCY", "IN FLIGHT", "LAST BEAT")
        print_table(header, rows)
    else:
        echo("no live workers (start one: tiller worker --store ...)")
    if listed and letters:
        print_table(
            ("DEAD LETTER", "ATTEMPT", "AT", "REASON"),
            [(d.id, str(d.attempt), timestamp(d.at), d.reason) for d in letters],
        )
