"""`tiller worker` as a real process on a SQLite file store: SIGTERM drains it (the run
stops at its step boundary, another worker finishes it, every call runs once), and a
worker killed with SIGKILL mid-run is recovered by another from the run's checkpoint."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from tiller.fleet import WORKER_LOST, WORKSPACES_BUCKET, Fleet
from tiller.store import Bus, CheckpointStore, open_bus
from tiller.testing import assert_valid_stream

from .conftest import ref, until

pytestmark = pytest.mark.filterwarnings("error")

SRC = Path(__file__).resolve().parents[2] / "src"


def start_worker(
    url: str, agents: ModuleType, tmp_path: Path, name: str, **env: str
) -> subprocess.Popen[str]:
    folder = Path(agents.__file__ or "").parent
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(folder)]),
        "FLEET_LEDGER": agents.LEDGER,
        "FLEET_SLOW_MARK": str(tmp_path / "slow"),
        **env,
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tiller",
            "worker",
            "--store",
            url,
            "--name",
            name,
            "--lease",
            "1",
            "--concurrency",
            "2",
            "--event-log-batch",
            "1",
        ],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def exited(process: subprocess.Popen[str], within: float = 60) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(asyncio.to_thread(process.communicate), within)
    return process.returncode, out, err


async def test_sigterm_drains_at_the_step_boundary(agents: ModuleType, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    (tmp_path / "slow").touch()
    async with await open_bus(url) as bus:
        fleet = Fleet(bus)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="drained")
        first = start_worker(url, agents, tmp_path, "first", FLEET_SLOW_TOOL="2")
        try:
            entered = Path(agents.LEDGER + ".entered.2")

            async def in_step_two() -> bool:
                return await asyncio.to_thread(entered.exists)

            await until(in_step_two, within=60)
            first.send_signal(signal.SIGTERM)  # while step 2's note sleeps
            code, out, err = await exited(first)
        finally:
            first.kill()
        assert code == 0, err
        assert "drained  started" in out and "drained  released" in out
        checkpoint = await CheckpointStore(bus).load("drained")
        assert (checkpoint.status, checkpoint.state.step) == ("running", 2)
        (tmp_path / "slow").unlink()
        second = start_worker(url, agents, tmp_path, "second")
        try:
            record = await handle.result(60)
        finally:
            second.send_signal(signal.SIGTERM)
            code, out, err = await exited(second)
        assert code == 0, err
        assert "drained  finished" in out
    assert (record.status, record.worker) == ("completed", "second")
    ledger = Counter(agents.ledger_lines())
    assert len(ledger) == 3 and set(ledger.values()) == {1}


async def test_a_killed_worker_is_recovered_from_the_checkpoint(
    agents: ModuleType, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    (tmp_path / "slow").touch()
    async with await open_bus(url) as bus:
        fleet = Fleet(bus)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="killed")
        first = start_worker(url, agents, tmp_path, "first", FLEET_SLOW_TURN="2")
        try:
            await until(lambda: _completed(bus, "killed", "killed-call-1"), within=60)
            first.send_signal(signal.SIGKILL)  # in step 2's model call
        finally:
            first.kill()
            code, _, _ = await exited(first)
        assert code == -signal.SIGKILL
        (tmp_path / "slow").unlink()
        second = start_worker(url, agents, tmp_path, "second")
        try:
            record = await handle.result(60)
            events = [e async for e in fleet.handle("killed").events()]
        finally:
            second.send_signal(signal.SIGTERM)
            await exited(second)
    assert (record.status, record.worker) == ("completed", "second")
    ledger = Counter(agents.ledger_lines())
    assert len(ledger) == 3 and set(ledger.values()) == {1}  # step 1's call did not run again
    kinds = [e["type"] for e in events]
    assert kinds.count("RUN_STARTED") == 2
    lost = [e for e in events if e.get("code") == WORKER_LOST]
    assert len(lost) == 1 and kinds.index("RUN_ERROR") < kinds.index("RUN_STARTED", 1)
    assert_valid_stream(events)


async def test_a_killed_workers_snapshot_run_keeps_the_files_of_its_completed_calls(
    agents: ModuleType, tmp_path: Path
) -> None:
    """The run wrote mine.txt in its private copy and the write was journaled completed;
    its worker is killed in the next model call. The recovering worker does not run the
    write again (law 5), so its copy must have it: the files were kept before the
    completion was recorded. (Before: recovered on a fresh copy of the fixture, the run
    read "missing".) Once the run ended, its kept copy is dropped."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    (tmp_path / "slow").touch()
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "notes.txt").write_text("start\n")
    async with await open_bus(url) as bus:
        fleet = Fleet(bus)
        handle = await fleet.submit(
            ref(agents, "keeper"), "kept", workspace=fixture, snapshot=True, run_id="kept"
        )
        first = start_worker(url, agents, tmp_path, "first", FLEET_SLOW_TURN="2")
        try:
            await until(lambda: _completed(bus, "kept", "kept-call-1"), within=60)
            first.send_signal(signal.SIGKILL)  # in step 2's model call
        finally:
            first.kill()
            code, _, _ = await exited(first)
        assert code == -signal.SIGKILL
        (tmp_path / "slow").unlink()
        second = start_worker(url, agents, tmp_path, "second")
        try:
            record = await handle.result(60)
            diff = await handle.diff()
        finally:
            second.send_signal(signal.SIGTERM)
            await exited(second)
        kept = await (await bus.kv(WORKSPACES_BUCKET)).get("run/kept")
    assert (record.status, record.worker) == ("completed", "second")
    assert record.text == "recalled: kept"
    assert diff is not None and diff.added == ("mine.txt",)  # against the fixture
    assert kept is None
    assert (fixture / "notes.txt").read_text() == "start\n"


async def _completed(bus: Bus, run_id: str, call_id: str) -> bool:
    """Whether the run's journal records the call as completed (then the worker goes on
    to its next model call, which sleeps: a kill lands between the two steps)."""
    log = (await CheckpointStore(bus).calls(run_id)).get(call_id)
    return log is not None and log.status == "completed"


async def test_a_worker_killed_inside_a_call_leaves_it_for_a_person(
    agents: ModuleType, tmp_path: Path
) -> None:
    """Whether the killed call's side effect happened is unknown (law 5): the next
    worker does not run it again, it records the run as blocked on that call."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    (tmp_path / "slow").touch()
    async with await open_bus(url) as bus:
        handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="uncertain")
        first = start_worker(
            url, agents, tmp_path, "first", FLEET_SLOW_TOOL="2", FLEET_SLOW_SECONDS="60"
        )
        try:
            entered = Path(agents.LEDGER + ".entered.2")

            async def in_step_two() -> bool:
                return await asyncio.to_thread(entered.exists)

            await until(in_step_two, within=60)
            first.send_signal(signal.SIGKILL)
        finally:
            first.kill()
            await exited(first)
        second = start_worker(url, agents, tmp_path, "second")
        try:
            record = await handle.result(60)
        finally:
            second.send_signal(signal.SIGTERM)
            await exited(second)
    assert record.status == "blocked"
    assert record.blocked_calls == ["note (uncertain-call-2)"]
    assert len(agents.ledger_lines()) == 1  # step 1's; step 2's never ran to its end


async def test_sigusr1_says_where_each_of_a_workers_runs_waits(
    agents: ModuleType, tmp_path: Path
) -> None:
    """An operator asking why a run does not move sends the worker SIGUSR1: each of its
    tasks (the run, its job lease, its event log...) and the frames it waits in go to
    its standard error, and the worker goes on."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    (tmp_path / "slow").touch()
    async with await open_bus(url) as bus:
        handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="stuck")
        worker = start_worker(url, agents, tmp_path, "asked", FLEET_SLOW_TOOL="2")
        try:
            entered = Path(agents.LEDGER + ".entered.2")

            async def in_step_two() -> bool:
                return await asyncio.to_thread(entered.exists)

            await until(in_step_two, within=60)
            worker.send_signal(signal.SIGUSR1)  # while step 2's note sleeps
            (tmp_path / "slow").unlink()
            record = await handle.result(60)
            worker.send_signal(signal.SIGTERM)
            code, _out, err = await exited(worker)
        finally:
            worker.kill()
    assert code == 0, err
    assert record.status == "completed"
    assert "--- task tiller-run-stuck" in err and "--- task tiller-job stuck" in err
    assert "_worker.py" in err and " note\n" in err  # down to the tool it waits in
