"""`tiller submit`, `tiller fleet status` and `tiller fleet cancel` as real commands on a
SQLite file store (one on NATS), with a worker running in the test's process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from tiller.fleet import (
    Fleet,
    ResultStore,
    RunJob,
    SharedWorkspace,
    SnapshotWorkspace,
    WorkerRegistry,
    materialize,
)
from tiller.ops import held_approvals
from tiller.store import QueueOptions, open_bus
from tiller.testing import assert_valid_stream

from .conftest import NATS_URL, Store, ref, running_worker, until

SRC = Path(__file__).resolve().parents[2] / "src"


async def tiller(
    agents: ModuleType, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m tiller ARGS` run from the agents' directory (as a person would, next to
    their code), off the event loop so an in-process worker keeps running."""
    folder = Path(agents.__file__ or "").parent
    env = {**os.environ, "PYTHONPATH": str(SRC), "FLEET_LEDGER": agents.LEDGER}
    env.pop("TILLER_STORE", None)
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tiller", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        cwd=folder,
        env=env,
    )


def sqlite(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02")


async def test_submit_prints_the_run_id_and_queues_the_run(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    done = await tiller(agents, "submit", ref(agents, "three"), "go", "--store", store.url)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert run_id.startswith("run-")
    async with running_worker(store), await store.open() as bus:
        record = await Fleet(bus).handle(run_id).result(60)
    assert record.status == "completed"
    assert record.queue == "tiller-runs"  # where a continuation goes
    assert len(agents.ledger_lines()) == 3


async def test_submit_wait_prints_the_result_and_exits_by_status(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    async with running_worker(store):
        done = await tiller(
            agents,
            "submit",
            ref(agents, "three"),
            "go",
            "--store",
            store.url,
            "--run-id",
            "waited",
            "--wait",
        )
        stopped = await tiller(
            agents,
            "submit",
            ref(agents, "five"),
            "go",
            "--store",
            store.url,
            "--run-id",
            "capped",
            "--max-steps",
            "2",
            "--wait",
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "waited"
    assert lines[1].startswith("waited  completed (completed)")
    assert "final text  done after 3 notes" in lines
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "capped  stopped" in stopped.stdout


async def test_submit_follow_streams_valid_agui_events(agents: ModuleType, tmp_path: Path) -> None:
    store = sqlite(tmp_path)
    async with running_worker(store, event_log_batch=1):
        done = await tiller(
            agents,
            "submit",
            ref(agents, "three"),
            "go",
            "--store",
            store.url,
            "--run-id",
            "followed",
            "--follow",
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "followed"
    events = [orjson.loads(line) for line in lines[1:] if line.startswith("{")]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    assert_valid_stream(events)
    assert lines[-2].startswith("followed  completed")


async def test_the_prompt_comes_from_stdin_or_a_file(agents: ModuleType, tmp_path: Path) -> None:
    store = sqlite(tmp_path)
    (tmp_path / "prompt.txt").write_text("a long prompt\nfrom a file\n")
    piped = await tiller(
        agents, "submit", ref(agents, "three"), "-", "--store", store.url, stdin="piped in\n"
    )
    filed = await tiller(
        agents,
        "submit",
        ref(agents, "three"),
        "--prompt-file",
        str(tmp_path / "prompt.txt"),
        "--store",
        store.url,
    )
    assert piped.returncode == 0 and filed.returncode == 0, piped.stderr + filed.stderr
    async with await store.open() as bus:
        queue = await bus.queue("tiller-runs")
        prompts = set()
        for _ in range(2):
            job = await queue.claim("test")
            assert job is not None
            prompts.add(RunJob.decode(job.id, job.payload).prompt)
    assert prompts == {"piped in\n", "a long prompt\nfrom a file\n"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-steps", "0"], "--max-steps must be at least 1"),
        (["--max-tokens", "-5"], "--max-tokens must be at least 1"),
        (["--max-cost", "-1"], "--max-cost must be a non-negative"),
        (["--store", "store.db"], "--store: 'store.db' is not a store URL"),
        (["--workspace", "/no/such/dir"], "is not a directory"),
        (["--workspace", "/no/such/dir", "--snapshot"], "does not exist"),
        (["--snapshot"], "--snapshot needs --workspace"),
    ],
)
async def test_bad_input_is_one_line_and_enqueues_nothing(
    agents: ModuleType, tmp_path: Path, args: list[str], says: str
) -> None:
    store = sqlite(tmp_path)
    done = await tiller(agents, "submit", ref(agents, "three"), "go", "--store", store.url, *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    async with await store.open() as bus:
        depth = await (await bus.queue("tiller-runs")).depth()
    assert (depth.waiting, depth.in_flight) == (0, 0)


@pytest.mark.parametrize(
    ("agent", "prompt", "says"),
    [
        ("no_such_module_here:agent", "go", "no module 'no_such_module_here' is importable"),
        ("just-a-name", "go", "must be a module:attr reference"),
        (None, "   ", "the prompt is empty"),
        # Loaded first, as `tiller run --agent` does: a non-agent is queued no more.
        ("os:path", "go", "'os:path' is a module, not an Agent"),
        ("os:getcwd", "go", "'os:getcwd'() returned a str, not an Agent"),
    ],
)
async def test_an_agent_or_prompt_no_worker_could_run_is_refused(
    agents: ModuleType, tmp_path: Path, agent: str | None, prompt: str, says: str
) -> None:
    store = sqlite(tmp_path)
    done = await tiller(
        agents, "submit", agent or ref(agents, "three"), prompt, "--store", store.url
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    async with await store.open() as bus:
        depth = await (await bus.queue("tiller-runs")).depth()
    assert depth.waiting == 0


async def test_an_agent_whose_code_is_in_the_shared_workspace_is_refused(
    agents: ModuleType, tmp_path: Path
) -> None:
    """Law 11: the runs' model writes the shared workspace; an agent defined there would
    run what it wrote when a worker loads it."""
    store = sqlite(tmp_path)
    folder = Path(agents.__file__ or "").parent
    done = await tiller(
        agents, "submit", ref(agents, "three"), "go", "--store", store.url, "-w", str(folder)
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "inside the run's workspace" in done.stderr
    async with await store.open() as bus:
        assert (await (await bus.queue("tiller-runs")).depth()).waiting == 0


async def test_no_check_queues_an_agent_only_the_workers_have(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    done = await tiller(
        agents, "submit", "elsewhere:agent", "go", "--store", store.url, "--no-check"
    )
    assert done.returncode == 0, done.stderr
    async with await store.open() as bus:
        assert (await (await bus.queue("tiller-runs")).depth()).waiting == 1


async def test_a_workspace_is_shared_by_path_or_snapshotted(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "seed.txt").write_text("seed")
    common = ("submit", ref(agents, "three"), "go", "--store", store.url, "-w", str(fixture))
    shared = await tiller(agents, *common, "--run-id", "shared")
    snapped = await tiller(agents, *common, "--run-id", "snapped", "--snapshot")
    assert shared.returncode == 0 and snapped.returncode == 0, shared.stderr + snapped.stderr
    (fixture / "seed.txt").write_text("changed after the snapshot")
    async with await store.open() as bus:
        queue = await bus.queue("tiller-runs")
        jobs = {}
        for _ in range(2):
            job = await queue.claim("test")
            assert job is not None
            jobs[job.id] = RunJob.decode(job.id, job.payload)
        assert jobs["shared"].workspace == SharedWorkspace(path=str(fixture))
        spec = jobs["snapped"].workspace
        assert isinstance(spec, SnapshotWorkspace)
        async with materialize(bus, spec, "snapped", root=tmp_path / "runs") as copy:
            assert (copy / "seed.txt").read_text() == "seed"


async def test_fleet_status_shows_depth_and_dead_letters_with_why(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    async with await store.open() as bus:
        queue = await bus.queue("tiller-runs")
        await queue.enqueue(b"not a job", job_id="junk")
        junk = await queue.claim("test")
        assert junk is not None
        await queue.term(junk, "job 'junk' is not a run job: not JSON")
        await Fleet(bus).submit(ref(agents, "three"), "go", run_id="later")
    shown = await tiller(agents, "fleet", "status", "--store", store.url)
    listed = await tiller(agents, "fleet", "status", "--store", store.url, "--dead-letters")
    as_json = await tiller(
        agents, "fleet", "status", "--store", store.url, "--dead-letters", "--json"
    )
    assert shown.returncode == listed.returncode == as_json.returncode == 0, shown.stderr
    assert "queue tiller-runs: 1 waiting, 0 in flight, 1 dead letter(s)" in shown.stdout
    assert "no live workers" in shown.stdout
    assert "junk" not in shown.stdout  # listed only when asked
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("junk")]
    assert "is not a run job: not JSON" in row
    status = orjson.loads(as_json.stdout)
    assert (status["waiting"], status["in_flight"], status["dead_letters"]) == (1, 0, 1)
    assert [d["id"] for d in status["dead_letter_jobs"]] == ["junk"]


async def test_fleet_status_lists_the_live_workers(agents: ModuleType, tmp_path: Path) -> None:
    store = sqlite(tmp_path)
    async with running_worker(store, name="w-one", concurrency=3, lease=7.0):

        async def registered() -> bool:
            async with await store.open() as bus:
                return bool((await Fleet(bus).status()).workers)

        await until(registered)
        async with await store.open() as bus:
            registry = WorkerRegistry(bus)
            # The live workers' lease, as each registered it.
            assert await registry.lease_of("tiller-runs") == 7.0
            assert await registry.lease_of("another-queue") is None
        shown = await tiller(agents, "fleet", "status", "--store", store.url, "--json")
        table = await tiller(agents, "fleet", "status", "--store", store.url)
    assert shown.returncode == 0, shown.stderr
    (one,) = orjson.loads(shown.stdout)["workers"]
    assert (one["name"], one["pid"], one["concurrency"], one["in_flight"]) == (
        "w-one",
        os.getpid(),
        3,
        0,
    )
    assert 0 < one["beat_at"] < one["expires_at"]
    assert one["lease"] == 7.0
    (row,) = [line for line in table.stdout.splitlines() if line.startswith("w-one")]
    assert row.split()[2:6] == [str(os.getpid()), "tiller-runs", "3", "0"]
    assert row.endswith("ago")


async def test_fleet_cancel_stops_the_batch_before_it_starts(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    for run_id in ("b-1", "b-2"):
        done = await tiller(
            agents,
            "submit",
            ref(agents, "three"),
            "go",
            "--store",
            store.url,
            "--batch",
            "nightly",
            "--run-id",
            run_id,
        )
        assert done.returncode == 0, done.stderr
    cancelled = await tiller(
        agents, "fleet", "cancel", "nightly", "--store", store.url, "--reason", "wrong fixture"
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == "cancelled batch nightly: 2 run(s) asked to stop"
    async with running_worker(store), await store.open() as bus:
        records = [await Fleet(bus).handle(r).result(60) for r in ("b-1", "b-2")]
    assert {r.status for r in records} == {"cancelled"}
    assert agents.ledger_lines() == []


async def test_submit_and_wait_on_nats(agents: ModuleType) -> None:
    store = Store(NATS_URL, namespace=f"t{uuid.uuid4().hex[:12]}")
    try:
        async with running_worker(store):
            done = await tiller(
                agents,
                "submit",
                ref(agents, "three"),
                "go",
                "--store",
                NATS_URL,
                "--namespace",
                store.namespace,
                "--run-id",
                "on-nats",
                "--wait",
            )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1].startswith("on-nats  completed")
        async with await store.open() as bus:
            record = await ResultStore(bus).get("on-nats")
        assert record is not None and record.status == "completed"
    finally:
        async with await open_bus(NATS_URL, namespace=store.namespace) as bus:
            await bus.delete_namespace()  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "nats"])
async def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store several processes reach: a SQLite file, or a NATS namespace of its own."""
    if request.param == "sqlite":
        yield sqlite(tmp_path)
        return
    store = Store(NATS_URL, namespace=f"t{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        async with await open_bus(NATS_URL, namespace=store.namespace) as bus:
            await bus.delete_namespace()  # type: ignore[attr-defined]


async def test_submit_keeps_the_lease_and_limit_a_worker_set(
    agents: ModuleType, shared_store: Store
) -> None:
    """`tiller worker --lease 2 --max-deliver 3` sets them for the queue; a `tiller
    submit` made while no worker is live (so none can be asked) keeps them, and a worker
    started without them runs with the queue's."""
    store = shared_store
    where = ["--store", store.url, "--namespace", store.namespace]
    async with running_worker(store, lease=2.0, max_deliver=3):
        pass  # it set them and stopped
    done = await tiller(agents, "submit", ref(agents, "three"), "go", *where, "--run-id", "r")
    assert done.returncode == 0, done.stderr
    shown = await tiller(agents, "fleet", "status", *where, "--json")
    table = await tiller(agents, "fleet", "status", *where)
    assert shown.returncode == table.returncode == 0, shown.stderr
    status = orjson.loads(shown.stdout)
    assert (status["lease"], status["max_deliver"]) == (2.0, 3)
    assert "lease 2 s, 3 deliveries" in table.stdout
    async with running_worker(store) as worker, await store.open() as bus:
        record = await Fleet(bus).handle("r").result(60)
        assert record.status == "completed"

        async def registered() -> bool:
            return bool((await Fleet(bus).status()).workers)

        await until(registered)
        (info,) = (await Fleet(bus).status()).workers
        assert (info.name, info.lease) == (worker.name, 2.0)  # the queue's, not 30
        assert await (await bus.queue("tiller-runs")).options() == QueueOptions(2.0, 3)


async def held_id(store: Store, run_id: str) -> str:
    async with await store.open() as bus:
        [pending] = [a for a in await held_approvals(bus) if a.run_id == run_id]
    return pending.id


async def test_approving_a_fleet_run_queues_its_continuation(
    agents: ModuleType, tmp_path: Path
) -> None:
    """The approving process does not run it: a worker does, and its record says so."""
    store = sqlite(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    async with running_worker(store, name="the-worker"):
        async with await store.open() as bus:
            handle = await Fleet(bus).submit(
                ref(agents, "writer"), "write it", run_id="ok-me", workspace=str(shared)
            )
            held = await handle.result(60)
        assert held.status == "suspended"
        done = await tiller(agents, "approve", await held_id(store, "ok-me"), "--store", store.url)
        assert done.returncode == 0, done.stderr
        assert "run ok-me is a fleet run: queued its continuation ok-me.continue." in done.stdout
        assert "resuming run" not in done.stdout
        async with await store.open() as bus:
            record = await Fleet(bus).handle("ok-me").result(60, through_holds=True)
    assert (record.status, record.text, record.worker) == (
        "completed",
        "wrote: written",
        "the-worker",
    )
    assert (shared / "out.txt").read_text() == "hello"  # the continuation's workspace is the run's


async def test_denying_a_fleet_run_queues_its_continuation(
    agents: ModuleType, tmp_path: Path
) -> None:
    store = sqlite(tmp_path)
    async with await store.open() as bus:
        handle = await Fleet(bus).submit(ref(agents, "writer"), "write it", run_id="no-me")
    async with running_worker(store):
        async with await store.open() as bus:
            assert (await Fleet(bus).handle("no-me").result(60)).status == "suspended"
        done = await tiller(
            agents,
            "deny",
            await held_id(store, "no-me"),
            "--reason",
            "not now",
            "--store",
            store.url,
        )
        assert done.returncode == 0, done.stderr
        assert "queued its continuation no-me.continue." in done.stdout
        async with await store.open() as bus:
            record = await Fleet(bus).handle(handle.run_id).result(60, through_holds=True)
    assert record.status == "completed"
    assert "Denied by the user: not now" in record.text


async def test_a_run_that_is_not_a_fleet_run_still_resumes_here(
    agents: ModuleType, tmp_path: Path
) -> None:
    """The fleet check does not take over ordinary headless runs."""
    store = sqlite(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    async with await store.open() as bus:
        await Fleet(bus).submit(
            ref(agents, "writer"), "write it", run_id="local", workspace=str(shared)
        )
        async with running_worker(store):
            assert (await Fleet(bus).handle("local").result(60)).status == "suspended"
        # Its result record gone, it is a plain suspended durable run.
        await (await bus.kv("tiller-run-results")).delete("local")
        approval = await held_id(store, "local")
    done = await tiller(agents, "approve", approval, "--store", store.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming run local" in done.stdout and "fleet run" not in done.stdout
    assert (shared / "out.txt").read_text() == "hello"  # written by this process
