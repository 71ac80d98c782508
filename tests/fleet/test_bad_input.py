"""What a worker does with jobs it must not run as given: each is settled with a reason,
and the queue goes on."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tiller.errors import UsageError
from tiller.fleet import RUN_QUEUE, Fleet, MalformedJob, RunJob
from tiller.store import Bus, CheckpointStore, QueueDepth

from .conftest import Store, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")


async def dead_letters_of(bus: Bus, count: int) -> dict[str, str]:
    queue = await bus.queue(RUN_QUEUE)

    async def enough() -> bool:
        return len(await queue.dead_letters()) >= count

    await until(enough)
    return {letter.id: letter.reason for letter in await queue.dead_letters()}


async def test_a_malformed_payload_is_dead_lettered_with_why(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    queue = await bus.queue(RUN_QUEUE)
    await queue.enqueue(b"not json", job_id="junk")
    await queue.enqueue(b'{"schema_version": 99, "run_id": "x"}', job_id="newer")
    await queue.enqueue(b'{"schema_version": 1, "run_id": "r"}', job_id="no-agent")
    fleet = Fleet(bus)
    async with running_worker(store):
        good = await (await fleet.submit(ref(agents, "three"), "after the junk")).result(30)
        dead = await dead_letters_of(bus, 3)
    assert good.status == "completed"  # the queue was not blocked
    assert "not JSON" in dead["junk"]
    assert "schema version 99" in dead["newer"] and "newer tiller" in dead["newer"]
    assert "needs its agent" in dead["no-agent"]


def test_decoding_names_what_is_wrong() -> None:
    with pytest.raises(MalformedJob) as caught:
        RunJob.decode("j", b'{"schema_version": 1, "run_id": "", "agent": "a:b", "prompt": "p"}')
    assert "run_id" in str(caught.value)
    with pytest.raises(MalformedJob, match="not a JSON object"):
        RunJob.decode("j", b"[1]")


@pytest.mark.parametrize(
    ("attr", "expected"),
    [
        ("missing", "has no attribute 'missing'"),
        ("broken", "failed: RuntimeError: this factory always fails"),
    ],
)
async def test_an_agent_that_does_not_load_fails_its_run(
    store: Store, bus: Bus, agents: ModuleType, attr: str, expected: str
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, attr), "go", run_id="bad-agent")
    async with running_worker(store):
        record = await handle.result(30)
        dead = await dead_letters_of(bus, 1)
    assert record.status == "failed"
    assert record.error is not None and expected in record.error
    assert expected in dead["bad-agent"]


async def test_a_missing_module_says_what_to_check(store: Store, bus: Bus) -> None:
    handle = await Fleet(bus).submit("no_such_module_here:agent", "go")
    async with running_worker(store):
        record = await handle.result(30)
    assert record.status == "failed" and "cannot import module" in (record.error or "")


async def test_a_shared_workspace_missing_here_fails_the_run(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    handle = await Fleet(bus).submit(
        ref(agents, "three"), "go", workspace=str(tmp_path / "not-mounted")
    )
    async with running_worker(store):
        record = await handle.result(30)
    assert record.status == "failed" and "not a directory on this worker" in (record.error or "")
    assert agents.ledger_lines() == []


async def test_a_shared_workspace_is_the_runs_jail(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    handle = await Fleet(bus).submit(ref(agents, "writer"), "go", workspace=str(shared))
    async with running_worker(store):
        record = await handle.result(30)
    # `write` asks, and a fleet run has no one to ask: it is held for a person.
    assert record.status == "suspended"


async def test_a_finished_run_is_acked_without_running_again(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="done-once")
    async with running_worker(store):
        first = await handle.result(30)
        # The same run again, under another job id (as after the queue's dedupe window).
        job = RunJob(run_id="done-once", agent=ref(agents, "three"), prompt="go")
        queue = await bus.queue(RUN_QUEUE)
        await queue.enqueue(job.encode(), job_id="done-once-again")

        async def settled() -> bool:
            depth = await queue.depth()
            return depth.waiting == depth.in_flight == 0

        await until(settled)
    assert len(agents.ledger_lines()) == 3  # it ran once
    assert await handle.result(1) == first
    assert await queue.dead_letters() == []


async def test_a_batch_cancelled_before_its_runs_start_runs_none(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handles = [await fleet.submit(ref(agents, "three"), "go", batch="nightly") for _ in range(3)]
    other = await fleet.submit(ref(agents, "three"), "go", batch="other")
    cancelled = await fleet.cancel_batch("nightly", "not tonight")
    assert sorted(cancelled) == sorted(h.run_id for h in handles)
    async with running_worker(store):
        records = [await h.result(30) for h in handles]
        kept = await other.result(30)
    assert {(r.status, r.batch) for r in records} == {("cancelled", "nightly")}
    assert kept.status == "completed"
    assert len(agents.ledger_lines()) == 3  # only `other` ran


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("victim/lease", "no '/'"),  # would be another run's lease key in the store
        ("victim/calls/victim-call-2", "no '/'"),  # another run's call record
        ("../escape", "starting with"),
        ("has space", "no '/', spaces"),
        ("x" * 5000, "at most 200"),  # a NATS control line overflows: the connection drops
        ("victim.continue.7", "continuations"),  # would swallow victim's continuation job
    ],
)
async def test_a_hostile_run_id_is_refused_at_submit_and_dead_lettered_on_the_queue(
    store: Store, bus: Bus, agents: ModuleType, run_id: str, expected: str
) -> None:
    fleet = Fleet(bus)
    with pytest.raises(UsageError, match="run id") as caught:
        await fleet.submit(ref(agents, "three"), "go", run_id=run_id)
    assert expected in str(caught.value)
    with pytest.raises(MalformedJob, match=expected.replace(".", r"\.")):
        RunJob.decode("j", RunJob.model_construct(run_id=run_id, agent="a:b", prompt="p").encode())
    assert await (await bus.queue(RUN_QUEUE)).depth() == QueueDepth(waiting=0, in_flight=0)


async def test_an_empty_run_id_or_prompt_is_a_usage_error_not_a_pydantic_one(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    with pytest.raises(UsageError, match="non-empty"):
        await fleet.submit(ref(agents, "three"), "go", run_id="")
    with pytest.raises(UsageError, match="needs a prompt"):
        await fleet.submit(ref(agents, "three"), "", run_id="no-prompt")
    with pytest.raises(UsageError, match="budget"):
        await fleet.submit(ref(agents, "three"), "go", budget={"max_steps": 0})  # type: ignore[arg-type]


async def test_a_ten_megabyte_prompt_runs(store: Store, bus: Bus, agents: ModuleType) -> None:
    """Far over NATS's 1 MB message limit: the job, the checkpoint and the event log carry
    it (through the object store), and the run completes."""
    prompt = "x" * (10 * 1024 * 1024)
    handle = await Fleet(bus).submit(ref(agents, "three"), prompt, run_id="huge-prompt")
    async with running_worker(store):
        record = await handle.result(60)
    assert (record.status, record.text) == ("completed", "done after 3 notes")
    state = (await CheckpointStore(bus).load("huge-prompt")).state
    assert state.messages[0].text == prompt  # type: ignore[union-attr]


async def test_continuing_a_run_whose_id_a_fleet_cannot_take_says_so(bus: Bus) -> None:
    with pytest.raises(UsageError, match="no '/'"):
        await Fleet(bus).continue_run("made/elsewhere")


async def test_a_reopened_batch_runs_its_queued_and_new_runs_and_keeps_its_cancelled_ones(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    first = await fleet.submit(ref(agents, "three"), "go", batch="again")
    await fleet.cancel_batch("again", "not now")
    async with running_worker(store):
        assert (await first.result(30)).status == "cancelled"
    queued = await fleet.submit(ref(agents, "three"), "go", batch="again")
    await fleet.reopen_batch("again")
    await fleet.reopen_batch("again")  # not cancelled: nothing changes
    assert await fleet.batches.cancelled("again") is None
    later = await fleet.submit(ref(agents, "three"), "go", batch="again")
    async with running_worker(store):
        records = [await queued.result(30), await later.result(30)]
    assert [r.status for r in records] == ["completed", "completed"]
    assert (await first.result(30)).status == "cancelled"  # its result stands
    await fleet.cancel_batch("again", "now for good")
    assert (await fleet.batches.cancelled("again")).reason == "now for good"  # type: ignore[union-attr]
