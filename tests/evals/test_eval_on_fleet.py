"""An eval on a fleet: the same dataset and scorers run in process and on the fleet's
workers (in this process or `tiller worker` processes, on SQLite and on NATS) give the same
records, field by field, but for the timings that must differ; a missing fixture, a job
that fails on its worker and a cancel are each the case's, as in process."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tiller.cancel import CancellationToken
from tiller.errors import UsageError
from tiller.evals import (
    Case,
    CaseBudget,
    CaseResultRecord,
    Eval,
    EvalResultStore,
    ExactMatch,
    JsonMatch,
    LlmJudge,
    ToolTraceMatch,
    WorkspaceCheck,
    rescore,
)
from tiller.fleet import Fleet, Worker
from tiller.loop import Agent, Budget, Pricing
from tiller.model import ScriptedModel
from tiller.store import Bus, MemoryBus, open_bus

from ._runner_support import Recording

pytestmark = pytest.mark.filterwarnings("error")

NATS_URL = "nats://127.0.0.1:4222"
SRC = Path(__file__).resolve().parents[2] / "src"

AGENTS = '''
"""Agents for the eval-on-a-fleet tests, importable by reference here and in workers."""

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, tool

#: In-process workers: `edit` of a prompt waits for GATES[prompt] if set.
GATES = {}
ENTERED = {}


@tool(read_only=True)
async def edit(path: str, text: str, ctx: ExecContext) -> str:
    """Write `text` to `path` in the workspace. (Declared read-only so that it runs
    without asking: these tests are about where the run runs, not approval.)"""
    if text in ENTERED:
        ENTERED[text].set()
    slow = os.environ.get("EVAL_SLOW_MARK")
    if slow and Path(slow).exists():
        Path(slow + ".entered").touch()
        await asyncio.sleep(60)  # a worker killed meanwhile dies mid-call
    if text in GATES:
        await GATES[text].wait()
    target = ctx.workdir / path
    target.parent.mkdir(parents=True, exist_ok=True)
    before = target.read_text() if target.exists() else "nothing"
    target.write_text(text)
    return "was: " + before


def coder():
    """Rewrites main.py and adds docs/notes.md (two calls in one step), calls a tool it
    does not have (refused as unknown), then answers."""

    def answer(messages, info):
        made = sum(1 for m in messages if getattr(m, "tool_calls", ()))
        prompt = messages[0].text
        if made == 0:
            return {"tool_calls": [
                {"name": "edit", "arguments": {"path": "main.py", "text": "print(%r)\\n" % prompt}},
                {"name": "edit", "arguments": {"path": "docs/notes.md", "text": prompt}},
            ]}
        if made == 1:
            return {"tool_calls": [{"name": "missing_tool", "arguments": {}}]}
        return "fixed " + prompt

    return Agent(ScriptedModel(answer), [edit], name="coder")


class Answer(BaseModel):
    value: int


def structured():
    return Agent(ScriptedModel(['{"value": 42}']), [], name="structured", output_type=Answer)


def broken():
    raise RuntimeError("this factory always fails")


def asking():
    """Writes a file with `write_file`, which needs approval, then answers."""
    from tiller.tools.builtin import write_file

    def answer(messages, info):
        if info.turn == 1:
            call = {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}
            return {"tool_calls": [call]}
        return "asked"

    return Agent(ScriptedModel(answer), [write_file], name="asking")
'''


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    name = f"eval_fleet_agents_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / f"{name}.py").write_text(AGENTS)
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(name)


def ref(agents: ModuleType, attr: str) -> str:
    return f"{agents.__name__}:{attr}"


@pytest.fixture
def fixture_dir(tmp_path: Path) -> Path:
    root = tmp_path / "fixture"
    (root / "src").mkdir(parents=True)
    (root / "main.py").write_text("print('broken')\n")
    (root / "src" / "lib.py").write_text("x = 1")
    (root / "old.txt").write_text("old\n")
    return root


def dataset(fixture: Path) -> list[Case]:
    return [
        Case(id="one", input="one", expected="fixed one", fixture=fixture),
        Case(id="two", input="two", expected="fixed two", fixture=fixture, tags=("t",)),
        Case(id="bare", input="bare", expected="fixed bare", budget=CaseBudget(max_steps=10)),
    ]


def scorers() -> list[Any]:
    return [
        ExactMatch(),
        ToolTraceMatch(["edit", "edit"], order="subsequence"),
        WorkspaceCheck(contains={"main.py": "print("}, exists=["docs/notes.md"]),
        Recording(),
    ]


def priced() -> Budget:
    """No ceiling (so no purse in process), but prices: each run's cost is counted, on
    the fleet by the worker from the prices its job carries."""
    return Budget(pricing={"scripted": Pricing(input=1.0, output=2.0)})


#: What may (and must) differ between the record of a run made here and on a fleet.
TIMINGS = {"duration_s", "finished_at"}


def assert_same_records(
    here: list[CaseResultRecord],
    there: list[CaseResultRecord],
    *,
    capture_of: dict[str, str | None] | None = None,
) -> None:
    """Field by field, the timings aside (which differ); `capture_of` says a case's
    in-process capture, by default its run id."""
    captures = capture_of or {}
    assert [(r.case_id, r.epoch) for r in here] == [(r.case_id, r.epoch) for r in there]
    for mine, theirs in zip(here, there, strict=True):
        a, b = mine.model_dump(), theirs.model_dump()
        for field in a:
            if field in TIMINGS:
                continue
            if field == "capture":
                # A worker writes no capture of its run (the runner says so: None).
                assert a[field] == captures.get(mine.case_id, mine.run_id)
                assert b[field] is None
                continue
            assert a[field] == b[field], f"{mine.case_id}: {field} differs"
        assert mine.finished_at != theirs.finished_at


@contextlib.asynccontextmanager
async def in_process_workers(url: str, namespace: str, count: int = 2) -> AsyncIterator[None]:
    """`count` workers, each on its own connection, until the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        workers = []
        for n in range(count):
            bus = await stack.enter_async_context(await open_bus(url, namespace=namespace))
            worker = Worker(bus, name=f"w{n}", poll_interval=0.02, control_poll=0.05)
            workers.append((worker, asyncio.create_task(worker.run())))
        try:
            yield
        finally:
            for worker, _ in workers:
                worker.drain()
            async with asyncio.timeout(30):
                for _, task in workers:
                    await task


def worker_process(url: str, agents: ModuleType, name: str, **env: str) -> subprocess.Popen[str]:
    folder = Path(agents.__file__ or "").parent
    path = os.pathsep.join([str(SRC), str(folder)])
    environment = {**os.environ, "PYTHONPATH": path, **env}
    command = [sys.executable, "-m", "tiller", "worker", "--store", url, "--name", name]
    return subprocess.Popen(
        [*command, "--concurrency", "2"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def in_process(agents: ModuleType, cases: list[Case], eval_id: str) -> list[CaseResultRecord]:
    async with MemoryBus() as bus:
        report = await Eval(
            ref(agents, "coder"),
            cases,
            scorers(),
            epochs=2,
            budget=priced(),
            store=bus,
            eval_id=eval_id,
        ).run()
        assert report.total == 6
        return await EvalResultStore(bus).results(eval_id)


@pytest.mark.parametrize("where", ["sqlite", "nats"])
async def test_an_eval_on_a_fleet_records_what_it_records_in_process(
    agents: ModuleType, fixture_dir: Path, tmp_path: Path, where: str
) -> None:
    cases = dataset(fixture_dir)
    eval_id = f"fleet-{uuid.uuid4().hex[:8]}"
    expected = await in_process(agents, cases, eval_id)
    assert all(r.status == "scored" for r in expected)
    assert all(r.scores["exact"].passed for r in expected)
    assert all(r.scores["workspace"].passed for r in expected)
    assert all(r.cost_usd > 0 for r in expected)

    url = f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02" if where == "sqlite" else NATS_URL
    namespace = f"t{uuid.uuid4().hex[:12]}" if where == "nats" else ""
    async with await open_bus(url, namespace=namespace) as bus:
        try:
            async with asyncio.timeout(120), in_process_workers(url, namespace):
                report = await Eval(
                    ref(agents, "coder"),
                    cases,
                    scorers(),
                    epochs=2,
                    budget=priced(),
                    eval_id=eval_id,
                    fleet=Fleet(bus),
                ).run()
            assert report.total == 6
            on_fleet = await EvalResultStore(bus).results(eval_id)
            assert_same_records(expected, on_fleet)
            # A rescore reads the kept workspaces back, as it does an in-process eval's.
            again = await rescore(bus, eval_id, [WorkspaceCheck(exists=["docs/notes.md"])])
            assert all(r.scores["workspace"].passed for r in again.results)
        finally:
            if where == "nats":
                await bus.delete_namespace()  # type: ignore[attr-defined]


async def test_worker_processes_on_sqlite_give_the_same_records(
    agents: ModuleType, fixture_dir: Path, tmp_path: Path
) -> None:
    cases = dataset(fixture_dir)
    eval_id = f"proc-{uuid.uuid4().hex[:8]}"
    expected = await in_process(agents, cases, eval_id)
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    async with await open_bus(url) as bus:
        processes = [worker_process(url, agents, f"p{n}") for n in range(2)]
        try:
            async with asyncio.timeout(120):
                await Eval(
                    ref(agents, "coder"),
                    cases,
                    scorers(),
                    epochs=2,
                    budget=priced(),
                    eval_id=eval_id,
                    fleet=Fleet(bus),
                ).run()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                await asyncio.to_thread(process.communicate, timeout=60)
        assert_same_records(expected, await EvalResultStore(bus).results(eval_id))


@contextlib.asynccontextmanager
async def sqlite_fleet(tmp_path: Path, workers: int = 1) -> AsyncIterator[Bus]:
    url = f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02"
    async with await open_bus(url) as bus, in_process_workers(url, "", workers):
        async with asyncio.timeout(120):
            yield bus


async def test_a_missing_fixture_fails_that_case_only_and_is_recorded_as_in_process(
    agents: ModuleType, fixture_dir: Path, tmp_path: Path
) -> None:
    cases = [
        Case(id="gone", input="gone", expected="fixed gone", fixture=tmp_path / "nowhere"),
        Case(id="here", input="here", expected="fixed here", fixture=fixture_dir),
    ]
    eval_id = f"gone-{uuid.uuid4().hex[:8]}"
    async with MemoryBus() as memory:
        await Eval(ref(agents, "coder"), cases, scorers(), store=memory, eval_id=eval_id).run()
        expected = await EvalResultStore(memory).results(eval_id)
    async with sqlite_fleet(tmp_path) as bus:
        fleet = Fleet(bus)
        report = await Eval(
            ref(agents, "coder"), cases, scorers(), eval_id=eval_id, fleet=fleet
        ).run()
        records = await EvalResultStore(bus).results(eval_id)
        assert await fleet.batches.runs(eval_id) == [f"{eval_id}:here:e0"]  # never submitted
    # Both records are the in-process ones, timings aside: the missing fixture's error too.
    assert [r.case_id for r in records] == ["gone", "here"]
    assert "does not exist" in (records[0].error or "")
    assert not next(r for r in report.results if r.case.id == "gone").passed
    assert_same_records(expected, records, capture_of={"gone": None})


async def test_a_job_that_fails_on_its_worker_is_that_cases_error(
    agents: ModuleType, tmp_path: Path
) -> None:
    cases = [Case(id="a", input="a"), Case(id="b", input="b")]
    async with sqlite_fleet(tmp_path) as bus:
        report = await Eval(
            ref(agents, "broken"), cases, [Recording()], eval_id="broken", fleet=Fleet(bus)
        ).run()
        records = await EvalResultStore(bus).results("broken")
    assert [r.status for r in records] == ["scored", "scored"]
    for record in records:
        assert record.stop_cause == "error"
        assert "the fleet run failed" in (record.error or "")
        assert "this factory always fails" in (record.error or "")
    assert report.total == 2 and len(report.results) == 2


async def test_structured_output_reaches_the_record_as_its_json(
    agents: ModuleType, tmp_path: Path
) -> None:
    cases = [Case(id="q", input="q", expected={"value": 42})]
    async with MemoryBus() as memory:
        await Eval(ref(agents, "structured"), cases, [JsonMatch()], store=memory, eval_id="s").run()
        expected = await EvalResultStore(memory).results("s")
    async with sqlite_fleet(tmp_path) as bus:
        await Eval(
            ref(agents, "structured"), cases, [JsonMatch()], eval_id="s", fleet=Fleet(bus)
        ).run()
        on_fleet = await EvalResultStore(bus).results("s")
    assert on_fleet[0].output == {"value": 42}
    assert on_fleet[0].scores["json_match"].passed
    assert_same_records(expected, on_fleet)


async def test_the_eval_budget_is_the_batch_budget_and_runs_it_never_started_are_not_run(
    agents: ModuleType, tmp_path: Path
) -> None:
    cases = [Case(id=f"c{n}", input=f"c{n}", budget=CaseBudget(max_steps=3)) for n in range(4)]
    async with sqlite_fleet(tmp_path) as bus:
        fleet = Fleet(bus)
        report = await Eval(
            ref(agents, "coder"),
            cases,
            [Recording()],
            budget=Budget(max_steps=6),
            eval_id="budgeted",
            fleet=fleet,
        ).run()
        status = await (await fleet.create_batch("budgeted", max_steps=6)).status()
        records = await EvalResultStore(bus).results("budgeted")
    assert status.spent.steps is not None and status.spent.steps <= 6
    assert sum(r.steps for r in records) <= 6
    assert [r.status for r in records].count("not_run") == 2
    assert report.total == 4


async def test_the_eval_token_cancels_the_batch_and_a_resume_makes_the_cancelled_runs_again(
    agents: ModuleType, fixture_dir: Path, tmp_path: Path
) -> None:
    release = agents.GATES["print('one')\n"] = asyncio.Event()
    entered = agents.ENTERED["print('one')\n"] = asyncio.Event()
    cases = [Case(id="one", input="one", fixture=fixture_dir), Case(id="two", input="two")]
    token = CancellationToken()
    async with sqlite_fleet(tmp_path) as bus:
        fleet = Fleet(bus)
        ev = Eval(
            ref(agents, "coder"), cases, [Recording()], eval_id="stop", cancel=token, fleet=fleet
        )
        running = asyncio.create_task(ev.run())
        await entered.wait()
        token.cancel("enough")
        report = await running
        release.set()
        assert await fleet.batches.cancelled("stop") is not None
        records = {r.case_id: r for r in await EvalResultStore(bus).results("stop")}
        assert records["one"].status == "cancelled"
        assert records["one"].stop_cause == "cancelled"
        assert records["one"].scores == {}
        assert report.cancelled
        # Resumed: the batch is reopened and the cancelled run made again, as its next
        # attempt (its first run id has its cancelled result for good).
        again = Eval(ref(agents, "coder"), cases, [Recording()], eval_id="stop", fleet=fleet)
        resumed = await again.run()
        assert await fleet.batches.cancelled("stop") is None
        records = {r.case_id: r for r in await EvalResultStore(bus).results("stop")}
    assert {r.status for r in records.values()} == {"scored"}
    assert (records["one"].attempt, records["one"].run_id) == (1, "stop:one:e0:a1")
    assert records["one"].text == "fixed one"
    assert not resumed.cancelled and len(resumed.results) == 2


def test_a_fleet_eval_needs_an_agent_reference_and_no_approver_or_options(
    agents: ModuleType,
) -> None:
    fleet = Fleet(MemoryBus())
    cases = [Case(id="a", input="a")]
    for agent in (agents.coder(), lambda: agents.coder()):
        with pytest.raises(UsageError, match="'module:attr' reference"):
            Eval(agent, cases, [], fleet=fleet)
    # A module-level factory is named by its module and name.
    assert Eval(agents.coder, cases, [], fleet=fleet).fleet is fleet
    with pytest.raises(UsageError, match="neither an approver nor"):
        Eval(ref(agents, "coder"), cases, [], fleet=fleet, approver=lambda case: None)
    with pytest.raises(UsageError, match=r"tiller\.fleet\.Fleet"):
        Eval(ref(agents, "coder"), cases, [], fleet="nats://x")  # type: ignore[arg-type]
    assert isinstance(agents.coder(), Agent)


async def test_a_job_whose_worker_was_killed_on_its_last_delivery_is_that_cases_error(
    agents: ModuleType, tmp_path: Path
) -> None:
    """`tiller worker` is killed (SIGKILL) mid-run and the job has no delivery left: the
    next worker to claim dead-letters it with a `failed` result, which is the case's
    error; the other case runs."""
    mark = tmp_path / "slow"
    mark.touch()
    cases = [Case(id="lost", input="lost")]
    url = f"sqlite:///{tmp_path / 'fleet.db'}?poll_interval=0.02"
    async with asyncio.timeout(120), await open_bus(url) as bus:
        fleet = Fleet(bus, lease=1.0, max_deliver=1)
        ev = Eval(ref(agents, "coder"), cases, [Recording()], eval_id="lost", fleet=fleet)
        running = asyncio.create_task(ev.run())
        process = worker_process(url, agents, "doomed", EVAL_SLOW_MARK=str(mark))
        try:
            while True:  # until the worker is in the slow call (a hang guard bounds it)
                if await asyncio.to_thread((tmp_path / "slow.entered").exists):
                    break
                await asyncio.sleep(0.05)
        finally:
            process.kill()
            await asyncio.to_thread(process.communicate, timeout=60)
        mark.unlink()
        async with in_process_workers(url, "", 1):
            report = await running
        records = {r.case_id: r for r in await EvalResultStore(bus).results("lost")}
    lost = records["lost"]
    assert (lost.status, lost.stop_cause) == ("scored", "error")
    assert "the fleet run failed" not in (lost.error or "")  # it had begun: its checkpoint
    assert lost.error and "deliver" in lost.error
    assert len(report.results) == 1


async def test_the_judge_on_a_fleet_eval_pays_from_the_batch_budget(
    agents: ModuleType, tmp_path: Path
) -> None:
    said = json.dumps({"score": 1.0, "passed": True, "explanation": "fine"})
    judge = LlmJudge(ScriptedModel([said]), rubric="Is it fixed?")
    cases = [Case(id="a", input="a", budget=CaseBudget(max_steps=5))]
    async with sqlite_fleet(tmp_path) as bus:
        fleet = Fleet(bus)
        budget = Budget(max_steps=20)
        await Eval(
            ref(agents, "coder"), cases, [judge], budget=budget, eval_id="j", fleet=fleet
        ).run()
        record = (await EvalResultStore(bus).results("j"))[0]
        status = await (await fleet.create_batch("j", max_steps=20)).status()
    assert record.scores["llm_judge"].passed, record.scores["llm_judge"]
    # The run's three steps (settled on its worker) and the judge's one, here.
    assert status.spent.steps == record.steps + 1 == 4


async def test_a_dollar_budget_stops_fleet_runs_with_the_prices_their_jobs_carry(
    agents: ModuleType, tmp_path: Path
) -> None:
    cases = [Case(id=f"c{n}", input=f"c{n}") for n in range(3)]
    prices = {"scripted": Pricing(input=1.0, output=2.0)}
    async with sqlite_fleet(tmp_path) as bus:
        await Eval(
            ref(agents, "coder"),
            cases,
            [Recording()],
            budget=Budget(max_cost_usd=0.0002, pricing=prices),
            eval_id="dollars",
            fleet=Fleet(bus),
        ).run()
        records = await EvalResultStore(bus).results("dollars")
    # Each run's share is a tenth of what is left: its first call spends it all.
    assert {r.stop_cause for r in records} == {"cost_budget"}
    assert all(r.cost_usd > 0 for r in records)


async def test_a_call_that_needs_approval_is_refused_in_process_and_held_on_a_fleet(
    agents: ModuleType, tmp_path: Path
) -> None:
    """The one difference in kind: in process a run without an approver is refused the
    call and goes on; a fleet run is durable, so it is held for a person, and an eval
    cannot wait for one: the case's error says so."""
    cases = [Case(id="w", input="w")]
    async with MemoryBus() as memory:
        await Eval(ref(agents, "asking"), cases, [Recording()], store=memory, eval_id="w").run()
        here = (await EvalResultStore(memory).results("w"))[0]
    async with sqlite_fleet(tmp_path) as bus:
        await Eval(ref(agents, "asking"), cases, [Recording()], eval_id="w", fleet=Fleet(bus)).run()
        there = (await EvalResultStore(bus).results("w"))[0]
    assert (here.text, here.tool_trace[0].refused_by, here.error) == ("asked", "policy", None)
    assert there.status == "scored" and there.stop_cause == "suspended"
    assert there.error is not None and "held on the fleet (suspended)" in there.error


async def test_a_resume_makes_again_a_run_its_cancelled_batch_kept_from_starting(
    agents: ModuleType, tmp_path: Path
) -> None:
    """The eval's process died after its token cancelled the batch, before it recorded a
    run the cancel kept from starting: that run id has its `cancelled` result for good,
    so the resumed eval makes the run under its next attempt's id."""
    cases = [Case(id="a", input="a")]
    async with sqlite_fleet(tmp_path) as bus:
        fleet = Fleet(bus)
        await fleet.cancel_batch("died", "the eval was cancelled")
        first = await fleet.submit(ref(agents, "coder"), "a", run_id="died:a:e0", batch="died")
        assert (await first.result(30)).status == "cancelled"
        await Eval(ref(agents, "coder"), cases, [Recording()], eval_id="died", fleet=fleet).run()
        (record,) = await EvalResultStore(bus).results("died")
    assert (record.status, record.attempt, record.run_id) == ("scored", 1, "died:a:e0:a1")
    assert record.text == "fixed a"
