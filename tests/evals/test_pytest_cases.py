"""An eval as a pytest test: `eval_cases` makes one test per case, `run_case` runs and
scores one case as the eval runner does, and `assert_case_passed` fails with the failing
scorers' explanations. Offline, on scripted models; the pytest side runs in a pytest of
its own through `pytester`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tiller.cancel import CancellationToken
from tiller.errors import UsageError
from tiller.evals import (
    Case,
    CaseOutcome,
    Dataset,
    DatasetError,
    Eval,
    ExactMatch,
    Includes,
    Score,
)
from tiller.loop import Agent, Budget
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo
from tiller.testing import assert_case_passed, eval_cases, run_case

from ._runner_support import Messages

pytest_plugins = ["pytester"]

ANSWERS = {"1+1?": "2", "2+2?": "4", "3+3?": "7"}


def sums() -> Agent:
    """A fresh agent whose model answers each sum from `ANSWERS` (3+3 wrongly)."""

    def turn(messages: Messages, info: TurnInfo) -> str:
        return ANSWERS[messages[0].text]

    return Agent(ScriptedModel(turn))


CASES = [Case("two", "1+1?", expected="2"), Case("four", "2+2?", expected="4")]


@eval_cases(CASES)
async def test_each_case_is_a_test_of_its_own(case: Case) -> None:
    result = await run_case(sums, case, [ExactMatch(), Includes([case.expected])])
    assert_case_passed(result)
    assert result.run_id == f"test:{case.id}:e0" and result.status == "scored"
    assert set(result.scores) == {"exact", "includes"} and result.outcome.text == case.expected


def test_the_cases_are_the_test_s_parameters_by_id(request: pytest.FixtureRequest) -> None:
    marker = test_each_case_is_a_test_of_its_own.pytestmark[0]  # type: ignore[attr-defined]
    assert marker.name == "parametrize" and marker.args[0] == "case"
    assert [param.id for param in marker.args[1]] == ["two", "four"]
    assert [param.values for param in marker.args[1]] == [(case,) for case in CASES]


async def test_a_failing_case_fails_with_what_each_failing_scorer_said() -> None:
    class Raises:
        name = "raises"

        async def score(self, outcome: CaseOutcome) -> Score:
            raise ValueError("the scorer broke on purpose")

    case = Case("six", "3+3?", expected="6")
    result = await run_case(sums, case, [ExactMatch(), Includes(["7"]), Raises()])
    assert not result.passed
    with pytest.raises(AssertionError) as failed:
        assert_case_passed(result)
    message = str(failed.value)
    assert message.startswith("case 'six' failed 2 of 3 scorers:\n  exact (0.00): ")
    assert result.scores["exact"].explanation in message
    assert "  raises (error): the scorer raised an error\n" in message
    assert "ValueError: the scorer broke on purpose" in message  # the traceback's end
    assert "includes" not in message  # it passed
    assert message.endswith("the agent answered: '7'")


async def test_a_run_that_ended_in_error_says_so() -> None:
    def broken() -> Agent:
        raise RuntimeError("no agent today")

    result = await run_case(broken, Case("c1", "q", expected="a"), [ExactMatch()])
    with pytest.raises(AssertionError) as failed:
        assert_case_passed(result)
    message = str(failed.value)
    assert "the run ended in error (error):" in message
    assert "RuntimeError: no agent today" in message


async def test_an_eval_s_runs_that_were_not_run_or_were_cancelled_say_so() -> None:
    """`assert_case_passed` takes any case run's result, an `Eval` report's too."""
    token = CancellationToken()

    def turn(messages: Messages, info: TurnInfo) -> str:
        if messages[0].text == "stop":
            token.cancel()
        return "2"

    cases = [Case("two", "1+1?", expected="2"), Case("stops", "stop"), Case("late", "q")]
    report = await Eval(
        lambda: Agent(ScriptedModel(turn)), cases, [ExactMatch()], concurrency=1, cancel=token
    ).run()
    assert_case_passed(report.for_case("two")[0])
    with pytest.raises(AssertionError, match="case 'stops' was cancelled before it was scored"):
        assert_case_passed(report.for_case("stops")[0])

    spent = await Eval(
        lambda: Agent(ScriptedModel(turn)),
        cases[:1] + cases[2:],
        [ExactMatch()],
        budget=Budget(max_steps=1),
        concurrency=1,
    ).run()
    with pytest.raises(AssertionError, match=r"case 'late' was not run: .*budget"):
        assert_case_passed(spent.for_case("late")[0])


def test_eval_cases_refuses_what_is_not_cases() -> None:
    with pytest.raises(UsageError, match=r"wrap one case in \[\.\.\.\]"):
        eval_cases(CASES[0])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="no cases"):
        eval_cases([])
    with pytest.raises(DatasetError, match="is not a Case"):
        eval_cases(["1+1?"])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="type the rows of a dataset file"):
        eval_cases(CASES, input_type=int)
    with pytest.raises(UsageError, match="argname"):
        eval_cases(CASES, argname="a case")


def test_a_dataset_file_is_read_beside_the_test_module(tmp_path: Path) -> None:
    async def test_agent(case: Case) -> None: ...

    with pytest.raises(DatasetError, match="no such dataset file") as missing:
        eval_cases("no-such-cases.jsonl")(test_agent)
    assert str(Path(__file__).parent / "no-such-cases.jsonl") in str(missing.value)

    Dataset(CASES).to_jsonl(tmp_path / "cases.jsonl")
    marked = eval_cases(tmp_path / "cases.jsonl")(test_agent)
    assert [p.id for p in marked.pytestmark[0].args[1]] == ["two", "four"]  # type: ignore[attr-defined]


async def test_run_case_needs_a_case_and_scorers() -> None:
    with pytest.raises(UsageError, match="at least one"):
        await run_case(sums, CASES[0], [])
    with pytest.raises(UsageError, match=r"one tiller\.evals\.Case, not a str"):
        await run_case(sums, "1+1?", [ExactMatch()])  # type: ignore[arg-type]


def test_importing_tiller_testing_imports_neither_pytest_nor_the_evals() -> None:
    code = (
        "import sys, tiller.testing; "
        "print(sorted(m for m in ('pytest', 'tiller.evals') if m in sys.modules))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "[]"


# ── in a pytest of its own ───────────────────────────────────────────────────────────

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers =
    smoke: the cases a quick run keeps
"""

DATASET = """\
{"id": "two", "input": "1+1?", "expected": "2", "tags": ["smoke"]}
{"id": "four", "input": "2+2?", "expected": "4"}
{"id": "six", "input": "3+3?", "expected": "6", "tags": ["smoke"]}
"""

TESTS = """
from tiller.evals import ExactMatch
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.testing import assert_case_passed, eval_cases, run_case

ANSWERS = {"1+1?": "2", "2+2?": "4", "3+3?": "7"}


def sums():
    return Agent(ScriptedModel(lambda messages, info: ANSWERS[messages[0].text]))


@eval_cases("cases.jsonl")
async def test_sums(case):
    assert_case_passed(await run_case(sums, case, [ExactMatch()]))
"""


def test_an_eval_file_is_a_pytest_test_per_case_and_a_failure_says_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    evals = pytester.mkdir("evals")
    (evals / "cases.jsonl").write_text(DATASET)
    (evals / "test_sums.py").write_text(TESTS)

    # Run from the project's root: the dataset is found beside its test module.
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_sums.py::test_sums?two? PASSED*",
            "*test_sums.py::test_sums?four? PASSED*",
            "*test_sums.py::test_sums?six? FAILED*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E*AssertionError: case 'six' failed 1 of 1 scorers:",
            "E*exact (0.00): *",
            "E*the agent answered: '7'",
        ]
    )

    smoke = pytester.runpytest("-p", "no:cacheprovider", "-m", "smoke")
    smoke.assert_outcomes(passed=1, failed=1, deselected=1)  # the tags are marks
    picked = pytester.runpytest("-p", "no:cacheprovider", "-k", "four")
    picked.assert_outcomes(passed=1, deselected=2)  # the ids are the cases'


@pytest.mark.parametrize(
    "tag",
    ["skip", "xfail", "skipif", "usefixtures", "parametrize", "filterwarnings"],
    ids=lambda tag: f"tag-{tag}",  # a bare `xfail` id would be a keyword plugins read
)
def test_a_tag_that_is_a_pytest_mark_is_refused_when_collected(tag: str) -> None:
    """A case tagged `skip` would have turned off its own test, silently."""
    decorate = eval_cases([Case("two", "1+1?", expected="2", tags=("smoke", tag))])

    def test_sums(case: Case) -> None: ...

    with pytest.raises(UsageError, match=rf"case 'two' has the tag {tag!r}.*pytest's own"):
        decorate(test_sums)


def test_with_tags_as_marks_off_a_pytest_mark_s_name_is_only_a_tag() -> None:
    decorate = eval_cases([Case("two", "1+1?", tags=("skip",))], tags_as_marks=False)

    def test_sums(case: Case) -> None: ...

    (marker,) = decorate(test_sums).pytestmark  # type: ignore[attr-defined]
    assert [param.marks for param in marker.args[1]] == [()]


def test_a_skip_tag_in_a_dataset_file_fails_the_collection_saying_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    evals = pytester.mkdir("evals")
    (evals / "cases.jsonl").write_text(
        '{"id": "two", "input": "1+1?", "expected": "2", "tags": ["skip"]}\n'
    )
    (evals / "test_sums.py").write_text(TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*UsageError: case 'two' has the tag 'skip'*"])
