"""`tiller eval run`'s gate and report files when the eval did not run every case: a
spec whose eval budget lets one step run (so the other cases are `not_run`), and report
paths that cannot be written. Real SQLite store, typer's runner, a `ScriptedModel`."""

from __future__ import annotations

import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tiller.cli import app

SPEC = """
from tiller.evals import Case, EvalSpec, Includes
from tiller.loop import Agent, Budget
from tiller.model import ScriptedModel

CASES = [Case(f"c{n}", "say yes", expected="yes") for n in range(5)]

spec = EvalSpec(
    agent=lambda: Agent(ScriptedModel(lambda messages, info: "yes")),
    cases=CASES,
    scorers=[Includes()],
    name="tight",
    concurrency=1,
    budget=Budget(max_steps=1),
)

roomy = EvalSpec(
    agent=lambda: Agent(ScriptedModel(lambda messages, info: "yes")),
    cases=CASES[:2],
    scorers=[Includes()],
    name="roomy",
)
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    yield tmp_path
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def run_eval(spec_dir: Path, *args: str, spec: str = "evals.py") -> Result:
    store = f"sqlite:///{spec_dir / 'evals.db'}"
    return CliRunner().invoke(app, ["eval", "run", str(spec_dir / spec), "--store", store, *args])


def test_fail_under_counts_the_runs_the_budget_did_not_let_start(spec_dir: Path) -> None:
    done = run_eval(spec_dir, "--id", "tight", "--fail-under", "0.9")
    assert "not run 4" in done.stdout, done.output
    assert done.exit_code == 1, done.output
    assert "pass rate 20.0% of all 5 runs" in done.stderr


def test_fail_under_help_says_unscored_runs_count_against_it() -> None:
    shown = CliRunner().invoke(app, ["eval", "run", "--help"], env={"COLUMNS": "200"})
    words = " ".join(shown.stdout.replace("│", " ").split())
    assert "not run, cancelled or not started count against it" in words, words


def test_junit_reports_a_run_the_budget_did_not_let_start_as_an_error(spec_dir: Path) -> None:
    xml = spec_dir / "report.xml"
    done = run_eval(spec_dir, "--id", "tight", "--junit", str(xml))
    assert done.exit_code == 0, done.output
    suite = ET.parse(xml).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("errors"), suite.get("skipped")) == ("5", "4", "0")
    errors = [case.find("error") for case in suite.iter("testcase")]
    messages = {error.get("message") for error in errors if error is not None}
    assert messages == {"not run: the eval's budget was spent"}


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_an_unwritable_report_path_is_refused_before_the_eval_runs(
    spec_dir: Path, option: str
) -> None:
    (spec_dir / "taken").mkdir()
    (spec_dir / "a-file").write_text("not a folder")
    for target in (spec_dir / "taken", spec_dir / "a-file" / "report.out"):
        done = run_eval(spec_dir, "--id", "early", option, str(target), spec="evals.py:roomy")
        assert done.exit_code == 2, done.output
        assert "cannot write" in done.stderr and str(target) in done.stderr
        assert "eval early" not in done.stdout  # nothing ran
    assert not (spec_dir / "evals.db").exists()


def test_the_eval_id_is_printed_before_the_reports_are_written(spec_dir: Path) -> None:
    out = spec_dir / "out.json"
    done = run_eval(spec_dir, "--id", "said", "--json", str(out), spec="evals.py:roomy")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines.index("eval id: said") < lines.index(f"wrote {out}")


def test_the_case_table_shows_a_run_that_errored_as_an_error(tmp_path: Path) -> None:
    """A run whose scorers passed what it left, but that ended in an error: `show` says
    error (as JUnit and the HTML do), with the error's first line."""
    import asyncio
    import time

    from tiller.evals import CaseResultRecord, EvalRecord, EvalResultStore
    from tiller.store import open_bus

    store = f"sqlite:///{tmp_path / 'evals.db'}"

    async def seed() -> None:
        async with await open_bus(store) as bus:
            results = EvalResultStore(bus)
            now = time.time()
            await results.put_eval(
                EvalRecord(
                    eval_id="ev",
                    agent="x:y",
                    epochs=1,
                    scorers=("exact",),
                    cases=1,
                    started_at=now,
                    last_run_at=now,
                )
            )
            await results.put(
                CaseResultRecord.model_validate(
                    {
                        "eval_id": "ev",
                        "case_id": "flaky",
                        "epoch": 0,
                        "run_id": "ev:flaky:e0",
                        "status": "scored",
                        "case": {"id": "flaky", "input": "say ok"},
                        "text": "ok",
                        "stop_cause": "error",
                        "error": "Boom\n  at line 2",
                        "scores": {"exact": {"value": 1.0, "passed": True}},
                    }
                )
            )

    asyncio.run(seed())
    shown = CliRunner().invoke(app, ["eval", "show", "ev", "--store", store])
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.stdout.splitlines() if line.startswith("flaky"))
    assert row.split()[2] == "error", row
    assert row.rstrip().endswith("Boom"), row  # the message's first line, not its last


def test_max_cost_keeps_the_spec_s_other_limits(spec_dir: Path) -> None:
    """`--max-cost` replaces only the cost ceiling: the spec's one step still holds."""
    import asyncio

    from tiller.evals import EvalResultStore
    from tiller.store import open_bus

    done = run_eval(spec_dir, "--id", "capped", "--max-cost", "5")
    assert done.exit_code == 0, done.output
    assert "not run 4" in done.stdout

    async def described() -> dict[str, int | float | None] | None:
        async with await open_bus(f"sqlite:///{spec_dir / 'evals.db'}") as bus:
            record = await EvalResultStore(bus).get_eval("capped")
            assert record is not None
            return record.budget

    budget = asyncio.run(described())
    assert budget is not None and (budget["max_steps"], budget["max_cost_usd"]) == (1, 5.0)
