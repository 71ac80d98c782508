"""An eval runs every case, epoch by epoch, each in its own directory on a private copy of
its fixture, with its own approver, and stores what each run produced; failures belong
to their case (a missing fixture, an agent or a scorer that raises), not to the eval."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tiller.capture import load_capture
from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, Eval, EvalProgress, EvalResultStore, Score
from tiller.fleet import load_diff
from tiller.loop import Agent, RunOptions
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus, MemoryBus, SqliteBus, StoreUnavailable, open_bus
from tiller.testing import run_capture

from ._runner_support import Includes, Messages, Recording, answering, writing


def _fixture(root: Path) -> Path:
    fixture = root / "fixture"
    (fixture / "src").mkdir(parents=True)
    (fixture / "src" / "app.py").write_text("print('hi')\n")
    (fixture / "README").write_text("the fixture\n")
    return fixture


async def test_every_case_and_epoch_is_run_scored_and_stored_with_its_capture(
    bus: Bus,
) -> None:
    cases = [Case(f"c{i}", f"q{i}", expected=f"q{i}") for i in range(3)]
    seen: list[EvalProgress] = []
    ev = Eval(
        answering(lambda prompt: f"answer to {prompt}"),
        cases,
        [Includes()],
        epochs=2,
        store=bus,
        eval_id="ev1",
    )
    report = await ev.run(on_progress=seen.append)

    assert [(r.case.id, r.epoch, r.run_id) for r in report.results] == [
        (f"c{i}", epoch, f"ev1:c{i}:e{epoch}") for i in range(3) for epoch in range(2)
    ]
    assert (report.total, report.scored, report.passed, report.pass_rate) == (6, 6, 6, 1.0)
    assert report.scorers["includes"].pass_rate == 1.0
    assert [p.done for p in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[-1].total == 6 and seen[-1].passed == 6
    stored = await EvalResultStore(bus).results("ev1")
    assert [(r.case_id, r.epoch, r.status) for r in stored] == [
        (f"c{i}", epoch, "scored") for i in range(3) for epoch in range(2)
    ]
    first = stored[0]
    assert first.text == "answer to q0"
    assert first.stop_cause == "completed"
    assert first.scores["includes"].passed
    assert [m.role for m in first.messages] == ["user", "assistant"]
    assert first.usage.output_tokens > 0 and first.duration_s >= 0
    assert first.capture == "ev1:c0:e0"
    capture = await load_capture(bus, first.capture)
    assert len(capture.model_calls) == 1
    replayed, _ = await run_capture(answering(str)(), capture, "q0")  # offline, no model
    assert replayed.text == "answer to q0"
    described = await EvalResultStore(bus).get_eval("ev1")
    assert described is not None
    assert (described.epochs, described.cases, described.scorers) == (2, 3, ("includes",))


async def test_a_sqlite_path_given_as_the_store_keeps_the_results_in_that_file(
    tmp_path: Path,
) -> None:
    from tiller.store import open_bus

    path = tmp_path / "results.db"
    ev = Eval(answering(str), [Case("c1", "q")], [Includes()], store=path, eval_id="ev1")
    await ev.run()
    async with await open_bus(f"sqlite:///{path}") as bus:
        stored = await EvalResultStore(bus).results("ev1")
    assert [(r.case_id, r.status) for r in stored] == [("c1", "scored")]


async def test_each_run_writes_to_its_own_copy_of_the_fixture_which_stays_untouched(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = _fixture(tmp_path)
    recording = Recording()
    cases = [Case(f"c{i}", f"q{i}", fixture=fixture) for i in range(3)]
    ev = Eval(
        writing("src/app.py", "print('fixed')\n"),
        cases,
        [recording],
        epochs=2,
        store=bus,
        eval_id="ev1",
        approver=AllowAll(),
    )
    report = await ev.run()

    assert report.passed == 6
    for files in recording.files.values():  # every run saw the fixture and only its write
        assert files == {"README": "the fixture\n", "src/app.py": "print('fixed')\n"}
    workspaces = {outcome.workspace for outcome in recording.seen}
    assert len(workspaces) == 6  # six private directories...
    assert not any(path is not None and path.exists() for path in workspaces)  # ...removed
    assert (fixture / "src" / "app.py").read_text() == "print('hi')\n"
    assert sorted(p.name for p in fixture.iterdir()) == ["README", "src"]
    result = report.results[0]
    assert result.diff_ref is not None and result.workspace is not None
    diff = await load_diff(bus, result.diff_ref)
    assert diff.modified == ("src/app.py",) and diff.deleted == ()
    assert all(path.startswith(".tiller/") for path in diff.added)  # the jail's own files


async def test_a_fixture_copy_keeps_links_as_links_and_leaves_special_files_out(
    tmp_path: Path,
) -> None:
    fixture = _fixture(tmp_path)
    (fixture / "link").symlink_to("README")
    (fixture / "outside").symlink_to("/etc/hostname")
    os.mkfifo(fixture / "pipe")
    (fixture / "locked").mkdir()
    (fixture / "locked" / "f.txt").write_text("f\n")
    (fixture / "locked").chmod(0o500)
    recording = Recording()
    try:
        report = await Eval(
            answering(str), [Case("c1", "q", fixture=fixture)], [recording], eval_id="ev1"
        ).run()
    finally:
        (fixture / "locked").chmod(0o700)

    assert report.passed == 1
    workspace = recording.seen[0].workspace
    assert workspace is not None and not workspace.exists()
    files = recording.files["c1-e0"]
    assert files["link"] == "-> README" and files["outside"] == "-> /etc/hostname"
    assert files["locked/f.txt"] == "f\n"
    assert "pipe" not in files


async def test_a_case_writing_into_its_copy_in_place_never_writes_through_to_the_fixture(
    tmp_path: Path,
) -> None:
    fixture = _fixture(tmp_path)

    class WritesInPlace:
        """Overwrites the copy's README through its own inode, as a hard link would share."""

        name = "in-place"

        async def score(self, outcome: CaseOutcome) -> Score:
            assert outcome.workspace is not None
            readme = outcome.workspace / "README"
            with readme.open("r+") as handle:
                handle.write("CHANGED")
            return Score.of(readme.stat().st_nlink == 1, "its own file")

    report = await Eval(
        answering(str),
        [Case(f"c{i}", "q", fixture=fixture) for i in range(3)],
        [WritesInPlace()],
        eval_id="ev1",
    ).run()
    assert report.passed == 3
    assert (fixture / "README").read_text() == "the fixture\n"


async def test_calls_that_need_approval_are_blocked_unless_the_case_has_an_approver(
    bus: Bus, tmp_path: Path
) -> None:
    fixture = _fixture(tmp_path)
    cases = [Case("allowed", "q", fixture=fixture), Case("blocked", "q", fixture=fixture)]
    recording = Recording()
    report = await Eval(
        writing("new.txt"),
        cases,
        [recording],
        store=bus,
        eval_id="ev1",
        approver=lambda case: AllowAll() if case.id == "allowed" else None,
    ).run()

    assert "new.txt" in recording.files["allowed-e0"]
    assert "new.txt" not in recording.files["blocked-e0"]
    allowed, blocked = report.for_case("allowed")[0], report.for_case("blocked")[0]
    assert not allowed.outcome.tool_trace[0].is_error
    assert blocked.outcome.tool_trace[0].is_error
    assert allowed.diff_ref is not None and blocked.diff_ref is not None
    changed = [
        tuple(c.path for c in (await load_diff(bus, ref)).changes if c.path != ".tiller/.gitignore")
        for ref in (allowed.diff_ref, blocked.diff_ref)
    ]
    assert changed == [("new.txt",), ()]


async def test_a_missing_fixture_fails_that_case_and_the_others_run(
    bus: Bus, tmp_path: Path
) -> None:
    cases = [
        Case("gone", "q", expected="q", fixture=tmp_path / "nowhere"),
        Case("fine", "q", expected="q"),
    ]
    report = await Eval(answering(str), cases, [Includes()], store=bus, eval_id="ev1").run()

    gone, fine = report.for_case("gone")[0], report.for_case("fine")[0]
    assert gone.status == "scored" and not gone.passed
    assert gone.outcome.stop_cause is StopCause.ERROR
    assert "case 'gone'" in (gone.outcome.error or "")
    assert "does not exist" in (gone.outcome.error or "")
    assert gone.capture is None
    assert fine.passed
    assert report.errors == 1


async def test_a_scorer_that_raises_scores_an_error_with_its_traceback_and_the_eval_goes_on(
    bus: Bus,
) -> None:
    class Broken:
        name = "broken"

        async def score(self, outcome: CaseOutcome) -> Score:
            raise ZeroDivisionError("scorer bug")

    cases = [Case("c1", "q", expected="q"), Case("c2", "q", expected="q")]
    report = await Eval(
        answering(str), cases, [Broken(), Includes()], store=bus, eval_id="ev1"
    ).run()

    assert report.scored == 2
    for result in report.results:
        broken = result.scores["broken"]
        assert not broken.passed
        assert "ZeroDivisionError: scorer bug" in (broken.error or "")
        assert result.scores["includes"].passed
    assert report.scorers["broken"].errors == 2
    stored = await EvalResultStore(bus).get("ev1", "c1", 0)
    assert stored is not None and "scorer bug" in (stored.scores["broken"].error or "")


async def test_an_agent_that_raises_errors_that_case_only(bus: Bus) -> None:
    built = 0

    def factory() -> Agent:
        nonlocal built
        built += 1
        if built == 2:
            raise RuntimeError("cannot build this one")
        return answering(str)()

    cases = [Case(f"c{i}", "q", expected="q") for i in range(3)]
    report = await Eval(factory, cases, [Includes()], concurrency=1, store=bus, eval_id="ev1").run()

    assert [r.passed for r in report.results] == [True, False, True]
    failed = report.results[1]
    assert failed.outcome.stop_cause is StopCause.ERROR
    assert "RuntimeError: cannot build this one" in (failed.outcome.error or "")


async def test_a_model_that_fails_ends_that_case_in_error(bus: Bus) -> None:
    def turn(messages: Messages, info: TurnInfo) -> str:
        if messages[0].text == "bad":
            return {"error": {"status": 400}}  # type: ignore[return-value]
        return messages[0].text

    cases = [Case("ok", "fine", expected="fine"), Case("bad", "bad", expected="bad")]
    report = await Eval(
        lambda: Agent(ScriptedModel(turn)), cases, [Includes()], store=bus, eval_id="ev1"
    ).run()

    assert report.for_case("ok")[0].passed
    bad = report.for_case("bad")[0]
    assert bad.status == "scored" and bad.outcome.stop_cause is StopCause.ERROR
    assert bad.outcome.error


async def test_at_most_concurrency_cases_run_at_once() -> None:
    running = 0
    most = 0
    full = asyncio.Event()

    async def turn(messages: Messages, info: TurnInfo) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 3:
            full.set()
        try:
            await full.wait()  # the first three wait for each other: all three overlap
            await asyncio.sleep(0)  # let a fourth start, if one could
        finally:
            running -= 1
        return "ok"

    cases = [Case(f"c{i}", "q") for i in range(10)]
    async with asyncio.timeout(30):  # a hang guard, not a timing assertion
        report = await Eval(
            lambda: Agent(ScriptedModel(turn)), cases, [Recording()], concurrency=3
        ).run()
    assert report.scored == 10
    assert most == 3


async def test_an_agent_reference_is_loaded_for_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "eval_agents_ref.py").write_text(
        "from tiller.loop import Agent\n"
        "from tiller.model import ScriptedModel\n"
        "BUILT = []\n"
        "def make():\n"
        "    BUILT.append(1)\n"
        "    return Agent(ScriptedModel(lambda messages, info: 'from the ref'))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = [Case("c1", "q", expected="from the ref"), Case("c2", "q", expected="from the ref")]
    report = await Eval("eval_agents_ref:make", cases, [Includes()]).run()
    assert report.passed == 2
    # Once to check the reference, then once per run.
    assert len(sys.modules["eval_agents_ref"].BUILT) == 3


def test_bad_eval_arguments_are_refused_with_what_to_give() -> None:
    agent = answering(str)
    with pytest.raises(UsageError, match="two cases have the id 'c1'"):
        Eval(agent, [Case("c1", "a"), Case("c1", "b")], [Includes()])
    with pytest.raises(UsageError, match="two scorers are named 'includes'"):
        Eval(agent, [Case("c1", "a")], [Includes(), Includes()])
    with pytest.raises(UsageError, match="not a scorer"):
        Eval(agent, [Case("c1", "a")], [object()])  # type: ignore[list-item]
    with pytest.raises(UsageError, match=r"not a tiller\.evals\.Case"):
        Eval(agent, [{"id": "c1"}], [Includes()])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="concurrency must be a positive int"):
        Eval(agent, [], [Includes()], concurrency=0)
    with pytest.raises(UsageError, match="eval id"):
        Eval(agent, [], [Includes()], eval_id="has/slash")
    with pytest.raises(UsageError, match="Budget"):
        Eval(agent, [], [Includes()], budget={"max_steps": 3})  # type: ignore[arg-type]


def test_a_bad_store_approver_options_or_token_is_refused_before_the_eval_runs() -> None:
    """Refused when the eval is built, saying what to give: not later as an
    AttributeError, and not after the eval's record and budget were written."""
    agent, cases = answering(str), [Case("c1", "a")]
    with pytest.raises(UsageError, match="an eval's store is a Bus, a store URL or a path"):
        Eval(agent, cases, [Includes()], store=42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="an eval's approver is an Approver"):
        Eval(agent, cases, [Includes()], approver="yes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"an eval's options are a tiller\.loop\.RunOptions"):
        Eval(agent, cases, [Includes()], options={"max_steps": 3})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"an eval's cancel is a tiller\.cancel"):
        Eval(agent, cases, [Includes()], cancel=True)  # type: ignore[arg-type]


class _CapturesDown(MemoryBus):
    """A memory store whose captures bucket refuses every write."""

    async def kv(self, bucket: str) -> Any:
        kv = await super().kv(bucket)
        if bucket == "tiller-captures":

            async def refuse(key: str, value: bytes) -> int:
                raise StoreUnavailable("the captures bucket is down")

            kv.create = refuse  # type: ignore[method-assign]
        return kv


async def test_a_capture_that_could_not_be_written_is_not_referenced() -> None:
    async with _CapturesDown() as bus:
        report = await Eval(
            answering(str), [Case("c1", "q", expected="q")], [Includes()], store=bus
        ).run()
    result = report.results[0]
    assert result.passed  # the run and its scores stand...
    assert result.capture is None  # ...but no reference to a capture that is not there


async def test_two_evals_whose_ids_and_case_ids_run_together_keep_their_own_runs(
    bus: Bus,
) -> None:
    """Eval "a" with case "b-e1" and eval "a-b" with case "e1" once made the same run id
    (`a-b-e1-e0`), and the second's run removed the first's capture."""
    first = Eval(
        answering(str), [Case("b-e1", "one", expected="one")], [Includes()], store=bus, eval_id="a"
    )
    second = Eval(
        answering(str), [Case("e1", "two", expected="two")], [Includes()], store=bus, eval_id="a-b"
    )
    one, two = (await first.run()).results[0], (await second.run()).results[0]
    assert one.run_id != two.run_id
    stored = [(await EvalResultStore(bus).results(eval_id))[0] for eval_id in ("a", "a-b")]
    assert [record.capture for record in stored] == [one.run_id, two.run_id]
    for record, prompt in zip(stored, ("one", "two"), strict=True):
        assert record.capture is not None
        capture = await load_capture(bus, record.capture)  # each eval's own, still there
        assert capture.model_calls and prompt in str(capture.model_calls[0])


@pytest.mark.parametrize(
    ("options", "synced"),
    [(None, False), (RunOptions(checkpoint_bucket="tiller-run-checkpoints"), True)],
)
async def test_an_eval_opens_its_sqlite_store_unsynced_unless_its_runs_are_durable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: RunOptions | None,
    synced: bool,
) -> None:
    """An eval's records can be made again (a lost one's case reruns on resume): no fsync
    per write. Durable runs' call records must be synced (law 5)."""
    opened: list[Bus] = []
    real_open = open_bus

    async def recording_open(url: str, **kwargs: Any) -> Bus:
        bus = await real_open(url, **kwargs)
        opened.append(bus)
        return bus

    monkeypatch.setattr("tiller.evals._eval.open_bus", recording_open)
    report = await Eval(
        answering(lambda prompt: prompt),
        [Case("one", "hello", expected="hello")],
        [Includes()],
        store=tmp_path / "evals.db",
        options=options,
    ).run()
    assert report.passed == 1
    (bus,) = opened
    assert isinstance(bus, SqliteBus) and bus.synced is synced
