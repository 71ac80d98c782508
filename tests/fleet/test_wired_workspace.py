"""A worker gives each run of a snapshot workspace its own copy of the fixture, stores
what the run changed, and names it in the run's result; on memory, SQLite and NATS."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType

import pytest

from tiller.errors import UsageError
from tiller.fleet import (
    WORKSPACES_BUCKET,
    FixtureNotFound,
    Fleet,
    LocalWorkspaces,
    RunJob,
    SharedWorkspace,
    SnapshotWorkspace,
    load_diff,
    snapshot_workspace,
)
from tiller.ops import approve, held_approvals
from tiller.store import Bus, MemoryBus

from .conftest import Store, ref, running_worker

pytestmark = pytest.mark.filterwarnings("error")


def fixture_dir(tmp_path: Path) -> Path:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "notes.txt").write_text("start\n")
    return fixture


async def test_two_runs_of_one_fixture_work_apart_and_keep_their_diffs(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    fixture = fixture_dir(tmp_path)
    fleet = Fleet(bus)
    one = await fleet.submit(ref(agents, "scribe"), "one", workspace=fixture, snapshot=True)
    spec = await snapshot_workspace(bus, fixture)  # the same fixture: the same spec
    two = await fleet.submit(ref(agents, "scribe"), "two", workspace=spec)
    async with running_worker(store, concurrency=2):
        first, second = await one.result(30), await two.result(30)
        diff_one, diff_two = await one.diff(), await two.diff()
    # Neither saw the other's mine.txt: each worked in a copy of its own.
    assert (first.status, first.text) == ("completed", "before: nothing")
    assert (second.status, second.text) == ("completed", "before: nothing")
    assert first.diff_ref is not None and second.diff_ref is not None
    assert first.diff_ref != second.diff_ref
    assert diff_one is not None and diff_two is not None
    assert diff_one.manifest == diff_two.manifest == spec.manifest
    assert (diff_one.added, diff_one.modified, diff_one.deleted) == (
        ("mine.txt",),
        ("notes.txt",),
        (),
    )
    notes = next(c for c in diff_two.changes if c.path == "notes.txt")
    assert notes.text_diff is not None and "+two" in notes.text_diff
    assert "+one" not in notes.text_diff
    assert (await load_diff(bus, first.diff_ref)).changes == diff_one.changes
    # The fixture itself is as it was.
    assert sorted(p.name for p in fixture.iterdir()) == ["notes.txt"]
    assert (fixture / "notes.txt").read_text() == "start\n"


async def test_a_fixture_missing_from_the_store_fails_its_run_not_the_worker(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    lost = await fleet.submit(
        ref(agents, "three"), "go", workspace=SnapshotWorkspace(manifest="0" * 64)
    )
    after = await fleet.submit(ref(agents, "three"), "then this")
    async with running_worker(store):
        record = await lost.result(30)
        later = await after.result(30)
    assert record.status == "failed" and record.diff_ref is None
    assert "is not in the store" in (record.error or "")
    assert later.status == "completed"  # the worker went on
    assert len(agents.ledger_lines()) == 3  # only the second run's calls


async def test_a_shared_workspace_keeps_no_diff(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    shared = fixture_dir(tmp_path)
    handle = await Fleet(bus).submit(ref(agents, "scribe"), "here", workspace=shared)
    async with running_worker(store):
        record = await handle.result(30)
        assert await handle.diff() is None
    assert record.status == "completed" and record.diff_ref is None
    assert (shared / "mine.txt").read_text() == "here"  # worked in place


async def test_submit_snapshots_a_fixture_or_says_what_is_wrong(
    tmp_path: Path, agents: ModuleType
) -> None:
    bus = MemoryBus()
    fleet = Fleet(bus)
    with pytest.raises(FixtureNotFound, match="does not exist"):
        await fleet.submit(ref(agents, "scribe"), "x", workspace=tmp_path / "nope", snapshot=True)
    with pytest.raises(UsageError, match="give workspace= its path"):
        await fleet.submit(ref(agents, "scribe"), "x", snapshot=True)
    # A Path without snapshot=True is a shared path, made absolute.
    handle = await fleet.submit(ref(agents, "scribe"), "x", workspace=Path("rel"))
    queue = await bus.queue("tiller-runs", lease=30.0)
    job = await queue.claim("me")
    assert job is not None and job.id == handle.run_id
    shared = RunJob.decode(job.id, job.payload).workspace
    # SharedWorkspace accepts only an absolute path: the submitter made it one.
    assert isinstance(shared, SharedWorkspace) and shared.path.endswith("/rel")
    await bus.aclose()


async def test_a_drained_snapshot_run_finds_its_files_on_the_next_worker(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    agents.GATES[2], agents.ENTERED[2] = asyncio.Event(), asyncio.Event()
    fixture = fixture_dir(tmp_path)
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "keeper"), "kept", workspace=fixture, snapshot=True)
    async with running_worker(store, name="A") as first:
        async with asyncio.timeout(30):
            await agents.ENTERED[2].wait()  # step 1 wrote mine.txt on A
        first.drain()  # the run stops after step 2; B goes on with it
        agents.GATES[2].set()
    async with running_worker(store, name="B"):
        record = await handle.result(30)
        diff = await handle.diff()
    assert (record.status, record.worker) == ("completed", "B")
    assert record.text == "recalled: kept"  # B's copy had A's write
    assert diff is not None and diff.added == ("mine.txt",)  # against the fixture
    assert diff.modified == ("notes.txt",)


async def test_a_damaged_kept_copy_fails_the_run_saying_so(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    fleet = Fleet(bus)
    spec = await snapshot_workspace(bus, fixture_dir(tmp_path))
    await (await bus.kv(WORKSPACES_BUCKET)).put("run/damaged", b"not a hash")
    handle = await fleet.submit(ref(agents, "scribe"), "x", workspace=spec, run_id="damaged")
    async with running_worker(store):
        record = await handle.result(30)
    assert record.status == "failed"
    assert "run/damaged: not the sha256 of a manifest" in (record.error or "")


async def test_a_suspended_snapshot_run_is_continued_on_its_own_files(
    store: Store, bus: Bus, agents: ModuleType, tmp_path: Path
) -> None:
    fleet = Fleet(bus)
    fixture = fixture_dir(tmp_path)
    handle = await fleet.submit(ref(agents, "asker"), "mine", workspace=fixture, snapshot=True)
    async with running_worker(store):
        held = await handle.result(30)
        assert held.status == "suspended"
        [pending] = await held_approvals(bus)
        await approve(bus, pending.id)
        await fleet.continue_run(handle.run_id)
        record = await handle.result(30, through_holds=True)
        diff = await handle.diff()
    assert (record.status, record.text) == ("completed", "recalled: mine")
    assert diff is not None and diff.added == ("mine.txt", "out.txt")


async def test_a_runs_kept_copy_is_written_only_when_it_changed_and_dropped_at_its_end(
    tmp_path: Path,
) -> None:
    """Keeping after every call must cost little: a copy unchanged since it was
    materialized or last kept writes nothing, and a changed one is read incrementally."""
    async with MemoryBus() as bus:
        spec = await snapshot_workspace(bus, fixture_dir(tmp_path))
        job = RunJob(run_id="r1", agent="m:a", prompt="p", workspace=spec)
        workspaces = LocalWorkspaces(bus, root=tmp_path / "runs")
        kv = await bus.kv(WORKSPACES_BUCKET)
        async with workspaces.open(job) as path:
            await workspaces.keep(job, path)
            assert await kv.get("run/r1") is None  # as materialized: nothing to keep
            (path / "mine.txt").write_text("written")
            await workspaces.keep(job, path)
            first = await kv.get("run/r1")
            assert first is not None
            await workspaces.keep(job, path)  # unchanged since: no new write
            again = await kv.get("run/r1")
            assert again is not None and again.revision == first.revision
        # A later worker materializes the kept copy.
        async with workspaces.open(job) as path:
            assert (path / "mine.txt").read_text() == "written"
        await workspaces.forget(job)
        assert await kv.get("run/r1") is None
