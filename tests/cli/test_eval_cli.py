"""`tiller eval run | show | list | rescore | compare` on a real SQLite store, through
typer's runner: a spec file in a temporary directory whose agent is a `ScriptedModel`.

The runs are checked in the store (`load_report`, `list_evals`) and the JSON and JUnit
files are parsed back; every bad input is one line on stderr, exit code 2, and nothing
stored. (Ctrl+C and `--id` resuming run in a child process: `test_eval_cli_cancel.py`.)
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tiller.cli import app
from tiller.evals import EvalRecord, EvalReport, list_evals, load_report
from tiller.store import open_bus

SPEC = """
from tiller.evals import Case, EvalSpec, Includes
from tiller.loop import Agent
from tiller.model import ScriptedModel

CASES = [
    Case("agrees", "say yes", expected="yes"),
    Case("refuses", "say no", expected="yes"),
]


def saying(answer):
    return lambda: Agent(ScriptedModel(lambda messages, info: answer(messages[0].text)))


spec = EvalSpec(
    agent=saying(lambda prompt: "yes" if "yes" in prompt else "no"),
    cases=CASES,
    scorers=[Includes()],
    name="cli",
)

always_yes = EvalSpec(agent=saying(lambda prompt: "yes"), cases=CASES, scorers=[Includes()])
"""

SCORERS = """
from tiller.evals import Score


class Shouting:
    name = "shouting"

    async def score(self, outcome):
        loud = outcome.text.isupper()
        return Score.of(loud, "all capitals" if loud else "quiet")


shouting = Shouting()
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "evals.py").write_text(textwrap.dedent(SPEC))
    (tmp_path / "my_scorers.py").write_text(textwrap.dedent(SCORERS))
    yield tmp_path
    sys.modules.pop("my_scorers", None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def store_of(directory: Path) -> str:
    return f"sqlite:///{directory / 'evals.db'}"


def stored_report(store: str, eval_id: str) -> EvalReport:
    async def read() -> EvalReport:
        async with await open_bus(store) as bus:
            return await load_report(bus, eval_id)

    return asyncio.run(read())


def stored_evals(store: str) -> list[EvalRecord]:
    async def read() -> list[EvalRecord]:
        async with await open_bus(store) as bus:
            return await list_evals(bus)

    return asyncio.run(read())


def run_eval(spec_dir: Path, *args: str, spec: str = "evals.py") -> Result:
    return invoke("eval", "run", str(spec_dir / spec), "--store", store_of(spec_dir), *args)


def test_run_prints_the_scorecard_stores_the_runs_and_writes_json_and_junit(
    spec_dir: Path,
) -> None:
    done = run_eval(
        spec_dir,
        "--id",
        "first",
        "--json",
        str(spec_dir / "out" / "report.json"),
        "--junit",
        str(spec_dir / "out" / "report.xml"),
    )
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == "eval first: 2 run(s), 1 epoch(s)"
    assert lines[lines.index(next(x for x in lines if x.startswith("SCORER"))) + 1].split() == [
        "includes",
        "2",
        "1",
        "50.0%",
        "0.500",
        "0",
    ]
    assert "runs 2  scored 2  passed 1 (50.0%)  errors 0  not run 0  cancelled 0" in done.stdout
    assert "eval id: first" in lines
    store = store_of(spec_dir)
    assert f"show it:    tiller eval show first --store {store}" in lines
    assert f"rescore it: tiller eval rescore first --scorer NAME --store {store}" in lines

    report = stored_report(store, "first")
    assert [(r.case.id, r.status, r.passed) for r in report.results] == [
        ("agrees", "scored", True),
        ("refuses", "scored", False),
    ]

    document = json.loads((spec_dir / "out" / "report.json").read_text())
    assert (document["format"], document["version"], document["eval_id"]) == (
        "tiller-eval-report",
        2,
        "first",
    )
    assert document["totals"]["runs"] == 2 and document["totals"]["passed"] == 1
    assert document["scorers"]["includes"]["pass_at_k"] == {"1": 0.5}
    refused = document["results"][1]
    assert refused["case_id"] == "refuses" and refused["run_id"] == "first:refuses:e0"
    assert refused["scores"]["includes"] == {
        "value": 0.0,
        "passed": False,
        "explanation": "found 0 of 1; missing 'yes'",
        "error": None,
    }
    assert refused["text"] == "no" and refused["stop_cause"] == "completed"

    root = ET.parse(spec_dir / "out" / "report.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "first"
    counts = {key: suite.get(key) for key in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "2", "failures": "1", "errors": "0", "skipped": "0"}
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {"agrees[e0]", "refuses[e0]"}
    assert all(case.get("classname") == "first" for case in cases.values())
    failure = cases["refuses[e0]"].find("failure")
    assert failure is not None and failure.get("message") == "failed: includes"
    assert "missing 'yes'" in (failure.text or "")
    assert cases["agrees[e0]"].find("failure") is None


def test_epochs_add_pass_at_k_and_fail_under_sets_the_exit_code(spec_dir: Path) -> None:
    done = run_eval(spec_dir, "--id", "twice", "--epochs", "2", "--fail-under", "0.5")
    assert done.exit_code == 0, done.output
    header = next(line for line in done.stdout.splitlines() if line.startswith("SCORER"))
    assert header.split()[-2:] == ["PASS@2", "PASS^2"]
    assert stored_report(store_of(spec_dir), "twice").total == 4

    strict = run_eval(spec_dir, "--id", "twice", "--fail-under", "0.9")
    assert strict.exit_code == 1
    assert "pass rate 50.0% of all 2 runs is below --fail-under 90.0%" in strict.stderr


def test_show_prints_the_cases_and_one_case_in_full(spec_dir: Path) -> None:
    assert run_eval(spec_dir, "--id", "shown").exit_code == 0
    store = store_of(spec_dir)
    shown = invoke("eval", "show", "shown", "--store", store)
    assert shown.exit_code == 0, shown.output
    rows = shown.stdout.splitlines()
    table = rows.index(next(row for row in rows if row.startswith("CASE")))
    assert rows[table].split() == ["CASE", "EPOCH", "STATUS", "SCORES", "COST", "DURATION", "ERROR"]
    assert rows[table + 1].split()[:4] == ["agrees", "0", "passed", "includes=1"]
    assert rows[table + 2].split()[:4] == ["refuses", "0", "failed", "includes=0✗"]

    one = invoke("eval", "show", "shown", "--case", "refuses", "--store", store)
    assert one.exit_code == 0, one.output
    assert "  includes: 0 FAIL: found 0 of 1; missing 'yes'" in one.stdout
    assert "  user: say no\n  assistant: no\n" in one.stdout
    assert "agrees" not in one.stdout

    written = invoke("eval", "show", "shown", "--store", store, "--junit", str(spec_dir / "j.xml"))
    assert written.exit_code == 0
    assert ET.parse(spec_dir / "j.xml").getroot().get("tests") == "2"


def test_list_shows_the_evals_newest_first(spec_dir: Path) -> None:
    assert run_eval(spec_dir, "--id", "older").exit_code == 0
    assert run_eval(spec_dir, "--id", "newer").exit_code == 0
    listed = invoke("eval", "list", "--store", store_of(spec_dir))
    assert listed.exit_code == 0, listed.output
    ids = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert ids == ["newer", "older"]


def test_rescore_with_scorers_named_on_the_command_line(spec_dir: Path) -> None:
    assert run_eval(spec_dir, "--id", "again").exit_code == 0
    store = store_of(spec_dir)
    done = invoke(
        "eval",
        "rescore",
        "again",
        "--scorer",
        "includes=no",
        "--scorer",
        "regex=^(yes|no)$",
        "--scorer",
        "my_scorers:shouting",
        "--store",
        store,
    )
    assert done.exit_code == 0, done.output
    rows = {line.split()[0]: line.split()[1:4] for line in done.stdout.splitlines()[2:5]}
    assert rows == {
        "includes": ["2", "1", "50.0%"],
        "regex": ["2", "2", "100.0%"],
        "shouting": ["2", "0", "0.0%"],
    }
    report = stored_report(store, "again")
    refused = report.for_case("refuses")[0]
    assert refused.scores["includes"].passed  # replaced: the new target is "no"
    assert refused.scores["regex"].explanation.startswith("/^(yes|no)$/ matches")


def test_compare_shows_the_changed_cases_and_their_counts(spec_dir: Path) -> None:
    assert run_eval(spec_dir, "--id", "before").exit_code == 0
    assert run_eval(spec_dir, "--id", "after", spec="evals.py:always_yes").exit_code == 0
    compared = invoke("eval", "compare", "before", "after", "--store", store_of(spec_dir))
    assert compared.exit_code == 0, compared.output
    lines = compared.stdout.splitlines()
    assert lines[0] == "before -> after"
    assert lines[1].split() == ["CHANGE", "CASE", "BEFORE", "AFTER", "SCORERS"]
    assert lines[2].split() == ["IMPROVED", "refuses", "0.0%", "100.0%", "includes", "0.00->1.00"]
    assert lines[-1] == (
        "0 regressed, 1 improved, 1 unchanged, 0 added, 0 removed, 0 unscored; "
        "pass rate 50.0% -> 100.0%"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "run", "{dir}/missing.py"], "eval spec file '{dir}/missing.py' does not exist"),
        (["eval", "run", "{dir}/evals.py", "--epochs", "0"], "--epochs is a positive whole"),
        (["eval", "run", "{dir}/evals.py", "--concurrency", "0"], "--concurrency is a positive"),
        (["eval", "run", "{dir}/evals.py", "--max-cost", "-1"], "--max-cost is a positive"),
        (["eval", "run", "{dir}/evals.py", "--fail-under", "1.5"], "--fail-under is a pass"),
        (["eval", "run", "{dir}/evals.py", "--id", "no/slash"], "eval id 'no/slash': use at"),
        (["eval", "show", "nosuch"], "there is no store at"),
        (["eval", "list"], "there is no store at"),
        (["eval", "rescore", "nosuch", "--scorer", "exact"], "there is no store at"),
        (["eval", "rescore", "x", "--scorer", "bogus"], "--scorer 'bogus': no such scorer; use"),
        (["eval", "rescore", "x", "--scorer", "regex=("], "--scorer 'regex=(': RegexMatch:"),
        (["eval", "rescore", "x", "--scorer", "json=deep"], "json takes no argument, or"),
        (["eval", "rescore", "x", "--scorer", "numeric=close"], "the tolerance is a number"),
        (["eval", "rescore", "x", "--scorer", "exact="], "nothing after '='"),
        (["eval", "rescore", "x"], "give at least one --scorer"),
        (["eval", "rescore", "x", "--scorer", "json:loads"], "calling it with no arguments failed"),
        (["eval", "rescore", "x", "--scorer", "no_such_mod:x"], "cannot import 'no_such_mod'"),
        (["eval", "rescore", "x", "--scorer", "os:sep"], "is a str, not a scorer"),
    ],
)
def test_a_bad_input_is_one_line_exit_2_and_creates_nothing(
    spec_dir: Path, args: list[str], message: str
) -> None:
    filled = [arg.format(dir=spec_dir) for arg in args]
    done = invoke(*filled, "--store", store_of(spec_dir))
    assert done.exit_code == 2, done.output
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tiller: ")
    assert message.format(dir=spec_dir) in done.stderr
    assert done.stdout == ""
    assert not (spec_dir / "evals.db").exists()


def test_an_unknown_eval_or_case_in_a_store_is_one_line_and_stores_nothing(
    spec_dir: Path,
) -> None:
    assert run_eval(spec_dir, "--id", "known").exit_code == 0
    store = store_of(spec_dir)
    for args in (
        ["eval", "show", "unknown"],
        ["eval", "rescore", "unknown", "--scorer", "exact"],
        ["eval", "compare", "known", "unknown"],
        ["eval", "show", "known", "--case", "nope"],
    ):
        done = invoke(*args, "--store", store)
        assert done.exit_code == 2, (args, done.output)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("tiller: ")
    assert "has no case 'nope'; its cases: agrees, refuses" in done.stderr
    assert [record.eval_id for record in stored_evals(store)] == ["known"]


def test_a_judge_is_refused_by_rescore(spec_dir: Path) -> None:
    (spec_dir / "judging.py").write_text(
        "class Judge:\n    name = 'judge'\n    calls_model = True\n"
        "    async def score(self, outcome): raise AssertionError('never called')\n"
        "judge = Judge()\n"
    )
    assert run_eval(spec_dir, "--id", "judged").exit_code == 0
    done = invoke(
        "eval", "rescore", "judged", "--scorer", "judging:judge", "--store", store_of(spec_dir)
    )
    sys.modules.pop("judging", None)
    assert done.exit_code == 2 and "a rescore calls no model" in done.stderr


def test_html_reports_for_run_show_and_compare(spec_dir: Path) -> None:
    for eval_id in ("before", "after"):
        path = spec_dir / f"{eval_id}.html"
        assert run_eval(spec_dir, "--id", eval_id, "--html", str(path)).exit_code == 0
    shown = invoke(
        "eval", "show", "after", "--store", store_of(spec_dir), "--html", str(spec_dir / "s.html")
    )
    assert shown.exit_code == 0, shown.output
    compared = invoke(
        "eval", "compare", "before", "after", "--store", store_of(spec_dir),
        "--html", str(spec_dir / "c.html"),
    )  # fmt: skip
    assert compared.exit_code == 0, compared.output
    for name in ("before", "after", "s", "c"):
        page = (spec_dir / f"{name}.html").read_text()
        assert "Plotly.newPlot" in page or "plotly" in page.lower()
        assert 'id="case-' in page
    assert "compare" in (spec_dir / "c.html").read_text().lower()


def test_html_without_plotly_is_refused_before_anything_runs(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    done = run_eval(spec_dir, "--html", str(spec_dir / "report.html"))
    assert done.exit_code == 2
    assert "pip install 'tiller[report]'" in done.stderr
    assert not (spec_dir / "evals.db").exists() and not (spec_dir / "report.html").exists()


def test_a_plain_path_is_a_sqlite_store_and_max_cost_without_prices_says_so(
    spec_dir: Path,
) -> None:
    path = spec_dir / "plain.db"
    done = invoke(
        "eval", "run", str(spec_dir / "evals.py"), "--store", str(path), "--max-cost", "1"
    )
    assert done.exit_code == 0, done.output
    assert "show it:    tiller eval show " in done.stdout
    assert f"--store sqlite:///{path}" in done.stdout
    assert "note: --max-cost counts only priced models" in done.stderr
    listed = invoke("eval", "list", "--store", str(path))
    assert listed.exit_code == 0 and listed.stdout.splitlines()[1].startswith("cli-")


def test_the_store_defaults_to_tiller_store(spec_dir: Path) -> None:
    store = store_of(spec_dir)
    runner = CliRunner(env={"TILLER_STORE": store})
    done = runner.invoke(app, ["eval", "run", str(spec_dir / "evals.py"), "--id", "from-env"])
    assert done.exit_code == 0, done.output
    assert [record.eval_id for record in stored_evals(store)] == ["from-env"]
    shown = runner.invoke(app, ["eval", "show", "from-env"])
    assert shown.exit_code == 0 and shown.stdout.startswith("eval from-env: 2 run(s)")
